"""jit/codegen/opt/order.py: a tiled conv whose input outgrows L2 opens its output-channel blocks innermost."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Ops, Tensor, UOp
from jit.codegen.opt import OptOptions, optimize_kernel
from jit.codegen.opt.order import MEASURED_REREAD_BYTES, reread_threshold
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.base import DEFAULT_L2, CacheLevel


def _conv(cin: int, size: int, cout: int = 16) -> tuple[Tensor, np.ndarray, np.ndarray]:
    """A 1x1 conv of ``cin`` channels of size x size to ``cout`` channels (a matmul over channels), and its inputs."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, cin, size, size), dtype=np.float32)
    w = rng.standard_normal((cout, cin, 1, 1), dtype=np.float32)
    return Tensor(x).conv2d(Tensor(w)), x, w


def _loop_sizes(t: Tensor, launch_dims: int = 0, l2: CacheLevel = DEFAULT_L2) -> list[int]:
    """The output loops' sizes, outermost first, after the optimizer (for a target whose L2 is ``l2``)."""
    kernels, _ = create_schedule([t.uop], "CPU")
    sink: UOp = optimize_kernel(commit_dtypes(kernels[-1].ast), OptOptions(), 8, launch_dims=launch_dims, l2=l2)
    outs = sorted((u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    return [int(r.src[0].arg) for r in outs]


def test_channel_blocks_open_innermost_when_the_input_outgrows_l2() -> None:
    with Context(WINO=0):
        big, x, w = _conv(64, 64)  # 1 MB of input, read again by every block of output channels
        assert x.nbytes >= DEFAULT_L2.size
        sizes = _loop_sizes(big)
        assert sizes[-1] == 16 // 4 and sizes[0] != 16 // 4  # 4 blocks of 4 channels, now the innermost loop
        kernel = compile_uops([big.uop])[-1]
        assert "int dp_lo, int dp_hi" in kernel.program.source  # the outermost loop is still shared over threads
        np.testing.assert_allclose(big.numpy(), np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["small input", "big output", "launched dims"])
def test_order_stays_when_the_input_fits_or_the_target_launches_dims(case: str) -> None:
    with Context(WINO=0):
        if case == "small input":
            conv, x, _ = _conv(8, 32)
            assert x.nbytes < DEFAULT_L2.size
            assert _loop_sizes(conv)[0] == 16 // 4
        elif case == "big output":
            conv, x, _ = _conv(16, 96, cout=64)  # 0.6 MB in, 2.4 MB out: scattered stores would cost more
            assert x.nbytes >= DEFAULT_L2.size
            assert _loop_sizes(conv)[0] == 64 // 4
        else:
            conv, _, _ = _conv(64, 64)
            assert _loop_sizes(conv, launch_dims=3)[0] == 16 // 4


def test_the_threshold_follows_a_smaller_l2_only() -> None:
    """A 32 KB input that outgrows a 16 KB L2 opens its channel blocks innermost (it stays put under the default
    L2); a bigger L2 than the one measured on keeps the measured threshold (a 1 MB input still reorders)."""
    assert [reread_threshold(n) for n in (16 * 1024, 512 * 1024, 2 * 1024 * 1024)] == [16 * 1024, 512 * 1024,
                                                                                      MEASURED_REREAD_BYTES]
    with Context(WINO=0):
        small, x, _ = _conv(8, 32)
        assert 16 * 1024 < x.nbytes < DEFAULT_L2.size
        assert _loop_sizes(small, l2=CacheLevel(16 * 1024, 4, 64))[-1] == 16 // 4
        assert _loop_sizes(small)[0] == 16 // 4
        big, _, _ = _conv(64, 64)
        assert _loop_sizes(big, l2=CacheLevel(2 * 1024 * 1024, 16, 64))[-1] == 16 // 4
