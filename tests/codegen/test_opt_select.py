"""jit/codegen/opt/select.py: the small axes an elementwise kernel selects pieces by (cat / stack) are unrolled, so each
copy computes only its own piece."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Ops, Tensor, UOp, graph_rewrite
from jit.codegen.opt import OptOptions, optimize_kernel
from jit.codegen.opt.select import MAX_COPIES, selector_axes, unroll_selector_axes
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    assert len(kernels) == 1
    return commit_dtypes(kernels[0].ast)


def _stack(x: Tensor, pieces: int) -> Tensor:
    """``pieces`` different sums of shifted slices of x (n, k) stacked along a new leading axis: a transform
    with constant coefficients, as jit/frontend/winograd.py builds its input transform (powers of two: exact whether or
    not the C compiler fuses the multiply and the subtract)."""
    n, k = x.shape
    terms = [(x.shrink(((0, n), (p, p + 1))) * float(2 ** p) - x.shrink(((0, n), (k - 1 - p, k - p)))).reshape(1, n)
             for p in range(pieces)]
    return Tensor.cat(*terms, dim=0).contiguous()


def _stack_want(x: np.ndarray, pieces: int) -> np.ndarray:
    k = x.shape[1]
    return np.stack([x[:, p] * np.float32(2 ** p) - x[:, k - 1 - p] for p in range(pieces)])


def _wheres(sink: UOp) -> int:
    return sum(u.op is Ops.WHERE for u in toposort([sink]))


def test_stack_axis_is_unrolled_and_every_select_folds() -> None:
    x = np.random.default_rng(0).standard_normal((512, 6)).astype(np.float32)
    y = _stack(Tensor(x), 6)
    ast = _ast(y)
    axis, = selector_axes(ast)
    assert int(axis.src[0].arg) == 6
    assert _wheres(ast) >= 5  # at least one select per piece but the first (pads add their own)
    unrolled = graph_rewrite(unroll_selector_axes(ast), pm_symbolic)
    assert len(unrolled.src) == 6 and _wheres(unrolled) == 0
    np.testing.assert_array_equal(y.numpy(), _stack_want(x, 6))


def test_generated_kernel_computes_each_piece_once() -> None:
    x = np.random.default_rng(1).standard_normal((256, 5)).astype(np.float32)
    y = _stack(Tensor(x), 5)
    kernel, = compile_uops([y.uop])
    source = kernel.program.source
    assert "?" not in source.split("{", 1)[1]  # no select left in the body
    assert source.count("*(data0") + source.count("memcpy(data0") >= 5  # one store per piece
    np.testing.assert_array_equal(y.numpy(), _stack_want(x, 5))


def test_large_or_unselected_axes_are_left_alone() -> None:
    x = Tensor(np.ones((64, 12), np.float32))
    wide = _stack(x, 12)  # 12 pieces: more than MAX_SELECT
    assert selector_axes(_ast(wide)) == []
    plain = (x * 2).contiguous()
    ast = _ast(plain)
    assert selector_axes(ast) == [] and unroll_selector_axes(ast) is ast
    reduced = x.sum(1)
    assert selector_axes(_ast(reduced)) == []


def test_copies_are_capped_keeping_the_innermost_axes() -> None:
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    inner = Tensor.cat(*(Tensor(x).shrink(((0, 4), (p, p + 1))) for p in range(6)), dim=1)  # (4, 6)
    inner = inner.reshape(4, 1, 6)
    both = Tensor.cat(*(inner * float(q) for q in range(9)), dim=1)  # (4, 9, 6): a 9-way and a 6-way select
    y = Tensor.cat(*(both + float(r) for r in range(2)), dim=0).contiguous()  # (8, 9, 6): and a 2-way one
    axes = selector_axes(_ast(y))
    assert [int(a.src[0].arg) for a in axes] == [9, 6]  # 2 x 9 x 6 > MAX_COPIES: the outermost one stays a loop
    assert 9 * 6 <= MAX_COPIES < 2 * 9 * 6
    want = np.concatenate([np.stack([x * np.float32(q) for q in range(9)], 1) + np.float32(r) for r in range(2)])
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("unroll", [True, False])
def test_unroll_option_controls_it(unroll: bool) -> None:
    x = np.random.default_rng(3).standard_normal((512, 4)).astype(np.float32)
    ast = _ast(_stack(Tensor(x), 4))
    out = graph_rewrite(optimize_kernel(ast, OptOptions(unroll=unroll), 8), pm_symbolic)
    assert (_wheres(out) == 0) is unroll


def test_unrolled_copies_count_as_work_for_threads() -> None:
    # 64 x 6 x 8 loop trips (under the thread threshold) but 36 pieces each: the copies are work to share
    x = np.random.default_rng(4).standard_normal((64, 6, 8, 8)).astype(np.float32)
    t = Tensor(x)
    rows = Tensor.cat(*(t.shrink(((0, 64), (i, i + 1), (0, 8), (0, 8))) * float(i + 1) for i in range(6)), dim=1)
    y = Tensor.cat(*(rows.reshape(64, 6, 1, 8, 8) - float(j) for j in range(6)), dim=2).contiguous()
    kernel, = compile_uops([y.uop])
    assert "int dp_lo, int dp_hi" in kernel.program.source
    want = np.stack([x * np.arange(1, 7, dtype=np.float32)[None, :, None, None] - np.float32(j) for j in range(6)], 2)
    np.testing.assert_array_equal(y.numpy(), want)
