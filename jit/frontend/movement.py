"""Tensor's movement ops: reshapes, permutes, pads, shrinks, flips, strides, concatenation and gathers.

Each is a view of its source (one movement UOp, or a few); nothing is copied until a kernel reads it. ``window``
(sliding windows, the WINDOW op) is the movement under convolutions and pooling. jit/frontend/__init__.py
attaches ``TENSOR_METHODS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jit.common.dtype import dtypes, least_upper_dtype
from jit.common.errors import AxisError, DTypeError, ShapeError
from jit.frontend.creation import arange, full, ones
from jit.frontend.shapes import normalize_axis, pad_arg, shape_arg
from jit.frontend.tensor import Scalar, Tensor
from jit.ir.uop import Ops, UOp


def expand(self: Tensor, *shape: Any) -> Tensor:
    want = shape_arg(shape)
    want = tuple(self.shape[i - (len(want) - self.ndim)] if s == -1 else s for i, s in enumerate(want))
    return self._broadcast_to_shape(want)


def reshape(self: Tensor, *shape: Any) -> Tensor:
    new = list(shape_arg(shape))
    if new.count(-1) > 1:
        raise ShapeError(f"reshape: expected at most one -1 in {tuple(new)}")
    if -1 in new:
        known = math.prod(s for s in new if s != -1)
        if known == 0 or self.numel() % known:
            raise ShapeError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {tuple(new)}")
        new[new.index(-1)] = self.numel() // known
    if any(s < 0 for s in new) or math.prod(new) != self.numel():
        raise ShapeError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {tuple(new)} "
                         f"({math.prod(new)} elements)")
    if tuple(new) == self.shape:
        return self
    src = self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop  # reshape(reshape(x)) is one reshape
    if src.shape == tuple(new):
        return self._new(src)
    return self._new(UOp(Ops.RESHAPE, self.dtype, (src,), tuple(new)))


def view(self: Tensor, *shape: Any) -> Tensor:
    return self.reshape(*shape)


def permute(self: Tensor, *order: Any) -> Tensor:
    axes = tuple(normalize_axis(a, self.ndim) for a in shape_arg(order))
    if sorted(axes) != list(range(self.ndim)):
        raise AxisError(f"permute: expected a permutation of range({self.ndim}), got {tuple(shape_arg(order))}")
    if axes == tuple(range(self.ndim)):
        return self
    return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), axes))


def transpose(self: Tensor, ax1: int = 1, ax2: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = normalize_axis(ax1, self.ndim), normalize_axis(ax2, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)


def _reversed_axes(self: Tensor) -> Tensor:
    """``T``: every axis in reverse order."""
    return self.permute(tuple(reversed(range(self.ndim))))


def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0:
        return self.reshape(1)
    s, e = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
    return self.reshape(*self.shape[:s], math.prod(self.shape[s:e + 1]), *self.shape[e + 1:])


def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None:
        return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {normalize_axis(d, self.ndim) for d in ([dim] if isinstance(dim, int) else dim)}
    for d in dims:
        if self.shape[d] != 1:
            raise ShapeError(f"squeeze: axis {d} expected size 1, got {self.shape[d]} (shape {self.shape})")
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims))


def unsqueeze(self: Tensor, dim: int) -> Tensor:
    d = normalize_axis(dim, self.ndim + 1)
    return self.reshape(*self.shape[:d], 1, *self.shape[d:])


def pad(self: Tensor, padding: Sequence[tuple[int, int]] | Sequence[int], mode: str = "constant",
        value: Scalar = 0.0) -> Tensor:
    """Pad each axis by (before, after); negative amounts crop. Modes: constant, reflect, edge."""
    pads = pad_arg(padding, self.ndim)
    if all(b == 0 and a == 0 for b, a in pads):
        return self
    if any(b < 0 or a < 0 for b, a in pads):
        crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, self.shape, strict=True))
        return self.shrink(crop).pad(tuple((max(0, b), max(0, a)) for b, a in pads), mode, value)
    if mode == "constant":
        out = self._new(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
        if value == 0:
            return out
        mask = ones(self.shape, dtype=dtypes.bool, device=self.device)._new(
            UOp(Ops.PAD, dtypes.bool, (full(self.shape, True, dtypes.bool).uop,), pads))
        return mask.where(out, self._new(UOp.const(self.dtype, value)))  # the fill takes the tensor's dtype
    if mode not in ("reflect", "edge"):
        raise ValueError(f"pad: mode expected 'constant', 'reflect' or 'edge', got {mode!r}")
    out = self
    for axis, (b, a) in enumerate(pads):
        out = _pad_axis_mode(out, axis, b, a, mode)
    return out


def _pad_axis_mode(self: Tensor, axis: int, before: int, after: int, mode: str) -> Tensor:
    if before == 0 and after == 0:
        return self
    n = self.shape[axis]
    if mode == "reflect" and (before >= n or after >= n):
        raise ShapeError(f"pad: reflect padding ({before}, {after}) must be < size {n} of axis {axis}")
    if n == 0:
        raise ShapeError(f"pad: {mode} padding of an empty axis {axis}")
    parts = []
    if before:
        piece = _slice_axis(self, axis, 1, before + 1) if mode == "reflect" else _slice_axis(self, axis, 0, 1)
        parts.append(piece.flip(axis) if mode == "reflect" else piece.expand(
            *[before if i == axis else s for i, s in enumerate(self.shape)]))
    parts.append(self)
    if after:
        piece = (_slice_axis(self, axis, n - 1 - after, n - 1) if mode == "reflect"
                 else _slice_axis(self, axis, n - 1, n))
        parts.append(piece.flip(axis) if mode == "reflect" else piece.expand(
            *[after if i == axis else s for i, s in enumerate(self.shape)]))
    return cat(*parts, dim=axis)


def _slice_axis(self: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """``self`` cut to [start, stop) along ``axis`` (attached too: the ONNX handlers use it)."""
    return self.shrink(tuple((start, stop) if i == axis else (0, s) for i, s in enumerate(self.shape)))


def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape, strict=True))
    for axis, ((b, e), s) in enumerate(zip(bounds, self.shape, strict=True)):
        if not 0 <= b <= e <= s:
            raise ShapeError(f"shrink: axis {axis} bounds expected 0 <= start <= stop <= {s}, got ({b}, {e})")
    if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
        return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))


def flip(self: Tensor, *axes: Any) -> Tensor:
    ax = tuple(sorted({normalize_axis(a, self.ndim) for a in shape_arg(axes)}))
    ax = tuple(a for a in ax if self.shape[a] > 1)
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), ax)) if ax else self


def stride(self: Tensor, steps: Sequence[int]) -> Tensor:
    steps = tuple(int(s) for s in steps)
    if any(s <= 0 for s in steps):
        raise ShapeError(f"stride: steps expected positive, got {steps}")
    if all(s == 1 for s in steps):
        return self
    return self._new(UOp(Ops.STRIDE, self.dtype, (self.uop,), steps))


def cat(*tensors: Tensor, dim: int = 0) -> Tensor:
    if not tensors:
        raise ShapeError("cat: expected at least one tensor, got none")
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError("cat: expected tensors of rank >= 1, got a scalar")
    axis = normalize_axis(dim, first.ndim)
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True))
                                       if i != axis):
            raise ShapeError(f"cat: shapes {first.shape} and {t.shape} differ outside axis {axis}")
    d = least_upper_dtype(*(t.dtype for t in tensors))
    total = sum(t.shape[axis] for t in tensors)
    if total == 0:
        return first.cast(d)
    out: Tensor | None = None
    offset = 0
    for t in (t for t in tensors if t.shape[axis]):  # an empty piece adds nothing (and no kernel input)
        n = t.shape[axis]
        pads = tuple((offset, total - offset - n) if i == axis else (0, 0) for i in range(t.ndim))
        padded = t.cast(d).pad(pads)
        if out is None:
            out = padded
        else:  # select, not add: -0.0 + 0.0 would lose the sign of a negative zero
            mask = full(t.shape, True, dtypes.bool, device=t.device).pad(pads)
            out = mask.where(padded, out)
        offset += n
    assert out is not None
    return out


def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> list[Tensor]:
    axis = normalize_axis(dim, self.ndim)
    n = self.shape[axis]
    if isinstance(sizes, int):
        if sizes <= 0:
            raise ShapeError(f"split: size expected positive, got {sizes}")
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if sum(sizes) != n:
        raise ShapeError(f"split: sizes {list(sizes)} expected to sum to {n} (axis {axis}), got {sum(sizes)}")
    out, start = [], 0
    for s in sizes:
        out.append(_slice_axis(self, axis, start, start + s))
        start += s
    return out


def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    if chunks <= 0:
        raise ShapeError(f"chunk: chunks expected positive, got {chunks}")
    n = self.shape[normalize_axis(dim, self.ndim)]
    return self.split(math.ceil(n / chunks) if n else 1, dim)


def repeat(self: Tensor, *repeats: Any) -> Tensor:
    reps = shape_arg(repeats)
    if len(reps) < self.ndim:
        raise ShapeError(f"repeat: expected at least {self.ndim} repeats for shape {self.shape}, got {reps}")
    base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    expanded = base.reshape(*[v for s in base.shape for v in (1, s)]).expand(
        *[v for r, s in zip(reps, base.shape, strict=True) for v in (r, s)])
    return expanded.reshape(*[r * s for r, s in zip(reps, base.shape, strict=True)])


def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j] = self[index[i][j]][j]`` along ``dim`` (torch.gather / np.take_along_axis)."""
    axis = normalize_axis(dim, self.ndim)
    if index.ndim != self.ndim:
        raise ShapeError(f"gather: index rank expected {self.ndim}, got {index.ndim}")
    if not index.dtype.is_int:
        raise DTypeError(f"gather: index dtype expected an integer type, got {index.dtype.name}")
    src = self
    for i, (s, k) in enumerate(zip(self.shape, index.shape, strict=True)):
        if i != axis and s != k:
            if s == 1:
                src = src.expand(*[k if j == i else d for j, d in enumerate(src.shape)])
            elif k <= s:
                src = _slice_axis(src, i, 0, k)
            else:
                raise ShapeError(f"gather: index shape {index.shape} exceeds data shape {self.shape} on axis {i}")
    return self._new(UOp(Ops.GATHER, self.dtype, (src.uop, index.uop), axis))


def take(self: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """numpy.take: ``out.shape = self.shape[:axis] + indices.shape + self.shape[axis+1:]``."""
    ax = normalize_axis(axis, self.ndim)
    pre, post = self.shape[:ax], self.shape[ax + 1:]
    idx = indices.reshape((1,) * len(pre) + indices.shape + (1,) * len(post))
    idx = idx.expand(*pre, *indices.shape, *post)
    src = self.reshape(*pre, *((1,) * (indices.ndim - 1)), self.shape[ax], *post) if indices.ndim else self
    if indices.ndim == 0:
        return self.gather(ax, idx.reshape(*pre, 1, *post)).reshape(*pre, *post)
    src = src.expand(*pre, *indices.shape[:-1], self.shape[ax], *post)
    return src.gather(ax + indices.ndim - 1, idx)


def one_hot(self: Tensor, num_classes: int) -> Tensor:
    return (self.unsqueeze(-1) == arange(num_classes, device=self.device)).cast(dtypes.int32)


def window(t: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """(*lead, *spatial) -> (*lead, *out, *kernel) sliding windows over the trailing len(kernel) dims."""
    for n, k, d in zip(t.shape[-len(kernel):], kernel, dilation, strict=True):
        if d * (k - 1) + 1 > n:
            raise ShapeError(f"window: kernel {kernel} (dilation {dilation}) is larger than the padded input "
                             f"{t.shape[-len(kernel):]}")
    return t._new(UOp(Ops.WINDOW, t.dtype, (t.uop,), (kernel, stride, dilation)))


TENSOR_METHODS: dict[str, Any] = {
    "reshape": reshape, "view": view, "expand": expand, "permute": permute, "transpose": transpose,
    "T": property(_reversed_axes), "flatten": flatten, "squeeze": squeeze, "unsqueeze": unsqueeze, "pad": pad,
    "shrink": shrink, "_slice_axis": _slice_axis, "flip": flip, "stride": stride, "cat": staticmethod(cat),
    "split": split, "chunk": chunk, "repeat": repeat, "gather": gather, "take": take, "one_hot": one_hot,
}
