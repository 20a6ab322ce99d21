"""Model zoo replay speed and compile time: drivepack CPU and OPENCL vs onnxruntime, per model, in one process.

    python3 benchmarks/bench_zoo.py [--models a,b] [--quick] [--repeat N] [--no-opencl] [--contention N]
                                    [--realtime PRIO] [--warm-process] [--json [PATH]] [--list]

The zoo (benchmarks/zoo_models.py; ``--list`` prints it) is torchvision, timm and torch.nn models exported once
to ONNX with fixed seeds into ``$DRIVEPACK_ZOO_DIR`` or ``~/.cache/drivepack/zoo`` (needs ``pip install -e
'.[bench]'`` the first time; later runs read the cache). ``--quick``: four small models, 5 timed calls.

Per model, printed in one table (ratios: lower is better, < 1 = drivepack faster):

* GFLOP counted from the ONNX graph (shapes inferred): 2 x the multiply-adds of Conv, ConvTranspose, Gemm,
  MatMul and the GRU/LSTM/RNN gates; elementwise ops, pooling, norms and softmax are left out (a few % on these
  models), so it is a floor, and the same floor for every peer.
* drivepack CPU / OPENCL: replay of ``jit.capture_onnx(jit.load_onnx(path, device=D), inputs, target=D)``, checked
  against onnxruntime before timing (max abs error and that error relative to the largest reference value are
  printed; a mismatch is flagged and that target not timed) and again after, on other inputs (a replay must
  compute, not return what it returned before).
* onnxruntime CPU with 2 intra-op threads (``--threads N``: N, and drivepack's CPU target N threads too).
* capture seconds (load + capture + the first call, every compile included: PoCL compiles each kernel for its
  launch size at its first launch) cold, with empty kernel caches (``DRIVEPACK_CACHE`` a fresh directory and the
  process's compiled kernels forgotten), and warm, captured again from them (in this process; ``--warm-process``: in
  a new Python process, as a user's next run captures, timed inside it from the load on; a warm capture replays
  what the cold one left in the capture cache, jit/capture_cache.py, and ``--warm-process`` also times one with
  that cache off, from the kernel caches alone). PoCL's own cache
  (``POCL_CACHE_DIR``,
  which serves OPENCL's warm capture: drivepack keeps no binaries of a CPU device) is one fresh directory for the
  whole run, so an OPENCL kernel source that an earlier model of the same run compiled is warm there.

All peers of a model are timed in alternating blocks (bench_core's ``interleaved_medians``), so a slow spell of
this shared machine falls on all of them alike. ``--contention N`` starts N busy processes (``while True:
pass``) for the timed part only and stops them after; the table then shows p50 and p99 of each peer (p99 of
``--repeat`` calls, interpolated: raise ``--repeat`` for a p99 that is more than the slowest call), and a control
timed with them: one thread hashing a 64 KB buffer over and over (``fixed_work``: no memory traffic, no other
thread, no system call), each call as many times as take as long as drivepack CPU's call (onnxruntime's where CPU
did not run) at the same place in a block on the quiet machine just before (``block_profile``, the peers timed as
they are under load; ``fixed_work_blocks``): a block's first call, whose data the other peers' blocks evicted, is
the longest, and a scheduler that lets a thread woken from a pause run for a while before preempting it stalls a
long block more often than a short one. Its p99 / p50 is what the scheduler alone does to a computation of those
lengths under that load, the floor under every peer's. The geometric mean of drivepack / onnxruntime is over the
models where both ran and matched; below it, OPENCL / CPU for each model of at most ``SMALL_MODEL_DISPATCHES``
dispatches (where a driver's fixed cost per dispatch shows most).

``--realtime PRIO`` runs the benchmark's thread ``SCHED_FIFO`` at PRIO before any peer starts a thread, so every
thread of every peer (onnxruntime's intra-op pool, PoCL's, drivepack's) inherits it, as in a driving stack whose
model process runs real-time (openpilot's modeld does); the busy processes of ``--contention`` stay fair. It needs
root, ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO`` of at least PRIO, and says so in one line where the OS refuses.

After the timed part each OPENCL replay runs ``TIMELINE_CALLS`` calls with every dispatch's device timestamps
(``OpenCLReplay.timeline``): the model's line and the summary below the table say how much of a call its kernels
take and how much the driver spends between them, per dispatch (PoCL wakes its second thread for each).

Each model also prints the time a cache line takes to go from one core to another and back, measured just before
and just after its timed part (bench_core's ``cross_core_round_trip_ns``, outside the busy processes). On the
2-vCPU VMs this ran on it was 50-80 ns at some times and 300-350 ns at others, switching within seconds to minutes,
and in the second state every peer's two-thread call of a model of many small kernels took up to twice as long
(README.md has the runs): a ratio timed while the two differ, or in the slow state, is not one of the quiet
machine.

A model drivepack fails on (an unsupported op, a crash) is an error row with the one-line message, listed again
below the table; the other models still run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

# runnable from a checkout without the package installed (as bench_replay.py): the repo first, then benchmarks/
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_core import BLOCK_CALLS, SETTLE_S, cross_core_round_trip_ns, interleaved_medians  # noqa: E402
from zoo_models import QUICK, ZOO, ensure, zoo_listing  # noqa: E402

from jit import capture_onnx, load_onnx  # noqa: E402
from jit.capture_cache import ENV as CAPTURE_CACHE_ENV  # noqa: E402
from jit.realize import clear_compiled_kernels  # noqa: E402
from targets.cpu_runtime import THREADS_ENV  # noqa: E402

ORT_THREADS = 2  # each peer's threads unless --threads says
# relative to the largest reference value: random-init nets end in logits of very different scales
RTOL = 2e-3
# fair whatever the benchmark runs as (--realtime): a busy process at a real-time priority would own its core
BUSY = "import os\nos.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\nwhile True: pass"


# OPENCL calls run with each dispatch's device timestamps after the timed part (``timeline_split``)
TIMELINE_CALLS = 5
# the bound for dispatch-bound models: none of at most this many dispatches over 2x the CPU target's time
SMALL_MODEL_DISPATCHES = 20


@dataclass
class TargetResult:
    """One drivepack target on one model: capture seconds, output error, the timed replay (seconds)."""

    cold_s: float | None = None
    warm_s: float | None = None
    uncached_s: float | None = None  # warm in a new process with the capture cache off (``--warm-process``)
    dispatches: int | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    p50: float | None = None
    p99: float | None = None
    # OPENCL: one call's seconds inside its kernels and between them (``timeline_split``)
    kernel_s: float | None = None
    between_s: float | None = None
    error: str | None = None


@dataclass
class ModelResult:
    """A table row: onnxruntime's times (seconds) and each drivepack target's; ``error`` when nothing ran."""

    name: str
    gflop: float | None = None
    ort_p50: float | None = None
    ort_p99: float | None = None
    control_p50: float | None = None  # the fixed-work control under contention (module docstring)
    control_p99: float | None = None
    # a cache line's round trip between two cores just before and just after the timed part (module docstring)
    cross_core_ns: tuple[float | None, float | None] = (None, None)
    targets: dict[str, TargetResult] = field(default_factory=dict)
    error: str | None = None


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def _dims(info: onnx.ValueInfoProto) -> list[int] | None:
    dims = info.type.tensor_type.shape.dim
    if not info.type.tensor_type.HasField("shape") or not all(d.HasField("dim_value") for d in dims):
        return None
    return [d.dim_value for d in dims]


def gflop(proto: onnx.ModelProto) -> float:
    """2 x the multiply-adds of the graph's Conv/ConvTranspose/Gemm/MatMul/GRU/LSTM/RNN nodes, in GFLOP."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    shapes: dict[str, list[int]] = {}
    for info in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = _dims(info)
        if dims is not None:
            shapes[info.name] = dims
    for init in proto.graph.initializer:
        shapes[init.name] = list(init.dims)
    gates = {"GRU": 3, "LSTM": 4, "RNN": 1}
    macs = 0
    for node in inferred.graph.node:
        ins = [shapes.get(n) for n in node.input]
        out = shapes.get(node.output[0]) if node.output else None
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv" and out and ins[1]:
            macs += math.prod(out) * math.prod(ins[1][1:])  # weight is (Cout, Cin/group, k...)
        elif node.op_type == "ConvTranspose" and ins[0] and ins[1]:
            macs += math.prod(ins[0]) * math.prod(ins[1][1:])
        elif node.op_type in ("Gemm", "MatMul") and out and ins[0]:
            k = ins[0][-2] if node.op_type == "Gemm" and attrs.get("transA") else ins[0][-1]
            macs += math.prod(out) * k
        elif node.op_type in gates and ins[0] and ins[1]:
            seq, batch, width = ins[0]
            dirs, rows, _ = ins[1]  # W is (directions, gates x hidden, input)
            hidden = rows // gates[node.op_type]
            macs += dirs * seq * batch * rows * (width + hidden)
    return 2 * macs / 1e9


def feeds_for(proto: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the graph's (fixed-shape) inputs: standard normal floats, integers in 0..255 (pixels)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in proto.graph.initializer}
    feeds = {}
    for info in proto.graph.input:
        if info.name in inits:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        shape = _dims(info) or []
        values = rng.standard_normal(shape) if np.issubdtype(dtype, np.floating) else rng.integers(0, 256, shape)
        feeds[info.name] = values.astype(dtype)
    return feeds


def compare(got: Mapping[str, np.ndarray], names: list[str], want: list[np.ndarray]) -> tuple[float, float, bool]:
    """(max abs error, that error over the largest reference magnitude, whether every output matches)."""
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for name, w in zip(names, want, strict=True):
        g = np.asarray(got[name], np.float32)
        if g.shape != w.shape:
            return math.inf, math.inf, False
        err = float(np.max(np.abs(g - w))) if w.size else 0.0
        scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1e-6)
        worst_abs, worst_rel = max(worst_abs, err), max(worst_rel, err / scale)
        # not floored at 1: a random-init net can end in outputs of 1e-4 (timm's efficientnets), where an
        # absolute 2e-3 would pass any wrong answer
        ok = ok and bool(np.isfinite(g).all()) and err <= RTOL * scale
    return worst_abs, worst_rel, ok


@contextmanager
def kernel_cache(path: Path) -> Iterator[None]:
    """``DRIVEPACK_CACHE`` pointed at ``path`` (read at each compile) while the block runs."""
    old = os.environ.get("DRIVEPACK_CACHE")
    os.environ["DRIVEPACK_CACHE"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DRIVEPACK_CACHE", None)
        else:
            os.environ["DRIVEPACK_CACHE"] = old


# a warm capture in a process of its own: the same kernel and PoCL caches (inherited environment), its imports untimed
WARM_PROCESS = """
import sys
sys.path[:0] = sys.argv[3:]
import onnx
from bench_zoo import feeds_for, timed_capture
print(timed_capture(sys.argv[1], feeds_for(onnx.load(sys.argv[1]), seed=0), sys.argv[2])[0])
"""


def timed_capture_in_new_process(path: str, target: str, capture_cache: bool = True) -> float:
    """``timed_capture``'s seconds for a fresh Python process given this one's environment (its kernel caches);
    ``capture_cache=False``: with the capture cache off, so that it schedules again (jit/capture_cache.py)."""
    here = Path(__file__).resolve()
    env = {**os.environ} | ({} if capture_cache else {CAPTURE_CACHE_ENV: "0"})
    done = subprocess.run([sys.executable, "-c", WARM_PROCESS, path, target, str(here.parents[1]), str(here.parent)],
                          capture_output=True, text=True, check=False, env=env)
    if done.returncode:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"warm capture in a new process: exit {done.returncode}: {last[0]}")
    return float(done.stdout.split()[-1])


def timed_capture(path: str, feeds: Mapping[str, np.ndarray], target: str) -> tuple[float, Any]:
    # the process remembers compiled kernels too: forgotten, so only the disk cache decides cold or warm
    clear_compiled_kernels()
    t0 = time.perf_counter()
    run = capture_onnx(load_onnx(path, device=target), feeds, target=target)
    run(feeds)
    return time.perf_counter() - t0, run


@contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes spinning a core each while the block runs; stopped (and reaped) after, also on error."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def fixed_work(seconds: float, calibrate_s: float = 0.05) -> Callable[[], None]:
    """A call that hashes one 64 KB buffer as many times as took about ``seconds`` here now: a fixed amount of work
    on one thread, touching no more memory than a core's cache holds."""
    data = bytes(1 << 16)
    start, rounds = time.perf_counter(), 0
    while time.perf_counter() - start < calibrate_s:
        hashlib.sha256(data).digest()
        rounds += 1
    times = max(1, round(seconds * rounds / (time.perf_counter() - start)))

    def work() -> None:
        for _ in range(times):
            hashlib.sha256(data).digest()
    return work


def fixed_work_blocks(seconds: list[float], pause_s: float = SETTLE_S / 2) -> Callable[[], int]:
    """A call doing ``fixed_work(seconds[i])`` as the ``i``-th call of a block: the first after a pause of at least
    ``pause_s`` since the last one ended, the last length again past the end of ``seconds``. Returns ``i``."""
    works = [fixed_work(t) for t in seconds]
    position, end = -1, -math.inf

    def work() -> int:
        nonlocal position, end
        position = 0 if time.perf_counter() - end >= pause_s else min(position + 1, len(works) - 1)
        works[position]()
        end = time.perf_counter()
        return position
    return work


def block_profile(fns: dict[str, Callable[[], object]], name: str, blocks: int = 3) -> list[float]:
    """Median seconds of ``fns[name]``'s call at each place of a block, all of ``fns`` timed in ``blocks``
    alternating blocks as ``interleaved_samples`` times them."""
    samples = interleaved_samples(fns, blocks * BLOCK_CALLS, warmup=1)[name]
    return [statistics.median(samples[i::BLOCK_CALLS]) for i in range(BLOCK_CALLS)]


def interleaved_samples(fns: dict[str, Callable[[], object]], repeat: int, warmup: int) -> dict[str, list[float]]:
    """Every timed call's seconds per function, scheduled by ``interleaved_medians`` (which keeps only medians):
    each function is wrapped to record its own calls, the warm-up ones dropped after."""
    samples: dict[str, list[float]] = {name: [] for name in fns}

    def recording(name: str, fn: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
        return call

    interleaved_medians({n: recording(n, f) for n, f in fns.items()}, repeat, warmup=warmup)
    return {name: s[warmup:] for name, s in samples.items()}


def timeline_split(run: Any, feeds: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """(seconds inside kernels, seconds between them) of one OPENCL call: medians over ``TIMELINE_CALLS`` calls of
    the replay's ``timeline`` (each dispatch's start and end on the device clock; one in-order queue, so spans never
    overlap and the rest of the call's span is the driver's own time between dispatches)."""
    inside, between = [], []
    for _ in range(TIMELINE_CALLS):
        spans = run.replay.timeline(feeds)
        busy = sum(s.end - s.start for s in spans)
        inside.append(busy)
        between.append(max((s.end for s in spans), default=0.0) - busy)
    return statistics.median(inside), statistics.median(between)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def bench_model(name: str, path: str, args: argparse.Namespace, work: Path) -> ModelResult:
    import onnxruntime as ort
    result = ModelResult(name)
    if path.startswith("error:"):
        result.error = "export " + path
        return result
    proto = onnx.load(path)
    result.gflop = gflop(proto)
    feeds, other = feeds_for(proto, seed=0), feeds_for(proto, seed=1)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want, other_want = sess.run(None, feeds), sess.run(None, other)
    peers: dict[str, Callable[[], object]] = {"ort": lambda: sess.run(None, feeds)}
    runs = {}
    for target in args.targets:
        tr = result.targets[target] = TargetResult()
        cache = work / f"{name}-{target}-cache"
        try:
            with kernel_cache(cache):
                tr.cold_s, _ = timed_capture(path, feeds, target)
                tr.warm_s, run = timed_capture(path, feeds, target)
                if args.warm_process:
                    tr.warm_s = timed_capture_in_new_process(path, target)
                    tr.uncached_s = timed_capture_in_new_process(path, target, capture_cache=False)
            tr.dispatches = run.n_dispatches
            tr.max_abs, tr.max_rel, ok = compare(run(feeds), names, want)
        except Exception as e:  # noqa: BLE001  # a model drivepack cannot run is a row, not the end of the run
            tr.error = one_line(e)
            print(f"  {name} {target}: {tr.error}", flush=True)
            continue
        uncached = f" ({tr.uncached_s:.1f} s without the capture cache)" if tr.uncached_s is not None else ""
        print(f"  {name} {target}: capture cold {tr.cold_s:.1f} s warm {tr.warm_s:.1f} s{uncached}, "
              f"{tr.dispatches} dispatches, "
              f"max abs err {tr.max_abs:.2g} (rel {tr.max_rel:.2g})", flush=True)
        if not ok:
            tr.error = f"outputs differ from onnxruntime (max abs {tr.max_abs:.3g}, rel {tr.max_rel:.3g}); not timed"
            continue
        runs[target] = run
        peers[target] = lambda run=run: run(feeds)
    if args.contention:
        peers["control"] = fixed_work_blocks(block_profile(peers, "CPU" if "CPU" in runs else "ort"))
    before = cross_core_round_trip_ns()
    with busy_processes(args.contention):
        samples = interleaved_samples(peers, args.repeat, warmup=3)
    result.cross_core_ns = (before, cross_core_round_trip_ns())
    trips = [f"{v:.0f}" if v else "-" for v in result.cross_core_ns]
    print(f"  {name}: cross-core round trip {trips[0]} ns before, {trips[1]} ns after the timed part", flush=True)
    result.ort_p50, result.ort_p99 = percentile(samples["ort"], 50), percentile(samples["ort"], 99)
    if "control" in samples:
        result.control_p50, result.control_p99 = percentile(samples["control"], 50), percentile(samples["control"], 99)
    for target, run in runs.items():
        tr = result.targets[target]
        tr.p50, tr.p99 = percentile(samples[target], 50), percentile(samples[target], 99)
        if not compare(run(other), names, other_want)[2]:
            tr.error, tr.p50, tr.p99 = "replay on other inputs differs from onnxruntime (stale outputs?)", None, None
        elif target == "OPENCL":
            tr.kernel_s, tr.between_s = timeline_split(run, feeds)
            print(f"  {name} OPENCL: one call's dispatches spend {tr.kernel_s * 1e3:.2f} ms in kernels and "
                  f"{tr.between_s * 1e3:.2f} ms between them ({tr.between_s / max(tr.dispatches - 1, 1) * 1e6:.1f} "
                  "us from one to the next)", flush=True)
    return result


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def _ms(v: float | None) -> str:
    """Milliseconds, to the microsecond below one (a GRU step's 0.07 ms would round its ratios by a seventh)."""
    return "-" if v is None else f"{v * 1e3:.3f}" if v < 1e-3 else f"{v * 1e3:.2f}"


def _s(v: float | None) -> str:
    return f"{v:.1f}" if v is not None else "-"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def cell(tr: TargetResult | None, value: Callable[[TargetResult], str]) -> str:
    if tr is None:
        return "-"
    return "ERR" if tr.error and tr.p50 is None and tr.cold_s is None else value(tr)


def warm_cells(t: TargetResult | None, uncached: bool) -> str:
    """The warm capture's cell, and with ``uncached`` the one of the warm capture without the capture cache."""
    return f" {cell(t, lambda v: _s(v.warm_s)):>6s}" + (f" {cell(t, lambda v: _s(v.uncached_s)):>6s}" if uncached
                                                          else "")


def print_table(results: list[ModelResult], args: argparse.Namespace) -> dict[str, float | None]:
    cpu, ocl = "CPU", "OPENCL"
    p99 = args.contention > 0
    head = f"{'model':22s} {'GFLOP':>7s} {'dp CPU':>8s} {'dp OCL':>8s} {'ORT':>8s} "
    if p99:
        head += f"{'CPU p99':>8s} {'OCL p99':>8s} {'ORT p99':>8s} {'CPU 99/50':>9s} {'ctl 99/50':>9s} "
    # --warm-process: each warm column followed by the warm capture with the capture cache off ("no cc")
    warm_heads = f" {'warm':>6s}" + (f" {'no cc':>6s}" if args.warm_process else "")
    head += (f"{'CPU/ORT':>8s} {'OCL/ORT':>8s} {'CPU cold':>8s}{warm_heads} {'OCL cold':>8s}{warm_heads} "
             f"{'rel err':>8s}")
    what = f"median of {args.repeat} calls after 3 warm-up"
    if args.realtime:
        what += f", every peer's threads SCHED_FIFO {args.realtime}"
    warm = "; warm in a new process" if args.warm_process else ""
    print(f"\nreplay ms ({what}{f', p50/p99 with {args.contention} busy processes' if p99 else ''}); "
          f"capture s (load + capture + first call{warm}); ratios: lower is better")
    if args.warm_process:
        print("warm: from the capture cache (jit/capture_cache.py); no cc: with it off (DRIVEPACK_CAPTURE_CACHE=0), "
              "the kernel caches only")
    print(head)
    ratios: dict[str, list[float]] = {cpu: [], ocl: []}
    for r in results:
        if r.error:
            print(f"{r.name:22s} ERROR {r.error}")
            continue
        t = {k: r.targets.get(k) for k in (cpu, ocl)}
        ok = {k: v.p50 if v is not None and v.error is None else None for k, v in t.items()}
        for k in ratios:
            if ok[k] is not None and r.ort_p50:
                ratios[k].append(ok[k] / r.ort_p50)
        rel = max((v.max_rel for v in t.values() if v is not None and v.max_rel is not None), default=None)
        line = (f"{r.name:22s} {r.gflop:7.3f} {cell(t[cpu], lambda v: _ms(v.p50)):>8s} "
                f"{cell(t[ocl], lambda v: _ms(v.p50)):>8s} {_ms(r.ort_p50):>8s} ")
        if p99:
            line += (f"{cell(t[cpu], lambda v: _ms(v.p99)):>8s} {cell(t[ocl], lambda v: _ms(v.p99)):>8s} "
                     f"{_ms(r.ort_p99):>8s} {cell(t[cpu], lambda v: _x(v.p99, v.p50)):>9s} "
                     f"{_x(r.control_p99, r.control_p50):>9s} ")
        line += (f"{_x(ok[cpu], r.ort_p50):>8s} {_x(ok[ocl], r.ort_p50):>8s} "
                 f"{cell(t[cpu], lambda v: _s(v.cold_s)):>8s}{warm_cells(t[cpu], args.warm_process)} "
                 f"{cell(t[ocl], lambda v: _s(v.cold_s)):>8s}{warm_cells(t[ocl], args.warm_process)} "
                 f"{f'{rel:.1e}' if rel is not None else '-':>8s}")
        print(line)
    means = {k: geomean(v) for k, v in ratios.items()}
    for k, v in ratios.items():
        if k in args.targets:
            g = means[k]
            print(f"geometric mean drivepack {k} / onnxruntime: {f'{g:.2f}x' if g else '-'} over {len(v)} models")
    small = [(r.name, o.p50 / c.p50, o.dispatches) for r in results if not r.error
             and (c := r.targets.get(cpu)) is not None and (o := r.targets.get(ocl)) is not None and c.p50 and o.p50
             and o.dispatches is not None and o.dispatches <= SMALL_MODEL_DISPATCHES]
    if small:
        print(f"OPENCL / CPU on models of at most {SMALL_MODEL_DISPATCHES} dispatches: "
              + ", ".join(f"{n} {x:.2f}x ({d} dispatches)" for n, x, d in small))
    split = [(o.between_s / (o.kernel_s + o.between_s), o.between_s / (o.dispatches - 1)) for r in results
             if not r.error and (o := r.targets.get(ocl)) is not None and o.kernel_s and o.between_s is not None
             and o.dispatches and o.dispatches > 1]
    if split:
        print(f"OPENCL time between dispatches (the driver's own, from device timestamps): median "
              f"{statistics.median(f for f, _ in split):.0%} of a call's span, "
              f"{statistics.median(d for _, d in split) * 1e6:.1f} us from one dispatch to the next, over {len(split)} "
              "models of several dispatches")
    errors = [(r.name, "model", r.error) for r in results if r.error]
    errors += [(r.name, k, v.error) for r in results for k, v in r.targets.items() if v.error]
    if errors:
        print("\nerrors:")
        for name, where, msg in errors:
            print(f"  {name} {where}: {msg}")
    return means


def go_realtime(priority: int) -> None:
    """This thread SCHED_FIFO at ``priority``, before any peer starts a thread: each thread started after inherits
    it (onnxruntime's pool, PoCL's, drivepack's), so every peer runs as a real-time application would. Exits with a
    one-line error where the OS refuses."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError) as e:
        raise SystemExit(f"--realtime: SCHED_FIFO priority {priority} refused to this process (needs root, "
                         f"CAP_SYS_NICE or an RLIMIT_RTPRIO of at least {priority}): {e}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help=f"comma list (default: all; --list); quick: {','.join(QUICK)}")
    parser.add_argument("--quick", action="store_true", help="four small models, 5 timed calls")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per peer (default 20; quick: 5)")
    parser.add_argument("--no-opencl", action="store_true", help="skip drivepack OPENCL")
    parser.add_argument("--contention", type=int, default=0, metavar="N",
                        help="N busy processes alongside the timed part; prints p50 and p99")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                        help="also write the results as JSON to PATH (stdout when no PATH)")
    parser.add_argument("--threads", type=int, default=ORT_THREADS, metavar="N",
                        help=f"threads for each peer: onnxruntime's intra-op threads and {THREADS_ENV} (default "
                             f"{ORT_THREADS})")
    parser.add_argument("--realtime", type=int, default=0, metavar="PRIO",
                        help="run every peer's threads SCHED_FIFO at PRIO (1-99; module docstring); busy processes "
                             "stay fair")
    parser.add_argument("--warm-process", action="store_true",
                        help="time the warm capture in a new process (what a user's next run pays), not this one")
    parser.add_argument("--list", action="store_true", help="list the zoo and exit")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads: expected a positive integer, got {args.threads}")
    if not 0 <= args.realtime <= 99:
        parser.error(f"--realtime: expected a priority from 1 to 99, got {args.realtime}")
    os.environ[THREADS_ENV] = str(args.threads)  # before the CPU target first starts: it reads this once
    if args.list:
        print("\n".join(zoo_listing()))
        return
    args.repeat = args.repeat or (5 if args.quick else 20)
    args.targets = ["CPU"] if args.no_opencl else ["CPU", "OPENCL"]
    names = (args.models.split(",") if args.models else list(QUICK if args.quick else ZOO))
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(ZOO)}")
    paths = ensure(names)
    if args.realtime:
        go_realtime(args.realtime)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-zoo-") as tmp:
        # PoCL keeps compiled kernels of its own (~/.cache/pocl), which would make a later run's OPENCL "cold"
        # capture warm (squeezenet: 21 s, then 3.8 s). It reads this once, when OpenCL starts: after this line
        os.environ["POCL_CACHE_DIR"] = str(Path(tmp) / "pocl")
        for name in names:
            print(f"{name}:", flush=True)
            try:
                results.append(bench_model(name, paths[name], args, Path(tmp)))
            except Exception as e:  # noqa: BLE001  # onnxruntime or the timing itself failing: still a row
                results.append(ModelResult(name, error=one_line(e)))
    means = print_table(results, args)
    if args.json:
        doc = {"repeat": args.repeat, "contention": args.contention, "threads": args.threads, "realtime": args.realtime,
               "geomean_vs_ort": means, "models": [asdict(r) for r in results]}
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
