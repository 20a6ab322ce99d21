"""Dependent layers on an OpenCL CPU device: a dispatch per layer against one persistent "team" kernel (issue 25:
what a call on PoCL would gain if its kernels ran inside one dispatch instead of one dispatch each).

    python3 benchmarks/bench_opencl_team.py [--steps 20,100,350,1000] [--layers 100] [--rounds 15] [--json]

The work: ``--layers`` layers of ``UNITS`` units; a unit reads its neighbour's value from the layer before and runs
a dependent multiply-add chain of ``steps`` iterations on it, so each layer needs the whole layer before it, as a
model's kernels do. Two ways to run them on drivepack's in-order OPENCL queue:
- dispatches: one launch per layer of ``groups`` one-item work-groups, each item a contiguous share of the units
  (how a replay runs a model's kernels today, one command each);
- team: one launch of ``groups`` one-item work-groups that runs every layer. Its groups claim chunks of a layer's
  units with an atomic counter and count the chunks they finish; a group that finds no chunk left waits until all
  are finished, then moves on to the next layer. A group that starts late finds its work done by the others
  (nothing waits for a group that never claimed anything), and the last group out resets the counters for the next
  launch.
Printed per ``steps``: microseconds per layer, each the fastest of ``--rounds`` timed launches (a preempted round
only adds time), with one group and with one group per compute unit, both ways. Both ways' results are checked
against numpy first. This is a measurement of the mechanism only: no capture renders such a kernel yet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_opencl_join import build_program  # noqa: E402

from jit import Device  # noqa: E402
from targets.cl_binding import CL_MEM_READ_WRITE, check, checked_create  # noqa: E402

UNITS = 64
SOURCE = """
void layer(__global const float* src, __global float* dst, int lo, int hi, int steps) {
  for (int u = lo; u < hi; u++) {
    float s = src[(u + 1) % UNITS];
    for (int k = 0; k < steps; k++) s = s * 0.999f + 1.0f;
    dst[u] = s;
  }
}
__kernel void one_layer(__global const float* src, __global float* dst, int steps) {
  int share = (UNITS + get_global_size(0) - 1) / get_global_size(0);
  int lo = min((int)get_global_id(0) * share, UNITS);
  layer(src, dst, lo, min(lo + share, UNITS), steps);
}
__kernel void team(__global float* a, __global float* b, __global volatile int* sync, int layers, int steps,
                   int chunk) {
  int chunks = (UNITS + chunk - 1) / chunk;
  for (int l = 0; l < layers; l++) {
    __global float* src = l % 2 ? b : a;
    __global float* dst = l % 2 ? a : b;
    for (int c = atomic_inc(&sync[2 * l]); c < chunks; c = atomic_inc(&sync[2 * l])) {
      layer(src, dst, c * chunk, min(c * chunk + chunk, UNITS), steps);
      atomic_inc(&sync[2 * l + 1]);
    }
    while (atomic_add(&sync[2 * l + 1], 0) < chunks) {}
  }
  if (atomic_inc(&sync[2 * layers]) == get_num_groups(0) - 1) {
    for (int i = 0; i <= 2 * layers; i++) sync[i] = 0;
  }
}
""".replace("UNITS", str(UNITS))


def expected(x: np.ndarray, layers: int, steps: int) -> np.ndarray:
    """The last layer's units, computed in float64 (each unit from its neighbour in the layer before)."""
    y = x.astype(np.float64)
    for _ in range(layers):
        y = np.roll(y, -1)
        for _ in range(steps):
            y = y * 0.999 + 1.0
    return y.astype(np.float32)


class TeamRunner:
    """Both kernels built on drivepack's OPENCL device, two unit buffers and the team's counters."""

    def __init__(self, max_layers: int) -> None:
        rt = Device.runtime("OPENCL")
        self.rt, self.ffi, self.lib = rt, rt.ffi, rt.lib
        self.units = rt.info.max_compute_units
        self.program = build_program(rt, SOURCE)
        self.one_layer = checked_create("clCreateKernel", self.lib.clCreateKernel, self.program, b"one_layer")
        self.team = checked_create("clCreateKernel", self.lib.clCreateKernel, self.program, b"team")
        self.a, self.b = self._buffer(UNITS * 4), self._buffer(UNITS * 4)
        self.sync = self._buffer(4 * (2 * max_layers + 1))
        self._write(self.sync, np.zeros(2 * max_layers + 1, np.int32))  # zero once: each launch leaves it zero

    def _buffer(self, nbytes: int) -> object:
        return checked_create("clCreateBuffer", self.lib.clCreateBuffer, self.rt.context, CL_MEM_READ_WRITE, nbytes,
                              self.ffi.NULL)

    def _write(self, mem: object, arr: np.ndarray) -> None:
        check("clEnqueueWriteBuffer", self.lib.clEnqueueWriteBuffer(
            self.rt.queue, mem, 1, 0, arr.nbytes, self.ffi.from_buffer(arr), 0, self.ffi.NULL, self.ffi.NULL))

    def _arg(self, kernel: object, i: int, value: object) -> None:
        if isinstance(value, int):
            check("clSetKernelArg", self.lib.clSetKernelArg(kernel, i, self.ffi.sizeof("int"),
                                                            self.ffi.new("int*", value)))
        else:
            check("clSetKernelArg", self.lib.clSetKernelArg(kernel, i, self.ffi.sizeof("cl_mem"),
                                                            self.ffi.new("cl_mem*", value)))

    def write(self, x: np.ndarray) -> None:
        self._write(self.a, x)

    def read(self, layers: int) -> np.ndarray:
        """The last layer's units (layers alternate a -> b -> a ...)."""
        out = np.empty(UNITS, np.float32)
        check("clEnqueueReadBuffer", self.lib.clEnqueueReadBuffer(
            self.rt.queue, self.b if layers % 2 else self.a, 1, 0, out.nbytes, self.ffi.from_buffer(out), 0,
            self.ffi.NULL, self.ffi.NULL))
        return out

    def _launch(self, kernel: object, groups: int) -> None:
        size, one = self.ffi.new("size_t[1]", [groups]), self.ffi.new("size_t[1]", [1])
        check("clEnqueueNDRangeKernel", self.lib.clEnqueueNDRangeKernel(self.rt.queue, kernel, 1, self.ffi.NULL,
                                                                        size, one, 0, self.ffi.NULL, self.ffi.NULL))

    def dispatches(self, layers: int, steps: int, groups: int) -> float:
        """Seconds to enqueue a launch per layer and finish them."""
        self._arg(self.one_layer, 2, steps)
        start = time.perf_counter()
        for i in range(layers):
            self._arg(self.one_layer, 0, self.b if i % 2 else self.a)
            self._arg(self.one_layer, 1, self.a if i % 2 else self.b)
            self._launch(self.one_layer, groups)
        check("clFinish", self.lib.clFinish(self.rt.queue))
        return time.perf_counter() - start

    def team_launch(self, layers: int, steps: int, groups: int, chunk: int) -> float:
        """Seconds to enqueue the team kernel over every layer and finish it."""
        for i, value in enumerate((self.a, self.b, self.sync, layers, steps, chunk)):
            self._arg(self.team, i, value)
        start = time.perf_counter()
        self._launch(self.team, groups)
        check("clFinish", self.lib.clFinish(self.rt.queue))
        return time.perf_counter() - start

    def release(self) -> None:
        for mem in (self.a, self.b, self.sync):
            self.lib.clReleaseMemObject(mem)
        self.lib.clReleaseKernel(self.one_layer)
        self.lib.clReleaseKernel(self.team)
        self.lib.clReleaseProgram(self.program)


def main(argv: list[str] | None = None) -> list[dict[str, float | int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="20,100,350,1000", help="multiply-adds per unit and layer (a list)")
    parser.add_argument("--layers", type=int, default=100, help="dependent layers per launch (default 100)")
    parser.add_argument("--chunk", type=int, default=8, help="units a team group claims at a time (default 8)")
    parser.add_argument("--rounds", type=int, default=15, help="timed launches per setting; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line after the table")
    args = parser.parse_args(argv)
    runner = TeamRunner(args.layers)
    n = runner.units
    x = np.linspace(-1.0, 1.0, UNITS, dtype=np.float32)
    print(f"\nOPENCL is {runner.rt.info.platform}: {runner.rt.info.name}; {args.layers} layers of {UNITS} units, "
          f"us per layer, fastest of {args.rounds}")
    print(f"{'steps':>6s} {'dispatches, 1 group':>20s} {f'{n} groups':>9s} {'team, 1 group':>14s} "
          f"{f'{n} groups':>9s}  team / dispatches on {n} groups")
    rows = []
    try:
        for steps in (int(s) for s in args.steps.split(",")):
            want = expected(x, args.layers, steps)
            for team in (False, True):
                runner.write(x)
                if team:
                    runner.team_launch(args.layers, steps, n, args.chunk)
                else:
                    runner.dispatches(args.layers, steps, n)
                np.testing.assert_allclose(runner.read(args.layers), want, rtol=1e-4,
                                           err_msg="team" if team else "dispatches")
            best = {key: float("inf") for key in ("dispatch1", "dispatchn", "team1", "teamn")}
            for _ in range(args.rounds):  # alternating, so a slow spell of the machine hits every way alike
                best["dispatch1"] = min(best["dispatch1"], runner.dispatches(args.layers, steps, 1))
                best["dispatchn"] = min(best["dispatchn"], runner.dispatches(args.layers, steps, n))
                best["team1"] = min(best["team1"], runner.team_launch(args.layers, steps, 1, args.chunk))
                best["teamn"] = min(best["teamn"], runner.team_launch(args.layers, steps, n, args.chunk))
            us = {key: t / args.layers * 1e6 for key, t in best.items()}
            rows.append({"steps": steps, "groups": n, **{f"{key}_us": v for key, v in us.items()},
                         "ratio": us["teamn"] / us["dispatchn"]})
            print(f"{steps:6d} {us['dispatch1']:20.1f} {us['dispatchn']:9.1f} {us['team1']:14.1f} "
                  f"{us['teamn']:9.1f}  {us['teamn'] / us['dispatchn']:.2f}x")
    finally:
        runner.release()
    if args.json:
        print(json.dumps({"rows": rows}))
    return rows


if __name__ == "__main__":
    main()
