"""Tensor's reductions: sum, prod, max, min and what is built on them (mean, var, argmax, cumsum, ...).

Each is one REDUCE_AXIS node over the normalized axes (keepdim=False reshapes them away). Narrow floats
accumulate in float32 and narrow ints in 32 bits, as numpy and torch do. A function named like the builtin it
would shadow ends in ``_`` (``sum_`` is ``Tensor.sum``). jit/frontend/__init__.py attaches ``TENSOR_METHODS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jit.common.dtype import DType, dtypes, to_dtype
from jit.common.errors import ShapeError
from jit.frontend.creation import arange
from jit.frontend.movement import window
from jit.frontend.shapes import axes_arg, normalize_axis
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops, UOp

Axis = int | Sequence[int] | None


def _reduce(self: Tensor, op: Ops, axis: Axis, keepdim: bool) -> Tensor:
    axes = axes_arg(axis, self.ndim)
    if self.ndim == 0:
        return self
    out = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))


def sum_(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    out = to_dtype(dtype) if dtype is not None else _sum_dtype(self.dtype)
    acc = _acc_float(out)  # half-width floats accumulate in float32 and round once (as numpy's mean, torch)
    return _reduce(self.cast(acc), Ops.ADD, axis, keepdim).cast(out)


def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    out = to_dtype(dtype) if dtype is not None else _sum_dtype(self.dtype)
    return _reduce(self.cast(_acc_float(out)), Ops.MUL, axis, keepdim).cast(out)


def max_(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    _check_nonempty(self, axis, "max")
    return _reduce(self, Ops.MAX, axis, keepdim)


def min_(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    _check_nonempty(self, axis, "min")
    return _reduce(self, Ops.MIN, axis, keepdim)


def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    axes = axes_arg(axis, self.ndim)
    n = math.prod(self.shape[a] for a in axes)
    x = self._float_operand()
    total = x.sum(axis, keepdim, dtype=_acc_float(x.dtype))  # a float16 total may exceed float16's range
    return (total / n if n else total * math.nan).cast(x.dtype)


def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    axes = axes_arg(axis, self.ndim)
    n = math.prod(self.shape[a] for a in axes)
    x = self._float_operand()
    xa = x.cast(_acc_float(x.dtype))
    centered = xa - xa.mean(axis, keepdim=True)
    return ((centered * centered).sum(axis, keepdim) / max(n - correction, 0)).cast(x.dtype)


def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()


def any_(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    return _reduce(self.cast(dtypes.bool), Ops.MAX, axis, keepdim)


def all_(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    return self.logical_not().any(axis, keepdim).logical_not()


def _arg_extreme(self: Tensor, axis: int | None, keepdim: bool, largest: bool) -> Tensor:
    if axis is None:
        return _arg_extreme(self.flatten(), 0, keepdim=False, largest=largest).reshape(
            (1,) * self.ndim if keepdim else ())
    ax = normalize_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0:
        raise ShapeError(f"arg{'max' if largest else 'min'}: axis {ax} is empty (shape {self.shape})")
    best = self.max(ax, keepdim=True) if largest else self.min(ax, keepdim=True)
    hit = (self == best)
    if self.dtype.is_float:
        hit = hit | self.isnan()  # numpy returns the first nan
    idx = arange(n, device=self.device).reshape(*[n if i == ax else 1 for i in range(self.ndim)])
    return hit.where(idx, n).min(ax, keepdim=keepdim).cast(dtypes.int64)


def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg_extreme(self, axis, keepdim, largest=True)


def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg_extreme(self, axis, keepdim, largest=False)


def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """Inclusive prefix sum: a windowed sum over the left-padded axis."""
    ax = normalize_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0:
        return self
    moved = self.transpose(ax, -1) if ax != self.ndim - 1 else self
    padded = moved.pad(tuple((0, 0) for _ in range(moved.ndim - 1)) + ((n - 1, 0),))
    out = window(padded, (n,), (1,), (1,)).sum(-1, dtype=_sum_dtype(self.dtype))
    return out.transpose(ax, -1) if ax != self.ndim - 1 else out


def _acc_float(d: DType) -> DType:
    """The dtype a sum of ``d`` accumulates in: float32 for floats narrower than float32, else ``d``."""
    return dtypes.float32 if d.is_float and not d.weak and d.itemsize < 4 else d


def _sum_dtype(d: DType) -> DType:
    if d.is_bool:
        return dtypes.int32
    if d.is_int and d.itemsize < 4:
        return dtypes.uint32 if d.is_unsigned else dtypes.int32
    return d


def _check_nonempty(t: Tensor, axis: Any, what: str) -> None:
    for a in axes_arg(axis, t.ndim):
        if t.shape[a] == 0:
            raise ShapeError(f"{what}: axis {a} is empty (shape {t.shape}); the reduction has no identity")


TENSOR_METHODS: dict[str, Any] = {
    "sum": sum_, "prod": prod, "max": max_, "min": min_, "mean": mean, "var": var, "std": std, "any": any_,
    "all": all_, "argmax": argmax, "argmin": argmin, "cumsum": cumsum,
}
