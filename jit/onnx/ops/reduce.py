"""ONNX reductions: Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK.

Axes come as an attribute before opset 13 (ReduceSum) or 18 (the other Reduce* ops) and as an optional
input from then on. An empty reduction (a reduced axis of size 0) yields the reduction's identity, as the
spec's ``*_empty_set`` cases want: 0 for sums, 1 for products, -inf/+inf (dtype min/max for integers) for
max/min, -inf for the log reductions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from jit.common.dtype import DType, dtypes
from jit.common.errors import AxisError, ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.indexing import gather_axis
from jit.onnx.ops.movement import axes_input
from jit.onnx.registry import OpContext, onnx_op


def reduce_axes_since(op_type: str) -> int:
    """The opset from which a Reduce* op takes its axes as an input instead of an attribute."""
    return 13 if op_type == "ReduceSum" else 18


def reduce_axes(ctx: OpContext, ndim: int) -> tuple[int, ...]:
    """The node's reduced axes, normalized and sorted; () when ``noop_with_empty_axes`` keeps every axis."""
    axes = axes_input(ctx, 1, reduce_axes_since(ctx.node.op_type))
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(ndim))
    out = set()
    for a in axes:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise AxisError(f"{ctx.where()}: axes expected in [{-ndim}, {ndim - 1}], got {a}")
        out.add(a % max(ndim, 1))
    return tuple(sorted(out)) if ndim else ()


def acc_dtype(d: DType) -> DType:
    """The dtype a sum or product over ``d`` accumulates in (half floats in float32, small ints in 32 bits)."""
    if d in (dtypes.float16, dtypes.bfloat16) or (d.is_float and d.itemsize == 1):
        return dtypes.float32
    if d.is_bool:
        return dtypes.int32
    if d.is_int and d.itemsize < 4:
        return dtypes.uint32 if d.is_unsigned else dtypes.int32
    return d


def _math_dtype(d: DType) -> DType:
    """The float dtype that float math (sqrt, log, exp) over ``d`` runs in."""
    if d.is_float:
        return acc_dtype(d)
    return dtypes.float64 if d.itemsize >= 4 else dtypes.float32


def _sum(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    return x.sum(axes, keepdim=True, dtype=acc_dtype(x.dtype)) if axes else x.cast(acc_dtype(x.dtype))


def _extreme(x: Tensor, axes: tuple[int, ...], largest: bool) -> Tensor:
    if not axes:
        return x
    src = x.cast(dtypes.uint8) if x.dtype.is_bool else x
    out = src.max(axes, keepdim=True) if largest else src.min(axes, keepdim=True)
    return out.cast(x.dtype)


def _logsumexp(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    x = x.cast(_math_dtype(x.dtype))
    if not axes:
        return x
    m = x.max(axes, keepdim=True)
    m = m.isinf().where(0.0, m)
    return (x - m).exp().sum(axes, keepdim=True).log() + m


def _mean(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    n = math.prod(x.shape[a] for a in axes)
    total = _sum(x, axes)
    if x.dtype.is_float:
        return total / n
    return total.cast(dtypes.float64).div(n).trunc()


@dataclass(frozen=True)
class _Reduction:
    """One Reduce* op: ``fn(x, axes)`` reduces keeping dims; ``identity(dtype)`` fills empty reductions."""

    fn: Callable[[Tensor, tuple[int, ...]], Tensor]
    identity: Callable[[DType], float | int | bool]


def _ident(value: float) -> Callable[[DType], float | int | bool]:
    return lambda d: value


REDUCTIONS: dict[str, _Reduction] = {
    "ReduceSum": _Reduction(_sum, _ident(0)),
    "ReduceMean": _Reduction(_mean, _ident(math.nan)),
    "ReduceMax": _Reduction(lambda x, a: _extreme(x, a, True), lambda d: d.min),
    "ReduceMin": _Reduction(lambda x, a: _extreme(x, a, False), lambda d: d.max),
    "ReduceProd": _Reduction(lambda x, a: x.prod(a, keepdim=True, dtype=acc_dtype(x.dtype)) if a else x,
                             _ident(1)),
    "ReduceL1": _Reduction(lambda x, a: _sum(x.abs(), a), _ident(0)),
    "ReduceL2": _Reduction(lambda x, a: _sum(x.cast(_math_dtype(x.dtype)).square(), a).sqrt(), _ident(0)),
    "ReduceSumSquare": _Reduction(lambda x, a: _sum(x * x, a), _ident(0)),
    "ReduceLogSum": _Reduction(lambda x, a: _sum(x.cast(_math_dtype(x.dtype)), a).log(), _ident(-math.inf)),
    "ReduceLogSumExp": _Reduction(_logsumexp, _ident(-math.inf)),
}


@onnx_op(*REDUCTIONS)
def reduce_op(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    red = REDUCTIONS[ctx.node.op_type]
    axes = reduce_axes(ctx, x.ndim)
    keep = bool(ctx.attr("keepdims", 1))
    kept_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    out_shape = kept_shape if keep else tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if any(x.shape[a] == 0 for a in axes):
        value = red.identity(x.dtype)
        if x.dtype.is_int and isinstance(value, float):
            value = x.dtype.min if value < 0 else x.dtype.max if value > 0 else 0
        return Tensor.full(out_shape, value, x.dtype, device=x.device)
    out = red.fn(x, axes)
    return out.cast(x.dtype).reshape(out_shape)


# --- ArgMax / ArgMin -----------------------------------------------------------------------------------
@onnx_op("ArgMax", "ArgMin")
def arg_extreme(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    largest = ctx.node.op_type == "ArgMax"
    axis = ctx.attr("axis", 0)
    keep = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    if x.ndim == 0:
        return Tensor.full((), 0, dtypes.int64, device=x.device)
    ax = axis % x.ndim
    n = x.shape[ax]
    src = x.cast(dtypes.uint8) if x.dtype.is_bool else x
    best = src.max(ax, keepdim=True) if largest else src.min(ax, keepdim=True)
    hit = src == best
    if src.dtype.is_float:
        hit = hit | src.isnan()  # numpy picks a nan first
    idx = Tensor.arange(n, dtype=dtypes.int64, device=x.device).reshape(
        *[n if i == ax else 1 for i in range(x.ndim)])
    out = hit.where(idx, -1).max(ax, keepdim=keep) if last else hit.where(idx, n).min(ax, keepdim=keep)
    return out.cast(dtypes.int64)


# --- CumSum / CumProd ----------------------------------------------------------------------------------
def cumulative(x: Tensor, axis: int, product: bool, exclusive: bool, reverse: bool) -> Tensor:
    """Inclusive/exclusive, forward/reverse prefix sum or product along ``axis`` (a triangular-mask reduce)."""
    if x.ndim == 0:
        return x
    ax = axis % x.ndim
    n = x.shape[ax]
    if n == 0:
        return x
    moved = x.transpose(ax, -1) if ax != x.ndim - 1 else x
    i = Tensor.arange(n, device=x.device).reshape(n, 1)  # output position
    j = Tensor.arange(n, device=x.device).reshape(1, n)  # input position
    if reverse:
        keep = (j > i) if exclusive else (j >= i)
    else:
        keep = (j < i) if exclusive else (j <= i)
    acc = acc_dtype(x.dtype)
    grid = moved.cast(acc).unsqueeze(-2)  # (..., 1, n) broadcast against (n, n)
    if product:
        out = keep.where(grid, Tensor.full((), 1, acc, device=x.device)).prod(-1, dtype=acc)
    else:
        out = keep.where(grid, Tensor.full((), 0, acc, device=x.device)).sum(-1, dtype=acc)
    out = out.cast(x.dtype)
    return out.transpose(ax, -1) if ax != x.ndim - 1 else out


@onnx_op("CumSum", "CumProd")
def cum_op(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    axis = int(ctx.static(1, "axis").reshape(-1)[0])
    if x.ndim and not -x.ndim <= axis < x.ndim:
        raise AxisError(f"{ctx.where()}: axis expected in [{-x.ndim}, {x.ndim - 1}], got {axis}")
    return cumulative(x, axis, ctx.node.op_type == "CumProd", bool(ctx.attr("exclusive", 0)),
                      bool(ctx.attr("reverse", 0)))


# --- TopK ----------------------------------------------------------------------------------------------
def topk(x: Tensor, k: int, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    """The k largest (smallest) values along ``axis`` in order, ties to the lower index, with int64 indices.

    Each element's rank is the number of elements that come before it (greater, or equal and at a lower
    index); output slot r holds the element whose rank is r.
    """
    ax = axis % x.ndim
    n = x.shape[ax]
    moved = x.transpose(ax, -1) if ax != x.ndim - 1 else x
    src = moved.cast(dtypes.uint8) if moved.dtype.is_bool else moved
    a = src.unsqueeze(-1)  # (..., n, 1): element i
    b = src.unsqueeze(-2)  # (..., 1, n): element j
    before = (b > a) if largest else (b < a)
    if src.dtype.is_float:  # nan sorts as the largest value (numpy's order)
        a_nan, b_nan = a.isnan(), b.isnan()
        before = (b_nan & a_nan.logical_not()) | before if largest else \
            (a_nan & b_nan.logical_not()) | (before & b_nan.logical_not())
    i = Tensor.arange(n, device=x.device).reshape(n, 1)
    j = Tensor.arange(n, device=x.device).reshape(1, n)
    ties = (b == a) | (a.isnan() & b.isnan()) if src.dtype.is_float else (b == a)
    before = before | (ties & (j < i))
    rank = before.cast(dtypes.int32).sum(-1)  # (..., n)
    r = Tensor.arange(k, device=x.device).reshape(k, 1)
    slot = rank.unsqueeze(-2) == r  # (..., k, n)
    idx = slot.where(Tensor.arange(n, device=x.device), 0).sum(-1, dtype=dtypes.int32)  # (..., k)
    values = gather_axis(moved, -1, idx) if k else moved._slice_axis(moved.ndim - 1, 0, 0)
    idx64 = idx.cast(dtypes.int64)
    if ax != x.ndim - 1:
        values, idx64 = values.transpose(ax, -1), idx64.transpose(ax, -1)
    return values, idx64


@onnx_op("TopK")
def top_k(ctx: OpContext) -> tuple[Tensor, Tensor]:
    x = ctx.t(0)
    k = int(ctx.static(1, "K").reshape(-1)[0]) if ctx.opset >= 10 else int(ctx.attr("k"))
    axis = ctx.attr("axis", -1)
    if not 0 <= k <= x.shape[axis % x.ndim]:
        raise ShapeError(f"{ctx.where()}: K expected in [0, {x.shape[axis % x.ndim]}] (axis {axis} of shape "
                         f"{x.shape}), got {k}")
    return topk(x, k, axis, bool(ctx.attr("largest", 1)))
