"""Reductions against numpy: sum/prod/max/min/mean/var/std/any/all/argmax/argmin/cumsum over every axis form,
keepdim, dtypes, empty axes, non-contiguous inputs and reductions fused with elementwise work."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jit import dtypes
from jit.common.errors import AxisError, ShapeError
from jit.frontend.tensor import Tensor
from tests.helpers import check_tensor, rand_array

TOL = {np.dtype(np.float16): (5e-3, 5e-3), np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float64): (1e-12, 1e-12)}


def check(t: Tensor, expected: Any, dtype: Any = None, rtol: float | None = None, atol: float | None = None) -> None:
    check_tensor(t, expected, dtype, rtol, atol, tol=TOL)


rand = rand_array


AXES = [None, 0, 1, 2, -1, -3, (0, 2), (-1, 0), (0, 1, 2), ()]
SHAPE = (2, 3, 4)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
def test_reduce_axes_float32(op: str, axis: Any, keepdim: bool) -> None:
    x = rand(SHAPE, np.float32, 0.5, 1.5, seed=1)
    out = getattr(Tensor(x), op)(axis, keepdim=keepdim)
    np_axis = axis if axis != () else ()
    expected = getattr(np, {"max": "amax", "min": "amin"}.get(op, op))(x.astype(np.float64), axis=np_axis,
                                                                      keepdims=keepdim)
    check(out, expected.astype(np.float32), dtype=np.float32)


@pytest.mark.parametrize("axis", [None, 1, (0, 2), -1], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(op: str, axis: Any, keepdim: bool, correction: int) -> None:
    x = rand(SHAPE, np.float32, -2, 2, seed=2)
    out = getattr(Tensor(x), op)(axis, keepdim=keepdim, correction=correction)
    expected = getattr(np, op)(x.astype(np.float64), axis=axis, keepdims=keepdim, ddof=correction)
    check(out, expected, dtype=np.float32)


@pytest.mark.parametrize("dtype,want", [("int32", "int32"), ("int8", "int32"), ("uint8", "uint32"),
                                        ("int16", "int32"), ("bool", "int32"), ("int64", "int64"),
                                        ("float64", "float64"), ("float16", "float16")])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)], ids=str)
def test_sum_dtypes(dtype: str, want: str, axis: Any) -> None:
    x = rand(SHAPE, dtype, -100, 100, seed=3)
    out = Tensor(x).sum(axis)
    assert out.dtype == dtypes.from_name(want)
    check(out, np.sum(x.astype(np.float64), axis=axis).astype(want), dtype=want, rtol=2e-3 if dtype == "float16"
          else None, atol=0.5 if dtype == "float16" else None)


def test_sum_dtype_argument() -> None:
    x = rand((4, 5), np.int8, -100, 100, seed=4)
    check(Tensor(x).sum(dtype=dtypes.int8), np.sum(x, dtype=np.int8), dtype=np.int8)  # wraps, like numpy
    check(Tensor(x).sum(1, dtype="float64"), np.sum(x, 1, dtype=np.float64), dtype=np.float64)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "float64", "float16", "bool"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dtypes(dtype: str, op: str) -> None:
    x = rand(SHAPE, dtype, -120, 120, seed=5)
    ref = np.amax if op == "max" else np.amin
    for axis in (None, 0, (1, 2)):
        check(getattr(Tensor(x), op)(axis), ref(x, axis=axis), dtype=dtype)


def test_max_min_extreme_values() -> None:
    for dt in (np.int8, np.uint8, np.int32, np.int64, np.uint32):
        info = np.iinfo(dt)
        x = np.array([[info.min, info.min], [info.max, info.min]], dtype=dt)
        check(Tensor(x).max(1), x.max(1), dtype=dt)
        check(Tensor(x).min(1), x.min(1), dtype=dt)
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0]], dtype=np.float32)
    check(Tensor(x).max(1), x.max(1))
    check(Tensor(x).min(1), x.min(1))


def test_max_min_nan_propagates() -> None:
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0], [np.nan, 0.0, -1.0]], dtype=np.float32)
    check(Tensor(x).max(1), np.max(x, 1))
    check(Tensor(x).min(1), np.min(x, 1))
    check(Tensor(x).max(), np.max(x))
    check(Tensor(x).sum(0), np.sum(x, 0))


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_prod_and_mean_int(dtype: str) -> None:
    x = rand((3, 4), dtype, -3, 3, seed=6)
    out = Tensor(x).prod(1)
    assert out.dtype == (dtypes.uint32 if dtype == "uint8" else dtypes.int32)
    check(out, np.prod(x.astype(np.int64), 1))
    m = Tensor(x).mean(0)
    assert m.dtype == dtypes.float32
    check(m, np.mean(x.astype(np.float64), 0))
    check(Tensor(x).var(), np.var(x.astype(np.float64), ddof=1))


@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(dtype: str, axis: Any, keepdim: bool) -> None:
    x = rand((3, 5), dtype, -1, 1, seed=7)
    if np.dtype(dtype).kind == "f":
        x = np.round(x)
    x[0] = 1
    x[:, 0] = 0
    t = Tensor(x)
    check(t.any(axis, keepdim=keepdim), np.any(x, axis=axis, keepdims=keepdim), dtype=np.bool_)
    check(t.all(axis, keepdim=keepdim), np.all(x, axis=axis, keepdims=keepdim), dtype=np.bool_)


def test_any_all_over_axis_of_4() -> None:
    # regression: a 4-wide (unrolled) MAX/MIN reduce of 0/1 compare values was miscompiled by gcc 12's SLP
    # vectorizer (signed max over -1 masks)
    x = np.array([[0, -1, 0, 1], [0, 0, 0, 0], [1, 2, 3, 4]], dtype=np.int32)
    check(Tensor(x).any(1), np.any(x, 1))
    check(Tensor(x).all(1), np.all(x, 1))
    check(Tensor(x).bool().min(1), np.min(x != 0, 1))


def test_any_all_of_nan_is_true() -> None:
    x = np.array([0.0, np.nan], dtype=np.float32)
    assert Tensor(x).any().item() is True and Tensor(x[1:]).all().item() is True


# --- empty reductions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((3, 0), 1), ((3, 0), None), ((2, 0, 3), (1, 2))],
                         ids=str)
def test_empty_reductions(shape: tuple[int, ...], axis: Any) -> None:
    x = np.zeros(shape, dtype=np.float32)
    t = Tensor(x)
    check(t.sum(axis), np.sum(x, axis=axis))
    check(t.prod(axis), np.prod(x, axis=axis))
    check(t.any(axis), np.any(x, axis=axis))
    check(t.all(axis), np.all(x, axis=axis))
    with np.errstate(all="ignore"):
        check(t.mean(axis), np.full(np.sum(x, axis=axis).shape, np.nan, np.float32))
    xi = np.zeros(shape, dtype=np.int32)
    check(Tensor(xi).sum(axis), np.sum(xi, axis=axis).astype(np.int32), dtype=np.int32)
    for op in ("max", "min"):
        with pytest.raises(ShapeError):
            getattr(t, op)(axis)
    with pytest.raises(ShapeError):
        t.argmax(axis if isinstance(axis, int) else None)


def test_empty_tensor_reduce_over_nonempty_axis() -> None:
    x = np.zeros((0, 3), dtype=np.float32)
    check(Tensor(x).max(1), np.zeros((0,), np.float32))
    check(Tensor(x).sum(1, keepdim=True), np.zeros((0, 1), np.float32))
    check(Tensor(x).argmax(1), np.zeros((0,), np.int64))


def test_empty_sum_is_zero() -> None:
    assert Tensor(np.zeros((0,), np.float32)).sum().item() == 0
    assert Tensor(np.zeros((0, 4), np.int8)).sum().item() == 0
    with pytest.raises(ShapeError):
        Tensor(np.zeros((0,), np.float32)).max()


def test_scalar_reductions() -> None:
    t = Tensor(3.5)
    for op in ("sum", "prod", "max", "min", "mean"):
        out = getattr(t, op)()
        assert out.shape == ()
        assert out.item() == 3.5
    assert Tensor(2).sum().item() == 2
    assert Tensor(2.0).argmax().item() == 0


# --- argmax / argmin ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8"])
def test_argmax_argmin(axis: Any, keepdim: bool, dtype: str) -> None:
    x = rand(SHAPE, dtype, -5, 5, seed=8)  # small int range: plenty of ties, numpy returns the first
    t = Tensor(x)
    for name in ("argmax", "argmin"):
        out = getattr(t, name)(axis, keepdim=keepdim)
        expected = getattr(np, name)(x, axis=axis, keepdims=keepdim)
        check(out, expected)
        assert out.dtype.is_int


def test_argmax_nan_and_bool() -> None:
    x = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 2.0, -1.0, 9.0]], dtype=np.float32)
    check(Tensor(x).argmax(1), np.argmax(x, 1))
    check(Tensor(x).argmin(1), np.argmin(x, 1))
    check(Tensor(x).argmax(), np.argmax(x))
    b = np.array([[False, True, True], [False, False, False]])
    check(Tensor(b).argmax(1), np.argmax(b, 1))
    check(Tensor(b).argmin(1), np.argmin(b, 1))


# --- cumsum ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_cumsum_float(axis: int) -> None:
    x = rand(SHAPE, np.float32, seed=9)
    check(Tensor(x).cumsum(axis), np.cumsum(x.astype(np.float64), axis=axis).astype(np.float32))


@pytest.mark.parametrize("dtype,want", [("int32", "int32"), ("int8", "int32"), ("bool", "int32"),
                                        ("uint8", "uint32"), ("float64", "float64")])
def test_cumsum_dtypes(dtype: str, want: str) -> None:
    x = rand((3, 7), dtype, -100, 100, seed=10)
    out = Tensor(x).cumsum(1)
    assert out.dtype == dtypes.from_name(want)
    check(out, np.cumsum(x.astype(np.float64), axis=1).astype(want), dtype=want)


def test_cumsum_edge_shapes() -> None:
    for shape in ((1,), (5,), (0,), (3, 0), (1, 1)):
        x = rand(shape, np.float32, seed=1)
        check(Tensor(x).cumsum(-1), np.cumsum(x, axis=-1))
    x = rand((4, 3), np.float32, seed=2)
    check(Tensor(x).T.cumsum(1), np.cumsum(x.T, 1))
    check(Tensor(x)[::-1].cumsum(0), np.cumsum(x[::-1], 0))


# --- composition, views, fusion -------------------------------------------------------------------------
def test_reduce_of_non_contiguous_views() -> None:
    x = rand((4, 5, 6), np.float32, seed=11)
    t = Tensor(x)
    check(t.permute(2, 0, 1).sum(1), x.transpose(2, 0, 1).sum(1))
    check(t[::2, 1:, ::-1].max((0, 2)), x[::2, 1:, ::-1].max((0, 2)))
    check(t.T.mean(0), x.T.mean(0))
    check(t[:, :1, :].expand(4, 7, 6).sum(1), np.broadcast_to(x[:, :1, :], (4, 7, 6)).sum(1))
    check(t.pad(((1, 1), (0, 0), (2, 0)), value=-5.0).min(0), np.pad(x, ((1, 1), (0, 0), (2, 0)),
                                                                  constant_values=-5.0).min(0))
    check(t.reshape(20, 6).T.sum(1), x.reshape(20, 6).T.sum(1))


def test_reduce_fused_with_elementwise() -> None:
    x = rand((6, 8), np.float32, seed=12)
    t, n = Tensor(x), x.astype(np.float64)
    check((t * 2 + 1).exp().sum(1) * 0.5 - 1, np.exp(n * 2 + 1).sum(1) * 0.5 - 1)
    check(t - t.max(1, keepdim=True), n - n.max(1, keepdims=True))
    sm = (t - t.max(1, keepdim=True)).exp()
    check(sm / sm.sum(1, keepdim=True), np.exp(n - n.max(1, keepdims=True)) / np.exp(
        n - n.max(1, keepdims=True)).sum(1, keepdims=True))
    check(t.sum(1).max(), n.sum(1).max())
    check(t.sum(0) + t.sum(0).max(), n.sum(0) + n.sum(0).max())
    check(t.max(1).reshape(2, 3).sum(0), n.max(1).reshape(2, 3).sum(0))
    check(t.sum(1, keepdim=True).T.expand(3, 6) * 1.0, np.broadcast_to(n.sum(1, keepdims=True).T, (3, 6)))
    check((t.sum() + t.mean()) * t.std(), (n.sum() + n.mean()) * n.std(ddof=1))


def test_large_reductions() -> None:
    x = rand((10000,), np.float32, 0, 1, seed=13)
    check(Tensor(x).sum(), x.astype(np.float64).sum(), rtol=1e-4)
    check(Tensor(x).mean(), x.astype(np.float64).mean(), rtol=1e-4)
    check(Tensor(x).max(), x.max())
    assert Tensor(x).argmax().item() == int(np.argmax(x))
    y = rand((300, 200), np.int32, -1000, 1000, seed=14)
    check(Tensor(y).sum(0), y.sum(0).astype(np.int32))
    check(Tensor(y).sum(), np.int32(y.sum()))


def test_float16_reductions_accumulate_in_float32() -> None:
    x = np.full(10000, 10, np.float16)
    check(Tensor(x).mean(), np.float16(10.0), dtype=np.float16)  # the float16 total (1e5) overflows
    check(Tensor(x).var(), np.float16(0.0), dtype=np.float16)
    check(Tensor(x).std(), np.float16(0.0), dtype=np.float16)
    y = np.random.default_rng(0).uniform(0, 1, 5000).astype(np.float16)
    exact = y.astype(np.float64).sum()
    check(Tensor(y).sum(), exact.astype(np.float16), dtype=np.float16)
    check(Tensor(y).cumsum(0)[-1], exact.astype(np.float16), dtype=np.float16)
    check(Tensor(y.reshape(50, 100)).mean(1), y.reshape(50, 100).astype(np.float64).mean(1), dtype=np.float16)


def test_realized_then_reduced_twice() -> None:
    x = rand((3, 4), np.float32, seed=15)
    t = (Tensor(x) * 3).realize()
    a, b = t.sum(0), t.sum(0)
    assert a.uop is b.uop
    check(a, (x * 3).sum(0))
    check(b, (x * 3).sum(0))
    check(t.sum(1) + t.sum(0).sum(), (x * 3).sum(1) + (x * 3).sum())


# --- errors ---------------------------------------------------------------------------------------------
def test_invalid_axis_raises_axis_error() -> None:
    t = Tensor(np.zeros((2, 3), np.float32))
    for op in ("sum", "max", "min", "mean", "prod", "any", "all", "var", "std", "argmax", "argmin", "cumsum"):
        with pytest.raises(AxisError) as e:
            getattr(t, op)(2)
        assert "2" in str(e.value)
        with pytest.raises(AxisError) as e:
            getattr(t, op)(-3)
        assert "-3" in str(e.value)
    with pytest.raises(AxisError):
        t.sum((0, 0))
    with pytest.raises(AxisError):
        t.sum((0, -2))
