"""The lazy Tensor: a handle on a UOp graph; nothing runs until realize(), numpy(), tolist() or item().

Broadcasting is explicit (RESHAPE + EXPAND nodes), Python scalars are weakly typed, and equal expressions are the
same UOp, so realizing one realizes every Tensor that holds it. This module holds what every op builds on: data
in and out, realization, casts, broadcasting and the promoted ALU node. The ops themselves live in the modules
beside it (elementwise, creation, movement, getitem, reduce, nn_ops, autograd), each with a ``TENSOR_METHODS``
table that jit/frontend/__init__.py attaches to Tensor, so any import of ``jit.frontend.tensor`` gets them all.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, ClassVar

import numpy as np

from jit.common.dtype import DType, commit_weak, dtypes, from_numpy, least_upper_dtype, to_dtype, to_numpy
from jit.common.errors import DTypeError, ShapeError
from jit.frontend.shapes import broadcast_shape
from jit.ir.uop import GroupOp, Ops, UOp
from targets.registry import Device

Scalar = int | float | bool

# every live Tensor: realizing a graph repoints each one that holds a realized node, and backward() looks for
# the tensors that want a gradient
live_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()


class Tensor:
    """A lazily evaluated n-dimensional array on a device."""

    __slots__ = ("uop", "requires_grad", "grad", "device", "__weakref__")
    training: ClassVar[bool] = False
    # __eq__ (attached by jit/frontend/elementwise.py) builds a comparison: tensors hash by identity
    __hash__ = object.__hash__

    def __init__(self, data: Any, dtype: DType | str | None = None, device: str | None = None,
                 requires_grad: bool | None = None) -> None:
        self.device: str = Device.canonical(device) if device else Device.DEFAULT
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        want = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            self.uop = data
        elif isinstance(data, Tensor):
            self.uop = data.uop if want is None else data.cast(want).uop
        elif isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
            d = want or commit_weak(dtypes.from_py(data))
            self.uop = UOp.const(d, data)
        else:
            arr = _to_numpy_array(data, want)
            self.uop = _upload(arr, self.device)
        live_tensors.add(self)

    # --- basic properties ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.uop.shape
        assert shape is not None
        return shape

    @property
    def dtype(self) -> DType:
        d = self.uop.dtype
        assert isinstance(d, DType)
        return d

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len: expected a tensor of rank >= 1, got a scalar")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"

    def _new(self, uop: UOp) -> Tensor:
        return Tensor(uop, device=self.device)

    # --- realization --------------------------------------------------------------------------------
    def realize(self) -> Tensor:
        """Compute this tensor now (every tensor holding the same graph shares the result)."""
        Tensor.realize_all(self)
        return self

    @staticmethod
    def realize_all(*tensors: Tensor) -> None:
        from jit.realize import realize_uops
        todo = [t for t in tensors if not _is_realized_leaf(t.uop)]
        if not todo:
            return
        becomes = realize_uops([t.uop for t in todo], todo[0].device)
        for t in list(live_tensors):
            view = becomes.get(t.uop)
            if view is not None and view is not t.uop:
                if view.dtype != t.uop.dtype:
                    # memory holds a weak dtype committed (weakfloat -> float32); the tensor keeps its weak dtype
                    view = UOp(Ops.CAST, t.uop.dtype, (view,))
                t.uop = view

    def numpy(self) -> np.ndarray:
        from jit.realize import copy_from_device
        self.realize()
        buf = _strip_weak_cast(self.uop).base
        if buf.op is Ops.CONST:  # a realized scalar constant needs no device
            return np.full(self.shape, buf.arg, dtype=to_numpy(self.dtype))
        return copy_from_device(buf).reshape(self.shape)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ShapeError(f"item: expected a tensor with 1 element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def contiguous(self) -> Tensor:
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        return Tensor(self.uop, device=self.device, requires_grad=False)

    # --- broadcasting, casts and the ALU node --------------------------------------------------------
    def _broadcast_to_shape(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(self.shape) > len(shape):
            raise ShapeError(f"broadcast: cannot broadcast shape {self.shape} to {shape}")
        t = self if len(self.shape) == len(shape) else self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
        for have, want in zip(t.shape, shape, strict=True):
            if have != want and have != 1:
                raise ShapeError(f"broadcast: cannot broadcast shape {self.shape} to {shape}")
        return t._new(UOp(Ops.EXPAND, t.dtype, (t.uop,), tuple(shape))) if t.shape != shape else t

    def _operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        y = other if isinstance(other, Tensor) else scalar_tensor(other, self.device)
        out_dtype = least_upper_dtype(self.dtype, y.dtype)
        shape = broadcast_shape(self.shape, y.shape)
        a = self.cast(out_dtype)._broadcast_to_shape(shape)
        b = y.cast(out_dtype)._broadcast_to_shape(shape)
        return (b, a) if reverse else (a, b)

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        out_dtype = dtypes.bool if op in GroupOp.Comparison else self.dtype
        return self._new(UOp(op, out_dtype, (self.uop, *(o.uop for o in others))))

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        a, b = self._operands(other, reverse)
        return a._alu(op, b)

    def cast(self, dtype: DType | str) -> Tensor:
        d = to_dtype(dtype)
        if d == self.dtype:
            return self
        if self.uop.op is Ops.CONST and not self.uop.src:
            # a constant converts now: a weak Python float keeps its full precision in float64
            return self._new(UOp.const(d, self.uop.arg))
        return self._new(UOp(Ops.CAST, d, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        d = to_dtype(dtype)
        if d.itemsize != self.dtype.itemsize:
            raise DTypeError(f"bitcast: itemsize expected {self.dtype.itemsize} (from {self.dtype.name}), "
                             f"got {d.itemsize} ({d.name})")
        src = self.cast(commit_weak(self.dtype))
        return self if d == src.dtype else self._new(UOp(Ops.BITCAST, d, (src.uop,)))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def _float_operand(self) -> Tensor:
        """Self as a float (ints compute in the default float, weak ints in a weak float)."""
        if self.dtype.is_float:
            return self
        return self.cast(dtypes.weakfloat if self.dtype.weak else dtypes.default_float)


# --- helpers -----------------------------------------------------------------------------------------
def _strip_weak_cast(u: UOp) -> UOp:
    """A realized weak tensor is a CAST to its weak dtype over the committed buffer view."""
    return u.src[0] if u.op is Ops.CAST and isinstance(u.dtype, DType) and u.dtype.weak else u


def _is_realized_leaf(u: UOp) -> bool:
    u = _strip_weak_cast(u)
    return u.op in (Ops.BUFFER, Ops.CONST) or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)


def scalar_tensor(x: Any, device: str) -> Tensor:
    """``x`` as an operand: a Python scalar becomes a weakly typed constant, an array-like an uploaded tensor."""
    if isinstance(x, (np.ndarray, list, tuple)):
        return Tensor(x, device=device)
    return Tensor(UOp.const(dtypes.from_py(x), x), device=device)


def _to_numpy_array(data: Any, want: DType | None) -> np.ndarray:
    if isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.asarray(data)
        except ValueError as e:  # ragged nested lists
            raise ShapeError(f"Tensor: data expected a rectangular nested sequence, got {e}") from None
        if arr.dtype == np.float64 and not isinstance(data, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats default to float32, as in the reference system
        elif arr.dtype == np.int64 and not isinstance(data, np.ndarray):
            arr = arr.astype(np.int32)
    if arr.dtype == object or arr.dtype.kind in "US":
        raise DTypeError(f"Tensor: data expected numbers, got numpy dtype {arr.dtype}")
    if want is not None:
        arr = arr.astype(to_numpy(want))
    from_numpy(arr.dtype)  # raises DTypeError for unsupported dtypes
    return arr


def _upload(arr: np.ndarray, device: str) -> UOp:
    from jit.realize import copy_to_device
    from jit.schedule.kernels import buffer_view, new_buffer
    buf = new_buffer(device, from_numpy(arr.dtype), arr.size)
    if arr.size:
        copy_to_device(buf, arr.reshape(-1))
    return buffer_view(buf, arr.shape)

