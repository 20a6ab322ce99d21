"""Elementwise Tensor ops against numpy, continued from test_tensor_elementwise.py: logical and bitwise ops,
where/clip/isnan/isinf, broadcasting, size-0 and size-1 dims, non-contiguous inputs, dtype promotion and casts.
numpy is only the oracle: every result here is computed by drivepack kernels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jit import dtypes
from jit.common.errors import DTypeError, ShapeError
from jit.frontend.tensor import Tensor
from tests.frontend.test_tensor_elementwise import BINARY, check, rand


# --- logical and bitwise ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_logical_ops(dtype: str) -> None:
    a = rand((3, 4), dtype, -2, 2, seed=1)
    b = rand((3, 4), dtype, -2, 2, seed=2)
    if np.dtype(dtype).kind == "f":
        a, b = np.round(a), np.round(b)  # some exact zeros
    ta, tb = Tensor(a), Tensor(b)
    check(ta.logical_and(tb), np.logical_and(a, b), dtype=np.bool_)
    check(ta.logical_or(tb), np.logical_or(a, b), dtype=np.bool_)
    check(ta.logical_xor(tb), np.logical_xor(a, b), dtype=np.bool_)
    check(ta.logical_not(), np.logical_not(a), dtype=np.bool_)
    check(ta.logical_and(True), np.logical_and(a, True), dtype=np.bool_)
    check(ta.logical_or(0), np.logical_or(a, 0), dtype=np.bool_)


def test_bool_operators() -> None:
    a, b = rand((2, 5), np.bool_, seed=1), rand((2, 5), np.bool_, seed=2)
    ta, tb = Tensor(a), Tensor(b)
    check(ta & tb, a & b, dtype=np.bool_)
    check(ta | tb, a | b, dtype=np.bool_)
    check(ta ^ tb, a ^ b, dtype=np.bool_)
    check(~ta, ~a, dtype=np.bool_)
    check(ta & True, a & True, dtype=np.bool_)
    check(False | ta, False | a, dtype=np.bool_)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int16", "int64"])
def test_bitwise_int(dtype: str) -> None:
    a = rand((3, 4), dtype, -1000, 1000, seed=1)
    b = rand((3, 4), dtype, -1000, 1000, seed=2)
    ta, tb = Tensor(a), Tensor(b)
    check(ta & tb, a & b, dtype=dtype)
    check(ta | tb, a | b, dtype=dtype)
    check(ta ^ tb, a ^ b, dtype=dtype)
    check(~ta, ~a, dtype=dtype)
    check(ta.bitwise_not(), ~a, dtype=dtype)
    check(ta & 6, a & np.array(6).astype(dtype), dtype=dtype)
    check(5 | ta, a | np.array(5).astype(dtype), dtype=dtype)
    check(ta.bitwise_xor(tb), a ^ b, dtype=dtype)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "uint32", "int64"])
def test_shifts(dtype: str) -> None:
    bits = np.dtype(dtype).itemsize * 8
    a = rand((3, 4), dtype, -100, 100, seed=1)
    s = rand((3, 4), dtype, 0, bits - 1, seed=2)
    check(Tensor(a) << Tensor(s), np.left_shift(a, s), dtype=dtype)
    check(Tensor(a) >> Tensor(s), np.right_shift(a, s), dtype=dtype)
    check(Tensor(a) << 2, np.left_shift(a, np.array(2, dtype)), dtype=dtype)
    check(Tensor(a) >> 1, np.right_shift(a, np.array(1, dtype)), dtype=dtype)
    check(Tensor(a).lshift(3), np.left_shift(a, np.array(3, dtype)), dtype=dtype)
    check(Tensor(a).rshift(3), np.right_shift(a, np.array(3, dtype)), dtype=dtype)


def test_bitwise_on_float_raises_dtype_error() -> None:
    t = Tensor([1.0, 2.0])
    for fn in (lambda: t & t, lambda: t | 1, lambda: ~t, lambda: t << 1, lambda: t.bitwise_xor(t)):
        with pytest.raises(DTypeError):
            fn()


# --- where / isnan / isinf / clip ------------------------------------------------------------------------
def test_where_tensors_and_scalars() -> None:
    c = rand((3, 4), np.bool_, seed=1)
    a, b = rand((3, 4), np.float32, seed=2), rand((3, 4), np.float32, seed=3)
    tc = Tensor(c)
    check(tc.where(Tensor(a), Tensor(b)), np.where(c, a, b), dtype=np.float32)
    check(tc.where(Tensor(a), 0.0), np.where(c, a, 0.0).astype(np.float32), dtype=np.float32)
    check(tc.where(1.5, Tensor(b)), np.where(c, 1.5, b).astype(np.float32), dtype=np.float32)
    check(tc.where(1, 0), np.where(c, 1, 0).astype(np.int32), dtype=np.int32)
    check(tc.where(1.0, -1.0), np.where(c, 1.0, -1.0).astype(np.float32), dtype=np.float32)


def test_where_broadcasts_and_promotes() -> None:
    c = rand((3, 1), np.bool_, seed=4)
    a = rand((1, 4), np.int8, -5, 5, seed=5)
    b = rand((4,), np.float16, seed=6)
    out = Tensor(c).where(Tensor(a), Tensor(b))
    assert out.dtype == dtypes.float16 and out.shape == (3, 4)
    check(out, np.where(c, a.astype(np.float16), b), dtype=np.float16)
    ci = rand((2, 3), np.int32, -1, 1, seed=7)  # non-bool condition: nonzero is true
    check(Tensor(ci).where(Tensor(np.ones((2, 3), np.int32)), 5), np.where(ci != 0, 1, 5).astype(np.int32))
    cf = np.array([0.0, -0.0, 0.5, np.nan], dtype=np.float32)
    check(Tensor(cf).where(1, 2), np.where(cf.astype(bool), 1, 2).astype(np.int32))


def test_where_int8_scalar_stays_int8() -> None:
    c = rand((5,), np.bool_, seed=1)
    a = rand((5,), np.int8, seed=2)
    out = Tensor(c).where(Tensor(a), 3)
    assert out.dtype == dtypes.int8
    check(out, np.where(c, a, np.int8(3)), dtype=np.int8)


def test_isnan_isinf() -> None:
    x = np.array([0.0, np.nan, np.inf, -np.inf, 1.0, -np.nan], dtype=np.float32)
    t = Tensor(x)
    check(t.isnan(), np.isnan(x), dtype=np.bool_)
    check(t.isinf(), np.isinf(x), dtype=np.bool_)
    check(t.isinf(detect_negative=False), np.isposinf(x), dtype=np.bool_)
    check(t.isinf(detect_positive=False), np.isneginf(x), dtype=np.bool_)
    check(t.isinf(False, False), np.zeros(6, bool), dtype=np.bool_)
    xi = np.array([1, 2, 3], dtype=np.int32)
    check(Tensor(xi).isnan(), np.zeros(3, bool), dtype=np.bool_)
    check(Tensor(xi).isinf(), np.zeros(3, bool), dtype=np.bool_)
    x16 = x.astype(np.float16)
    check(Tensor(x16).isnan(), np.isnan(x16), dtype=np.bool_)
    check(Tensor(x16).isinf(), np.isinf(x16), dtype=np.bool_)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "float16"])
def test_clip(dtype: str) -> None:
    x = rand((3, 5), dtype, -50, 50, seed=1)
    t = Tensor(x)
    check(t.clip(-10, 10), np.clip(x.astype(np.float64), -10, 10).astype(dtype), dtype=dtype)
    check(t.clip(-1000, 1000), x, dtype=dtype)  # bounds beyond the dtype never wrap
    check(t.clip(5), np.maximum(x, np.array(5).astype(dtype)), dtype=dtype)
    check(t.clip(None, 7), np.minimum(x, np.array(7).astype(dtype)), dtype=dtype)
    check(t.clamp(2, 3), np.clip(x, 2, 3).astype(dtype), dtype=dtype)
    lo, hi = rand((5,), dtype, -20, 0, seed=2), rand((3, 1), dtype, 0, 20, seed=3)
    check(t.clip(Tensor(lo), Tensor(hi)), np.minimum(np.maximum(x, lo), hi), dtype=dtype)


def test_clip_float_bounds_on_float_and_nan() -> None:
    x = np.array([-2.0, -0.5, 0.25, np.nan, 3.0], dtype=np.float32)
    check(Tensor(x).clip(-1.0, 1.0), np.clip(x, -1.0, 1.0))


# --- broadcasting, size-0 / size-1 dims, non-contiguous views --------------------------------------------
SHAPE_PAIRS = [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((2, 3, 4), ()), ((), (2, 3)), ((1,), (5,)),
               ((2, 1, 3), (1, 4, 1)), ((1, 1), (1, 1)), ((0, 3), (1, 3)), ((0,), ()), ((4, 0), (4, 1)),
               ((2, 3), (2, 3))]


@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("name", ["add", "mul", "maximum", "lt", "mod"])
def test_broadcasting(sa: tuple[int, ...], sb: tuple[int, ...], name: str) -> None:
    fn, ref, _ = BINARY[name]
    a = rand(sa, np.float32, seed=1)
    b = rand(sb, np.float32, 0.5, 3, seed=2)
    out = fn(Tensor(a), Tensor(b))
    assert out.shape == np.broadcast_shapes(sa, sb)
    check(out, ref(a, b))


@pytest.mark.parametrize("sa,sb", [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((2, 3), ()), ((0, 2), (1, 2))], ids=str)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "bool", "float16", "float64", "int32"])
def test_broadcasting_dtypes(sa: tuple[int, ...], sb: tuple[int, ...], dtype: str) -> None:
    a, b = rand(sa, dtype, -50, 50, seed=1), rand(sb, dtype, -50, 50, seed=2)
    ta, tb = Tensor(a), Tensor(b)
    kw: dict[str, Any] = {"rtol": 2e-3, "atol": 2e-2} if dtype == "float16" else {}
    check(ta + tb, np.logical_or(a, b) if dtype == "bool" else a + b, dtype=dtype, **kw)
    check(tb * ta, np.logical_and(a, b) if dtype == "bool" else b * a, dtype=dtype, **kw)
    check(ta.maximum(tb), np.maximum(a, b), dtype=dtype)
    check(ta < tb, a < b, dtype=np.bool_)
    check(tb == ta, b == a, dtype=np.bool_)
    check((ta >= tb).where(ta, tb), np.where(a >= b, a, b), dtype=dtype)


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0, 2), (1,), (1, 1, 1), ()], ids=str)
def test_unary_degenerate_shapes(shape: tuple[int, ...]) -> None:
    x = rand(shape, np.float32, seed=3)
    t = Tensor(x)
    check(t.exp(), np.exp(x))
    check(-t, -x)
    check((t * 2 + 1).relu(), np.maximum(x * 2 + 1, 0))
    check(t < 0, x < 0)


def test_broadcast_error_names_both_shapes() -> None:
    with pytest.raises(ShapeError) as e:
        Tensor(np.zeros((3, 4), np.float32)) + Tensor(np.zeros(5, np.float32))
    msg = str(e.value)
    assert "(3, 4)" in msg and "(5,)" in msg
    with pytest.raises(ShapeError):
        Tensor(np.zeros((2, 3), np.float32)).where(Tensor(np.zeros((3, 2), np.float32)), 0)
    with pytest.raises(ShapeError):
        Tensor(np.zeros((2, 3), np.float32)).maximum(Tensor(np.zeros((4,), np.float32)))


def _views(x: np.ndarray) -> list[tuple[str, Tensor, np.ndarray]]:
    t = Tensor(x)
    return [("T", t.T, x.T), ("permute", t.permute(2, 0, 1), x.transpose(2, 0, 1)),
            ("slice", t[:, 1:, ::2], x[:, 1:, ::2]), ("flip", t[::-1, :, ::-1], x[::-1, :, ::-1]),
            ("expand", t[:, :1, :].expand(2, 3, 4), np.broadcast_to(x[:, :1, :], (2, 3, 4))),
            ("pad", t.pad(((0, 0), (1, 0), (0, 1))), np.pad(x, ((0, 0), (1, 0), (0, 1))))]


@pytest.mark.parametrize("i", range(6))
def test_non_contiguous_inputs(i: int) -> None:
    x = rand((2, 3, 4), np.float32, seed=7)
    y = rand((2, 3, 4), np.float32, 0.5, 2, seed=8)
    name, tv, xv = _views(x)[i]
    _, tw, yw = _views(y)[i]
    check(tv + tw, xv + yw)
    check(tv * tw.T.T - 1, xv * yw - 1)
    check(tv.exp(), np.exp(xv))
    check(tv.maximum(tw), np.maximum(xv, yw))
    with np.errstate(all="ignore"):  # the padded view divides by zero
        check(tv // tw, xv // yw)
        check(tv % tw, xv % yw)
    check((tv < tw).where(tv, tw), np.where(xv < yw, xv, yw))
    # a transposed int view too
    xi = rand((2, 3, 4), np.int8, -50, 50, seed=9)
    _, ti, xiv = _views(xi)[i]
    check(ti * 3 + 1, (xiv * np.int8(3) + np.int8(1)).astype(np.int8), dtype=np.int8)


def test_elementwise_of_realized_view() -> None:
    x = rand((4, 6), np.float32, seed=1)
    t = (Tensor(x) + 1).realize()
    check(t.T[1:3] * 2, (x + 1).T[1:3] * 2)
    check(t[::2, ::-3] - t[1::2, ::-3], (x + 1)[::2, ::-3] - (x + 1)[1::2, ::-3])


def test_scalar_tensor_ops() -> None:
    a, b = Tensor(3.5), Tensor(2.0)
    assert a.shape == () and (a + b).shape == ()
    check(a * b + 1, np.float32(8.0))
    check(a.exp(), np.exp(np.float32(3.5)))
    assert (a > b).item() is True
    assert Tensor(7).item() == 7 and Tensor(7).dtype == dtypes.int32


# --- dtype promotion -------------------------------------------------------------------------------------
def _t(dtype: str, n: int = 3) -> Tensor:
    return Tensor(rand((n,), dtype, 0, 5, seed=11))


@pytest.mark.parametrize("da,db,want", [
    ("uint8", "int8", "int16"), ("int8", "int16", "int16"), ("int8", "int32", "int32"), ("uint8", "uint16", "uint16"),
    ("uint16", "int16", "int32"), ("uint32", "int32", "int64"), ("bool", "int8", "int8"), ("bool", "uint8", "uint8"),
    ("bool", "float16", "float16"), ("int8", "float16", "float16"), ("int32", "float32", "float32"),
    ("float16", "float32", "float32"), ("float32", "float64", "float64"), ("int64", "float16", "float16"),
    ("bool", "bool", "bool"),
])
def test_promotion_tensor_tensor(da: str, db: str, want: str) -> None:
    a, b = _t(da), _t(db)
    out = a + b
    assert out.dtype == dtypes.from_name(want)
    assert (b * a).dtype == dtypes.from_name(want)
    an, bn = a.numpy(), b.numpy()
    expected = an.astype(np.float64) + bn.astype(np.float64) if want != "bool" else an | bn
    check(out, np.asarray(expected).astype(want), dtype=want)


def test_weak_scalar_promotion() -> None:
    i8 = Tensor(np.array([1, -2, 100], dtype=np.int8))
    assert (i8 + 3).dtype == dtypes.int8
    assert (3 * i8).dtype == dtypes.int8
    check(i8 + 100, np.array([101, 98, -56], dtype=np.int8), dtype=np.int8)  # wraps in int8
    half = i8 + 0.5
    assert half.dtype == dtypes.weakfloat
    check(half, np.array([1.5, -1.5, 100.5]), dtype=np.float32)  # weak float commits to float32
    f16 = Tensor(np.array([1, 2, 3], dtype=np.float16))
    assert (half + f16).dtype == dtypes.float16
    check(half + f16, np.array([2.5, 0.5, 103.5], dtype=np.float16), dtype=np.float16)
    assert (f16 * 2).dtype == dtypes.float16 and (f16 * 2.5).dtype == dtypes.float16
    u8 = Tensor(np.array([1, 2, 250], dtype=np.uint8))
    assert (u8 + 10).dtype == dtypes.uint8
    check(u8 + 10, np.array([11, 12, 4], dtype=np.uint8), dtype=np.uint8)
    b = Tensor([True, False, True])
    assert b.dtype == dtypes.bool
    assert (b + b).dtype == dtypes.bool and (b * b).dtype == dtypes.bool
    check(b + b, np.array([True, False, True]), dtype=np.bool_)
    assert (b + 1).dtype == dtypes.weakint
    check(b + 1, np.array([2, 1, 2], dtype=np.int32), dtype=np.int32)
    assert (b + True).dtype == dtypes.bool
    assert (Tensor([1, 2]) + 1.5).dtype == dtypes.weakfloat
    assert (Tensor(np.array([1.0], np.float64)) + 1.5).dtype == dtypes.float64
    assert (Tensor([1.0]) > 0).dtype == dtypes.bool
    assert (i8 / 2).dtype == dtypes.float32
    assert (i8.exp()).dtype == dtypes.float32


def test_weak_python_scalar_tensor() -> None:
    # Tensor(python scalar) commits immediately: 3 -> int32, 0.5 -> float32
    assert Tensor(3).dtype == dtypes.int32 and Tensor(0.5).dtype == dtypes.float32 and Tensor(True).dtype == dtypes.bool


def test_cast_roundtrips() -> None:
    x = np.array([-2.7, -0.5, 0.0, 1.5, 300.25], dtype=np.float32)
    t = Tensor(x)
    check(t.cast(dtypes.int32), x.astype(np.int32), dtype=np.int32)
    check(t.cast("float16"), x.astype(np.float16), dtype=np.float16)
    check(t.cast(dtypes.float64), x.astype(np.float64), dtype=np.float64)
    check(t.cast(dtypes.bool), x.astype(bool), dtype=np.bool_)
    check(t.int().float(), x.astype(np.int32).astype(np.float32))
    check(t.half(), x.astype(np.float16))
    check(Tensor(np.array([1, 0, 2], np.int32)).bool(), np.array([True, False, True]))
    check(Tensor([True, False]).cast(dtypes.float32), np.array([1.0, 0.0], np.float32))
    check(Tensor(np.array([-1, 255, 256], np.int32)).cast(dtypes.uint8), np.array([-1, 255, 256]).astype(np.uint8))


def test_bitcast() -> None:
    x = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    check(Tensor(x).bitcast(dtypes.int32), x.view(np.int32), dtype=np.int32)
    check(Tensor(x.view(np.uint32)).bitcast(dtypes.float32), x, dtype=np.float32)
    with pytest.raises(DTypeError):
        Tensor(x).bitcast(dtypes.int16)



def test_long_elementwise_chain() -> None:
    x = rand((5, 7), np.float32, seed=3)
    t, n = Tensor(x), x.astype(np.float64)
    for i in range(12):
        t = (t * 0.9 + 0.1 * i).tanh() if i % 2 else (t - 0.2).maximum(-1.0) * 1.1
        n = np.tanh(n * 0.9 + 0.1 * i) if i % 2 else np.maximum(n - 0.2, -1.0) * 1.1
    check(t, n, rtol=1e-5, atol=1e-5)
