"""Lowering: one scheduled kernel's tensor-level graph becomes a kernel graph of loads, ALU ops and a store.

Each tensor node is evaluated at an index (one int expression per dimension). Movement ops only rewrite
that index (reshape: flatten and unflatten; permute: reorder; expand: size-1 dims read index 0; pad:
shift, clamp and mask; shrink/flip/stride/window: affine maps). A reduce opens new RANGEs for its axes.
Loads of realized buffers read ``buffer[linear index]``. Nothing here depends on the target.

Dtypes are copied as they are: weak dtypes (Python scalars) stay weak here and are committed by the
codegen passes (jit/codegen/passes/commit_weak.py and what follows it in jit/codegen/pipeline.py). Index arithmetic
is int32, so every buffer's element count must fit int32; a gather index wider than int32 is clamped in its
own dtype first and only then narrowed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from jit.common.dtype import DType, PtrDType, dtypes
from jit.common.errors import CompileError
from jit.ir.uop import GroupOp, Ops, UOp

INDEX_DTYPE = dtypes.int32
MAX_INDEXED = 2**31 - 1  # elements an int32 index reaches
_WIDE_INDEX = (dtypes.int64, dtypes.uint64, dtypes.uint32)


@functools.lru_cache(maxsize=1 << 14)
def idx_const(v: int) -> UOp:
    """The int32 index constant ``v`` (cached: lowering builds the same few strides and sizes thousands of times;
    a node is hash-consed anyway, so the cache only skips rebuilding its key)."""
    return UOp.const(INDEX_DTYPE, v)


def _like(i: UOp, v: int) -> UOp:
    """``v`` as ``i``'s constant, as ``i.alu(op, v)`` would build it (index arithmetic is int32: from the cache)."""
    return idx_const(v) if i.dtype is INDEX_DTYPE else i.const_like(v)


def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def flatten_index(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
    flat = idx_const(0)
    for i, st, n in zip(idx, strides_of(shape), shape, strict=True):
        if n != 1:
            flat = flat + i * _like(i, st)
    return flat


def unflatten_index(flat: UOp, shape: tuple[int, ...]) -> tuple[UOp, ...]:
    out = []
    for st, n in zip(strides_of(shape), shape, strict=True):
        out.append(idx_const(0) if n == 1 else (flat // _like(flat, st)) % _like(flat, n))
    return tuple(out)


@functools.lru_cache(maxsize=1 << 12)
def reshape_index(idx: tuple[UOp, ...], out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> tuple[UOp, ...]:
    """Map an index of the reshaped tensor to an index of its source, dim groups at a time. A pure function of
    immutable arguments, cached: operands reshaped alike are read at the same index (two thirds of the calls
    lowering a resnet repeat an earlier one), and the result is the same hash-consed graph either way."""
    if 0 in in_shape or 0 in out_shape:
        return tuple(idx_const(0) for _ in in_shape)  # nothing is ever read through an empty view
    # split both shapes into groups with equal products so each group maps independently
    result: list[UOp] = []
    i = j = 0
    while i < len(out_shape) or j < len(in_shape):
        gi, gj = [i], [j] if j < len(in_shape) else []
        if i >= len(out_shape):
            result.append(idx_const(0))  # trailing size-1 source dims
            j += 1
            continue
        if j >= len(in_shape):
            i += 1  # trailing size-1 output dims carry no information
            continue
        po, pi = out_shape[i], in_shape[j]
        while po != pi:
            if po < pi:
                i += 1
                gi.append(i)
                po *= out_shape[i]
            else:
                j += 1
                gj.append(j)
                pi *= in_shape[j]
        flat = flatten_index(tuple(idx[k] for k in gi), tuple(out_shape[k] for k in gi))
        result.extend(unflatten_index(flat, tuple(in_shape[k] for k in gj)))
        i, j = gi[-1] + 1, gj[-1] + 1
    return tuple(result)


@dataclass(frozen=True)
class KernelInfo:
    """The SINK's arg: every parameter's pointer type, in launch order (kept even when simplification
    removes all reads of one, so the signature always matches the buffers the scheduler passes)."""

    params: tuple[PtrDType, ...]


@dataclass
class LoweringContext:
    """Per-kernel state: parameter numbering and range ids."""

    params: dict[UOp, int] = field(default_factory=dict)  # BUFFER -> parameter index (0 is the output)
    next_range: int = 0
    memo: dict[tuple[UOp, tuple[UOp, ...]], UOp] = field(default_factory=dict)
    reduce_dims: list[int] = field(default_factory=list)

    def new_range(self, n: int, kind: str) -> UOp:
        r = UOp(Ops.RANGE, INDEX_DTYPE, (idx_const(n),), (self.next_range, kind))
        self.next_range += 1
        return r

    def param(self, buf: UOp) -> UOp:
        if buf not in self.params:
            self.params[buf] = len(self.params)
        base = buf.dtype
        assert isinstance(base, DType) and not base.weak, "buffers are created with a committed dtype"
        if buf.arg[2] > MAX_INDEXED:
            raise CompileError(f"lowering: buffer {buf.arg[0]} has {buf.arg[2]} elements; int32 indexing reaches "
                               f"{MAX_INDEXED}")
        return UOp(Ops.DEFINE_GLOBAL, PtrDType(base, buf.arg[2]), (), self.params[buf])


def lower_node(ctx: LoweringContext, node: UOp, idx: tuple[UOp, ...]) -> UOp:
    key = (node, idx)
    if key in ctx.memo:
        return ctx.memo[key]
    out = _lower(ctx, node, idx)
    ctx.memo[key] = out
    return out


def _lower(ctx: LoweringContext, node: UOp, idx: tuple[UOp, ...]) -> UOp:
    op = node.op
    dtype = node.dtype  # weak dtypes stay weak: the commit passes fix their width
    assert isinstance(dtype, DType), f"tensor-level {op.name} has a scalar dtype"
    if op is Ops.BUFFER:
        g = ctx.param(node)
        return UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, g.dtype, (g, idx[0])),))
    if op is Ops.CONST:
        return UOp.const(dtype, node.arg)
    if op is Ops.IOTA:
        return idx[0].cast(dtype)
    src = node.src[0] if node.src else None
    if op is Ops.RESHAPE:
        assert src is not None and src.shape is not None
        return lower_node(ctx, src, reshape_index(idx, tuple(node.arg), src.shape))
    if op is Ops.PERMUTE:
        assert src is not None
        src_idx: list[UOp | None] = [None] * len(idx)
        for out_axis, src_axis in enumerate(node.arg):
            src_idx[src_axis] = idx[out_axis]
        return lower_node(ctx, src, tuple(i for i in src_idx if i is not None))
    if op is Ops.EXPAND:
        assert src is not None and src.shape is not None
        return lower_node(ctx, src, tuple(idx_const(0) if s == 1 else i for i, s in zip(idx, src.shape, strict=True)))
    if op is Ops.SHRINK:
        assert src is not None
        return lower_node(ctx, src, tuple(i + b if b else i for i, (b, _) in zip(idx, node.arg, strict=True)))
    if op is Ops.FLIP:
        assert src is not None and src.shape is not None
        return lower_node(ctx, src, tuple(idx_const(src.shape[a] - 1) - i if a in node.arg else i
                                          for a, i in enumerate(idx)))
    if op is Ops.STRIDE:
        assert src is not None
        return lower_node(ctx, src, tuple(i * st if st != 1 else i for i, st in zip(idx, node.arg, strict=True)))
    if op is Ops.WINDOW:
        assert src is not None and src.shape is not None
        kernel, stride, dilation = node.arg
        n = len(kernel)
        lead = len(src.shape) - n
        outs, ks = idx[lead:lead + n], idx[lead + n:]
        return lower_node(ctx, src, (*idx[:lead], *(o * s + k * d for o, k, s, d in zip(outs, ks, stride, dilation,
                                                                                            strict=True))))
    if op is Ops.PAD:
        assert src is not None and src.shape is not None
        valid: UOp | None = None
        new_idx = []
        for i, n, (b, _a) in zip(idx, src.shape, node.arg, strict=True):
            if b == 0 and _a == 0:
                new_idx.append(i)
                continue
            shifted = i - b if b else i
            ok = (shifted >= 0) & (shifted < n)
            valid = ok if valid is None else valid & ok
            # clamped so the masked-off lanes still read in bounds
            new_idx.append(shifted.maximum(0).minimum(max(n - 1, 0)))
        inner = lower_node(ctx, src, tuple(new_idx))
        return inner if valid is None else valid.where(inner, inner.const_like(0))
    if op is Ops.REDUCE_AXIS:
        assert src is not None and src.shape is not None
        reduce_op, axes = node.arg
        new_idx = list(idx)
        ranges = []
        for a in axes:
            n = src.shape[a]
            if n == 1:
                new_idx[a] = idx_const(0)
            else:
                r = ctx.new_range(n, "reduce")
                ctx.reduce_dims.append(n)
                ranges.append(r)
                new_idx[a] = r
        value = lower_node(ctx, src, tuple(new_idx))
        if not ranges:
            return value
        return UOp(Ops.REDUCE, value.dtype, (value, *ranges), reduce_op)
    if op is Ops.GATHER:
        x, index = node.src
        assert x.shape is not None
        axis = node.arg
        n = x.shape[axis]
        v = lower_node(ctx, index, idx)
        # wrap and clamp in the index's own dtype when it is wider than int32 can hold (int64, uint64, uint32):
        # narrowing first would wrap 2**32 + 1 to 1 instead of clamping it to n - 1
        if v.dtype not in _WIDE_INDEX:
            v = v.cast(INDEX_DTYPE)
        if not v.dtype.is_unsigned:  # type: ignore[union-attr]
            v = (v < 0).where(v + n, v)
        v = v.maximum(0).minimum(max(n - 1, 0))  # out-of-range indices read the edge instead of stray memory
        v = v.cast(INDEX_DTYPE)  # in 0..n-1, and n fits int32 because the buffer does
        return lower_node(ctx, x, (*idx[:axis], v, *idx[axis + 1:]))
    if op is Ops.CONTIGUOUS:
        assert src is not None
        return lower_node(ctx, src, idx)
    if op in GroupOp.Elementwise:
        return UOp(op, dtype, tuple(lower_node(ctx, s, idx) for s in node.src), None)
    raise CompileError(f"lowering: no rule for tensor op {op.name}")


def _store_index(ctx: LoweringContext, view: UOp, idx: tuple[UOp, ...]) -> UOp:
    """The INDEX a store at ``idx`` of ``view`` writes: ``view`` is movement ops (no PAD: every element is one
    element of the buffer) over the kernel's output BUFFER, lowered as a load would read it."""
    load = lower_node(ctx, view, idx)
    if load.op is not Ops.LOAD:
        raise CompileError(f"lowering: a store view expected movement ops over a buffer, got {load.op.name}")
    return load.src[0]


def _sink(ctx: LoweringContext, stores: tuple[UOp, ...]) -> UOp:
    params = tuple(ctx.param(b).dtype for b in sorted(ctx.params, key=lambda b: ctx.params[b]))
    return UOp(Ops.SINK, dtypes.void, stores, KernelInfo(params))  # type: ignore[arg-type]


def lower_kernel(out: UOp, out_buffer: UOp, store_view: UOp | None = None) -> tuple[UOp, LoweringContext]:
    """The kernel graph (SINK of one STORE) computing ``out`` into ``out_buffer``, and the lowering context.
    ``store_view``: ``out``'s place in ``out_buffer`` (movement ops over it, ``out``'s shape) where the buffer
    is not simply ``out`` laid out contiguously (the interior of a padded copy, ``lower_border``)."""
    assert out.shape is not None
    ctx = LoweringContext()
    ctx.param(out_buffer)
    idx = tuple(idx_const(0) if n == 1 else ctx.new_range(n, "global") for n in out.shape)
    value = lower_node(ctx, out, idx)
    g = ctx.param(out_buffer)
    where = _store_index(ctx, store_view, idx) if store_view is not None else \
        UOp(Ops.INDEX, g.dtype, (g, flatten_index(idx, out.shape)))
    return _sink(ctx, (UOp(Ops.STORE, dtypes.void, (where, value)),)), ctx


def lower_zero_fill(out_buffer: UOp, dtype: DType, size: int) -> tuple[UOp, LoweringContext]:
    """The kernel graph storing zero at each of ``size`` elements of ``dtype`` in ``out_buffer`` (a padded copy's
    whole buffer, before its producer writes the interior: ``jit.schedule.kernels``)."""
    ctx = LoweringContext()
    g = ctx.param(out_buffer)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, g.dtype, (g, ctx.new_range(size, "global"))),
                                         UOp.const(dtype, 0)))
    return _sink(ctx, (store,)), ctx


def lower_border(padded: UOp, pads: tuple[tuple[int, int], ...], out_buffer: UOp,
                 inner: tuple[int, ...] = ()) -> tuple[UOp, LoweringContext]:
    """The kernel graph storing zero at every border element of a zero-padded tensor, and at no interior one:
    ``padded`` is the padded shape as movement ops over ``out_buffer`` (``lower_kernel``'s ``store_view`` of the
    interior is its shrink), ``pads`` the PAD's (before, after) per dim, padding only the last two dims.

    Per index of the leading dims, the ``bh + ah`` pad rows are written whole and the ``bw + aw`` side elements of
    the H interior rows run on as "virtual" rows of the same width, so the kernel is one rectangle of
    ``(bh + ah + ceil(H (bw + aw) / W')) x W'`` elements (``W'`` the padded width): a last virtual row's
    elements past the end write the last side element again (zero twice), so every index stays in bounds with no
    gate. ``inner``: leading dims run inside the border ranges (a channels-last copy's channels: its border
    elements' channels lie side by side)."""
    shape = padded.shape
    assert shape is not None and all(p == (0, 0) for p in pads[:-2]) and len(shape) >= 2
    (bh, ah), (bw, aw) = pads[-2:]
    h, w = shape[-2] - bh - ah, shape[-1] - bw - aw
    sides = bw + aw
    virtual = -(-h * sides // shape[-1]) if sides else 0
    ctx = LoweringContext()
    ctx.param(out_buffer)
    def loop(n: int) -> UOp:
        return idx_const(0) if n == 1 else ctx.new_range(n, "global")

    ranges = {d: loop(shape[d]) for d in range(len(shape) - 2) if d not in inner}
    row, col = loop(bh + ah + virtual), loop(shape[-1])
    ranges.update((d, loop(shape[d])) for d in inner)
    pad_row = (row < bh).where(row, row + h)
    y, x = pad_row, col
    if sides:
        side = ((row - (bh + ah)) * shape[-1] + col).maximum(0).minimum(h * sides - 1)
        s = side % sides
        y = (row < bh + ah).where(pad_row, side // sides + bh)
        x = (row < bh + ah).where(col, (s < bw).where(s, s + w))
    idx = (*(ranges[d] for d in range(len(shape) - 2)), y, x)
    store = UOp(Ops.STORE, dtypes.void, (_store_index(ctx, padded, idx), UOp.const(padded.dtype, 0)))
    return _sink(ctx, (store,)), ctx


def kernel_name(out_shape: tuple[int, ...], reduce_dims: list[int]) -> str:
    """``E_4`` for elementwise, ``r_16_32`` for kernels with reduces (output dims, then reduce dims)."""
    dims = [n for n in out_shape if n != 1] or [1]
    prefix = "r" if reduce_dims else "E"
    return "_".join([prefix, *map(str, dims), *map(str, reduce_dims)])


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
