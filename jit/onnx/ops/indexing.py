"""ONNX indexing ops: OneHot, Scatter*, GatherND, NonZero, Compress, Unique, TensorScatter, ReverseSequence.

Scatters compare every output position with every update's target index (a one-hot match) and combine the
matched updates with a where + reduce, so they are built from Tensor ops only; that costs
``outputs x updates`` work, which is fine at model-sized index tensors. Ops whose output shape depends on
the data (NonZero, Compress, Unique) are host ops (jit/onnx/host_ops.py): that data must be known at load
time; the indices are then shape arithmetic on a constant and the values themselves are still gathered on the
device.
"""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import dtypes
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.host_ops import host_op
from jit.onnx.registry import OpContext, onnx_op

_INDEX = dtypes.int32  # index arithmetic dtype (tensor sizes fit)


def _scalar(x: Tensor, i: int) -> Tensor:
    """Element ``i`` of a 1-D tensor as a 0-d tensor."""
    return x.reshape(-1)._slice_axis(0, i, i + 1).reshape(())


def gather_axis(x: Tensor, axis: int, idx: Tensor) -> Tensor:
    """``x.gather(axis, idx)`` for in-range, non-negative ``idx``; from a size-1 axis it is an expand.

    (That also sidesteps a core bug: a gather from a size-1 axis simplifies its index loads away, the kernel
    signature then drops the index buffer but the launch still passes it.)
    """
    ax = axis % x.ndim
    if x.shape[ax] != 1:
        return x.gather(ax, idx)
    bounds = [(0, 1) if i == ax else (0, min(k, s)) for i, (s, k) in enumerate(zip(x.shape, idx.shape, strict=True))]
    return x.shrink(bounds).expand(*idx.shape)


def _normalize_index(idx: Tensor, size: int | Tensor) -> Tensor:
    """Negative indices count from the end."""
    idx = idx.cast(_INDEX)
    return (idx < 0).where(idx + size, idx)


# --- OneHot --------------------------------------------------------------------------------------------
@onnx_op("OneHot")
def one_hot(ctx: OpContext) -> Tensor:
    indices, values = ctx.t(0), ctx.t(2)
    depth = int(np.asarray(ctx.static(1, "depth")).reshape(-1)[0])
    axis = ctx.attr("axis", -1)
    out_ndim = indices.ndim + 1
    ax = axis % out_ndim
    idx = indices.trunc().cast(dtypes.int64) if indices.dtype.is_float else indices.cast(dtypes.int64)
    idx = (idx < 0).where(idx + depth, idx).unsqueeze(ax)
    classes = Tensor.arange(depth, dtype=dtypes.int64, device=indices.device).reshape(
        *[depth if i == ax else 1 for i in range(out_ndim)])
    off, on = _scalar(values, 0), _scalar(values, 1)
    return (idx == classes).where(on, off)


# --- scatters ------------------------------------------------------------------------------------------
def _combine(data: Tensor, match: Tensor, updates: Tensor, reduction: str) -> Tensor:
    """Combine ``updates`` into ``data`` where ``match``; the last axis of ``match``/``updates`` enumerates the
    updates (``data`` has a size-1 axis there, squeezed away in the result)."""
    d = data.dtype
    upd = updates.cast(d)
    hit = match.any(-1, keepdim=True)
    if reduction == "none":  # the last matching update wins (the reference applies them in order)
        m = match.shape[-1]
        j = Tensor.arange(m, dtype=_INDEX, device=data.device)
        last = match.where(j, -1).max(-1, keepdim=True).maximum(0)
        full = upd.expand(*match.shape)
        out = hit.where(gather_axis(full, -1, last), data)
    elif reduction == "add":
        out = data + match.where(upd, 0).cast(d).sum(-1, keepdim=True, dtype=d)
    elif reduction == "mul":
        out = data * match.where(upd, 1).cast(d).prod(-1, keepdim=True, dtype=d)
    elif reduction in ("max", "min"):
        src = match.where(upd, d.min if reduction == "max" else d.max)
        red = src.max(-1, keepdim=True) if reduction == "max" else src.min(-1, keepdim=True)
        out = hit.where(data.maximum(red) if reduction == "max" else data.minimum(red), data)
    else:
        raise ValueError(f"reduction expected none, add, mul, max or min, got {reduction!r}")
    return out.cast(d).squeeze(-1)


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, axis: int, reduction: str = "none") -> Tensor:
    """``out[..., indices[i], ...] (op)= updates[i]`` along ``axis`` (ONNX ScatterElements)."""
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ShapeError(f"ScatterElements: indices {indices.shape} and updates {updates.shape} expected the "
                         f"same shape of rank {data.ndim}")
    ax = axis % data.ndim
    n_upd = indices.shape[ax]
    idx = _normalize_index(indices, data.shape[ax])
    # positions past the updates' extent on the other axes receive nothing: pad them with an index never hit
    pads = tuple((0, 0) if i == ax else (0, s - k) for i, (s, k) in enumerate(zip(data.shape, indices.shape,
                                                                                   strict=True)))
    idx = (idx + 1).pad(pads) - 1  # padded area reads -1
    upd = updates.pad(pads)
    # data's axes with a size-1 axis at ``ax``, the updates along ``ax`` moved to a new last axis
    idx_m, upd_m = idx.unsqueeze(-1).transpose(ax, -1), upd.unsqueeze(-1).transpose(ax, -1)
    pos = Tensor.arange(data.shape[ax], dtype=_INDEX, device=data.device).reshape(
        *[data.shape[ax] if i == ax else 1 for i in range(data.ndim)], 1)
    match = idx_m == pos
    assert match.shape == (*data.shape, n_upd)
    return _combine(data.unsqueeze(-1), match, upd_m, reduction)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements_op(ctx: OpContext) -> Tensor:
    reduction = ctx.attr("reduction", "none") if ctx.node.op_type == "ScatterElements" else "none"
    return scatter_elements(ctx.t(0), ctx.t(1), ctx.t(2), ctx.attr("axis", 0), reduction)


def _linear_index(indices: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Row-major linear index over ``dims`` of the index tuples along ``indices``' last axis."""
    k = len(dims)
    lin: Tensor | None = None
    for d in range(k):
        part = _normalize_index(indices._slice_axis(indices.ndim - 1, d, d + 1).squeeze(-1), dims[d])
        lin = part if lin is None else lin * dims[d] + part
    assert lin is not None
    return lin


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
    """ONNX ScatterND: each index tuple (the last axis of ``indices``) addresses a slice of ``data``."""
    k = indices.shape[-1]
    lead, rest = data.shape[:k], data.shape[k:]
    n = math.prod(indices.shape[:-1])
    p = math.prod(lead)
    if updates.shape != indices.shape[:-1] + rest:
        raise ShapeError(f"ScatterND: updates shape expected {indices.shape[:-1] + rest}, got {updates.shape}")
    lin = _linear_index(indices.reshape(n, k), lead) if k else Tensor.zeros(n, dtype=_INDEX)
    flat = data.reshape(p, *rest)
    nr = len(rest)
    match = lin.reshape(1, *(1,) * nr, n) == Tensor.arange(p, dtype=_INDEX, device=data.device).reshape(
        p, *(1,) * nr, 1)
    match = match.expand(p, *rest, n)
    upd = updates.reshape(n, *rest).permute(*range(1, nr + 1), 0).unsqueeze(0)  # (1, *rest, n)
    out = _combine(flat.unsqueeze(-1), match, upd, reduction)
    return out.reshape(data.shape)


@onnx_op("ScatterND")
def scatter_nd_op(ctx: OpContext) -> Tensor:
    return scatter_nd(ctx.t(0), ctx.t(1), ctx.t(2), ctx.attr("reduction", "none"))


# --- GatherND ------------------------------------------------------------------------------------------
def gather_nd(data: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    """ONNX GatherND: ``out[b, i] = data[b, indices[b, i]]`` with index tuples along indices' last axis."""
    b = batch_dims
    k = indices.shape[-1]
    batch, lead, rest = data.shape[:b], data.shape[b:b + k], data.shape[b + k:]
    nb, p = math.prod(batch), math.prod(lead)
    idx_mid = indices.shape[b:-1]
    n = math.prod(idx_mid)
    out_shape = indices.shape[:-1] + rest
    if n == 0 or math.prod(out_shape) == 0:
        return Tensor.zeros(*out_shape, dtype=data.dtype, device=data.device)
    lin = _linear_index(indices.reshape(nb, n, k), lead) if k else Tensor.zeros(nb, n, dtype=_INDEX)
    flat = data.reshape(nb, p, *rest)
    nr = len(rest)
    idx = lin.reshape(nb, n, *(1,) * nr).expand(nb, n, *rest)
    return gather_axis(flat, 1, idx).reshape(out_shape)


@onnx_op("GatherND")
def gather_nd_op(ctx: OpContext) -> Tensor:
    return gather_nd(ctx.t(0), ctx.t(1), ctx.attr("batch_dims", 0))


# --- data-dependent shapes: host ops, the data must be known at load ------------------------------------
@host_op("NonZero", reason="the output's length is the number of non-zero elements", inputs=(0,))
def nonzero(ctx: OpContext) -> np.ndarray:
    if not ctx.has(0) or ctx.inputs[0].host is None:  # type: ignore[union-attr]
        raise ctx.unsupported(input="a computed tensor (the output shape depends on its values)")
    x = ctx.static(0)
    if x.ndim == 0:  # (rank 0, count) like the reference
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.asarray(np.nonzero(x), dtype=np.int64)


def _take_static(x: Tensor, idx: np.ndarray, axis: int) -> Tensor:
    """``x`` at the load-time ``idx`` along ``axis`` (gathered on the device)."""
    if idx.size == 0:
        return Tensor.zeros(*[0 if i == axis else s for i, s in enumerate(x.shape)], dtype=x.dtype,
                            device=x.device)
    if x.shape[axis] == 1:  # every index is 0
        return x.expand(*[idx.size if i == axis else s for i, s in enumerate(x.shape)])
    return x.take(Tensor(idx.astype(np.int32), device=x.device), axis)


@host_op("Compress", reason="the output's length is the number of true conditions", inputs=(1,))
def compress(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    if ctx.inputs[1] is None or ctx.inputs[1].host is None:
        raise ctx.unsupported(condition="a computed tensor (the output shape depends on its values)")
    cond = ctx.static(1, "condition").astype(bool).reshape(-1)
    axis = ctx.attr("axis", None)
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = axis % x.ndim
    idx = np.nonzero(cond[:x.shape[ax]])[0]
    return _take_static(x, idx, ax)


@host_op("Unique", reason="the output's length is the number of distinct values", inputs=(0,))
def unique(ctx: OpContext) -> tuple[Tensor | np.ndarray, ...]:
    if ctx.inputs[0] is None or ctx.inputs[0].host is None:
        raise ctx.unsupported(input="a computed tensor (the output shape depends on its values)")
    host = ctx.static(0)
    axis = ctx.attr("axis", None)
    flat = axis is None
    data = host.reshape(-1) if flat else host
    ax = 0 if flat else axis % host.ndim
    cmp = data.astype(np.float64) if data.dtype.kind == "f" else data  # bfloat16 and friends sort as float64
    _, first, inverse, counts = np.unique(cmp, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if flat else ax)
    inverse = inverse.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    x = ctx.t(0).reshape(-1) if flat else ctx.t(0)
    y = _take_static(x, first, ax)
    outs: tuple[Tensor | np.ndarray, ...] = (y, first.astype(np.int64), inverse.astype(np.int64),
                                             counts.astype(np.int64))
    return outs[:max(1, len(ctx.node.output))]


# --- TensorScatter (KV-cache update) --------------------------------------------------------------------
@onnx_op("TensorScatter")
def tensor_scatter(ctx: OpContext) -> Tensor:
    past, upd = ctx.t(0), ctx.t(1)
    ax = ctx.attr("axis", -2) % past.ndim
    m, s, nb = past.shape[ax], upd.shape[ax], past.shape[0]
    w = ctx.opt(2)
    start = w.cast(_INDEX) if w is not None else Tensor.zeros(nb, dtype=_INDEX, device=past.device)
    t = Tensor.arange(m, dtype=_INDEX, device=past.device).reshape(*[m if i == ax else 1 for i in range(past.ndim)])
    i = t - start.reshape(nb, *(1,) * (past.ndim - 1))  # the update row that lands on cache row t
    if ctx.attr("mode", "linear") == "circular":
        i = i % m
    valid = (i >= 0) & (i < s)
    src = valid.where(i, 0).expand(*past.shape)
    return valid.where(gather_axis(upd, ax, src), past)


# --- ReverseSequence -----------------------------------------------------------------------------------
@onnx_op("ReverseSequence")
def reverse_sequence(ctx: OpContext) -> Tensor:
    x, lens = ctx.t(0), ctx.t(1).cast(_INDEX)
    bax, tax = ctx.attr("batch_axis", 1) % x.ndim, ctx.attr("time_axis", 0) % x.ndim
    nt, nb = x.shape[tax], x.shape[bax]
    t = Tensor.arange(nt, dtype=_INDEX, device=x.device).reshape(*[nt if i == tax else 1 for i in range(x.ndim)])
    seq = lens.reshape(*[nb if i == bax else 1 for i in range(x.ndim)])
    src = (t < seq).where(seq - 1 - t, t).expand(*x.shape)
    return gather_axis(x, tax, src)
