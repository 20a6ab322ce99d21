"""Replay overhead and capture memory, each printed next to a peer measured in the same run.

1. A chain of N tiny elementwise kernels (N = 500 by default), captured on the CPU target: one replay (one FFI
   call into the generated driver) per dispatch, against the same dispatches called one FFI call each from
   Python, and against the eager run (graph build + schedule + launches). Target: < 2 us per dispatch.
2. The same chain on the OpenCL target: the recorded cl_khr_command_buffer replay against the enqueue loop.
3. The CPU thread pool's cost per parallel region (targets/cpu_pool.py): regions of 8 small chunks on 2 threads,
   called from C while a replay would hold the pool, against the same chunks run on the calling thread alone.
4. The sample vision model captured on the CPU target in a fresh child process: peak host memory (ru_maxrss)
   before and after capture, kernels pruned, arena bytes vs the naive sum (target: <= 50%).

Usage: python3 benchmarks/bench_replay.py [--kernels 500] [--iters 200] [--skip-opencl] [--skip-vision]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cffi
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import targets.cpu_runtime as cpu  # noqa: E402
from jit.frontend.tensor import Tensor  # noqa: E402
from jit.trace import capture  # noqa: E402
from targets.replay_opencl import OpenCLReplay  # noqa: E402


def chain(n: int) -> Callable[..., dict[str, Tensor]]:
    def fn(x: Tensor) -> dict[str, Tensor]:
        for _ in range(n):
            x = (x * 1.0001 + 0.5).contiguous()  # contiguous: one kernel per step
        return {"y": x}
    return fn


def best_of(fn: Callable[[], object], iters: int, repeats: int = 5) -> float:
    """The best mean seconds per call over ``repeats`` runs of ``iters`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def bench_cpu(n: int, iters: int) -> None:
    x = {"x": np.arange(16, dtype=np.float32)}
    cap = capture(chain(n), x, target="CPU")
    assert cap.n_dispatches == n, cap.report
    rep = cap.replay
    replay = best_of(lambda: cap(x), iters)
    arrays = rep.check_inputs(x)

    def python_loop() -> None:  # the same compiled dispatches, one FFI call each from Python
        outputs = rep.new_outputs()
        keep = rep._bind(arrays, outputs)
        for i in range(n):
            rep._dispatch_fn(rep._table, i)
        del keep

    loop = best_of(python_loop, max(iters // 10, 5))
    eager = best_of(lambda: chain(n)(Tensor(x["x"]))["y"].numpy(), 3, repeats=2)
    print(f"CPU   {n} tiny kernels: replay {replay * 1e6:9.1f} us = {replay / n * 1e6:6.3f} us/dispatch "
          f"(target < 2) | python loop {loop / n * 1e6:6.3f} us/dispatch ({loop / replay:5.1f}x the replay) | "
          f"eager {eager / n * 1e6:8.1f} us/dispatch ({eager / replay:7.1f}x)")


REGION_LOOP = r"""
#include <stdint.h>
#include <time.h>
typedef void (*dp_fn)(void *ctx, int lo, int hi);
typedef void (*parallel_for_t)(int threads, int n, int chunks, dp_fn fn, void *ctx);
static void touch(void *ctx, int lo, int hi) { float *a = ctx; for (int i = lo * 16; i < hi * 16; i++) a[i] += 1.0f; }
long long regions_ns(uintptr_t parallel_for, int threads, int regions, void *buf) {
  struct timespec s, e;
  clock_gettime(CLOCK_MONOTONIC, &s);
  for (int r = 0; r < regions; r++) ((parallel_for_t)parallel_for)(threads, 64, 8, touch, buf);
  clock_gettime(CLOCK_MONOTONIC, &e);
  return (long long)(e.tv_sec - s.tv_sec) * 1000000000 + (e.tv_nsec - s.tv_nsec);
}
"""


def bench_regions(regions: int = 2000, repeats: int = 15) -> None:
    ffi = cffi.FFI()
    ffi.cdef("long long regions_ns(uintptr_t parallel_for, int threads, int regions, void *buf);")
    lib = ffi.dlopen(str(cpu.compile_shared(REGION_LOOP)))
    pool = cpu.thread_pool()
    parallel_for = int(pool.ffi.cast("uintptr_t", pool.lib.dp_parallel_for))
    buf = np.zeros(64 * 16, dtype=np.float32)
    ptr = ffi.cast("void*", buf.ctypes.data)
    pool.lib.dp_pool_hold(1)
    try:
        split = sorted(lib.regions_ns(parallel_for, 2, regions, ptr) / regions for _ in range(repeats))
        alone = sorted(lib.regions_ns(parallel_for, 1, regions, ptr) / regions for _ in range(repeats))
    finally:
        pool.lib.dp_pool_hold(-1)
    print(f"CPU pool: {split[repeats // 2]:6.0f} ns per 2-thread region of 8 chunks (median of {repeats} runs of "
          f"{regions}) | the same chunks on the caller alone {alone[repeats // 2]:6.0f} ns")


def bench_opencl(n: int, iters: int) -> None:
    x = {"x": np.arange(16, dtype=np.float32)}
    cap = capture(chain(n), x, target="OPENCL")
    rep = cap.replay
    assert isinstance(rep, OpenCLReplay)
    loop = OpenCLReplay(cap.cmdbuf, cap.weights, rep.target, use_command_buffer=False)
    assert loop(x)["y"].tobytes() == cap(x)["y"].tobytes()
    n_iters = max(iters // 10, 5)
    if rep.mode != "command_buffer":
        print(f"OPENCL: {rep.target.info.name} lacks cl_khr_command_buffer: enqueue loop only")
    recorded = best_of(lambda: cap(x), n_iters)
    looped = best_of(lambda: loop(x), n_iters)
    enq_cb = min(rep.time_enqueue(x)[0] for _ in range(n_iters))
    enq_loop = min(loop.time_enqueue(x)[0] for _ in range(n_iters))
    print(f"OPENCL {n} tiny kernels on {rep.target.info.name}: {rep.mode} {recorded / n * 1e6:7.2f} us/dispatch "
          f"(enqueue {enq_cb * 1e6:8.1f} us) | enqueue loop {looped / n * 1e6:7.2f} us/dispatch (enqueue "
          f"{enq_loop * 1e6:8.1f} us) | loop / command buffer = {looped / recorded:5.2f}x")


def vision_child() -> None:
    """Runs in a fresh process: capture the sample vision model, print memory and plan numbers."""
    from jit.onnx.loader import load_onnx
    from jit.trace import capture_onnx
    from packager.samples import sample_inputs, vision_model
    proto = vision_model()
    model = load_onnx(proto, device="CPU")
    inputs = sample_inputs(proto)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cap = capture_onnx(model, inputs, target="CPU")
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = cap.report
    print(f"vision capture (CPU): {took:6.2f} s; peak host memory {before / 1024:7.1f} MiB before capture, "
          f"{after / 1024:7.1f} MiB after (+{(after - before) / 1024:.1f}); weights {r.weight_bytes / 2**20:.1f} MiB")
    print(f"vision: pruned {r.kernels_traced} -> {r.kernels_kept} kernels; arena {r.arena_bytes} bytes vs naive "
          f"{r.naive_bytes} = {r.arena_bytes / r.naive_bytes:.1%} (target <= 50%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=500)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--skip-opencl", action="store_true")
    ap.add_argument("--skip-vision", action="store_true")
    ap.add_argument("--vision-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.vision_child:
        vision_child()
        return
    bench_cpu(args.kernels, args.iters)
    bench_regions()
    if not args.skip_opencl:
        bench_opencl(args.kernels, args.iters)
    if not args.skip_vision:
        subprocess.run([sys.executable, __file__, "--vision-child"], check=True)


if __name__ == "__main__":
    main()
