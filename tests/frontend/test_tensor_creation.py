"""Creating tensors and getting data back: lists, numpy arrays of every dtype, scalars, zeros/ones/full,
arange, eye, rand/randn/uniform (seeded), tolist/item/numpy round trips, unsupported inputs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from jit import dtypes
from jit.common.errors import DTypeError, ShapeError
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops
from tests.helpers import check_tensor

NP_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
             np.float16, np.float32, np.float64]


def check(t: Tensor, expected: Any, dtype: Any = None) -> None:
    check_tensor(t, expected, dtype, rtol=1e-6, atol=1e-6)


# --- from Python / numpy data -----------------------------------------------------------------------------
@pytest.mark.parametrize("npd", NP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_from_numpy_every_dtype_round_trips(npd: Any) -> None:
    dt = np.dtype(npd)
    if dt.kind == "b":
        x = np.array([[True, False, True], [False, False, True]])
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        x = np.array([[info.min, info.max, 0], [1, info.max - 1, info.min + 1]], dtype=dt)
    else:
        x = np.array([[np.finfo(dt).max, np.finfo(dt).tiny, -0.0], [np.inf, -np.inf, 1.5]], dtype=dt)
    t = Tensor(x)
    assert t.dtype == dtypes.from_name(dt.name)
    assert t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6 and len(t) == 2
    out = t.numpy()
    assert out.dtype == dt
    np.testing.assert_array_equal(out, x)
    assert t.tolist() == x.tolist()
    # and through a kernel (a copy that really runs on the device)
    check(t.contiguous(), x, dtype=dt)
    check(t.T, x.T, dtype=dt)


def test_numpy_nan_and_negative_zero_round_trip() -> None:
    x = np.array([np.nan, -0.0, 0.0], dtype=np.float32)
    out = (Tensor(x) * 1.0).numpy()
    assert np.isnan(out[0]) and np.signbit(out[1]) and not np.signbit(out[2])


def test_big_64bit_values_round_trip() -> None:
    u = np.array([2 ** 64 - 1, 2 ** 63 + 5, 0], dtype=np.uint64)
    check(Tensor(u) + 0, u, dtype=np.uint64)
    i = np.array([-(2 ** 63), 2 ** 63 - 1, 2 ** 40 + 3], dtype=np.int64)
    check(Tensor(i) * 1, i, dtype=np.int64)
    check(Tensor(i) + 1, i + 1, dtype=np.int64)  # wraps like numpy


def test_numpy_input_is_copied() -> None:
    x = np.arange(4, dtype=np.float32)
    t = Tensor(x)
    x[0] = 100
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    out = t.numpy()
    out[1] = 50
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_non_contiguous_numpy_input() -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    check(Tensor(x.T), x.T)
    check(Tensor(x[::2, ::-3]), x[::2, ::-3])
    check(Tensor(np.broadcast_to(x[:1], (3, 6))), np.broadcast_to(x[:1], (3, 6)))


@pytest.mark.parametrize("data,dtype,shape", [
    ([1, 2, 3], dtypes.int32, (3,)), ([1.0, 2.5], dtypes.float32, (2,)), ([True, False], dtypes.bool, (2,)),
    ([[1, 2], [3, 4]], dtypes.int32, (2, 2)), ([[1, 2.5]], dtypes.float32, (1, 2)), ([[[0]]], dtypes.int32, (1, 1, 1)),
    ([], dtypes.float32, (0,)), ([[], []], dtypes.float32, (2, 0)), ((1, 2), dtypes.int32, (2,)),
    ([True, 2], dtypes.int32, (2,)),
], ids=str)
def test_from_lists(data: Any, dtype: Any, shape: tuple[int, ...]) -> None:
    t = Tensor(data)
    assert t.dtype == dtype and t.shape == shape
    np.testing.assert_array_equal(t.numpy(), np.asarray(data, dtype=np.dtype(dtype.name)))
    assert t.tolist() == np.asarray(data, dtype=np.dtype(dtype.name)).tolist()


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8", "bool", "int64", "uint64"])
def test_from_list_with_dtype(dtype: str) -> None:
    data = [[0, 1, 2], [3, 1, 0]]
    for spec in (dtype, dtypes.from_name(dtype), np.dtype(dtype)):
        t = Tensor(data, dtype=spec)
        assert t.dtype == dtypes.from_name(dtype)
        check(t, np.array(data, dtype=dtype), dtype=dtype)


def test_from_tensor_and_dtype_conversion() -> None:
    a = Tensor([1.7, -2.2])
    assert Tensor(a).uop is a.uop
    check(Tensor(a, dtype=dtypes.int32), np.array([1, -2], np.int32), dtype=np.int32)


@pytest.mark.parametrize("value,dtype", [(3, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool),
                                         (np.float16(1.5), dtypes.float16), (np.int64(-5), dtypes.int64),
                                         (np.uint8(200), dtypes.uint8), (np.float64(0.1), dtypes.float64),
                                         (np.bool_(False), dtypes.bool)], ids=str)
def test_scalars(value: Any, dtype: Any) -> None:
    t = Tensor(value)
    assert t.shape == () and t.dtype == dtype and t.ndim == 0 and t.numel() == 1
    assert t.item() == value
    assert type(t.item()) is type(np.asarray(value).item())
    assert t.tolist() == np.asarray(value).item()
    assert t.numpy().shape == () and t.numpy().dtype == np.dtype(dtype.name)
    assert (t + 0).item() == value if dtype != dtypes.bool else (t | False).item() == value
    with pytest.raises(ShapeError):
        len(t)


def test_scalar_with_dtype() -> None:
    t = Tensor(3, dtype=dtypes.float16)
    assert t.dtype == dtypes.float16 and t.item() == 3.0
    assert Tensor(2.7, dtype="int32").item() == 2
    assert Tensor(0.1, dtype=dtypes.float64).item() == 0.1  # no float32 rounding on the way


def test_item_and_tolist() -> None:
    assert Tensor([[5]]).item() == 5
    assert isinstance(Tensor([[5]]).item(), int)
    assert isinstance(Tensor([2.5]).item(), float)
    assert isinstance(Tensor([True]).item(), bool)
    with pytest.raises(ShapeError) as e:
        Tensor([1, 2]).item()
    assert "(2,)" in str(e.value)
    assert Tensor(np.zeros((2, 0, 3), np.float32)).tolist() == [[], []]
    assert (Tensor([[1, 2], [3, 4]]) * 2).tolist() == [[2, 4], [6, 8]]


@pytest.mark.parametrize("bad", [np.array([1 + 2j], dtype=np.complex64), np.array([1 + 2j]),
                                 np.array([object()], dtype=object), np.array(["a", "b"]), ["a", "b"],
                                 np.array([b"x"]), [1, "x"], np.array([1], dtype=np.longdouble)],
                         ids=["complex64", "complex128", "object", "str_array", "str_list", "bytes", "mixed",
                              "longdouble"])
def test_unsupported_data_raises_dtype_error(bad: Any) -> None:
    with pytest.raises(DTypeError):
        Tensor(bad)


def test_ragged_list_raises_shape_error() -> None:
    with pytest.raises(ShapeError):
        Tensor([[1, 2], [3]])


def test_unsupported_dtype_names_raise() -> None:
    with pytest.raises(DTypeError):
        Tensor([1, 2], dtype="complex64")
    with pytest.raises(DTypeError):
        Tensor([1, 2], dtype=np.complex64)
    with pytest.raises(DTypeError):
        Tensor([1.0]).cast("float128")
    with pytest.raises(DTypeError):
        Tensor(1 + 2j)


# --- constructors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, "int8", "float16", "bool", "float64", "uint32"])
def test_zeros_ones_full(dtype: str | None) -> None:
    npd = dtype or "float32"
    check(Tensor.zeros(2, 3, dtype=dtype), np.zeros((2, 3), npd), dtype=npd)
    check(Tensor.zeros((2, 3), dtype=dtype), np.zeros((2, 3), npd), dtype=npd)
    check(Tensor.ones(4, dtype=dtype), np.ones(4, npd), dtype=npd)
    check(Tensor.ones([1, 2, 1], dtype=dtype), np.ones((1, 2, 1), npd), dtype=npd)
    check(Tensor.full((3, 2), 1, dtype=dtype), np.full((3, 2), 1, dtype or "int32"), dtype=dtype or "int32")
    check(Tensor.zeros(0, 5, dtype=dtype), np.zeros((0, 5), npd), dtype=npd)
    check(Tensor.zeros(dtype=dtype), np.zeros((), npd), dtype=npd)


def test_full_infers_dtype_and_like_variants() -> None:
    check(Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32), dtype=np.int32)
    check(Tensor.full((2,), 0.25), np.full(2, 0.25, np.float32), dtype=np.float32)
    check(Tensor.full((2,), True), np.full(2, True), dtype=np.bool_)
    check(Tensor.full((3,), math.nan), np.full(3, np.nan, np.float32))
    check(Tensor.full((3,), -math.inf, dtype=dtypes.float16), np.full(3, -np.inf, np.float16), dtype=np.float16)
    base = Tensor(np.zeros((2, 3), np.int8))
    check(base.zeros_like(), np.zeros((2, 3), np.int8), dtype=np.int8)
    check(base.ones_like(), np.ones((2, 3), np.int8), dtype=np.int8)
    check(base.full_like(-3), np.full((2, 3), -3, np.int8), dtype=np.int8)
    check(base.full_like(0.5, dtype=dtypes.float32), np.full((2, 3), 0.5, np.float32), dtype=np.float32)
    with pytest.raises(ShapeError):
        Tensor.full((2, -1), 1.0)


@pytest.mark.parametrize("args", [(5,), (0,), (2, 7), (7, 2), (-3, 4), (10, 0, -1), (10, 1, -3), (0, 10, 3),
                                  (5, 5), (-10, -20, -4), (3, -3, -1)], ids=str)
def test_arange_int(args: tuple[int, ...]) -> None:
    t = Tensor.arange(*args)
    assert t.dtype == dtypes.int32
    check(t, np.arange(*args, dtype=np.int32), dtype=np.int32)


@pytest.mark.parametrize("args", [(2.5,), (0.0, 1.0, 0.1), (1.0, 0.0, -0.25), (-1, 1, 0.5), (0, 5.5), (3, 0.5, -0.7),
                                  (0.1, 0.35, 0.05)], ids=str)
def test_arange_float(args: tuple[float, ...]) -> None:
    t = Tensor.arange(*args)
    assert t.dtype == dtypes.float32
    check(t, np.arange(*args, dtype=np.float64).astype(np.float32), dtype=np.float32)


def test_arange_from_zero_by_one_is_the_converted_iota() -> None:
    """No ``* 1`` or ``+ 0`` reaches a kernel (the modeld warp's pixel grid), and the zero a negative step starts
    from stays +0.0, as numpy's."""
    ops = {u.op for u in Tensor.arange(6, dtype=dtypes.float32).uop.toposort()}
    assert not ops & {Ops.MUL, Ops.ADD}, ops
    assert {Ops.MUL, Ops.ADD} <= {u.op for u in Tensor.arange(1, 7, 2, dtype=dtypes.float32).uop.toposort()}
    down = Tensor.arange(0, -3, -1, dtype=dtypes.float32).numpy()
    np.testing.assert_array_equal(np.signbit(down), np.signbit(np.arange(0, -3, -1, dtype=np.float32)))


def test_arange_dtype_and_errors() -> None:
    check(Tensor.arange(5, dtype=dtypes.float16), np.arange(5, dtype=np.float16), dtype=np.float16)
    check(Tensor.arange(0, 10, 2, dtype="int64"), np.arange(0, 10, 2, dtype=np.int64), dtype=np.int64)
    check(Tensor.arange(4, dtype=dtypes.uint8), np.arange(4, dtype=np.uint8), dtype=np.uint8)
    check(Tensor.arange(0, 1, 0.25, dtype=dtypes.float64), np.arange(0, 1, 0.25), dtype=np.float64)
    with pytest.raises(ShapeError):
        Tensor.arange(0, 5, 0)


@pytest.mark.parametrize("n,m", [(1, None), (3, None), (2, 4), (4, 2), (0, None), (3, 0)], ids=str)
def test_eye(n: int, m: int | None) -> None:
    check(Tensor.eye(n, m), np.eye(n, m, dtype=np.float32), dtype=np.float32)
    check(Tensor.eye(n, m, dtype=dtypes.int32), np.eye(n, m, dtype=np.int32), dtype=np.int32)
    check(Tensor.eye(n, m, dtype="bool"), np.eye(n, m, dtype=bool), dtype=np.bool_)


# --- random ----------------------------------------------------------------------------------------------
def test_rand_seeded_and_uniform() -> None:
    Tensor.manual_seed(1234)
    a = Tensor.rand(10000).numpy()
    b = Tensor.rand(10000).numpy()
    Tensor.manual_seed(1234)
    a2 = Tensor.rand(10000).numpy()
    np.testing.assert_array_equal(a, a2)  # same seed, same values
    assert not np.array_equal(a, b)  # the next draw differs
    assert a.dtype == np.float32 and a.shape == (10000,)
    assert a.min() >= 0.0 and a.max() < 1.0
    assert abs(a.mean() - 0.5) < 0.02
    assert abs(a.std() - math.sqrt(1 / 12)) < 0.02
    hist, _ = np.histogram(a, bins=10, range=(0, 1))
    assert hist.min() > 800 and hist.max() < 1200
    assert len(np.unique(a)) > 9900
    Tensor.manual_seed(99)
    assert not np.array_equal(Tensor.rand(10000).numpy(), a)


def test_rand_shapes_and_dtypes() -> None:
    Tensor.manual_seed(0)
    t = Tensor.rand(2, 3)
    assert t.shape == (2, 3) and t.dtype == dtypes.float32
    assert Tensor.rand((4, 5)).shape == (4, 5)
    h = Tensor.rand(100, dtype=dtypes.float16).numpy()
    assert h.dtype == np.float16 and h.min() >= 0 and h.max() <= 1
    d = Tensor.rand(50, dtype="float64").numpy()
    assert d.dtype == np.float64 and d.min() >= 0 and d.max() < 1
    assert Tensor.rand(0, 3).numpy().shape == (0, 3)
    assert Tensor.rand().shape == ()
    u = Tensor.uniform(1000, low=-2.0, high=3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.2


def test_randn_moments() -> None:
    Tensor.manual_seed(7)
    x = Tensor.randn(20000).numpy()
    assert x.dtype == np.float32 and np.isfinite(x).all()
    assert abs(x.mean()) < 0.03
    assert abs(x.std() - 1.0) < 0.03
    assert abs(np.mean(np.abs(x) < 1) - 0.6827) < 0.02
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(Tensor.randn(20000).numpy(), x)
    assert Tensor.randn(3, 4, dtype=dtypes.float64).numpy().dtype == np.float64


# --- misc ------------------------------------------------------------------------------------------------
def test_repr_and_properties() -> None:
    t = Tensor(np.zeros((2, 3), np.int8))
    assert "(2, 3)" in repr(t) and "int8" in repr(t)
    assert t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6 and len(t) == 2


def test_realize_returns_self_and_is_idempotent() -> None:
    t = Tensor([1.0, 2.0]) * 3
    assert t.realize() is t
    uop = t.uop
    assert t.realize().uop is uop
    assert t.tolist() == [3.0, 6.0]
    Tensor.realize_all(t, t + 1)


def test_dedupe_realize_shares_result() -> None:
    t = Tensor([1, 2, 3, 4])
    a, b = t * 4, t * 4
    assert a is not b
    assert a.uop is b.uop
    a.realize()
    assert a.uop is b.uop
    assert b.tolist() == [4, 8, 12, 16]


def test_weak_tensor_keeps_dtype_after_realize() -> None:
    w = Tensor(np.array([1, 2], np.int8)) + 0.5
    assert w.dtype == dtypes.weakfloat
    w.realize()
    assert w.dtype == dtypes.weakfloat
    assert w.tolist() == [1.5, 2.5]
    f16 = Tensor(np.array([1, 1], np.float16))
    assert (w + f16).dtype == dtypes.float16
    check(w + f16, np.array([2.5, 3.5], np.float16), dtype=np.float16)
