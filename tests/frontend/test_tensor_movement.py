"""Movement and indexing ops against numpy: reshape, permute/transpose, expand, pad (constant/reflect/edge,
flat and per-axis, negative crops), shrink, flip, __getitem__ (ints, slices with any step, None, Ellipsis,
integer tensors), cat/split/chunk/repeat, gather/take/one_hot, squeeze/unsqueeze/flatten, and their errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jit import dtypes
from jit.common.errors import AxisError, DTypeError, ShapeError
from jit.frontend.tensor import Tensor
from tests.helpers import check_tensor


def check(t: Tensor, expected: Any, dtype: Any = None) -> None:
    check_tensor(t, expected, dtype, rtol=1e-6, atol=1e-6)


def arange(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)


X = arange(2, 3, 4)


# --- reshape / permute / expand ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(24,), (4, 6), (2, -1), (-1, 4), (1, 2, 1, 12, 1), (3, 2, 4), (2, 3, 4),
                                   (4, 3, 2), (-1,)], ids=str)
def test_reshape(shape: tuple[int, ...]) -> None:
    check(Tensor(X).reshape(shape), X.reshape(shape))
    check(Tensor(X).reshape(*shape), X.reshape(shape))
    check(Tensor(X).T.reshape(shape), X.T.reshape(shape))  # reshape of a non-contiguous view
    check(Tensor(X)[:, ::-1].reshape(shape) + 1, X[:, ::-1].reshape(shape) + 1)


def test_reshape_scalar_and_empty() -> None:
    check(Tensor(5.0).reshape(1, 1), np.full((1, 1), 5.0, np.float32))
    check(Tensor([7.0]).reshape(()), np.float32(7.0))
    e = np.zeros((0, 3), np.float32)
    check(Tensor(e).reshape(3, 0), e.reshape(3, 0))
    check(Tensor(e).reshape(0, 5, 7), e.reshape(0, 5, 7))
    check(Tensor(X).view(6, 4), X.reshape(6, 4))


def test_reshape_errors_name_both_shapes() -> None:
    with pytest.raises(ShapeError) as e:
        Tensor(X).reshape(5, 5)
    assert "(2, 3, 4)" in str(e.value) and "(5, 5)" in str(e.value)
    with pytest.raises(ShapeError) as e:
        Tensor(X).reshape(-1, 5)
    assert "(2, 3, 4)" in str(e.value) and "(-1, 5)" in str(e.value)
    with pytest.raises(ShapeError):
        Tensor(X).reshape(-1, -1)
    with pytest.raises(ShapeError):
        Tensor(X).reshape(-2, -12)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0), (-1, 0, 1)], ids=str)
def test_permute(order: tuple[int, ...]) -> None:
    check(Tensor(X).permute(order), X.transpose(order))
    check(Tensor(X).permute(*order), X.transpose(order))


def test_transpose_and_T() -> None:
    t = Tensor(X)
    check(t.transpose(0, 2), X.swapaxes(0, 2))
    check(t.transpose(-1, -2), X.swapaxes(-1, -2))
    check(t.transpose(), X.swapaxes(1, 0))
    check(t.T, X.T)
    check(t.T.T, X)
    check(Tensor(arange(3, 5)).T, arange(3, 5).T)
    check(Tensor(arange(5)).T, arange(5))


def test_permute_errors() -> None:
    with pytest.raises(AxisError):
        Tensor(X).permute(0, 1)
    with pytest.raises(AxisError):
        Tensor(X).permute(0, 0, 1)
    with pytest.raises(AxisError) as e:
        Tensor(X).permute(0, 1, 3)
    assert "3" in str(e.value)
    with pytest.raises(AxisError):
        Tensor(X).transpose(0, 3)


@pytest.mark.parametrize("src,dst", [((3, 1), (3, 4)), ((1,), (5,)), ((4,), (2, 3, 4)), ((1, 4), (2, 3, 4)),
                                     ((2, 1, 1), (2, 3, 5)), ((), (2, 2)), ((3, 1), (-1, 4)), ((1, 3), (0, 3))],
                         ids=str)
def test_expand(src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    x = arange(*src) if src else np.float32(3.0)
    np_dst = tuple(s if d == -1 else d for s, d in zip((1,) * (len(dst) - len(src)) + src, dst, strict=True))
    check(Tensor(x).expand(dst), np.broadcast_to(x, np_dst))
    check(Tensor(x).expand(*dst) * 2, np.broadcast_to(x, np_dst) * 2)


def test_expand_errors() -> None:
    with pytest.raises(ShapeError):
        Tensor(arange(3)).expand(4)
    with pytest.raises(ShapeError):
        Tensor(arange(2, 3)).expand(3)
    with pytest.raises(ShapeError):
        Tensor(arange(2, 3)).expand(2, 6)


def test_squeeze_unsqueeze_flatten() -> None:
    x = arange(1, 3, 1, 4)
    t = Tensor(x)
    check(t.squeeze(), x.squeeze())
    check(t.squeeze(0), x.squeeze(0))
    check(t.squeeze(-2), x.squeeze(-2))
    check(t.squeeze((0, 2)), x.squeeze((0, 2)))
    with pytest.raises(ShapeError):
        t.squeeze(1)
    with pytest.raises(AxisError):
        t.squeeze(4)
    for d in (0, 1, 4, -1, -5):
        check(t.unsqueeze(d), np.expand_dims(x, d))
    with pytest.raises(AxisError):
        t.unsqueeze(5)
    check(t.flatten(), x.reshape(-1))
    check(t.flatten(1), x.reshape(1, -1))
    check(t.flatten(1, 2), x.reshape(1, 3, 4))
    check(t.flatten(-2), x.reshape(1, 3, 4))
    check(Tensor(X).T.flatten(), X.T.reshape(-1))
    check(Tensor(2.0).flatten(), np.array([2.0], np.float32))
    check(Tensor(2.0).unsqueeze(0), np.array([2.0], np.float32))


# --- pad / shrink / flip -------------------------------------------------------------------------------
@pytest.mark.parametrize("pads", [((0, 0), (1, 2), (3, 0)), ((1, 1), (0, 0), (0, 0)), ((1, 0), (0, 2), (1, 1)),
                                  ((0, 0), (0, 0), (0, 0))], ids=str)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_per_axis(pads: tuple[tuple[int, int], ...], mode: str) -> None:
    out = Tensor(X).pad(pads, mode=mode)
    check(out, np.pad(X, pads, mode=mode))


@pytest.mark.parametrize("value", [0.0, 1.5, -np.inf, np.nan])
def test_pad_constant_value(value: float) -> None:
    pads = ((1, 0), (0, 2), (1, 1))
    check(Tensor(X).pad(pads, value=value), np.pad(X, pads, constant_values=value))


def test_pad_constant_value_int_and_bool() -> None:
    xi = arange(2, 3, dtype=np.int8)
    check(Tensor(xi).pad(((1, 1), (2, 0)), value=-7), np.pad(xi, ((1, 1), (2, 0)), constant_values=-7),
          dtype=np.int8)
    xb = np.array([[True, False]])
    check(Tensor(xb).pad(((1, 0), (0, 1))), np.pad(xb, ((1, 0), (0, 1))), dtype=np.bool_)
    check(Tensor(xb).pad(((1, 0), (0, 1)), value=True), np.pad(xb, ((1, 0), (0, 1)), constant_values=True),
          dtype=np.bool_)


@pytest.mark.parametrize("flat,per_axis", [((1, 2), ((0, 0), (0, 0), (1, 2))),
                                           ((1, 2, 2, 0), ((0, 0), (2, 0), (1, 2))),
                                           ((0, 1, 0, 0, 1, 1), ((1, 1), (0, 0), (0, 1)))], ids=str)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_flat_torch_form(flat: tuple[int, ...], per_axis: tuple[tuple[int, int], ...], mode: str) -> None:
    check(Tensor(X).pad(flat, mode=mode), np.pad(X, per_axis, mode=mode))


def test_pad_negative_crops() -> None:
    check(Tensor(X).pad(((0, 0), (-1, 0), (-1, -2))), X[:, 1:, 1:2])
    check(Tensor(X).pad(((-1, 1), (0, -1), (2, -1))), np.pad(X[1:, :2, :3], ((0, 1), (0, 0), (2, 0))))
    check(Tensor(X).pad((-1, 1)), np.pad(X[:, :, 1:], ((0, 0), (0, 0), (0, 1))))
    check(Tensor(X).pad(((0, 0), (-1, 1), (0, 0)), mode="edge"), np.pad(X[:, 1:], ((0, 0), (0, 1), (0, 0)), "edge"))


def test_pad_value_takes_tensor_dtype() -> None:
    xi = arange(3, dtype=np.int8)
    check(Tensor(xi).pad(((1, 1),), value=2.7), np.pad(xi, 1, constant_values=2), dtype=np.int8)
    check(Tensor(xi).pad(((1, 0),), value=-1), np.pad(xi, ((1, 0),), constant_values=-1), dtype=np.int8)
    check(Tensor(np.array([True])).pad(((1, 0),), value=1), np.array([True, True]), dtype=np.bool_)
    xh = arange(2, dtype=np.float16)
    check(Tensor(xh).pad(((0, 1),), value=0.1), np.pad(xh, ((0, 1),), constant_values=0.1), dtype=np.float16)


def test_pad_errors() -> None:
    with pytest.raises(ShapeError):
        Tensor(X).pad(((1, 1), (1, 1)))  # wrong number of pairs
    with pytest.raises(ShapeError):
        Tensor(X).pad((1, 1, 1))  # odd flat length
    with pytest.raises(ShapeError):
        Tensor(X).pad((1, 1) * 4)  # flat form for too many axes
    with pytest.raises(ShapeError):
        Tensor(X).pad(((0, 0), (0, 0), (4, 0)), mode="reflect")  # reflect needs pad < size
    with pytest.raises(ValueError):
        Tensor(X).pad(((0, 0), (0, 0), (1, 0)), mode="wrap")


def test_pad_of_views_and_then_compute() -> None:
    t = Tensor(X)
    check(t.T.pad(((1, 0), (0, 0), (0, 1)), value=9.0) * 2, np.pad(X.T, ((1, 0), (0, 0), (0, 1)),
                                                                   constant_values=9.0) * 2)
    check(t[:, ::2].pad(((0, 0), (1, 1), (1, 1)), mode="reflect"), np.pad(X[:, ::2], ((0, 0), (1, 1), (1, 1)),
                                                                           mode="reflect"))
    check(t.pad(((1, 1), (1, 1), (1, 1))).pad(((1, 0), (0, 0), (0, 2))),
          np.pad(np.pad(X, 1), ((1, 0), (0, 0), (0, 2))))


def test_flip_after_reshape_of_buffer() -> None:
    x = arange(2, 3)
    check(Tensor(x).reshape(6).flip(0), x.reshape(6)[::-1])
    check(Tensor(x).reshape(3, 2)[::-1] * 1, x.reshape(3, 2)[::-1])


def test_flip_after_reshape_of_view() -> None:
    # regression: symbolic split_divmod rewrote (c - i) % n to (c mod n - i) % n, wrong in C for negative operands
    x = arange(2, 2)
    check(Tensor(x).T.reshape(4).flip(0), x.T.reshape(4)[::-1])
    y = arange(2, 3, 4)
    check(Tensor(y).permute(2, 0, 1).reshape(4, 6)[::-1, ::-2], y.transpose(2, 0, 1).reshape(4, 6)[::-1, ::-2])
    check(Tensor(y).permute(1, 2, 0).reshape(-1).flip(0).reshape(3, 8), y.transpose(1, 2, 0).reshape(-1)[::-1]
          .reshape(3, 8))


def test_shrink() -> None:
    t = Tensor(X)
    check(t.shrink(((0, 1), (1, 3), (0, 4))), X[0:1, 1:3, 0:4])
    check(t.shrink((None, (2, 2), None)), X[:, 2:2, :])
    check(t.shrink(((1, 2), None, (3, 4))), X[1:2, :, 3:4])
    with pytest.raises(ShapeError):
        t.shrink(((0, 3), None, None))
    with pytest.raises(ShapeError):
        t.shrink(((1, 0), None, None))


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (-1,), (0, 1, 2)], ids=str)
def test_flip(axes: tuple[int, ...]) -> None:
    check(Tensor(X).flip(axes), np.flip(X, axes))
    check(Tensor(X).flip(*axes), np.flip(X, axes))
    check(Tensor(X).T.flip(axes), np.flip(X.T, axes))
    with pytest.raises(AxisError):
        Tensor(X).flip(3)


# --- __getitem__ ---------------------------------------------------------------------------------------
GETITEM_KEYS: list[Any] = [
    0, -1, 1, (1, 2), (-1, -1, -1), (0, 1, 2),
    slice(None), slice(1, None), slice(None, 1), slice(None, None, -1), slice(None, None, 2),
    (slice(None), slice(0, 3, 2)), (slice(None), slice(None, None, -2)), (slice(None), slice(2, 0, -1)),
    (Ellipsis, 1), (Ellipsis, slice(None, None, -3)), (0, Ellipsis), (0, Ellipsis, 2), (Ellipsis,),
    None, (None, 0), (slice(None), None, 1), (Ellipsis, None), (None, Ellipsis, None),
    (slice(-2, None), slice(-100, 100), slice(3, -5, -1)), (slice(5, 10),), (slice(None), slice(2, 1)),
    (slice(None), slice(None), slice(None, None, 5)), (1, slice(None, None, -1), slice(1, 3)),
    (slice(None, None, -1), slice(None, None, -1), slice(None, None, -1)), (slice(3, None, -2),),
]


@pytest.mark.parametrize("key", GETITEM_KEYS, ids=str)
def test_getitem_basic(key: Any) -> None:
    check(Tensor(X)[key], X[key])
    xp = X.transpose(1, 0, 2)
    try:
        expected = xp[key]
    except IndexError:
        with pytest.raises(AxisError):
            Tensor(X).permute(1, 0, 2)[key]
        return
    check(Tensor(X).permute(1, 0, 2)[key], expected)


def test_getitem_scalar_results_and_numpy_ints() -> None:
    t = Tensor(X)
    assert t[1, 2, 3].shape == () and t[1, 2, 3].item() == X[1, 2, 3]
    assert t[np.int64(1), np.int32(-1), 0].item() == X[1, -1, 0]
    check(Tensor(arange(5))[::-1][1:4], arange(5)[::-1][1:4])
    check(Tensor(arange(5))[3:1:-1][0], arange(5)[3:1:-1][0])


def test_getitem_errors() -> None:
    t = Tensor(X)
    with pytest.raises(AxisError) as e:
        t[2]
    assert "2" in str(e.value)
    with pytest.raises(AxisError):
        t[0, -4]
    with pytest.raises(AxisError):
        t[0, 0, 0, 0]
    with pytest.raises(TypeError):
        t["a"]  # type: ignore[index]
    with pytest.raises(ValueError):
        t[::0]


@pytest.mark.parametrize("idx", [[2, 0, 1], [-1, 0, -3, 2, 2], [[0, 1], [2, 2]], [1]], ids=str)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_getitem_tensor_index(idx: list[Any], axis: int) -> None:
    x = arange(3, 3, 4)
    key = (slice(None),) * axis + (np.array(idx),)
    t_key = (slice(None),) * axis + (Tensor(np.array(idx, dtype=np.int32)),)
    check(Tensor(x)[t_key], x[key])


def test_getitem_tensor_index_mixed() -> None:
    x = arange(4, 5, 6)
    i = np.array([3, 0, -1], dtype=np.int32)
    check(Tensor(x)[Tensor(i)], x[i])
    check(Tensor(x)[1, Tensor(i)], x[1, i])
    check(Tensor(x)[:, Tensor(i), 2:4], x[:, i, 2:4])
    check(Tensor(x)[::-1, Tensor(i)], x[::-1, i])
    check(Tensor(x)[..., Tensor(i)], x[..., i])
    check(Tensor(x)[None, Tensor(i)], x[None, i])
    check(Tensor(x)[Tensor(np.array(2, dtype=np.int32))], x[2])
    ib = np.array([1, 0], dtype=np.int64)
    check(Tensor(x)[:, :, Tensor(ib)], x[:, :, ib])
    with pytest.raises(TypeError):
        Tensor(x)[Tensor(i), Tensor(i)]


def test_getitem_list_and_array_index() -> None:
    x = arange(3, 4)
    check(Tensor(x)[[0, 2]], x[[0, 2]])
    check(Tensor(x)[:, np.array([[0, -1]])], x[:, np.array([[0, -1]])])
    check(Tensor(x)[[]], x[np.array([], dtype=np.int64)])
    check(Tensor(x)[1, [3, 3, 0]], x[1, [3, 3, 0]])


def test_getitem_rejects_masks_and_float_indices() -> None:
    x = Tensor(arange(3, 4))
    with pytest.raises(DTypeError):
        x[Tensor(np.array([True, False, True]))]  # a boolean mask has a data-dependent shape
    with pytest.raises(DTypeError):
        x[[True, False, True]]
    with pytest.raises(DTypeError):
        x[[1.5]]
    with pytest.raises(DTypeError):
        x[Tensor([0.0, 1.0])]
    with pytest.raises(DTypeError):
        x.gather(0, Tensor(np.zeros((3, 4), bool)))


# --- cat / split / chunk / repeat -----------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat(dim: int) -> None:
    a, b = arange(2, 3, 4), arange(2, 3, 4) + 100
    c = np.concatenate([a, b], axis=dim)[tuple(slice(0, 1) if i == dim % 3 else slice(None) for i in range(3))]
    check(Tensor.cat(Tensor(a), Tensor(b), Tensor(c), dim=dim), np.concatenate([a, b, c], axis=dim))
    check(Tensor.cat(Tensor(a), dim=dim), a)


def test_cat_mixed_dtypes_views_and_empty() -> None:
    a = arange(2, 3, dtype=np.int8)
    b = arange(2, 2, dtype=np.float16)
    out = Tensor.cat(Tensor(a), Tensor(b), dim=1)
    assert out.dtype == dtypes.float16
    check(out, np.concatenate([a.astype(np.float16), b], 1), dtype=np.float16)
    u, i = arange(1, 3, dtype=np.uint8), arange(1, 3, dtype=np.int8) - 2
    check(Tensor.cat(Tensor(u), Tensor(i)), np.concatenate([u.astype(np.int16), i.astype(np.int16)]), dtype=np.int16)
    bo = np.array([[True, False, True]])
    check(Tensor.cat(Tensor(bo), Tensor(bo)), np.concatenate([bo, bo]), dtype=np.bool_)
    check(Tensor.cat(Tensor(bo), Tensor(u)), np.concatenate([bo.astype(np.uint8), u]), dtype=np.uint8)
    e = np.zeros((0, 3), np.float32)
    x = arange(2, 3)
    check(Tensor.cat(Tensor(e), Tensor(x), Tensor(e)), np.concatenate([e, x, e]))
    check(Tensor.cat(Tensor(x).T, Tensor(x)[:, ::-1].T, dim=1), np.concatenate([x.T, x[:, ::-1].T], 1))
    check(Tensor.cat(Tensor(x)[:, 1:], Tensor(x)[:, :1], dim=1), np.concatenate([x[:, 1:], x[:, :1]], 1))


def test_cat_nan_inf_and_negative_zero_survive() -> None:
    a = np.array([np.nan, np.inf, -0.0], np.float32)
    b = np.array([-np.inf, 1.0, -0.0], np.float32)
    out = Tensor.cat(Tensor(a), Tensor(b), Tensor(a)).numpy()
    np.testing.assert_array_equal(out, np.concatenate([a, b, a]))
    np.testing.assert_array_equal(np.signbit(out), np.signbit(np.concatenate([a, b, a])))


def test_cat_errors() -> None:
    with pytest.raises(ShapeError):
        Tensor.cat()
    with pytest.raises(ShapeError):
        Tensor.cat(Tensor(arange(2, 3)), Tensor(arange(3, 2)), dim=0)
    with pytest.raises(ShapeError):
        Tensor.cat(Tensor(arange(2, 3)), Tensor(arange(2)))
    with pytest.raises(AxisError):
        Tensor.cat(Tensor(arange(2, 3)), Tensor(arange(2, 3)), dim=2)
    with pytest.raises(ShapeError):
        Tensor.cat(Tensor(1.0), Tensor(2.0))


def test_split_and_chunk() -> None:
    x = arange(7, 4)
    t = Tensor(x)
    for got, exp in zip(t.split(3), np.split(x, [3, 6]), strict=True):
        check(got, exp)
    for got, exp in zip(t.split([2, 0, 5]), np.split(x, [2, 2]), strict=True):
        check(got, exp)
    for got, exp in zip(t.split(2, dim=1), np.split(x, 2, axis=1), strict=True):
        check(got, exp)
    for got, exp in zip(t.split([1, 3], dim=-1), np.split(x, [1], axis=1), strict=True):
        check(got, exp)
    assert [c.shape for c in t.chunk(3)] == [(3, 4), (3, 4), (1, 4)]
    for got, exp in zip(t.chunk(3), np.split(x, [3, 6]), strict=True):
        check(got, exp)
    assert [c.shape for c in t.chunk(4, dim=1)] == [(7, 1)] * 4
    assert [c.shape for c in t.chunk(2, dim=1)] == [(7, 2)] * 2
    with pytest.raises(ShapeError):
        t.split([3, 3])
    with pytest.raises(ShapeError):
        t.split(0)
    with pytest.raises(ShapeError):
        t.chunk(0)


@pytest.mark.parametrize("reps", [(2, 1, 1), (1, 2, 3), (2, 1, 1, 2), (1, 1, 1), (3, 1, 2, 1, 1)], ids=str)
def test_repeat(reps: tuple[int, ...]) -> None:
    check(Tensor(X).repeat(reps), np.tile(X, reps))
    check(Tensor(X).repeat(*reps), np.tile(X, reps))


def test_repeat_zero_and_1d() -> None:
    check(Tensor(arange(3)).repeat(4), np.tile(arange(3), 4))
    check(Tensor(arange(3)).repeat(2, 2), np.tile(arange(3), (2, 2)))
    check(Tensor(arange(2, 3)).repeat(0, 1), np.tile(arange(2, 3), (0, 1)))
    with pytest.raises(ShapeError):
        Tensor(arange(2, 3)).repeat(2)  # as torch: fewer repeats than dims is an error


# --- gather / take / one_hot ----------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather(axis: int) -> None:
    x = arange(3, 4, 5)
    rng = np.random.default_rng(axis + 5)
    n = x.shape[axis]
    idx = rng.integers(-n, n, size=x.shape).astype(np.int32)  # negative indices count from the end
    check(Tensor(x).gather(axis, Tensor(idx)), np.take_along_axis(x, idx, axis))
    idx64 = idx.astype(np.int64)
    check(Tensor(x).gather(axis, Tensor(idx64)), np.take_along_axis(x, idx64, axis))


def test_gather_smaller_index_and_broadcast_source() -> None:
    x = arange(3, 4, 5)
    idx = np.array([[[0, 4], [1, 1]], [[3, 2], [-1, 0]]], dtype=np.int32)  # (2, 2, 2) <= data in every axis
    check(Tensor(x).gather(2, Tensor(idx)), np.take_along_axis(x[:2, :2], idx, 2))
    idx0 = np.array([[[2], [0], [1]]], dtype=np.int32)  # (1, 3, 1)
    check(Tensor(x).gather(1, Tensor(idx0)), np.take_along_axis(x[:1, :, :1], idx0, 1))
    one = x[:, :1, :]
    idx2 = np.zeros((3, 4, 5), np.int32)  # size-1 source axis broadcasts
    check(Tensor(one).gather(0, Tensor(idx2)), np.take_along_axis(np.broadcast_to(one, (3, 4, 5)), idx2, 0))
    xi = arange(4, 6, dtype=np.int8)
    ii = np.array([[5, 0, -6], [1, 2, 3]], dtype=np.int32)
    check(Tensor(xi).gather(1, Tensor(ii)), np.take_along_axis(xi[:2], ii, 1), dtype=np.int8)
    check(Tensor(x).T.gather(0, Tensor(np.zeros((1, 4, 3), np.int32))),
          np.take_along_axis(x.T, np.zeros((1, 4, 3), np.int64), 0))


def test_gather_errors() -> None:
    x = Tensor(arange(3, 4))
    with pytest.raises(ShapeError):
        x.gather(0, Tensor(np.zeros((3,), np.int32)))
    with pytest.raises(DTypeError):
        x.gather(0, Tensor(np.zeros((3, 4), np.float32)))
    with pytest.raises(ShapeError):
        x.gather(0, Tensor(np.zeros((3, 5), np.int32)))
    with pytest.raises(AxisError):
        x.gather(2, Tensor(np.zeros((3, 4), np.int32)))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("ishape", [(), (3,), (2, 2)], ids=str)
def test_take(axis: int, ishape: tuple[int, ...]) -> None:
    x = arange(3, 4, 5)
    n = x.shape[axis]
    idx = (np.arange(int(np.prod(ishape))) * 7 % (2 * n) - n).reshape(ishape).astype(np.int32)
    check(Tensor(x).take(Tensor(idx), axis), np.take(x, idx, axis))


def test_one_hot() -> None:
    idx = np.array([[0, 2], [3, 1]], dtype=np.int32)
    out = Tensor(idx).one_hot(4)
    check(out, np.eye(4, dtype=np.int32)[idx], dtype=np.int32)
    check(Tensor(np.array([1, 0], np.int8)).one_hot(3), np.eye(3, dtype=np.int32)[[1, 0]])
    check(Tensor(np.array([5, -1], np.int32)).one_hot(3), np.zeros((2, 3), np.int32))  # out of range: all zero
