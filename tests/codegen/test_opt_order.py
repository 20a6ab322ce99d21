"""jit/codegen/opt/order.py: a tiled conv whose input outgrows L2 opens its output-channel blocks innermost; a pool
or depthwise conv over a big value stored channels-last opens its channel blocks innermost, its rows shared over
threads."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Ops, Tensor, UOp, capture
from jit.codegen.opt import OptOptions, optimize_kernel
from jit.codegen.opt.order import (
    MEASURED_REREAD_BYTES,
    MEASURED_SCATTERED_BYTES,
    channel_blocks_inner,
    reread_threshold,
    scattered_threshold,
)
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
    return _outer_sizes(optimize_kernel(commit_dtypes(kernels[-1].ast), OptOptions(), 8, launch_dims=launch_dims,
                                        l2=l2))


def _outer_sizes(sink: UOp) -> list[int]:
    """The sizes of ``sink``'s output loops, outermost first."""
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


def _pooled(channels: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 3x3 conv's input and weights to ``channels`` (tiled across them: stored channels-last), then the weights of
    a 1x1 conv back to 16 channels after a 3x3 stride-2 max pool (squeezenet's pools)."""
    rng = np.random.default_rng(3)
    return (rng.standard_normal((1, 16, size, size), dtype=np.float32),
            rng.standard_normal((channels, 16, 3, 3), dtype=np.float32) / 8,
            rng.standard_normal((16, channels, 1, 1), dtype=np.float32) / 8)


def _pooled_value(x: Tensor, w1: np.ndarray, w2: np.ndarray) -> Tensor:
    return x.conv2d(Tensor(w1), padding=1).relu().max_pool2d(3, 2).conv2d(Tensor(w2))


def _want_pooled(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    size = x.shape[2]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    hidden = np.maximum(sum(np.einsum("oc,nchw->nohw", w1[:, :, i, j], padded[:, :, i:i + size, j:j + size])
                            for i in range(3) for j in range(3)), 0)
    n = (size - 3) // 2 + 1
    windows = [hidden[:, :, i:i + 2 * n - 1:2, j:j + 2 * n - 1:2] for i in range(3) for j in range(3)]
    return np.einsum("oc,nchw->nohw", w2[:, :, 0, 0], np.max(windows, axis=0))


CHANNEL_BLOCKS = (128 // 16, 128 // 8)  # 128 channels in vectors of 16 or 8 lanes


def _pool_sink(size: int, launch_dims: int = 0) -> UOp:
    """The pool's kernel of ``_pooled_value`` over 128 channels, tiled for a 16-lane target up to its loop order."""
    x, w1, w2 = _pooled(128, size)
    kernels, _ = create_schedule([_pooled_value(Tensor(x), w1, w2).uop], "CPU")
    pooled = (size - 3) // 2 + 1
    pool = next(k for k in kernels if k.name.startswith(f"r_128_{pooled}_{pooled}_3_3"))
    return optimize_kernel(commit_dtypes(pool.ast), OptOptions(), 16, launch_dims=launch_dims,
                           l2=CacheLevel(1 << 30, 16, 64))  # a huge L2: the measured threshold applies


def test_a_pool_over_a_big_channels_last_value_shares_its_rows_over_threads() -> None:
    """1.5 MB read a 64-byte line of every pixel per block of 16 channels: the blocks open innermost, the 27 rows of
    the pooled map are what the threads share, and the results stay the same."""
    assert 128 * 55 * 55 * 4 >= MEASURED_SCATTERED_BYTES
    sizes = _outer_sizes(_pool_sink(55))
    assert sizes[0] == 27 and sizes[-1] in CHANNEL_BLOCKS, sizes
    x, w1, w2 = _pooled(128, 55)
    run = capture(lambda x: {"y": _pooled_value(x, w1, w2)}, {"x": x}, target="CPU")
    cb = run.cmdbuf
    assert [d.global_size for d in cb.dispatches if cb.kernels[d.kernel].name.startswith("r_128_27_27_3_3")] == [(27,)]
    np.testing.assert_allclose(run(x=x)["y"], _want_pooled(x, w1, w2), rtol=1e-4, atol=1e-4)


def test_the_channel_blocks_stay_outermost_for_a_small_value_a_conv_or_launched_dims() -> None:
    small = _pool_sink(27)  # 0.4 MB: in L2 either way
    assert _outer_sizes(small)[0] in CHANNEL_BLOCKS
    assert channel_blocks_inner(small, 0, 64, 256 * 1024) is not small  # unless the L2 is smaller than that
    assert _outer_sizes(_pool_sink(55, launch_dims=3))[0] in CHANNEL_BLOCKS
    with Context(WINO=0):
        conv, _, _ = _conv(64, 64)  # its input does not move with its output-channel blocks
        kernels, _ = create_schedule([conv.uop], "CPU")
        sink = optimize_kernel(commit_dtypes(kernels[-1].ast), OptOptions(), 8)
        assert channel_blocks_inner(sink, 0, 64, 1 << 30) is sink


def test_the_scattered_threshold_follows_a_smaller_l2_only() -> None:
    assert [scattered_threshold(n) for n in (256 * 1024, 2 * 1024 * 1024)] == [256 * 1024, MEASURED_SCATTERED_BYTES]
