"""OpenCL fixed cost per dispatch (issue 25, 6): command buffer vs enqueue loop vs one merged kernel, on PoCL.

    python3 benchmarks/bench_opencl_dispatch.py [--repeat N] [--lengths 1,4,16,64] [--json]

The model: a chain of N tiny elementwise steps on 64 float32 values (``y = y * 1.01 + 0.5``), each step made its
own kernel by ``.contiguous()``, captured once with ``jit.capture`` on OPENCL; it is what a small head or a
feature-queue update looks like once scheduled. Three ways to run the same N steps, each a whole replay call
(inputs in, outputs back on the host), timed in alternating blocks in one process (bench_core's
``interleaved_medians``):

* command buffer: ``OpenCLReplay(..., use_command_buffer=True)``, the N dispatches recorded once with
  cl_khr_command_buffer and enqueued as one command (drivepack's default where the device has the extension);
* enqueue loop: ``use_command_buffer=False``, N ``clEnqueueNDRangeKernel`` calls per replay;
* chain: the N kernels captured as a CPU device runs them by default (jit/schedule/chains.py): one dispatch
  whose single work-item runs the N kernels one after another (the two modes above capture them without);
* merged: the same chain without the ``.contiguous()`` calls: the scheduler fuses it into one kernel;

and, for scale, the CPU target's replay of the N-kernel chain. Printed per N: the median ms of each, and the
per-kernel cost of the multi-kernel modes (their slope over N, least squares, in microseconds). Every
replay's outputs are checked against numpy first. ``--json`` prints the figures as one JSON line after the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_core import interleaved_medians  # noqa: E402

from jit import Device, Tensor, capture  # noqa: E402
from targets.replay_opencl import OpenCLReplay  # noqa: E402

VALUES = 64
MODES = ("command_buffer", "enqueue_loop", "chain", "merged", "cpu")


def chain(n: int, split: bool) -> Callable[[Tensor], dict[str, Tensor]]:
    """``n`` steps of ``y * 1.01 + 0.5``; with ``split`` each step is its own kernel."""

    def fn(x: Tensor) -> dict[str, Tensor]:
        y = x
        for i in range(n):
            y = y * 1.01 + 0.5
            if split and i < n - 1:
                y = y.contiguous()
        return {"y": y}

    return fn


def expected(x: np.ndarray, n: int) -> np.ndarray:
    y = x.copy()
    for _ in range(n):
        y = y * np.float32(1.01) + np.float32(0.5)
    return y


def runners(n: int, x: np.ndarray) -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    target = Device["OPENCL"]
    limits, target.chain_limits = target.chain_limits, None
    try:
        split = capture(chain(n, True), {"x": x}, target="OPENCL")
    finally:
        target.chain_limits = limits
    chained = capture(chain(n, True), {"x": x}, target="OPENCL")
    merged = capture(chain(n, False), {"x": x}, target="OPENCL")
    cpu = capture(chain(n, True), {"x": x}, target="CPU")
    runtime = Device.runtime("OPENCL")
    reps = {"command_buffer": OpenCLReplay(split.cmdbuf, split.weights, runtime, use_command_buffer=True),
            "enqueue_loop": OpenCLReplay(split.cmdbuf, split.weights, runtime, use_command_buffer=False)}
    assert split.n_dispatches == n and merged.n_dispatches == 1, (split.n_dispatches, merged.n_dispatches)
    return {**{m: (lambda r=r: r(x=x)) for m, r in reps.items()}, "chain": lambda: chained(x=x),
            "merged": lambda: merged(x=x), "cpu": lambda: cpu(x=x)}


def slope_us(lengths: list[int], ms: list[float]) -> float:
    """Least-squares microseconds per extra dispatch."""
    return float(np.polyfit(np.asarray(lengths, float), np.asarray(ms, float), 1)[0] * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per mode and length (default 200)")
    parser.add_argument("--lengths", default="1,4,16,64", help="chain lengths (default 1,4,16,64)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line after the table")
    args = parser.parse_args()
    lengths = [int(v) for v in args.lengths.split(",")]
    x = np.random.default_rng(0).standard_normal(VALUES).astype(np.float32)
    table: dict[int, dict[str, float]] = {}
    for n in lengths:
        fns = runners(n, x)
        want = expected(x, n)
        for mode, fn in fns.items():
            np.testing.assert_allclose(fn()["y"], want, rtol=1e-5, atol=1e-6, err_msg=f"{mode}, {n} steps")
        table[n] = {m: t * 1e3 for m, t in interleaved_medians(fns, args.repeat, warmup=5).items()}
    info = Device.runtime("OPENCL").info
    print(f"\nOpenCL ({info.platform}: {info.name}) fixed cost, medians (ms) of {args.repeat} replay calls "
          f"of a chain of N elementwise kernels on {VALUES} floats")
    print(f"{'N':>4s} " + " ".join(f"{m:>15s}" for m in MODES))
    for n, row in table.items():
        print(f"{n:4d} " + " ".join(f"{row[m]:15.3f}" for m in MODES))
    slopes = {m: slope_us(lengths, [table[n][m] for n in lengths]) for m in ("command_buffer", "enqueue_loop", "chain",
                                                                        "cpu")}
    print("per extra kernel (us): " + ", ".join(f"{m} {v:.1f}" for m, v in slopes.items()))
    if args.json:
        print(json.dumps({"values": VALUES, "repeat": args.repeat, "ms": table, "per_dispatch_us": slopes}))


if __name__ == "__main__":
    main()
