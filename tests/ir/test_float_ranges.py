"""Float value ranges (jit/ir/uop.py): a range other than the dtype's means never NaN and within it; only finite
constants, the NaN-absorbing clamp selects, roundings of those and their casts to int have one, and index folds use
them."""

from __future__ import annotations

import math

import pytest

from jit import dtypes
from jit.codegen.passes.symbolic import pm_symbolic
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, nan_free

F32 = dtypes.float32
DEFAULT = (-math.inf, math.inf)


def unknown(uid: int = 20_001, d=F32) -> UOp:
    """A float node of any value, NaN included (a realized buffer)."""
    return UOp(Ops.BUFFER, d, (), (uid, "CPU", 4))


def c(v: float, d=F32) -> UOp:
    return UOp.const(d, v)


def rng(x: UOp) -> tuple:
    return (x.vmin, x.vmax)


def max_like(x: UOp, lo: UOp) -> UOp:
    """``lo < x ? x : lo``: NaN becomes lo."""
    return UOp(Ops.WHERE, x.dtype, (UOp(Ops.CMPLT, dtypes.bool, (lo, x)), x, lo))


def min_like(x: UOp, hi: UOp) -> UOp:
    """``x < hi ? x : hi``."""
    return UOp(Ops.WHERE, x.dtype, (UOp(Ops.CMPLT, dtypes.bool, (x, hi)), x, hi))


def clamp(x: UOp, lo: float, hi: float) -> UOp:
    return min_like(max_like(x, c(lo, x.dtype)), c(hi, x.dtype))


def test_a_finite_float_constant_is_its_value() -> None:
    assert rng(c(1927.0)) == (1927.0, 1927.0) and nan_free(c(1927.0))
    assert rng(c(math.inf)) == (math.inf, math.inf) and nan_free(c(math.inf))  # never NaN


def test_nan_and_weak_constants_have_no_range() -> None:
    assert rng(c(math.nan)) == DEFAULT and not nan_free(c(math.nan))
    assert rng(UOp.const(dtypes.weakfloat, 3.0)) == DEFAULT  # rounded only once it gets a width


def test_anything_else_float_has_the_default_range() -> None:
    x = unknown()
    for node in (x, x + c(1.0), x * c(0.0), UOp(Ops.SQRT, F32, (c(4.0),)), c(1.0) + c(2.0),
                 UOp(Ops.CAST, F32, (UOp.const(dtypes.int32, 3),))):
        assert rng(node) == DEFAULT and not nan_free(node), node


def test_max_and_min_of_floats_keep_nan_so_have_no_range() -> None:
    x = unknown()
    assert rng(x.alu(Ops.MAX, c(0.0))) == DEFAULT
    assert rng(x.alu(Ops.MIN, c(5.0))) == DEFAULT
    assert rng(x.alu(Ops.MAX, c(0.0)).alu(Ops.MIN, c(5.0))) == DEFAULT  # Tensor.clip's shape


def test_the_nan_absorbing_clamp_is_bounded() -> None:
    x = unknown()
    lo = max_like(x, c(0.0))
    assert rng(lo) == (0.0, math.inf)  # may be +inf: x is
    assert rng(min_like(x, c(5.0))) == (-math.inf, 5.0)
    assert rng(clamp(x, 0.0, 1927.0)) == (0.0, 1927.0) and nan_free(clamp(x, 0.0, 1927.0))


def test_a_branch_range_narrows_the_select() -> None:
    inner = clamp(unknown(), 2.0, 3.0)
    assert rng(max_like(inner, c(0.0))) == (0.0, 3.0)
    assert rng(min_like(inner, c(10.0))) == (2.0, 10.0)


@pytest.mark.parametrize("shape", ["x < c ? c : x", "c < x ? c : x", "x < c ? x : c with c NaN",
                                   "lo < x ? x : lo with lo unknown", "lo < x ? lo : y"])
def test_nan_propagating_selects_have_no_range(shape: str) -> None:
    x, y, k = unknown(), unknown(20_002), c(0.0)
    node = {
        "x < c ? c : x": UOp(Ops.WHERE, F32, (UOp(Ops.CMPLT, dtypes.bool, (x, k)), k, x)),  # NaN: x
        "c < x ? c : x": UOp(Ops.WHERE, F32, (UOp(Ops.CMPLT, dtypes.bool, (k, x)), k, x)),
        "x < c ? x : c with c NaN": min_like(x, c(math.nan)),
        "lo < x ? x : lo with lo unknown": max_like(x, y),
        "lo < x ? lo : y": UOp(Ops.WHERE, F32, (UOp(Ops.CMPLT, dtypes.bool, (k, x)), k, y)),
    }[shape]
    assert rng(node) == DEFAULT and not nan_free(node)


def test_a_cast_of_a_bounded_float_to_int_truncates() -> None:
    x = unknown()
    assert rng(UOp(Ops.CAST, dtypes.int32, (clamp(x, 0.0, 1927.0),))) == (0, 1927)
    assert rng(UOp(Ops.CAST, dtypes.int32, (clamp(x, -2.5, 2.75),))) == (-2, 2)  # toward zero
    assert rng(UOp(Ops.CAST, dtypes.uint8, (clamp(x, 0.0, 255.0),))) == (0, 255)


@pytest.mark.parametrize("case", ["unbounded above", "unclamped", "too wide for int8", "negative to unsigned",
                                  "NaN-propagating clip"])
def test_casts_that_may_overflow_or_see_nan_have_the_int_range(case: str) -> None:
    x = unknown()
    src, d = {
        "unbounded above": (max_like(x, c(0.0)), dtypes.int32),
        "unclamped": (x, dtypes.int32),
        "too wide for int8": (clamp(x, 0.0, 200.0), dtypes.int8),
        "negative to unsigned": (clamp(x, -1.0, 3.0), dtypes.uint16),
        "NaN-propagating clip": (x.alu(Ops.MAX, c(0.0)).alu(Ops.MIN, c(5.0)), dtypes.int32),
    }[case]
    assert rng(UOp(Ops.CAST, d, (src,))) == (d.min, d.max)


@pytest.mark.parametrize(("op", "want"), [(Ops.RINT, (-2.0, 1928.0)), (Ops.FLOOR, (-3.0, 1927.0)),
                                          (Ops.CEIL, (-2.0, 1928.0)), (Ops.TRUNC, (-2.0, 1927.0))])
def test_a_rounding_of_a_bounded_float_is_bounded_by_its_rounded_bounds(op: Ops, want: tuple) -> None:
    bounded = clamp(unknown(), -2.5, 1927.5)  # rint: -2.5 to even -2, 1927.5 to even 1928
    node = UOp(op, F32, (bounded,))
    assert rng(node) == want and nan_free(node)
    assert rng(UOp(Ops.CAST, dtypes.int32, (UOp(Ops.RINT, F32, (clamp(unknown(), 0.0, 1927.0),)),))) == (0, 1927)
    assert rng(UOp(op, F32, (max_like(unknown(), c(0.5)),)))[1] == math.inf  # an infinite bound stays


def test_a_rounding_of_an_unbounded_float_has_no_range() -> None:
    for op in (Ops.RINT, Ops.FLOOR, Ops.CEIL, Ops.TRUNC):
        assert rng(UOp(op, F32, (unknown(),))) == DEFAULT
        assert rng(UOp(op, F32, (unknown().alu(Ops.MAX, c(0.0)).alu(Ops.MIN, c(5.0)),))) == DEFAULT


def test_a_cast_to_bool_is_not_a_truncation() -> None:
    cast = UOp(Ops.CAST, dtypes.bool, (clamp(unknown(), 0.0, 0.5),))
    assert rng(cast) == (False, True)  # 0.5 is true, though it truncates to 0


def test_the_gather_normalisation_of_a_clamped_index_folds_away() -> None:
    """What jit/schedule/lower.py wraps a GATHER's index in is decided by the index's range: it folds to the
    index itself, while an index from the NaN-propagating clip keeps it."""
    def normalised(v: UOp, n: int) -> UOp:
        v = (v < 0).where(v + n, v)
        return v.maximum(0).minimum(n - 1)

    i32 = dtypes.int32
    col = UOp(Ops.CAST, i32, (clamp(unknown(), 0.0, 1927.0),))
    line = UOp(Ops.CAST, i32, (clamp(unknown(20_002), 0.0, 1207.0),))
    index = line * 2048 + col
    assert rng(index) == (0, 1207 * 2048 + 1927)
    assert graph_rewrite(normalised(index, 4_804_608), pm_symbolic) is graph_rewrite(index, pm_symbolic)
    clip = UOp(Ops.CAST, i32, (unknown().alu(Ops.MAX, c(0.0)).alu(Ops.MIN, c(1927.0)),))
    kept = graph_rewrite(normalised(clip, 4_804_608), pm_symbolic)
    assert kept.op is Ops.MIN and kept.src[1].arg == 4_804_607


def test_float_comparisons_are_not_folded_by_range() -> None:
    """Range folds stay integer-only: a float MAX tie could pick -0.0 over 0.0, so folding it is not exact."""
    a = clamp(unknown(), 0.0, 1.0)
    b = clamp(unknown(20_002), 2.0, 3.0)
    cmp = UOp(Ops.CMPLT, dtypes.bool, (a, b))
    assert graph_rewrite(cmp, pm_symbolic) is cmp
