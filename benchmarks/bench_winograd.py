"""Winograd (2x2 and 4x4 output tiles) against the direct conv on the CPU target, per 3x3 conv shape, in one run.

    python3 benchmarks/bench_winograd.py [--repeat N] [--kernels]

Shapes: the sample vision model's 3x3 stride-1 convs (its residual blocks: 48 channels at 32x64 and 96 channels
at 16x32, batch 1, padding 1), a resnet-like 64 channels at 56x56, and the vision model's stride-2 convs (tiles
from F(2,2) / F(4,2), jit/frontend/winograd.py). Each conv (with its bias) is captured
(jit/trace.py) under WINO=0 (the direct conv), WINO=2 and WINO=4, its output checked against the direct conv's,
and its replay timed: median of ``--repeat`` calls after 3 warm-up calls, numpy input in, numpy output out (the
same timing as benchmarks/bench_models.py). Printed per shape: milliseconds, GFLOP/s of the direct conv's
arithmetic (2 * Cout * Cin * 9 * output H * W, so the columns compare time), and each Winograd time / direct time
(lower is better; < 1 = Winograd faster). A second row per shape sums each dispatch's fastest time over 5
one-at-a-time profiles: less hostage to a busy machine than the median. ``--kernels``: those dispatch times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from jit.common.helpers import Context
from jit.frontend.tensor import Tensor
from jit.trace import Captured, capture

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import median_time  # noqa: E402

# (name, Cin, Cout, input H, W, stride)
SHAPES = [("vision 48ch 32x64", 48, 48, 32, 64, 1), ("vision 96ch 16x32", 96, 96, 16, 32, 1),
          ("resnet 64ch 56x56", 64, 64, 56, 56, 1), ("vision 24-48 s2", 24, 48, 64, 128, 2),
          ("vision 48-96 s2", 48, 96, 32, 64, 2), ("vision 96-128 s2", 96, 128, 16, 32, 2)]
MODES = (0, 2, 4)


def conv_capture(x: np.ndarray, w: np.ndarray, b: np.ndarray, wino: int, stride: int) -> Captured:
    weight, bias = Tensor(w), Tensor(b)
    with Context(WINO=str(wino)):
        return capture(lambda x: {"y": x.conv2d(weight, bias, padding=1, stride=stride)}, {"x": x})


def dispatch_times(run: Captured, x: np.ndarray, profiles: int = 5) -> tuple[list[str], list[float]]:
    """Each dispatch's fastest time over ``profiles`` one-at-a-time profiles (a busy machine slows single
    launches at random; the fastest of several is the kernel's own speed)."""
    profs = [run.profile({"x": x}) for _ in range(profiles)]
    return [d.kernel for d in profs[0]], [min(p[i].seconds for p in profs) for i in range(len(profs[0]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--kernels", action="store_true", help="print each variant's dispatches, timed alone")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'conv':<20} {'timing':<14} {'direct ms':>10} {'2x2 ms':>10} {'4x4 ms':>10} {'direct GF/s':>12} "
          f"{'2x2/direct':>14} {'4x4/direct':>14}")
    for name, cin, cout, h, w, stride in SHAPES:
        x = rng.standard_normal((1, cin, h, w), dtype=np.float32)
        wt = (rng.standard_normal((cout, cin, 3, 3)) * (2 / (9 * cin)) ** 0.5).astype(np.float32)
        bias = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        runs = {mode: conv_capture(x, wt, bias, mode, stride) for mode in MODES}
        want = runs[0]({"x": x})["y"]
        for mode in MODES[1:]:
            got = runs[mode]({"x": x})["y"]
            err = float(np.abs(got - want).max() / np.abs(want).max())
            if err > 1e-4:
                raise SystemExit(f"{name}: {mode}x{mode} tiles: max error {err:.2e} of the output's range, expected "
                                 "<= 1e-4")
        median = {mode: median_time(lambda r=runs[mode], x=x: r({"x": x}), args.repeat, warmup=3) for mode in MODES}
        per_dispatch = {mode: dispatch_times(runs[mode], x) for mode in MODES}
        gflop = 2 * cout * cin * 9 * want.shape[2] * want.shape[3] / 1e9
        summed = {mode: sum(per_dispatch[mode][1]) for mode in MODES}
        for label, t in (("replay median", median), ("sum dispatches", summed)):
            print(f"{name:<20} {label:<14} {t[0] * 1e3:>10.3f} {t[2] * 1e3:>10.3f} {t[4] * 1e3:>10.3f} "
                  f"{gflop / t[0]:>12.1f} {t[2] / t[0]:>14.2f} {t[4] / t[0]:>14.2f}")
        if args.kernels:
            for mode in MODES:
                names, best = per_dispatch[mode]
                cells = [f"{k} {t * 1e3:.3f} ms" for k, t in zip(names, best, strict=True)]
                print(f"    WINO={mode}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
