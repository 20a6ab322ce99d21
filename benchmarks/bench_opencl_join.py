"""How late an OpenCL CPU driver's second thread joins a dispatch, against the CPU target's pool (issue 25: why PoCL
lags the CPU target).

    python3 benchmarks/bench_opencl_join.py [--steps 5000,20000,60000] [--chain 64] [--rounds 20] [--json]

The kernel: each work-item runs a dependent multiply-add chain of ``steps`` iterations on its own float and
stores it, so a work-group's time is the chain's and nothing is shared. A chain of ``--chain`` dispatches of it is
enqueued on drivepack's in-order OPENCL queue, once with one work-group per dispatch and once with two (one
work-item each), and timed to ``clFinish`` (the fastest of ``--rounds``: a preempted round only adds time).
The same chain runs on the CPU target's thread pool too (targets/cpu_pool.py ``dp_parallel_for``: one index on one
thread, two indices on two, a region a dispatch). Printed per device and chain length: microseconds per dispatch
with one group and with two, and how long after the first the second group started: two groups on two threads take
one group's time, so the excess over it is the second thread's join delay; where the second group added about its
own work (one group's time less an empty dispatch's, ``steps`` 0), one thread ran both: it finished the first before
the second thread came. The outputs are checked against the same chain in numpy first.

A driver thread that sleeps between commands (PoCL's wait on a condition variable) must be woken for each
dispatch; on a VM whose idle vCPUs halt at once, that wake-up is what this prints, and a kernel shorter than about
twice it gains nothing from the second thread. The CPU target's pool workers spin a few microseconds before they
sleep, which covers the gap between one region and the next.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import cffi
import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from jit import Device  # noqa: E402
from targets import cpu_runtime  # noqa: E402
from targets.cl_binding import CL_MEM_READ_WRITE, check, checked_create  # noqa: E402

SOURCE = """__kernel void chain(__global float* a, int steps) {
  int i = get_global_id(0);
  float s = a[i];
  for (int k = 0; k < steps; k++) s = s * 0.999f + 1.0f;
  a[i] = s;
}"""
POOL_SOURCE = """
/* ctx: the steps, then one float per index */
void chain(void *ctx, int lo, int hi) {
  int steps = *(int *)ctx;
  float *a = (float *)ctx + 1;
  for (int i = lo; i < hi; i++) {
    float s = a[i];
    for (int k = 0; k < steps; k++) s = s * 0.999f + 1.0f;
    a[i] = s;
  }
}
"""
# below this share of one group's work added by the second, the two groups overlapped: a second thread took one
OVERLAP = 0.9


def join_us(empty_us: float, one_us: float, two_us: float) -> float | None:
    """Microseconds the second group started after the first, from a dispatch's time with no work, with one group
    and with two (each one work-item of the same work); None where one thread ran both (the second group added
    about one group's work)."""
    if two_us >= one_us + OVERLAP * (one_us - empty_us):
        return None
    return max(two_us - one_us, 0.0)


def expected(x: np.ndarray, steps: int, dispatches: int) -> np.ndarray:
    y = x.astype(np.float64)
    for _ in range(steps * dispatches):
        y = y * 0.999 + 1.0
    return y.astype(np.float32)


class Runner(Protocol):
    name: str

    def write(self, x: np.ndarray) -> None: ...
    def read(self) -> np.ndarray: ...
    def run(self, steps: int, groups: int, dispatches: int) -> float: ...
    def release(self) -> None: ...


def build_program(rt: Any, source: str) -> Any:
    """``source`` built as an OpenCL program on runtime ``rt``'s device, with no options (a benchmark's own
    kernels, not drivepack's: the runtime's build path adds its flags and caches)."""
    src = rt.ffi.new("char[]", source.encode())
    program = checked_create("clCreateProgramWithSource", rt.lib.clCreateProgramWithSource, rt.context, 1,
                             rt.ffi.new("char*[1]", [src]), rt.ffi.NULL)
    check("clBuildProgram", rt.lib.clBuildProgram(program, 1, rt.ffi.new("cl_device_id[1]", [rt.device_id]), b"",
                                                  rt.ffi.NULL, rt.ffi.NULL))
    return program


class OpenCLRunner:
    """The kernel built on drivepack's OPENCL device, a 2-float buffer, and timed chains of its dispatches."""

    def __init__(self) -> None:
        rt = Device.runtime("OPENCL")
        self.rt, self.ffi, self.lib = rt, rt.ffi, rt.lib
        self.name = f"OPENCL, {rt.info.max_compute_units} threads"
        self.program = build_program(rt, SOURCE)
        self.kernel = checked_create("clCreateKernel", self.lib.clCreateKernel, self.program, b"chain")
        self.mem = checked_create("clCreateBuffer", self.lib.clCreateBuffer, rt.context, CL_MEM_READ_WRITE, 8,
                                  self.ffi.NULL)
        check("clSetKernelArg", self.lib.clSetKernelArg(self.kernel, 0, self.ffi.sizeof("cl_mem"),
                                                        self.ffi.new("cl_mem*", self.mem)))

    def write(self, x: np.ndarray) -> None:
        check("clEnqueueWriteBuffer", self.lib.clEnqueueWriteBuffer(
            self.rt.queue, self.mem, 1, 0, 8, self.ffi.from_buffer(x), 0, self.ffi.NULL, self.ffi.NULL))

    def read(self) -> np.ndarray:
        out = np.empty(2, np.float32)
        check("clEnqueueReadBuffer", self.lib.clEnqueueReadBuffer(
            self.rt.queue, self.mem, 1, 0, 8, self.ffi.from_buffer(out), 0, self.ffi.NULL, self.ffi.NULL))
        return out

    def run(self, steps: int, groups: int, dispatches: int) -> float:
        """Seconds to enqueue ``dispatches`` launches of ``groups`` one-item work-groups and finish them."""
        ffi, lib, queue = self.ffi, self.lib, self.rt.queue
        check("clSetKernelArg", lib.clSetKernelArg(self.kernel, 1, ffi.sizeof("int"), ffi.new("int*", steps)))
        size, one = ffi.new("size_t[1]", [groups]), ffi.new("size_t[1]", [1])
        start = time.perf_counter()
        for _ in range(dispatches):
            check("clEnqueueNDRangeKernel", lib.clEnqueueNDRangeKernel(queue, self.kernel, 1, ffi.NULL, size, one,
                                                                       0, ffi.NULL, ffi.NULL))
        check("clFinish", lib.clFinish(queue))
        return time.perf_counter() - start

    def release(self) -> None:
        self.lib.clReleaseMemObject(self.mem)
        self.lib.clReleaseKernel(self.kernel)
        self.lib.clReleaseProgram(self.program)


class PoolRunner:
    """The same chain as a C function split over the CPU target's thread pool, a region per dispatch."""

    def __init__(self) -> None:
        self.pool = cpu_runtime.thread_pool()
        self.ffi = cffi.FFI()
        self.ffi.cdef("void chain(void *ctx, int lo, int hi);")
        self.lib = self.ffi.dlopen(str(cpu_runtime.compile_shared(POOL_SOURCE)))
        self.fn = self.pool.ffi.cast("dp_fn", int(self.ffi.cast("uintptr_t", self.lib.chain)))
        self.ctx = np.zeros(3, np.int32)
        self.name = "CPU target's pool"

    def write(self, x: np.ndarray) -> None:
        self.ctx[1:].view(np.float32)[:] = x

    def read(self) -> np.ndarray:
        return self.ctx[1:].view(np.float32).copy()

    def run(self, steps: int, groups: int, dispatches: int) -> float:
        """Seconds for ``dispatches`` regions of ``groups`` indices on as many threads."""
        self.ctx[0] = steps
        parallel_for, ctx = self.pool.lib.dp_parallel_for, self.pool.ffi.cast("void*", self.ctx.ctypes.data)
        start = time.perf_counter()
        for _ in range(dispatches):
            parallel_for(groups, groups, groups, self.fn, ctx)
        return time.perf_counter() - start

    def release(self) -> None:
        pass


def fastest_us(runner: Runner, steps: int, dispatches: int, rounds: int) -> dict[int, float]:
    """Per-dispatch microseconds with one group and with two, alternating, the fastest round of each."""
    best = {1: float("inf"), 2: float("inf")}
    for _ in range(rounds):
        for groups in best:
            best[groups] = min(best[groups], runner.run(steps, groups, dispatches))
    return {g: t / dispatches * 1e6 for g, t in best.items()}


def measure(runner: Runner, steps: int, dispatches: int, rounds: int,
            empty_us: float) -> dict[str, str | float | None]:
    """``fastest_us`` at ``steps``, the second group's join delay (``join_us``) and the empty dispatch it used."""
    t = fastest_us(runner, steps, dispatches, rounds)
    return {"device": runner.name, "steps": steps, "one_group_us": t[1], "two_groups_us": t[2],
            "join_us": join_us(empty_us, t[1], t[2]), "empty_us": empty_us}


def main(argv: list[str] | None = None) -> list[dict[str, str | float | None]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="5000,20000,60000", help="multiply-adds per work-item (a list)")
    parser.add_argument("--chain", type=int, default=64, help="dispatches per timed chain (default 64)")
    parser.add_argument("--rounds", type=int, default=20, help="timed chains per setting; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line after the table")
    args = parser.parse_args(argv)
    x = np.array([0.5, -2.0], np.float32)
    steps = [int(s) for s in args.steps.split(",")]
    info = Device.runtime("OPENCL").info
    print(f"\nOPENCL is {info.platform}: {info.name}; chains of {args.chain} dispatches, fastest of {args.rounds}, "
          f"us per dispatch")
    print(f"{'device':24s} {'steps':>7s} {'one group':>10s} {'two groups':>11s}  second group started")
    rows = []
    for runner in (OpenCLRunner(), PoolRunner()):
        try:
            runner.write(x)
            runner.run(37, 2, 3)
            np.testing.assert_allclose(runner.read(), expected(x, 37, 3), rtol=1e-4, err_msg=runner.name)
            empty_us = fastest_us(runner, 0, args.chain, args.rounds)[1]
            for n in steps:
                row = measure(runner, n, args.chain, args.rounds, empty_us)
                rows.append(row)
                joined = "(one thread ran both)" if row["join_us"] is None else \
                    f"{row['join_us']:.1f} us after the first"
                print(f"{runner.name:24s} {n:7d} {row['one_group_us']:10.1f} {row['two_groups_us']:11.1f}  {joined}")
        finally:
            runner.release()
    if args.json:
        print(json.dumps({"chain": args.chain, "rounds": args.rounds, "rows": rows}))
    return rows


if __name__ == "__main__":
    main()
