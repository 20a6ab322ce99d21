"""Replay benchmark of a loaded package: latency percentiles, deadline misses, enqueue vs completion where the
target separates them, and per-kernel attribution; the JSON document ``drivepack replay --json`` prints.

JSON schema (documented in docs/package-format.md, "replay --json"): ``{"package", "entry", "device", "iters",
"warmup", "latency_ms": {"p50", "p90", "p99", "p999", "max", "mean", "stddev"}, "deadline_ms", "deadline_misses",
"enqueue_ms": same keys as latency_ms or null, "kernels": [{"name", "dispatches", "ms", "share"}], "replay_mode",
"replay_mode_reason"}`` (how the replay ran its dispatches, Replay.mode, and why). Latency is
one whole replay call (inputs in, outputs back on the host), measured with ``time.perf_counter``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packager.errors import PackageError

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def latency_summary(seconds: list[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9 (linear interpolation), max, mean and population stddev, in milliseconds."""
    if not seconds:
        raise PackageError("iters: expected at least one timed replay, got 0")
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    out = {k: float(np.percentile(ms, q)) for k, q in PERCENTILES.items()}
    out |= {"max": float(ms.max()), "mean": float(ms.mean()), "stddev": float(ms.std())}
    return out


@dataclass
class ReplayStats:
    """The result of one ``replay`` benchmark run (see the module docstring for its JSON form)."""

    package: str
    entry: str
    device: str
    iters: int
    warmup: int
    latency_ms: dict[str, float]
    deadline_ms: float
    deadline_misses: int
    enqueue_ms: dict[str, float] | None = None
    kernels: list[dict[str, Any]] = field(default_factory=list)
    replay_mode: str = ""  # Replay.mode: cpu_driver, command_buffer or enqueue_loop
    replay_mode_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "entry": self.entry, "device": self.device, "iters": self.iters,
                "warmup": self.warmup,
                "latency_ms": self.latency_ms, "deadline_ms": self.deadline_ms,
                "deadline_misses": self.deadline_misses, "enqueue_ms": self.enqueue_ms, "kernels": self.kernels,
                "replay_mode": self.replay_mode, "replay_mode_reason": self.replay_mode_reason}

    def lines(self) -> list[str]:
        lat = self.latency_ms
        out = [f"{self.package} entry {self.entry} on {self.device}: {self.iters} iters after {self.warmup} warmup",
               f"replay mode: {self.replay_mode} ({self.replay_mode_reason})",
               "latency ms: " + "  ".join(f"{k} {lat[k]:.3f}" for k in (*PERCENTILES, "max", "mean", "stddev")),
               f"deadline {self.deadline_ms:g} ms: {self.deadline_misses} miss(es) of {self.iters}"]
        if self.enqueue_ms is not None:
            out.append("enqueue ms: " + "  ".join(f"{k} {v:.3f}" for k, v in self.enqueue_ms.items()) +
                       " (time to hand the replay to the device; latency above is until outputs are back)")
        if self.kernels:
            out.append(f"{'kernel':40s} {'dispatches':>10s} {'ms':>10s} {'share':>7s}")
            out += [f"{k['name']:40s} {k['dispatches']:10d} {k['ms']:10.3f} {k['share']:7.1%}" for k in self.kernels]
        return out


def kernel_profile(replay: Any, inputs: dict[str, np.ndarray], runs: int) -> list[dict[str, Any]]:
    """Per kernel: dispatches, median-of-``runs`` milliseconds summed over its dispatches, share of the total;
    largest first. Each run times every dispatch on its own (``Replay.profile``)."""
    per_dispatch = np.median([[t.seconds for t in replay.profile(inputs)] for _ in range(max(runs, 1))], axis=0)
    names = [replay.cmdbuf.kernels[d.kernel].name for d in replay.cmdbuf.dispatches]
    agg: dict[str, list[float]] = {}
    for name, s in zip(names, per_dispatch, strict=True):
        agg.setdefault(name, []).append(float(s))
    total = float(sum(per_dispatch)) or 1.0
    rows = [{"name": n, "dispatches": len(v), "ms": sum(v) * 1e3, "share": sum(v) / total} for n, v in agg.items()]
    return sorted(rows, key=lambda r: -r["ms"])


def run_replay_benchmark(pkg: Any, iters: int, warmup: int, profile: bool = False, device: str | None = None,
                         profile_runs: int = 3, entry: str | None = None) -> ReplayStats:
    """Replay golden set 0 of entry ``entry`` of ``pkg`` (may be omitted when the package has one entry)
    ``warmup`` + ``iters`` times and summarise (see the module docstring)."""
    if iters < 1:
        raise PackageError(f"--iters: expected >= 1, got {iters}")
    if warmup < 0:
        raise PackageError(f"--warmup: expected >= 0, got {warmup}")
    view = pkg.entry(entry)  # an unknown or missing entry fails before anything is compiled
    replay = view.make_replay(device)
    inputs = dict(view.golden(0).inputs)
    for _ in range(warmup):
        replay(inputs)
    split = hasattr(replay, "time_enqueue")  # OpenCL: enqueue returns before the device finishes
    times, enqueue = [], []
    for _ in range(iters):
        if split:
            e, total = replay.time_enqueue(inputs)
            enqueue.append(e)
            times.append(total)
        else:
            start = time.perf_counter()
            replay(inputs)
            times.append(time.perf_counter() - start)
    deadline = view.manifest.budget_max_ms
    misses = sum(t * 1e3 > deadline for t in times)
    kernels = kernel_profile(replay, inputs, profile_runs) if profile else []
    return ReplayStats(pkg.path.name, view.name, replay.target.name, iters, warmup, latency_summary(times), deadline,
                       misses, latency_summary(enqueue) if split else None, kernels, replay.mode, replay.mode_reason)
