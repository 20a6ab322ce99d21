"""The lazy Tensor: every op builds UOps; nothing runs until realize(), numpy(), tolist() or item().

A Tensor is a handle on a UOp graph. Broadcasting is explicit (RESHAPE + EXPAND nodes), Python scalars are
weakly typed, and equal expressions are the same UOp, so realizing one realizes every Tensor that holds it.
Composite ops (conv, pooling, softmax, ...) live in jit/frontend/nn_ops.py and are attached to this class there.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from jit.common.dtype import DType, commit_weak, dtypes, from_numpy, least_upper_dtype, to_dtype, to_numpy
from jit.common.errors import AxisError, DTypeError, ShapeError
from jit.ir.uop import GroupOp, Ops, UOp
from targets.registry import Device

Scalar = int | float | bool
TensorLike = "Tensor | Scalar | np.ndarray | list"

_all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()


def _normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise AxisError(f"{what}: expected in [{-max(ndim, 1)}, {max(ndim, 1) - 1}] for rank {ndim}, got {axis}")
    return axis % max(ndim, 1)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded, strict=True):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ShapeError(f"broadcast: shapes {' and '.join(map(str, shapes))} are incompatible "
                             f"(sizes {sorted(sizes)} in one dimension)")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


class Tensor:
    """A lazily evaluated n-dimensional array on a device."""

    __slots__ = ("uop", "requires_grad", "grad", "device", "__weakref__")
    training: ClassVar[bool] = False
    _seed: ClassVar[int] = 0
    _rng_counter: ClassVar[int] = 0

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
        _all_tensors.add(self)

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
        for t in list(_all_tensors):
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

    # --- creation -----------------------------------------------------------------------------------
    @staticmethod
    def full(shape: Sequence[int], value: Scalar, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        d = to_dtype(dtype) if dtype is not None else commit_weak(dtypes.from_py(value))
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"full: shape expected non-negative sizes, got {shape}")
        const = UOp.const(d, value)
        return Tensor(const, **kw)._broadcast_to_shape(shape)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        return Tensor.full(_shape_arg(shape), 0, dtype or dtypes.default_float, **kw)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        return Tensor.full(_shape_arg(shape), 1, dtype or dtypes.default_float, **kw)

    def full_like(self, value: Scalar, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, value, dtype or self.dtype, device=self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(1, dtype)

    @staticmethod
    def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
               **kw: Any) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ShapeError("arange: step expected non-zero, got 0")
        n = max(0, math.ceil((stop - start) / step))
        is_float = any(isinstance(v, float) for v in (start, stop, step))
        d = to_dtype(dtype) if dtype is not None else (dtypes.default_float if is_float else dtypes.default_int)
        iota = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), **kw)
        return (iota.cast(d) * step + start).cast(d)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Uniform [0, 1) from a counter-based hash computed on the device (seeded by manual_seed)."""
        shape = _shape_arg(shape)
        n = math.prod(shape)
        counter = Tensor._rng_counter
        Tensor._rng_counter += 1
        idx = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), **kw).cast(dtypes.uint32)
        seed_mix = Tensor._seed * 0x85EBCA6B & 0xFFFFFFFF
        bits = _hash_u32(_hash_u32(idx + (counter * 0x9E3779B9 & 0xFFFFFFFF)) ^ seed_mix)
        # 24 random bits -> float32 in [0, 1) exactly representable
        out = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
        return out.reshape(shape).cast(dtype or dtypes.default_float)

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Standard normal by Box-Muller over two rand draws."""
        shape = _shape_arg(shape)
        u1, u2 = Tensor.rand(*shape, **kw), Tensor.rand(*shape, **kw)
        return ((1 - u1).log() * -2).sqrt().mul((u2 * (2 * math.pi)).cos()).cast(dtype or dtypes.default_float)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kw: Any) -> Tensor:
        return Tensor.rand(*shape, **kw) * (high - low) + low

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        m = n if m is None else m
        return (Tensor.arange(n, **kw).reshape(n, 1) == Tensor.arange(m, **kw).reshape(1, m)).cast(
            dtype or dtypes.default_float)

    # --- broadcasting and elementwise ---------------------------------------------------------------
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

    def expand(self, *shape: Any) -> Tensor:
        want = _shape_arg(shape)
        want = tuple(self.shape[i - (len(want) - self.ndim)] if s == -1 else s for i, s in enumerate(want))
        return self._broadcast_to_shape(want)

    def _operands(self, other: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        y = other if isinstance(other, Tensor) else _scalar_tensor(other, self.device)
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

    # arithmetic
    def add(self, x: Any, reverse: bool = False) -> Tensor: return self._binary(Ops.ADD, x, reverse)
    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._operands(x, reverse)
        if a.dtype.is_bool:  # as numpy and torch: bool - bool has no meaning (use logical_xor)
            raise DTypeError("sub: dtype expected a number, got bool for both operands (use logical_xor)")
        return a._alu(Ops.SUB, b)

    def mul(self, x: Any, reverse: bool = False) -> Tensor: return self._binary(Ops.MUL, x, reverse)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division; ``rounding_mode`` 'trunc' or 'floor' divide integers like C or like numpy ``//``."""
        if rounding_mode not in (None, "trunc", "floor"):
            raise ValueError(f"div: rounding_mode expected None, 'trunc' or 'floor', got {rounding_mode!r}")
        a, b = self._operands(x, reverse)
        if rounding_mode is None:
            a, b = a._float_operand(), b._float_operand()
            return a._alu(Ops.FDIV, b)
        if a.dtype.is_float:
            q = a._alu(Ops.FDIV, b)
            return q.trunc() if rounding_mode == "trunc" else q.floor()
        q = a._alu(Ops.IDIV, b)
        if rounding_mode == "trunc" or a.dtype.is_unsigned:
            return q
        # floor: step down when the remainder is non-zero and the signs differ
        r = a._alu(Ops.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(q - 1, q)

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        return self.div(x, reverse, rounding_mode="trunc")

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor (numpy ``%``)."""
        a, b = self._operands(x, reverse)
        r = a._alu(Ops.MOD, b)
        if a.dtype.is_unsigned:
            return r
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def fmod(self, x: Any) -> Tensor:
        """Remainder with the sign of the dividend (C ``fmod`` / ONNX Mod fmod=1)."""
        a, b = self._operands(x)
        return a._alu(Ops.MOD, b)

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._operands(x, reverse)
        if a.dtype.is_bool:
            a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
        return a._alu(Ops.POW, b)

    def neg(self) -> Tensor:
        return self.logical_not() if self.dtype.is_bool else self._alu(Ops.NEG)

    def maximum(self, x: Any) -> Tensor: return self._binary(Ops.MAX, x)
    def minimum(self, x: Any) -> Tensor: return self._binary(Ops.MIN, x)

    def __add__(self, x: Any) -> Tensor: return self.add(x)
    def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
    def __sub__(self, x: Any) -> Tensor: return self.sub(x)
    def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
    def __mul__(self, x: Any) -> Tensor: return self.mul(x)
    def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
    def __truediv__(self, x: Any) -> Tensor: return self.div(x)
    def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
    def __floordiv__(self, x: Any) -> Tensor: return self.div(x, rounding_mode="floor")
    def __rfloordiv__(self, x: Any) -> Tensor: return self.div(x, True, rounding_mode="floor")
    def __mod__(self, x: Any) -> Tensor: return self.mod(x)
    def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)
    def __pow__(self, x: Any) -> Tensor: return self.pow(x)
    def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)
    def __neg__(self) -> Tensor: return self.neg()
    def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
    def __rmatmul__(self, x: Tensor) -> Tensor: return x.matmul(self)

    # comparisons
    def __lt__(self, x: Any) -> Tensor: return self._binary(Ops.CMPLT, x)
    def __gt__(self, x: Any) -> Tensor: return self._binary(Ops.CMPLT, x, True)
    def __le__(self, x: Any) -> Tensor: return self._cmp_le(x, reverse=False)
    def __ge__(self, x: Any) -> Tensor: return self._cmp_le(x, reverse=True)

    def _cmp_le(self, x: Any, reverse: bool) -> Tensor:
        """``self <= x`` (``x <= self`` when reverse): not(b < a) for ints, (a < b) | (a == b) for floats (NaN)."""
        a, b = self._operands(x, reverse)
        if a.dtype.is_float:
            return a._alu(Ops.CMPLT, b)._alu(Ops.OR, a._alu(Ops.CMPEQ, b))
        return b._alu(Ops.CMPLT, a)._alu(Ops.NOT)
    def __eq__(self, x: Any) -> Tensor: return self._binary(Ops.CMPEQ, x)  # type: ignore[override]
    def __ne__(self, x: Any) -> Tensor: return self._binary(Ops.CMPNE, x)  # type: ignore[override]
    __hash__ = object.__hash__

    # logical and bitwise
    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(Ops.NOT)

    def logical_and(self, x: Any) -> Tensor:
        return self.cast(dtypes.bool)._binary(Ops.AND, _as_bool(x, self.device))

    def logical_or(self, x: Any) -> Tensor:
        return self.cast(dtypes.bool)._binary(Ops.OR, _as_bool(x, self.device))

    def logical_xor(self, x: Any) -> Tensor:
        return self.cast(dtypes.bool)._binary(Ops.XOR, _as_bool(x, self.device))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._operands(x, reverse)
        if a.dtype.is_float:
            raise DTypeError(f"{op.name.lower()}: dtype expected bool or integer, got {a.dtype.name}")
        return a._alu(op, b)

    def bitwise_and(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x)
    def bitwise_or(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x)
    def bitwise_xor(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x)

    def bitwise_not(self) -> Tensor:
        if self.dtype.is_float:
            raise DTypeError(f"bitwise_not: dtype expected bool or integer, got {self.dtype.name}")
        return self._alu(Ops.NOT)

    def lshift(self, x: Any) -> Tensor: return self._bitwise(Ops.SHL, x)
    def rshift(self, x: Any) -> Tensor: return self._bitwise(Ops.SHR, x)
    def __and__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x)
    def __rand__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, True)
    def __or__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x)
    def __ror__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, True)
    def __xor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x)
    def __rxor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, True)
    def __invert__(self) -> Tensor: return self.logical_not() if self.dtype.is_bool else self.bitwise_not()
    def __lshift__(self, x: Any) -> Tensor: return self.lshift(x)
    def __rshift__(self, x: Any) -> Tensor: return self.rshift(x)

    def where(self, x: Any, y: Any) -> Tensor:
        """``self ? x : y`` elementwise; the condition does not take part in dtype promotion."""
        xt = x if isinstance(x, Tensor) else _scalar_tensor(x, self.device)
        yt = y if isinstance(y, Tensor) else _scalar_tensor(y, self.device)
        d = least_upper_dtype(xt.dtype, yt.dtype)
        shape = broadcast_shape(self.shape, xt.shape, yt.shape)
        cond = self.cast(dtypes.bool)._broadcast_to_shape(shape)
        a, b = xt.cast(d)._broadcast_to_shape(shape), yt.cast(d)._broadcast_to_shape(shape)
        return self._new(UOp(Ops.WHERE, d, (cond.uop, a.uop, b.uop)))

    # unary math
    def _float_unary(self, op: Ops) -> Tensor:
        return self._float_operand()._alu(op)

    def exp(self) -> Tensor: return self._float_unary(Ops.EXP)
    def log(self) -> Tensor: return self._float_unary(Ops.LOG)
    def sqrt(self) -> Tensor: return self._float_unary(Ops.SQRT)
    def sin(self) -> Tensor: return self._float_unary(Ops.SIN)
    def cos(self) -> Tensor: return self._float_unary(Ops.COS)
    def tan(self) -> Tensor: return self._float_unary(Ops.TAN)
    def tanh(self) -> Tensor: return self._float_unary(Ops.TANH)
    def erf(self) -> Tensor: return self._float_unary(Ops.ERF)
    def reciprocal(self) -> Tensor: return self._float_operand()._alu(Ops.RECIPROCAL)
    def exp2(self) -> Tensor: return (self._float_operand() * math.log(2)).exp()
    def log2(self) -> Tensor: return self.log() * (1 / math.log(2))
    def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()

    def _rounding(self, op: Ops) -> Tensor:
        return self if not self.dtype.is_float else self._alu(op)

    def trunc(self) -> Tensor: return self._rounding(Ops.TRUNC)
    def floor(self) -> Tensor: return self._rounding(Ops.FLOOR)
    def ceil(self) -> Tensor: return self._rounding(Ops.CEIL)
    def round(self) -> Tensor: return self._rounding(Ops.RINT)  # half to even

    def abs(self) -> Tensor:
        return self if self.dtype.is_bool or self.dtype.is_unsigned else self._alu(Ops.ABS)

    def sign(self) -> Tensor:
        if self.dtype.is_bool:
            return self
        s = (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)
        return (self != self).where(self, s) if self.dtype.is_float else s  # nan stays nan

    def isnan(self) -> Tensor:
        return self != self

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtypes.bool)
        neg = (self == -math.inf) if detect_negative else self.full_like(False, dtypes.bool)
        return pos | neg if self.dtype.is_float else self.full_like(False, dtypes.bool)

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        if self.dtype.is_int:  # a Python int bound outside the dtype's range would wrap (uint8 clip(-10) -> 246)
            lo, hi = self.dtype.min, self.dtype.max
            min_ = min(max(min_, lo), hi) if isinstance(min_, int) and not isinstance(min_, bool) else min_
            max_ = min(max(max_, lo), hi) if isinstance(max_, int) and not isinstance(max_, bool) else max_
        out = self
        if min_ is not None:
            out = out.maximum(min_)
        if max_ is not None:
            out = out.minimum(max_)
        return out.cast(self.dtype) if not (isinstance(min_, Tensor) or isinstance(max_, Tensor)) else out

    clamp = clip

    def square(self) -> Tensor: return self * self
    def relu(self) -> Tensor: return (self > 0).where(self, 0)
    def sigmoid(self) -> Tensor: return (1 + (-self._float_operand()).exp()).reciprocal()
    def elu(self, alpha: float = 1.0) -> Tensor: return (self > 0).where(self, ((self.exp() - 1) * alpha))
    def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
        return (self > 0).where(self * gamma, (self.exp() * alpha - alpha) * gamma)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self > 0).where(self, self * neg_slope)

    def gelu(self, approximate: str = "none") -> Tensor:
        x = self._float_operand()
        if approximate == "tanh":
            return x * 0.5 * (1 + ((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)).tanh())
        return x * 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())

    def softplus(self, beta: float = 1.0) -> Tensor:
        x = self._float_operand() * beta
        # log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)
        return (x.maximum(0) + ((-x.abs()).exp() + 1).log()) * (1 / beta)

    def mish(self) -> Tensor: return self * self.softplus().tanh()
    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        return (self * alpha + beta).clip(0, 1)

    def hardswish(self) -> Tensor: return self * (self + 3).clip(0, 6) * (1 / 6)
    def swish(self) -> Tensor: return self * self.sigmoid()
    silu = swish

    # --- movement -----------------------------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        new = list(_shape_arg(shape))
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

    def view(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Tensor:
        axes = tuple(_normalize_axis(a, self.ndim) for a in _shape_arg(order))
        if sorted(axes) != list(range(self.ndim)):
            raise AxisError(f"permute: expected a permutation of range({self.ndim}), got {tuple(_shape_arg(order))}")
        if axes == tuple(range(self.ndim)):
            return self
        return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), axes))

    def transpose(self, ax1: int = 1, ax2: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(ax1, self.ndim), _normalize_axis(ax2, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _normalize_axis(start_dim, self.ndim), _normalize_axis(end_dim, self.ndim)
        return self.reshape(*self.shape[:s], math.prod(self.shape[s:e + 1]), *self.shape[e + 1:])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = {_normalize_axis(d, self.ndim) for d in ([dim] if isinstance(dim, int) else dim)}
        for d in dims:
            if self.shape[d] != 1:
                raise ShapeError(f"squeeze: axis {d} expected size 1, got {self.shape[d]} (shape {self.shape})")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims))

    def unsqueeze(self, dim: int) -> Tensor:
        d = _normalize_axis(dim, self.ndim + 1)
        return self.reshape(*self.shape[:d], 1, *self.shape[d:])

    def pad(self, padding: Sequence[tuple[int, int]] | Sequence[int], mode: str = "constant",
            value: Scalar = 0.0) -> Tensor:
        """Pad each axis by (before, after); negative amounts crop. Modes: constant, reflect, edge."""
        pads = _pad_arg(padding, self.ndim)
        if all(b == 0 and a == 0 for b, a in pads):
            return self
        if any(b < 0 or a < 0 for b, a in pads):
            crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, self.shape, strict=True))
            return self.shrink(crop).pad(tuple((max(0, b), max(0, a)) for b, a in pads), mode, value)
        if mode == "constant":
            out = self._new(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
            if value == 0:
                return out
            mask = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device)._new(
                UOp(Ops.PAD, dtypes.bool, (Tensor.full(self.shape, True, dtypes.bool).uop,), pads))
            return mask.where(out, self._new(UOp.const(self.dtype, value)))  # the fill takes the tensor's dtype
        if mode not in ("reflect", "edge"):
            raise ValueError(f"pad: mode expected 'constant', 'reflect' or 'edge', got {mode!r}")
        out = self
        for axis, (b, a) in enumerate(pads):
            out = out._pad_axis_mode(axis, b, a, mode)
        return out

    def _pad_axis_mode(self, axis: int, before: int, after: int, mode: str) -> Tensor:
        if before == 0 and after == 0:
            return self
        n = self.shape[axis]
        if mode == "reflect" and (before >= n or after >= n):
            raise ShapeError(f"pad: reflect padding ({before}, {after}) must be < size {n} of axis {axis}")
        if n == 0:
            raise ShapeError(f"pad: {mode} padding of an empty axis {axis}")
        parts = []
        if before:
            piece = self._slice_axis(axis, 1, before + 1) if mode == "reflect" else self._slice_axis(axis, 0, 1)
            parts.append(piece.flip(axis) if mode == "reflect" else piece.expand(
                *[before if i == axis else s for i, s in enumerate(self.shape)]))
        parts.append(self)
        if after:
            piece = (self._slice_axis(axis, n - 1 - after, n - 1) if mode == "reflect"
                     else self._slice_axis(axis, n - 1, n))
            parts.append(piece.flip(axis) if mode == "reflect" else piece.expand(
                *[after if i == axis else s for i, s in enumerate(self.shape)]))
        return Tensor.cat(*parts, dim=axis)

    def _slice_axis(self, axis: int, start: int, stop: int) -> Tensor:
        return self.shrink(tuple((start, stop) if i == axis else (0, s) for i, s in enumerate(self.shape)))

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape, strict=True))
        for axis, ((b, e), s) in enumerate(zip(bounds, self.shape, strict=True)):
            if not 0 <= b <= e <= s:
                raise ShapeError(f"shrink: axis {axis} bounds expected 0 <= start <= stop <= {s}, got ({b}, {e})")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
            return self
        return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))

    def flip(self, *axes: Any) -> Tensor:
        ax = tuple(sorted({_normalize_axis(a, self.ndim) for a in _shape_arg(axes)}))
        ax = tuple(a for a in ax if self.shape[a] > 1)
        return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), ax)) if ax else self

    def stride(self, steps: Sequence[int]) -> Tensor:
        steps = tuple(int(s) for s in steps)
        if any(s <= 0 for s in steps):
            raise ShapeError(f"stride: steps expected positive, got {steps}")
        if all(s == 1 for s in steps):
            return self
        return self._new(UOp(Ops.STRIDE, self.dtype, (self.uop,), steps))

    def __getitem__(self, key: Any) -> Tensor:
        return _getitem(self, key)

    @staticmethod
    def cat(*tensors: Tensor, dim: int = 0) -> Tensor:
        if not tensors:
            raise ShapeError("cat: expected at least one tensor, got none")
        first = tensors[0]
        if first.ndim == 0:
            raise ShapeError("cat: expected tensors of rank >= 1, got a scalar")
        axis = _normalize_axis(dim, first.ndim)
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
                mask = Tensor.full(t.shape, True, dtypes.bool, device=t.device).pad(pads)
                out = mask.where(padded, out)
            offset += n
        assert out is not None
        return out

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> list[Tensor]:
        axis = _normalize_axis(dim, self.ndim)
        n = self.shape[axis]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ShapeError(f"split: size expected positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {list(sizes)} expected to sum to {n} (axis {axis}), got {sum(sizes)}")
        out, start = [], 0
        for s in sizes:
            out.append(self._slice_axis(axis, start, start + s))
            start += s
        return out

    def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks expected positive, got {chunks}")
        n = self.shape[_normalize_axis(dim, self.ndim)]
        return self.split(math.ceil(n / chunks) if n else 1, dim)

    def repeat(self, *repeats: Any) -> Tensor:
        reps = _shape_arg(repeats)
        if len(reps) < self.ndim:
            raise ShapeError(f"repeat: expected at least {self.ndim} repeats for shape {self.shape}, got {reps}")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        expanded = base.reshape(*[v for s in base.shape for v in (1, s)]).expand(
            *[v for r, s in zip(reps, base.shape, strict=True) for v in (r, s)])
        return expanded.reshape(*[r * s for r, s in zip(reps, base.shape, strict=True)])

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """``out[i][j] = self[index[i][j]][j]`` along ``dim`` (torch.gather / np.take_along_axis)."""
        axis = _normalize_axis(dim, self.ndim)
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
                    src = src._slice_axis(i, 0, k)
                else:
                    raise ShapeError(f"gather: index shape {index.shape} exceeds data shape {self.shape} on axis {i}")
        return self._new(UOp(Ops.GATHER, self.dtype, (src.uop, index.uop), axis))

    def take(self, indices: Tensor, axis: int = 0) -> Tensor:
        """numpy.take: ``out.shape = self.shape[:axis] + indices.shape + self.shape[axis+1:]``."""
        ax = _normalize_axis(axis, self.ndim)
        pre, post = self.shape[:ax], self.shape[ax + 1:]
        idx = indices.reshape((1,) * len(pre) + indices.shape + (1,) * len(post))
        idx = idx.expand(*pre, *indices.shape, *post)
        src = self.reshape(*pre, *((1,) * (indices.ndim - 1)), self.shape[ax], *post) if indices.ndim else self
        if indices.ndim == 0:
            return self.gather(ax, idx.reshape(*pre, 1, *post)).reshape(*pre, *post)
        src = src.expand(*pre, *indices.shape[:-1], self.shape[ax], *post)
        return src.gather(ax + indices.ndim - 1, idx)

    def one_hot(self, num_classes: int) -> Tensor:
        return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.int32)

    # --- reductions ---------------------------------------------------------------------------------
    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = _axes_arg(axis, self.ndim)
        if self.ndim == 0:
            return self
        out = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DType | str | None = None) -> Tensor:
        out = to_dtype(dtype) if dtype is not None else _sum_dtype(self.dtype)
        acc = _acc_float(out)  # half-width floats accumulate in float32 and round once (as numpy's mean, torch)
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim).cast(out)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Tensor:
        out = to_dtype(dtype) if dtype is not None else _sum_dtype(self.dtype)
        return self.cast(_acc_float(out))._reduce(Ops.MUL, axis, keepdim).cast(out)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        _check_nonempty(self, axis, "max")
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        _check_nonempty(self, axis, "min")
        return self._reduce(Ops.MIN, axis, keepdim)

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        axes = _axes_arg(axis, self.ndim)
        n = math.prod(self.shape[a] for a in axes)
        x = self._float_operand()
        total = x.sum(axis, keepdim, dtype=_acc_float(x.dtype))  # a float16 total may exceed float16's range
        return (total / n if n else total * math.nan).cast(x.dtype)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        axes = _axes_arg(axis, self.ndim)
        n = math.prod(self.shape[a] for a in axes)
        x = self._float_operand()
        xa = x.cast(_acc_float(x.dtype))
        centered = xa - xa.mean(axis, keepdim=True)
        return ((centered * centered).sum(axis, keepdim) / max(n - correction, 0)).cast(x.dtype)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()

    def _arg_extreme(self, axis: int | None, keepdim: bool, largest: bool) -> Tensor:
        if axis is None:
            return self.flatten()._arg_extreme(0, keepdim=False, largest=largest).reshape(
                (1,) * self.ndim if keepdim else ())
        ax = _normalize_axis(axis, self.ndim)
        n = self.shape[ax]
        if n == 0:
            raise ShapeError(f"arg{'max' if largest else 'min'}: axis {ax} is empty (shape {self.shape})")
        best = self.max(ax, keepdim=True) if largest else self.min(ax, keepdim=True)
        hit = (self == best)
        if self.dtype.is_float:
            hit = hit | self.isnan()  # numpy returns the first nan
        idx = Tensor.arange(n, device=self.device).reshape(*[n if i == ax else 1 for i in range(self.ndim)])
        return hit.where(idx, n).min(ax, keepdim=keepdim).cast(dtypes.int64 if _int64_ok() else dtypes.int32)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg_extreme(axis, keepdim, largest=True)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg_extreme(axis, keepdim, largest=False)

    def cumsum(self, axis: int = 0) -> Tensor:
        """Inclusive prefix sum: a windowed sum over the left-padded axis."""
        ax = _normalize_axis(axis, self.ndim)
        n = self.shape[ax]
        if n == 0:
            return self
        moved = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        padded = moved.pad(tuple((0, 0) for _ in range(moved.ndim - 1)) + ((n - 1, 0),))
        win = padded._new(UOp(Ops.WINDOW, padded.dtype, (padded.uop,), ((n,), (1,), (1,))))
        out = win.sum(-1, dtype=_sum_dtype(self.dtype))
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    # --- autodiff -----------------------------------------------------------------------------------
    def gradient(self, *targets: Tensor, grad: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target; ``self`` must be a scalar unless ``grad`` is given."""
        from jit.frontend.autograd import compute_gradients
        if grad is None:
            if self.numel() != 1:
                raise ShapeError(f"gradient: expected a scalar loss, got shape {self.shape} (pass grad=)")
            grad = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
        grads = compute_gradients(self.uop, grad.uop, [t.uop for t in targets])
        return [Tensor(g, device=self.device) for g in grads]

    def backward(self, grad: Tensor | None = None) -> Tensor:
        """Set ``.grad`` on every tensor with ``requires_grad`` that this one depends on."""
        want = [t for t in list(_all_tensors) if t.requires_grad]
        for t, g in zip(want, self.gradient(*want, grad=grad), strict=True):
            t.grad = g if t.grad is None else t.grad + g
        return self


# --- helpers -----------------------------------------------------------------------------------------
def _strip_weak_cast(u: UOp) -> UOp:
    """A realized weak tensor is a CAST to its weak dtype over the committed buffer view."""
    return u.src[0] if u.op is Ops.CAST and isinstance(u.dtype, DType) and u.dtype.weak else u


def _is_realized_leaf(u: UOp) -> bool:
    u = _strip_weak_cast(u)
    return u.op in (Ops.BUFFER, Ops.CONST) or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)


def _int64_ok() -> bool:
    return True


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
    for a in _axes_arg(axis, t.ndim):
        if t.shape[a] == 0:
            raise ShapeError(f"{what}: axis {a} is empty (shape {t.shape}); the reduction has no identity")


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def _axes_arg(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = tuple(sorted({_normalize_axis(a, ndim) for a in axes}))
    if len(norm) != len(axes):
        raise AxisError(f"axis: expected distinct axes, got {tuple(axes)}")
    return norm


def _pad_arg(padding: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    pads = list(padding)
    if pads and isinstance(pads[0], (tuple, list)):
        if len(pads) != ndim:
            raise ShapeError(f"pad: expected {ndim} (before, after) pairs, got {len(pads)}")
        return tuple((int(b), int(a)) for b, a in pads)
    if len(pads) % 2 or len(pads) // 2 > ndim:
        raise ShapeError(f"pad: flat padding expected pairs for at most {ndim} axes, got {len(pads)} values")
    # flat form is torch's: last axis first
    pairs = [(int(pads[i]), int(pads[i + 1])) for i in range(0, len(pads), 2)]
    return tuple([(0, 0)] * (ndim - len(pairs)) + list(reversed(pairs)))


def _scalar_tensor(x: Any, device: str) -> Tensor:
    if isinstance(x, (np.ndarray, list, tuple)):
        return Tensor(x, device=device)
    return Tensor(UOp.const(dtypes.from_py(x), x), device=device)


def _as_bool(x: Any, device: str) -> Tensor:
    return (x if isinstance(x, Tensor) else _scalar_tensor(x, device)).cast(dtypes.bool)


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


def _hash_u32(x: Tensor) -> Tensor:
    """A 32-bit integer mix (lowbias32): deterministic, device-computed randomness."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


def _index_key(k: Any, device: str) -> Any:
    """A list or numpy array index becomes an integer Tensor; boolean masks (data-dependent shape) are refused."""
    if isinstance(k, (list, np.ndarray)):
        arr = np.asarray(k)
        if arr.dtype.kind not in "iub" and arr.size:
            raise DTypeError(f"index: array index dtype expected an integer type, got numpy {arr.dtype}")
        k = Tensor(arr.astype(np.int32) if arr.dtype.kind != "b" else arr, device=device)
    if isinstance(k, Tensor) and not k.dtype.is_int:
        raise DTypeError(f"index: tensor index dtype expected an integer type, got {k.dtype.name}"
                         + (" (boolean masks have a data-dependent shape; use where)" if k.dtype.is_bool else ""))
    return k


def _getitem(t: Tensor, key: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None, Ellipsis; and integer Tensors (gather) on one axis."""
    keys = [_index_key(k, t.device) for k in (key if isinstance(key, tuple) else (key,))]
    n_real = sum(1 for k in keys if k is not None and k is not Ellipsis)
    if n_real > t.ndim:
        raise AxisError(f"index: too many indices for a tensor of rank {t.ndim}: {n_real}")
    ellipses = [i for i, k in enumerate(keys) if k is Ellipsis]  # identity: `in` would call Tensor.__eq__
    if len(ellipses) > 1:
        raise IndexError("index: an index can only have a single ellipsis ('...')")
    if ellipses:
        i = ellipses[0]
        keys = keys[:i] + [slice(None)] * (t.ndim - n_real) + keys[i + 1:]
    keys += [slice(None)] * (t.ndim - sum(1 for k in keys if k is not None))
    out = t
    out_shape: list[int] = []
    axis = 0
    bounds, steps, flips, drop = [], [], [], []
    tensor_keys: list[tuple[int, Tensor]] = []
    for k in keys:
        if k is None:
            out_shape.append(-1)  # placeholder for an inserted axis
            continue
        n = t.shape[axis]
        if isinstance(k, Tensor):
            tensor_keys.append((axis, k))
            bounds.append((0, n))
            steps.append(1)
            out_shape.append(-2)
        elif isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise AxisError(f"index: {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            bounds.append((i, i + 1))
            steps.append(1)
            drop.append(axis)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step > 0:
                count = max(0, math.ceil((stop - start) / step))
                bounds.append((start, start + max(count - 1, 0) * step + 1) if count else (0, 0))
                steps.append(step)
            else:
                count = max(0, math.ceil((start - stop) / -step))
                lo = start - (count - 1) * -step if count else 0
                bounds.append((lo, start + 1) if count else (0, 0))
                steps.append(-step)
                flips.append(axis)
            out_shape.append(count)
        else:
            raise TypeError(f"index: expected int, slice, None, Ellipsis or Tensor, got {type(k).__name__}")
        axis += 1
    out = out.shrink(tuple(bounds))
    if flips:
        out = out.flip(*flips)
    out = out.stride(steps)
    for ax, idx in tensor_keys:
        out = out.take(idx, ax) if len(tensor_keys) == 1 else out
    if len(tensor_keys) > 1:
        raise TypeError("index: at most one integer-tensor index is supported")
    final = [s for s in out.shape]
    result_shape: list[int] = []
    j = 0
    src_axes = [a for a in range(t.ndim)]
    for k in keys:
        if k is None:
            result_shape.append(1)
            continue
        a = src_axes.pop(0)
        if a in drop:
            j += 1
            continue
        if isinstance(k, Tensor):
            result_shape.extend(k.shape)
            j += k.ndim
            continue
        result_shape.append(final[j])
        j += 1
    return out.reshape(tuple(result_shape))


Tensor.__module__ = "jit.frontend.tensor"

import jit.frontend.nn_ops  # noqa: E402,F401  (attaches composite ops)
