"""Whole-model speed on the CPU target against onnxruntime (2 threads), in one run, plus per-layer GFLOP/s.

    python3 benchmarks/bench_models.py [--repeat N] [--models vision,policy,resnet50] [--layers K]

Models: the sample openpilot-shaped vision and policy models (packager/samples.py) and the onnx wheel's
``light_resnet50`` (its stored weights; input arange(n)/n as onnx's backend runner feeds it). For each model it
prints the median latency of drivepack and of onnxruntime and the ratio drivepack / onnxruntime (lower is
better). Outputs are checked against onnxruntime before anything is timed.

What is timed for drivepack: until capture/replay lands, an *eager* run with warm caches: the model's kernels
are scheduled and compiled once, and the timed part relaunches that schedule (every kernel launch from
Python, weight-only kernels included). Compile time is excluded; Python launch overhead is included.

Per layer: the ``--layers`` slowest kernels of each model with their time, GFLOP/s (FLOPs counted from the
kernel graph, jit/stats.py) and the share of the machine's FMA peak, which this script measures itself by
compiling a small C kernel of independent FMAs that runs on every core (OpenMP).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from jit.device import Device
from jit.onnx import load_onnx
from jit.realize import compile_kernels, device_buffer, run_schedule
from jit.schedule import create_schedule
from targets.cpu import cpu_threads

ORT_THREADS = 2
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# 12 independent vector accumulators per thread (widest vectors the machine has): enough FMAs in flight to
# hide their latency on two ports; the result is stored so the compiler cannot drop the work
FMA_PEAK_C = r"""
#include <omp.h>
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
#define STEP(x) x = x * b + a;
#define ALL(M) M(c0) M(c1) M(c2) M(c3) M(c4) M(c5) M(c6) M(c7) M(c8) M(c9) M(c10) M(c11)
double fma_peak(long iters, float* out) {
  int nt = 1;
  double t0 = omp_get_wtime();
  #pragma omp parallel
  {
    vf a, b;
    for (int j = 0; j < LANES; j++) { a[j] = 1e-7f * j; b[j] = 0.999999f; }
    vf c0 = a, c1 = a + 1, c2 = a + 2, c3 = a + 3, c4 = a + 4, c5 = a + 5, c6 = a + 6, c7 = a + 7, c8 = a + 8,
       c9 = a + 9, c10 = a + 10, c11 = a + 11;
    for (long it = 0; it < iters; it++) { ALL(STEP) }
    vf s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
    out[omp_get_thread_num()] = s[0];
    #pragma omp single
    nt = omp_get_num_threads();
  }
  double secs = omp_get_wtime() - t0;
  return 2.0 * 12 * LANES * (double)iters * nt / secs;  /* FLOP/s: 2 per lane-FMA */
}
"""


def fma_peak_gflops(threads: int) -> float:
    """FMA peak of this machine on ``threads`` threads, in GFLOP/s (best of a few runs)."""
    import cffi
    with tempfile.TemporaryDirectory() as tmp:
        src, lib_path = Path(tmp) / "peak.c", Path(tmp) / "peak.so"
        src.write_text(FMA_PEAK_C)
        subprocess.run(["cc", "-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib_path)],
                       check=True)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # libgomp reads it when it is loaded
        ffi = cffi.FFI()
        ffi.cdef("double fma_peak(long iters, float* out);")
        lib = ffi.dlopen(str(lib_path))
        out = ffi.new("float[]", 256)
        return max(lib.fma_peak(5_000_000, out) for _ in range(3)) / 1e9


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def light_inputs(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in proto.graph.initializer}
    feeds = {}
    for info in proto.graph.input:
        if info.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[info.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def load_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from packager.samples import policy_model, sample_inputs, vision_model
    if name == "vision":
        proto = vision_model()
        return proto, sample_inputs(proto, seed=3)
    if name == "policy":
        proto = policy_model()
        return proto, sample_inputs(proto, seed=3)
    proto = onnx.load(str(LIGHT_DIR / f"light_{name}.onnx"))
    return proto, light_inputs(proto)


def bench_model(name: str, repeat: int, layers: int, peak: float) -> tuple[float, float]:
    import onnxruntime as ort
    proto, feeds = load_case(name)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    model = load_onnx(proto)
    checked = model(feeds)
    for n, w in zip(model.output_names, want, strict=True):
        np.testing.assert_allclose(checked[n].numpy(), w, rtol=2e-3, atol=2e-3)
    outs = model(feeds)  # a fresh graph (the checked one is realized now): its schedule is what gets timed
    kernels, _ = create_schedule([outs[n].uop for n in model.output_names], Device.DEFAULT)
    compiled = compile_kernels(kernels, Device[Device.DEFAULT])
    ours = median_time(lambda: run_schedule(kernels), repeat)
    peer = median_time(lambda: sess.run(None, feeds), repeat)
    if layers:
        target = Device[Device.DEFAULT]
        rows = []
        for k, ck in zip(kernels, compiled, strict=True):
            bufs = [device_buffer(b) for b in k.buffers]
            times = [target.launch(ck.program, bufs, wait=True) or 0.0 for _ in range(3)]
            rows.append((min(times), ck))
        rows.sort(key=lambda r: -r[0])
        total = sum(t for t, _ in rows)
        print(f"  {name}: {len(rows)} kernels, sum of best kernel times {total * 1e3:.2f} ms")
        for t, ck in rows[:layers]:
            gflops = ck.stats.flops / t / 1e9 if t else 0.0
            print(f"    {ck.name:36s} {t * 1e3:8.3f} ms {ck.stats.flops / 1e9:7.3f} GFLOP {gflops:8.1f} GFLOP/s "
                  f"{100 * gflops / peak:5.1f}% of peak")
    return ours, peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", default="vision,policy,resnet50")
    parser.add_argument("--layers", type=int, default=5, help="slowest kernels listed per model (0: none)")
    args = parser.parse_args()
    threads = cpu_threads()
    peak = fma_peak_gflops(threads)
    print(f"FMA peak measured on {threads} threads: {peak:.1f} GFLOP/s")
    results = [(name, *bench_model(name, args.repeat, args.layers, peak)) for name in args.models.split(",")]
    print(f"{'model':12s} {'drivepack ms':>13s} {'onnxruntime ms':>15s} {'ratio':>8s}")
    for name, ours, peer in results:
        print(f"{name:12s} {ours * 1e3:13.2f} {peer * 1e3:15.2f} {ours / peer:8.2f}x")


if __name__ == "__main__":
    main()
