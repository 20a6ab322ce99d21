"""``drivepack replay STEP.dpk --rate HZ --frames N``: a modeld package fed synthetic NV12 frames at the camera
rate, as openpilot's modeld is fed by VisionIPC.

Frame i arrives at ``start + i / rate``. When the step is idle at an arrival it waits for it and runs the whole
step; when a step ends after later frames arrived, every frame it missed but the newest is pushed through the
``prepare`` entry (openpilot's dropped-frame path: the queues stay consecutive, the models do not run) and the
newest runs the whole step. Latency is a run's completion minus its frame's arrival; a deadline miss is a latency
above one frame period. JSON: ``{"package", "size", "device", "rate_hz", "frames", "runs", "prepared",
"dropped_pct", "latency_ms": {...}, "budget_ms": {"mean", "max"}, "deadline_ms", "deadline_misses",
"prepare_ms": {...} or null}``.

A plain (not modeld) package takes ``--rate`` through packager/replay_stats.py's ``fixed_rate``: one inference per
tick, no frames dropped; an inference that overruns its period makes the next tick start late (``late_starts``),
and that lateness counts in the next latency (tick to completion), which ``replay`` sets against the vehicle's
budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from packager.errors import PackageError
from packager.replay_context import ran_on
from packager.replay_stats import latency_summary

FRAME_POOL = 4  # distinct synthetic frames cycled through (generating 4.8 MB per frame would be timed otherwise)


@dataclass
class RateStats:
    """One rate-replay run (the module docstring gives its JSON form)."""

    package: str
    size: str
    device: str
    rate_hz: float
    frames: int
    runs: int
    prepared: int
    latency_ms: dict[str, float]
    budget_ms: dict[str, float]
    deadline_misses: int
    prepare_ms: dict[str, float] | None

    @property
    def deadline_ms(self) -> float:
        return 1e3 / self.rate_hz

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "size": self.size, "device": self.device, "rate_hz": self.rate_hz,
                "frames": self.frames, "runs": self.runs, "prepared": self.prepared,
                "dropped_pct": 100.0 * self.prepared / self.frames, "latency_ms": self.latency_ms,
                "budget_ms": self.budget_ms, "deadline_ms": self.deadline_ms,
                "deadline_misses": self.deadline_misses, "prepare_ms": self.prepare_ms}

    def lines(self) -> list[str]:
        lat = self.latency_ms
        over = [k for k, limit in (("p50", self.budget_ms["mean"]), ("max", self.budget_ms["max"])) if lat[k] > limit]
        out = [f"{self.package} step {self.size} on {self.device}: {self.frames} frames at {self.rate_hz:g} Hz",
               f"runs {self.runs}, prepared (dropped) {self.prepared} ({100.0 * self.prepared / self.frames:.1f}%)",
               "latency ms: " + "  ".join(f"{k} {lat[k]:.2f}" for k in ("p50", "p90", "p99", "max", "mean")),
               f"budget ms: mean {self.budget_ms['mean']:g}, max {self.budget_ms['max']:g}: "
               + (f"over budget ({', '.join(over)})" if over else "within budget"),
               f"deadline {self.deadline_ms:g} ms: {self.deadline_misses} miss(es) of {self.runs} runs"]
        if self.prepare_ms is not None:
            out.append("prepare ms: " + "  ".join(f"{k} {self.prepare_ms[k]:.2f}" for k in ("p50", "max", "mean")))
        return out


def synthetic_frames(golden: dict[str, np.ndarray], seed: int = 0) -> list[dict[str, np.ndarray]]:
    """FRAME_POOL input sets: seeded random camera buffers, the golden set's transforms and per-frame inputs."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(FRAME_POOL):
        frame = dict(golden)
        for name, value in golden.items():
            if value.dtype == np.uint8:
                frame[name] = rng.integers(0, 256, value.shape, dtype=np.uint8)
        pool.append(frame)
    return pool


def run_rate_benchmark(pkg: Any, rate_hz: float, frames: int, size: str | None = None,
                       device: str | None = None) -> RateStats:
    """Feed ``frames`` frames at ``rate_hz`` through the step of camera size ``size`` (see the module docstring)."""
    if not rate_hz > 0 or frames < 1:
        raise PackageError(f"rate/frames: expected a rate > 0 Hz and at least one frame, got {rate_hz} Hz, {frames}")
    step = pkg.make_step(size, device)
    run_entry = pkg.entry(f"run@{step.size}")
    pool = synthetic_frames(dict(run_entry.golden(0).inputs))
    period = 1.0 / rate_hz
    step.reset()
    step.run(pool[0])  # warm: first-call costs (host-pointer binding, page faults) are not a frame's latency
    step.reset()
    latencies, prepare_times, runs, prepared = [], [], 0, 0
    start = time.perf_counter() + period
    i = 0
    while i < frames:
        arrival = start + i * period
        now = time.perf_counter()
        if now < arrival:
            time.sleep(arrival - now)
        newest = min(frames - 1, int((time.perf_counter() - start) / period))
        for j in range(i, newest):  # frames that arrived while the last step ran: queued, not run
            t = time.perf_counter()
            step.prepare(pool[j % FRAME_POOL])
            prepare_times.append(time.perf_counter() - t)
            prepared += 1
        step.run(pool[newest % FRAME_POOL])
        latencies.append(time.perf_counter() - (start + newest * period))
        runs += 1
        i = newest + 1
    budget = {"mean": run_entry.manifest.budget_mean_ms, "max": run_entry.manifest.budget_max_ms}
    lat = latency_summary(latencies)
    misses = sum(t > period for t in latencies)
    where = ran_on(step.run_replay.target)[0]  # the device that ran, e.g. "OPENCL (...) emulating QCOM:630"
    return RateStats(str(pkg.path), step.size, where, rate_hz, frames, runs, prepared,
                     lat, budget, misses, latency_summary(prepare_times) if prepare_times else None)
