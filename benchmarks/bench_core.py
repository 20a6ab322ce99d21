"""Core speed check: drivepack's CPU target against numpy (matmul) and onnxruntime (conv), in one run.

    python3 benchmarks/bench_core.py [--repeat N]

Prints the median time of each and the ratio drivepack / peer (lower is better; 1.0 = as fast as the peer).
Kernels are compiled before timing; the timed part relaunches the already scheduled kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jit.frontend.tensor import Tensor
from jit.realize import run_schedule
from jit.schedule.kernels import create_schedule
from targets.registry import Device

# settings both drivepack and tinygrad read from the environment (tinygrad parses WINO as an int and would turn
# on its own Winograd or BEAM search): a peer runs with its defaults whatever drivepack was asked for
SHARED_FLAGS = ("WINO", "BEAM", "NOOPT", "DEBUG")


def peer_env(**extra: str) -> dict[str, str]:
    """The environment for a peer's (tinygrad's) process: this one's without ``SHARED_FLAGS``, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in SHARED_FLAGS}, **extra}


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):  # compiles, faults pages in
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def other_threads_cpu_ns() -> int | None:
    """Nanoseconds of CPU every thread of this process but the calling one has run (Linux's
    ``/proc/self/task/*/schedstat``); None where that is not available."""
    me = str(threading.get_native_id())
    total = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            if tid != me:
                with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                    total += int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def settle(minimum: float, window: float = 0.005, cap: float = 0.25) -> float:
    """Sleep ``minimum`` seconds, then on until this process's other threads have run no CPU for ``window``
    seconds (a peer's thread pool still spinning after its call: onnxruntime's spins tens of milliseconds, longer
    than a fixed pause covered), ``cap`` seconds at most in all. The seconds waited."""
    start = time.perf_counter()
    time.sleep(minimum)
    last = other_threads_cpu_ns()
    while last is not None and time.perf_counter() - start < cap:
        time.sleep(window)
        now = other_threads_cpu_ns()
        if now is None or now == last:
            break
        last = now
    return time.perf_counter() - start


CROSS_CORE_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
static _Atomic int dp_turn __attribute__((aligned(64)));
static int dp_rounds, dp_other_cpu;
static void dp_pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static void *dp_answer(void *arg) {
  (void)arg;
  dp_pin(dp_other_cpu);
  for (int i = 0; i < dp_rounds; i++) {
    while (atomic_load(&dp_turn) != 1) {}
    atomic_store(&dp_turn, 0);
  }
  return 0;
}
/* nanoseconds per round trip of one cache line between cores a and b (both pinned), -1 if no thread started */
double dp_round_trip_ns(int a, int b, int rounds) {
  pthread_t t;
  struct timespec s, e;
  dp_rounds = rounds;
  dp_other_cpu = b;
  atomic_store(&dp_turn, 0);
  if (pthread_create(&t, 0, dp_answer, 0)) return -1;
  dp_pin(a);
  clock_gettime(CLOCK_MONOTONIC, &s);
  for (int i = 0; i < rounds; i++) {
    atomic_store(&dp_turn, 1);
    while (atomic_load(&dp_turn) != 0) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &e);
  pthread_join(t, 0);
  return ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / rounds;
}
"""


@functools.cache
def _round_trip_lib() -> Any:
    """The compiled ping-pong (kernel cache: compiled once per source), loaded once per process."""
    import cffi

    from targets.cpu_runtime import compile_shared
    ffi = cffi.FFI()
    ffi.cdef("double dp_round_trip_ns(int a, int b, int rounds);")
    return ffi.dlopen(str(compile_shared(CROSS_CORE_SOURCE)))


def cross_core_round_trip_ns(rounds: int = 20_000) -> float | None:
    """Nanoseconds for one cache line to go from one core this process may use to another and back (two threads
    pinned, the calling one restored to its cores after); None with fewer than two cores. On a VM it moves with
    where the host puts the vCPUs, and two-thread calls move with it (bench_zoo.py's module docstring)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    try:
        ns = _round_trip_lib().dp_round_trip_ns(cores[0], cores[1], rounds)
    finally:
        os.sched_setaffinity(0, cores)
    return ns if ns > 0 else None


BLOCK_CALLS = 5  # calls of one function in a row in interleaved_medians
SETTLE_S = 0.05  # the least pause before each block there


def interleaved_medians(fns: dict[str, Callable[[], object]], repeat: int, warmup: int = 1,
                        block: int = BLOCK_CALLS, settle_s: float = SETTLE_S) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, timed in alternating blocks of ``block`` calls (``repeat`` per
    function in all): on a noisy machine a slow spell then falls on every peer alike, not on whichever ran in it.
    Each block starts once the last one's threads are quiet (``settle``, at least ``settle_s`` seconds): thread
    pools (onnxruntime's, OpenMP's) spin a while after a call, and a peer timed in that while shares the cores
    with them."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    while any(len(t) < repeat for t in times.values()):
        for name, fn in fns.items():
            settle(settle_s)
            for _ in range(min(block, repeat - len(times[name]))):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def drivepack_runner(out: Tensor) -> Callable[[], None]:
    kernels, _ = create_schedule([out.uop], Device.DEFAULT)
    return lambda: run_schedule(kernels)


def bench_matmul(repeat: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    out = Tensor(a).matmul(Tensor(b))
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-3, atol=1e-3)
    ours = median_time(drivepack_runner(Tensor(a).matmul(Tensor(b))), repeat)
    peer = median_time(lambda: a @ b, repeat)
    return ours, peer


def conv_model_bytes(w: np.ndarray, bias: np.ndarray) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 128, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 128, 256])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def bench_conv(repeat: int) -> tuple[float, float]:
    import onnxruntime as ort
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 128, 256), dtype=np.float32)
    w = rng.standard_normal((64, 32, 3, 3), dtype=np.float32) * 0.1
    bias = rng.standard_normal(64, dtype=np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(conv_model_bytes(w, bias), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    out = Tensor(x).conv2d(Tensor(w), Tensor(bias), padding=1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3)
    ours = median_time(drivepack_runner(Tensor(x).conv2d(Tensor(w), Tensor(bias), padding=1)), repeat)
    peer = median_time(lambda: sess.run(None, {"x": x}), repeat)
    return ours, peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = [("matmul 1024x1024 f32", "numpy", *bench_matmul(args.repeat)),
            ("conv3x3 1x32x128x256->64", "onnxruntime", *bench_conv(args.repeat))]
    print(f"{'case':28s} {'drivepack ms':>13s} {'peer':>12s} {'peer ms':>9s} {'ratio':>8s}")
    for name, peer_name, ours, peer in rows:
        print(f"{name:28s} {ours * 1e3:13.2f} {peer_name:>12s} {peer * 1e3:9.2f} {ours / peer:8.1f}x")


if __name__ == "__main__":
    main()
