"""codegen/opt/locality.py: an outer output axis whose loads walk cache lines opens its line-sized part innermost."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Ops, Tensor, UOp
from jit.codegen.opt import OptOptions, OptOptionsError, optimize_kernel
from jit.codegen.opt.locality import split_for_line_reuse
from jit.codegen.opt.split import split_divmod_ranges
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.base import DEFAULT_L1, CacheLevel


def _blocked_transform(seed: int = 0) -> tuple[Tensor, np.ndarray]:
    """Winograd's last output step in small: M holds blocks of 16 channels innermost, (2, 14 tiles, 6, 16), and
    output (c, 4 * tile + q) of 32 channels is the sum over j of table[q, j] * M[c // 16, tile, j, c % 16]."""
    rng = np.random.default_rng(seed)
    m, table = rng.standard_normal((2, 14, 6, 16), dtype=np.float32), rng.standard_normal((4, 6), dtype=np.float32)
    table_qj = Tensor(np.ascontiguousarray(table.T)).permute(1, 0)  # stored (j, q), as Winograd's
    per_channel = Tensor(m).permute(0, 3, 1, 2).reshape(32, 14, 1, 6)
    y = (per_channel * table_qj.reshape(1, 1, 4, 6)).sum(-1).reshape(32, 56)
    want = np.einsum("btjc,qj->bctq", m, table).reshape(32, 56)
    return y, want


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    assert len(kernels) == 1
    return split_divmod_ranges(commit_dtypes(kernels[0].ast))


def _loop_sizes(sink: UOp) -> list[int]:
    outs = sorted((u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    return [int(r.src[0].arg) for r in outs]


def test_channels_sharing_a_line_open_innermost() -> None:
    y, want = _blocked_transform()
    ast = _ast(y)
    assert _loop_sizes(ast) == [32, 14, 4]
    found = split_for_line_reuse(ast, launch_dims=0, line_bytes=64)
    assert found is not None and int(found[1].src[0].arg) == 16
    assert _loop_sizes(optimize_kernel(ast, OptOptions(), 8))[-1] == 16  # the 16 channels of a line, innermost
    assert _loop_sizes(optimize_kernel(ast, OptOptions(line_reuse=False), 8))[-1] != 16
    kernel, = compile_uops([y.uop])
    assert "< 16; " in kernel.program.source  # the pipeline's render has the channel loop
    got = y.numpy()
    with Context(NOOPT=1):
        plain, _ = _blocked_transform()
        reference = plain.numpy()
    np.testing.assert_array_equal(got, reference)  # loop order only: the same sums, bit for bit
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["launched dims", "direct conv", "matmul", "channels outermost"])
def test_other_kernels_keep_their_order(case: str) -> None:
    rng = np.random.default_rng(1)
    launch_dims = 0
    if case == "launched dims":
        t, _ = _blocked_transform()
        launch_dims = 3
    elif case == "direct conv":  # weights read at (c // 8) * K + c % 8, but no loop inside c walks their lines
        x = rng.standard_normal((1, 16, 16, 16), dtype=np.float32)
        w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
        with Context(WINO=0):
            t = Tensor(x).conv2d(Tensor(w), padding=1)
    elif case == "matmul":
        t = Tensor(rng.standard_normal((64, 32), dtype=np.float32)).matmul(
            Tensor(rng.standard_normal((32, 48), dtype=np.float32)))
    else:  # M with channels outermost: no // or % of the channel at all
        m = rng.standard_normal((32, 14, 6), dtype=np.float32)
        t = (Tensor(m).reshape(32, 14, 1, 6) * Tensor(rng.standard_normal((1, 1, 4, 6), dtype=np.float32))).sum(-1)
    kernels, _ = create_schedule([t.uop], "CPU")
    ast = split_divmod_ranges(commit_dtypes(kernels[-1].ast))
    assert split_for_line_reuse(ast, launch_dims, 64) is None


def test_the_line_is_the_targets_l1_line() -> None:
    """With 512-byte lines a tile's step in M (6 x 16 floats, 384 bytes) stays within one line: nothing to split;
    optimize_kernel takes the line from the L1 it is given."""
    y, _ = _blocked_transform()
    ast = _ast(y)
    assert split_for_line_reuse(ast, 0, 512) is None
    wide = CacheLevel(512 * 64, 1, 512)
    assert _loop_sizes(optimize_kernel(ast, OptOptions(), 8, l1=wide))[-1] != 16
    assert _loop_sizes(optimize_kernel(ast, OptOptions(), 8, l1=DEFAULT_L1))[-1] == 16


def test_line_reuse_option_is_checked_and_stored() -> None:
    with pytest.raises(OptOptionsError, match="line_reuse"):
        OptOptions(line_reuse="yes")  # type: ignore[arg-type]
    opts = OptOptions(line_reuse=False)
    assert OptOptions.from_dict(opts.to_dict()) == opts
