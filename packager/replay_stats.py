"""Replay benchmark of a loaded package: startup (load + compile, first inference, warm-up), steady-state latency
percentiles, throughput, memory, deadline misses against the vehicle's budget, enqueue vs completion where the
target separates them, per-kernel attribution mapped to ONNX nodes, and the context it ran in; the JSON document
``drivepack replay --json`` prints.

JSON schema (documented in docs/package-format.md, "replay --json"): ``{"package", "entry", "device" (what ran,
e.g. ``OPENCL (...) emulating QCOM:630``), "device_profile" (the device name the replay was made for), "inputs",
"mode" (``iters``, ``min_secs`` or ``rate``), "iters", "warmup", "min_secs", "rate_hz", "startup_ms": {"load",
"compile", "first_inference"}, "warmup_mean_ms", "latency_ms": {"p50", "p90", "p99", "p999", "max", "mean",
"stddev"}, "throughput_ips", "late_starts", "noise_warnings", "deadline_ms", "budget_ms": {"mean", "max"},
"deadline_misses", "enqueue_ms": same keys as latency_ms or null, "memory", "context" (packager/replay_context.py),
"kernels": [{"name", "dispatches", "ms", "share", "onnx_nodes", "flops", "bytes", "gflops", "gbs"}],
"kernels_total", "peaks", "profile_note", "trace", "replay_mode", "replay_mode_reason"}``. Latency is one whole
replay call (inputs in, outputs back on the host), measured with ``time.perf_counter``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jit.common.helpers import DEBUG
from packager.errors import PackageError
from packager.replay_context import context_lines, device_bytes, measure_peaks, peak_rss_bytes, replay_context

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
NOISE_SAMPLES = 100  # a percentile with fewer samples beyond it moves with a handful of outliers
PROFILE_NOTE = "profiled dispatches are synchronised one by one, so their sum exceeds the pipelined latency"


def latency_summary(seconds: list[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9 (linear interpolation), max, mean and population stddev, in milliseconds."""
    if not seconds:
        raise PackageError("iters: expected at least one timed replay, got 0")
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    out = {k: float(np.percentile(ms, q)) for k, q in PERCENTILES.items()}
    out |= {"max": float(ms.max()), "mean": float(ms.mean()), "stddev": float(ms.std())}
    return out


def noise_warnings(n: int) -> list[str]:
    """A warning per percentile that rests on fewer than NOISE_SAMPLES samples beyond it in ``n``."""
    out = []
    for key, q in PERCENTILES.items():
        beyond = round(n * (100.0 - q) / 100.0, 9)  # 100000 * 0.1% is 100, not 99.99999999999999
        if beyond < NOISE_SAMPLES:
            need = int(np.ceil(round(NOISE_SAMPLES * 100.0 / (100.0 - q), 6)))
            out.append(f"{key} rests on {beyond:g} sample(s) beyond it (of {n}): noisy; {need} iterations give "
                       f"{NOISE_SAMPLES}")
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
    device_profile: str = ""
    inputs: str = "golden set 0"
    mode: str = "iters"
    min_secs: float | None = None
    rate_hz: float | None = None
    startup_ms: dict[str, float] = field(default_factory=dict)
    warmup_mean_ms: float | None = None
    throughput_ips: float = 0.0
    late_starts: int | None = None
    budget_ms: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int | None] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    kernels_total: dict[str, Any] | None = None
    peaks: dict[str, Any] | None = None
    trace: str | None = None
    debug_note: str | None = None
    trace_doc: dict[str, Any] | None = field(default=None, repr=False)  # --trace: written by the command

    @property
    def noise_warnings(self) -> list[str]:
        return noise_warnings(self.iters)

    def to_json(self) -> dict[str, Any]:
        return {"package": self.package, "entry": self.entry, "device": self.device,
                "device_profile": self.device_profile, "inputs": self.inputs, "mode": self.mode,
                "iters": self.iters, "warmup": self.warmup, "min_secs": self.min_secs, "rate_hz": self.rate_hz,
                "startup_ms": self.startup_ms, "warmup_mean_ms": self.warmup_mean_ms,
                "latency_ms": self.latency_ms, "throughput_ips": self.throughput_ips,
                "late_starts": self.late_starts, "noise_warnings": self.noise_warnings,
                "deadline_ms": self.deadline_ms, "budget_ms": self.budget_ms,
                "deadline_misses": self.deadline_misses, "enqueue_ms": self.enqueue_ms, "memory": self.memory,
                "context": self.context, "kernels": self.kernels, "kernels_total": self.kernels_total,
                "peaks": self.peaks, "profile_note": PROFILE_NOTE if self.kernels else None, "trace": self.trace,
                "replay_mode": self.replay_mode, "replay_mode_reason": self.replay_mode_reason}

    def lines(self) -> list[str]:
        lat, st = self.latency_ms, self.startup_ms
        how = f"{self.iters} ticks at {self.rate_hz:g} Hz" if self.rate_hz is not None else \
            f"{self.iters} iters over >= {self.min_secs:g} s" if self.min_secs is not None else f"{self.iters} iters"
        out = [f"{self.package} entry {self.entry} on {self.device}: {how} after {self.warmup} warmup "
               f"(inputs: {self.inputs})", *context_lines(self.context),
               f"replay mode: {self.replay_mode} ({self.replay_mode_reason})",
               f"startup ms: load {st['load']:.1f}  compile {st['compile']:.1f}  first inference "
               f"{st['first_inference']:.3f}" + (f"  warm-up mean {self.warmup_mean_ms:.3f}"
                                                 if self.warmup_mean_ms is not None else ""),
               "latency ms: " + "  ".join(f"{k} {lat[k]:.3f}" for k in (*PERCENTILES, "max")) +
               f"  mean {lat['mean']:.3f} ± {lat['stddev']:.3f}",
               f"throughput: {self.throughput_ips:.1f} inferences/s",
               f"memory: peak RSS {self.memory['peak_rss_bytes'] / 2**20:.1f} MiB, device "
               + (f"{self.memory['device_bytes'] / 2**20:.2f} MiB" if self.memory["device_bytes"] is not None
                  else "n/a (CPU: buffers are host memory, in the RSS)"),
               f"deadline {self.deadline_ms:g} ms (vehicle budget max; mean {self.budget_ms['mean']:g}): "
               f"{self.deadline_misses} miss(es) of {self.iters}"]
        if self.late_starts is not None:
            out.append(f"late starts: {self.late_starts} of {self.iters} ticks began after their tick (the previous "
                       f"inference overran the {1e3 / (self.rate_hz or 1):g} ms period)")
        out += [f"warning: {w}" for w in self.noise_warnings]
        if self.debug_note:
            out.append(f"note: {self.debug_note}")
        if self.enqueue_ms is not None:
            out.append("enqueue ms: " + "  ".join(f"{k} {v:.3f}" for k, v in self.enqueue_ms.items()) +
                       " (time to hand the replay to the device; latency above is until outputs are back)")
        if self.kernels:
            out += self._kernel_lines()
        if self.trace:
            out.append(f"trace: {self.trace} (one span per dispatch; chrome://tracing or ui.perfetto.dev)")
        return out

    def _kernel_lines(self) -> list[str]:
        peaks = self.peaks or {}
        out = [f"peaks: {peaks.get('gflops', 0):.1f} GFLOP/s, {peaks.get('gbs', 0):.1f} GB/s ({peaks.get('how')})",
               f"{'kernel':28s} {'disp':>5s} {'ms':>9s} {'share':>7s} {'GFLOP/s':>8s} {'%pk':>5s} {'GB/s':>7s} "
               f"{'%pk':>5s}  onnx nodes"]
        for k in [*self.kernels, *([self.kernels_total] if self.kernels_total else [])]:
            nodes = "?" if k["onnx_nodes"] is None else ", ".join(k["onnx_nodes"]) or "-"
            out.append(f"{k['name']:28s} {k['dispatches']:5d} {k['ms']:9.3f} {k['share']:7.1%} {k['gflops']:8.2f} "
                       f"{_pct(k['gflops'], peaks.get('gflops')):>5s} {k['gbs']:7.2f} "
                       f"{_pct(k['gbs'], peaks.get('gbs')):>5s}  {nodes}")
        if self.kernels_total:
            out.append(f"note: {PROFILE_NOTE} (total {self.kernels_total['ms']:.3f} ms vs p50 "
                       f"{self.latency_ms['p50']:.3f} ms)")
        return out


def _pct(x: float, peak: float | None) -> str:
    return f"{x / peak:.0%}" if peak else "-"


def _rates(flops: int, nbytes: int, seconds: float) -> tuple[float, float]:
    return (flops / seconds / 1e9, nbytes / seconds / 1e9) if seconds > 0 else (0.0, 0.0)


def kernel_profile(replay: Any, inputs: dict[str, Any], runs: int,
                   kernel_info: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[float]]:
    """(per kernel: dispatches, median-of-``runs`` milliseconds summed over its dispatches, share of the total,
    its ONNX nodes (None: not recorded), FLOPs and bytes over its dispatches and their GFLOP/s and GB/s, largest
    first; the median seconds of each dispatch). Each run times every dispatch on its own (``Replay.profile``)."""
    kernel_info = kernel_info or {}
    per_dispatch = np.median([[t.seconds for t in replay.profile(inputs)] for _ in range(max(runs, 1))], axis=0)
    names = [replay.cmdbuf.kernels[d.kernel].name for d in replay.cmdbuf.dispatches]
    agg: dict[str, list[float]] = {}
    for name, s in zip(names, per_dispatch, strict=True):
        agg.setdefault(name, []).append(float(s))
    total = float(sum(per_dispatch)) or 1.0
    rows = []
    for n, v in agg.items():
        info = kernel_info.get(n)
        flops, nbytes = (info.flops * len(v), info.bytes * len(v)) if info is not None else (0, 0)
        gflops, gbs = _rates(flops, nbytes, sum(v))
        rows.append({"name": n, "dispatches": len(v), "ms": sum(v) * 1e3, "share": sum(v) / total,
                     "onnx_nodes": list(info.onnx_nodes) if info is not None and info.onnx_nodes is not None
                     else None, "flops": flops, "bytes": nbytes, "gflops": gflops, "gbs": gbs})
    return sorted(rows, key=lambda r: -r["ms"]), [float(s) for s in per_dispatch]


def total_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The kernels' sum as one row (``name`` "total"), its rates over the summed time."""
    seconds = sum(r["ms"] for r in rows) / 1e3
    flops, nbytes = sum(r["flops"] for r in rows), sum(r["bytes"] for r in rows)
    gflops, gbs = _rates(flops, nbytes, seconds)
    return {"name": "total", "dispatches": sum(r["dispatches"] for r in rows), "ms": seconds * 1e3,
            "share": 1.0 if rows else 0.0, "onnx_nodes": [], "flops": flops, "bytes": nbytes, "gflops": gflops,
            "gbs": gbs}


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def fixed_rate(call: Callable[[], object], rate_hz: float, ticks: int) -> tuple[list[float], int]:
    """(seconds from each tick to the end of its inference, ticks that began late): ``call`` once per tick of
    ``rate_hz``, ``ticks`` times, waiting for each tick. An inference that overruns its period makes the next tick
    start late, and that lateness counts in the next latency (the tick is when its input was due)."""
    period = 1.0 / rate_hz
    start = time.perf_counter() + period
    latencies, late = [], 0
    for i in range(ticks):
        tick = start + i * period
        now = time.perf_counter()
        if now < tick:
            time.sleep(tick - now)
        else:
            late += 1
        call()
        latencies.append(time.perf_counter() - tick)
    return latencies, late


def run_replay_benchmark(pkg: Any, iters: int, warmup: int, profile: bool = False, device: str | None = None,
                         profile_runs: int = 3, entry: str | None = None, *, threads: int | None = None,
                         min_secs: float | None = None, rate_hz: float | None = None,
                         inputs: dict[str, Any] | None = None, inputs_label: str = "golden set 0",
                         trace: bool = False, load_s: float = 0.0) -> ReplayStats:
    """Replay entry ``entry`` of ``pkg`` (may be omitted when the package has one entry) on ``inputs`` (default:
    golden set 0): one first inference, ``warmup`` more untimed, then ``iters`` timed (at least ``min_secs``
    seconds of them; with ``rate_hz``, ``iters`` ticks at that rate). With ``trace``, ``trace_doc`` is the Chrome
    trace document of one profiled replay (packager/replay_trace.py)."""
    if iters < 1:
        raise PackageError(f"--iters: expected >= 1, got {iters}")
    if warmup < 0:
        raise PackageError(f"--warmup: expected >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise PackageError(f"--threads: expected >= 1, got {threads}")
    if min_secs is not None and not min_secs > 0:
        raise PackageError(f"--min-secs: expected > 0, got {min_secs}")
    if rate_hz is not None and not (rate_hz > 0 and np.isfinite(rate_hz)):
        raise PackageError(f"--rate: expected a finite rate > 0 Hz, got {rate_hz}")
    if rate_hz is not None and min_secs is not None:
        raise PackageError(f"--min-secs: expected none with --rate (ticks are --iters), got {min_secs}")
    view = pkg.entry(entry)  # an unknown or missing entry fails before anything is compiled
    start = time.perf_counter()
    replay = view.make_replay(device)
    compile_s = time.perf_counter() - start
    if threads is not None:
        replay.set_threads(threads)  # a ReplayError on a device that schedules its own work-items
    inputs = dict(view.golden(0).inputs) if inputs is None else inputs
    first_s = _timed(lambda: replay(inputs))  # the inputs are checked here, before any figure is taken
    warm = [_timed(lambda: replay(inputs)) for _ in range(warmup)]
    debugging = DEBUG >= 2
    split = hasattr(replay, "time_enqueue") and not debugging  # OpenCL: enqueue returns before the device finishes
    times, enqueue = [], []
    late_starts = None
    began = time.perf_counter()
    if rate_hz is not None:
        times, late_starts = fixed_rate(lambda: replay(inputs), rate_hz, iters)
    else:
        while len(times) < iters or (min_secs is not None and time.perf_counter() - began < min_secs):
            if split:
                e, total = replay.time_enqueue(inputs)
                enqueue.append(e)
                times.append(total)
            else:
                times.append(_timed(lambda: replay(inputs)))
    elapsed = time.perf_counter() - began
    deadline = view.manifest.budget_max_ms
    misses = sum(t * 1e3 > deadline for t in times)
    kernel_info = {k.name: k for k in view.manifest.kernels}
    kernels, per_dispatch, peaks, total = [], [], None, None
    if profile or trace:
        kernels, per_dispatch = kernel_profile(replay, inputs, profile_runs, kernel_info)
        if profile:
            peaks, total = measure_peaks(), total_row(kernels)
        else:
            kernels = []
    context = replay_context(replay)
    stats = ReplayStats(
        pkg.path.name, view.name, context["ran_on"], len(times), warmup, latency_summary(times), deadline, misses,
        latency_summary(enqueue) if split and enqueue else None, kernels, replay.mode, replay.mode_reason,
        device_profile=replay.target.name, inputs=inputs_label,
        mode="rate" if rate_hz is not None else "min_secs" if min_secs is not None else "iters",
        min_secs=min_secs, rate_hz=rate_hz,
        startup_ms={"load": load_s * 1e3, "compile": compile_s * 1e3, "first_inference": first_s * 1e3},
        warmup_mean_ms=float(np.mean(warm) * 1e3) if warm else None,
        throughput_ips=len(times) / (elapsed if rate_hz is not None else sum(times)),
        late_starts=late_starts,
        budget_ms={"mean": view.manifest.budget_mean_ms, "max": view.manifest.budget_max_ms},
        memory={"peak_rss_bytes": peak_rss_bytes(), "device_bytes": device_bytes(replay)},
        context=context, kernels_total=total, peaks=peaks,
        debug_note="DEBUG=2: every replay ran dispatch by dispatch (synchronised, one line each on stderr): the "
                   "latency above is not the pipelined one" if debugging else None)
    if trace:
        from packager.replay_trace import chrome_trace

        stats.trace_doc = chrome_trace(replay, per_dispatch, kernel_info,
                                       f"drivepack replay {pkg.path.name} entry {view.name} on {context['ran_on']}")
    return stats
