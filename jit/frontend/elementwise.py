"""Tensor's elementwise math: ALU methods built from a table, the operators, and composite math and activations.

``ALU_OPS`` says, for each method that is one ALU node, which UOp op it builds and how it prepares its operands;
``OPERATORS`` maps each Python operator that forwards to a method onto that method. Methods that need more than
one node (sub, div, mod, pow, where, clip, the activations, ...) are written out below, as are the operators with
logic of their own (``<=``, ``//``, ``~``). A function named like the builtin it would shadow ends in ``_``
(``abs_`` is ``Tensor.abs``). jit/frontend/__init__.py attaches ``TENSOR_METHODS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from jit.common.dtype import dtypes, least_upper_dtype
from jit.common.errors import DTypeError
from jit.frontend.shapes import broadcast_shape
from jit.frontend.tensor import Tensor, scalar_tensor
from jit.ir.uop import Ops, UOp

# How a one-node method prepares its operands. Unary: "float" (ints compute in the default float), "rounding"
# (the identity on ints and bools). Binary (``x``, with ``reverse`` for the reflected operator): "binary"
# (promoted to one dtype and broadcast), "bitwise" (the same, refused for floats), "logical" (both cast to bool).
FLOAT, ROUNDING, BINARY, BITWISE, LOGICAL = "float", "rounding", "binary", "bitwise", "logical"

# method -> (UOp op, operand kind). A comparison has no named method: its operator is the method.
ALU_OPS: dict[str, tuple[Ops, str]] = {
    "add": (Ops.ADD, BINARY), "mul": (Ops.MUL, BINARY), "maximum": (Ops.MAX, BINARY), "minimum": (Ops.MIN, BINARY),
    "__lt__": (Ops.CMPLT, BINARY), "__eq__": (Ops.CMPEQ, BINARY), "__ne__": (Ops.CMPNE, BINARY),
    "bitwise_and": (Ops.AND, BITWISE), "bitwise_or": (Ops.OR, BITWISE), "bitwise_xor": (Ops.XOR, BITWISE),
    "lshift": (Ops.SHL, BITWISE), "rshift": (Ops.SHR, BITWISE),
    "logical_and": (Ops.AND, LOGICAL), "logical_or": (Ops.OR, LOGICAL), "logical_xor": (Ops.XOR, LOGICAL),
    "exp": (Ops.EXP, FLOAT), "log": (Ops.LOG, FLOAT), "sqrt": (Ops.SQRT, FLOAT), "sin": (Ops.SIN, FLOAT),
    "cos": (Ops.COS, FLOAT), "tan": (Ops.TAN, FLOAT), "tanh": (Ops.TANH, FLOAT), "erf": (Ops.ERF, FLOAT),
    "reciprocal": (Ops.RECIPROCAL, FLOAT),
    "trunc": (Ops.TRUNC, ROUNDING), "floor": (Ops.FLOOR, ROUNDING), "ceil": (Ops.CEIL, ROUNDING),
    "round": (Ops.RINT, ROUNDING),  # half to even
}

# operator -> (method, reflected): a reflected operator calls the method with ``reverse=True`` (``2 - t`` is
# ``t.sub(2, True)``), so ``x > t`` is ``t.__lt__(x, True)``
OPERATORS: dict[str, tuple[str, bool]] = {
    "__add__": ("add", False), "__radd__": ("add", True), "__sub__": ("sub", False), "__rsub__": ("sub", True),
    "__mul__": ("mul", False), "__rmul__": ("mul", True), "__truediv__": ("div", False),
    "__rtruediv__": ("div", True), "__rfloordiv__": ("__floordiv__", True), "__mod__": ("mod", False),
    "__rmod__": ("mod", True), "__pow__": ("pow", False), "__rpow__": ("pow", True), "__neg__": ("neg", False),
    "__matmul__": ("matmul", False), "__gt__": ("__lt__", True), "__ge__": ("__le__", True),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True), "__or__": ("bitwise_or", False),
    "__ror__": ("bitwise_or", True), "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True),
    "__lshift__": ("lshift", False), "__rshift__": ("rshift", False),
}


def _alu_method(name: str, op: Ops, kind: str) -> Callable[..., Tensor]:
    """The method ``name`` that builds one ``op`` node from operands prepared as ``kind`` says."""
    if kind == FLOAT:
        def method(self: Tensor) -> Tensor:
            return self._float_operand()._alu(op)
    elif kind == ROUNDING:
        def method(self: Tensor) -> Tensor:
            return self if not self.dtype.is_float else self._alu(op)
    elif kind == BINARY:
        def method(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
            return self._binary(op, x, reverse)
    elif kind == BITWISE:
        def method(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
            a, b = self._operands(x, reverse)
            if a.dtype.is_float:
                raise DTypeError(f"{op.name.lower()}: dtype expected bool or integer, got {a.dtype.name}")
            return a._alu(op, b)
    elif kind == LOGICAL:
        def method(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
            return self.cast(dtypes.bool)._binary(op, _as_bool(x, self.device), reverse)
    else:
        raise ValueError(f"ALU_OPS: kind expected one of {FLOAT}, {ROUNDING}, {BINARY}, {BITWISE}, {LOGICAL}, "
                         f"got {kind!r}")
    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    method.__doc__ = f"One {op.name} node ({kind} operands)."
    return method


def _operator(name: str, method: str, reflected: bool) -> Callable[..., Tensor]:
    """The operator ``name``: calls ``method`` by name (so it finds methods attached after it, such as matmul)."""
    if reflected:
        def call(self: Tensor, x: Any) -> Tensor:
            return getattr(self, method)(x, True)
    else:
        def call(self: Tensor, *x: Any) -> Tensor:
            return getattr(self, method)(*x)
    call.__name__, call.__qualname__ = name, f"Tensor.{name}"
    call.__doc__ = f"``{method}``{' with the operands swapped' if reflected else ''}."
    return call


def _as_bool(x: Any, device: str) -> Tensor:
    return (x if isinstance(x, Tensor) else scalar_tensor(x, device)).cast(dtypes.bool)


# --- arithmetic --------------------------------------------------------------------------------------
def sub(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._operands(x, reverse)
    if a.dtype.is_bool:  # as numpy and torch: bool - bool has no meaning (use logical_xor)
        raise DTypeError("sub: dtype expected a number, got bool for both operands (use logical_xor)")
    return a._alu(Ops.SUB, b)


def div(self: Tensor, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
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


def idiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    return self.div(x, reverse, rounding_mode="trunc")


def floordiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """``self // x``: division rounded down, as numpy's."""
    return self.div(x, reverse, rounding_mode="floor")


def mod(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor (numpy ``%``)."""
    a, b = self._operands(x, reverse)
    r = a._alu(Ops.MOD, b)
    if a.dtype.is_unsigned:
        return r
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(r + b, r)


def fmod(self: Tensor, x: Any) -> Tensor:
    """Remainder with the sign of the dividend (C ``fmod`` / ONNX Mod fmod=1)."""
    a, b = self._operands(x)
    return a._alu(Ops.MOD, b)


def pow_(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._operands(x, reverse)
    if a.dtype.is_bool:
        a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
    return a._alu(Ops.POW, b)


def neg(self: Tensor) -> Tensor:
    return self.logical_not() if self.dtype.is_bool else self._alu(Ops.NEG)


def rmatmul(self: Tensor, x: Tensor) -> Tensor:
    return x.matmul(self)


def less_equal(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """``self <= x`` (``x <= self`` when reverse): not(b < a) for ints, (a < b) | (a == b) for floats (NaN)."""
    a, b = self._operands(x, reverse)
    if a.dtype.is_float:
        return a._alu(Ops.CMPLT, b)._alu(Ops.OR, a._alu(Ops.CMPEQ, b))
    return b._alu(Ops.CMPLT, a)._alu(Ops.NOT)


# --- logical and bitwise -----------------------------------------------------------------------------
def logical_not(self: Tensor) -> Tensor:
    return self.cast(dtypes.bool)._alu(Ops.NOT)


def bitwise_not(self: Tensor) -> Tensor:
    if self.dtype.is_float:
        raise DTypeError(f"bitwise_not: dtype expected bool or integer, got {self.dtype.name}")
    return self._alu(Ops.NOT)


def invert(self: Tensor) -> Tensor:
    return self.logical_not() if self.dtype.is_bool else self.bitwise_not()


def where(self: Tensor, x: Any, y: Any) -> Tensor:
    """``self ? x : y`` elementwise; the condition does not take part in dtype promotion."""
    xt = x if isinstance(x, Tensor) else scalar_tensor(x, self.device)
    yt = y if isinstance(y, Tensor) else scalar_tensor(y, self.device)
    d = least_upper_dtype(xt.dtype, yt.dtype)
    shape = broadcast_shape(self.shape, xt.shape, yt.shape)
    cond = self.cast(dtypes.bool)._broadcast_to_shape(shape)
    a, b = xt.cast(d)._broadcast_to_shape(shape), yt.cast(d)._broadcast_to_shape(shape)
    return self._new(UOp(Ops.WHERE, d, (cond.uop, a.uop, b.uop)))


# --- unary math --------------------------------------------------------------------------------------
def exp2(self: Tensor) -> Tensor:
    return (self._float_operand() * math.log(2)).exp()


def log2(self: Tensor) -> Tensor:
    return self.log() * (1 / math.log(2))


def rsqrt(self: Tensor) -> Tensor:
    return self.sqrt().reciprocal()


def abs_(self: Tensor) -> Tensor:
    return self if self.dtype.is_bool or self.dtype.is_unsigned else self._alu(Ops.ABS)


def sign(self: Tensor) -> Tensor:
    if self.dtype.is_bool:
        return self
    s = (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)
    return (self != self).where(self, s) if self.dtype.is_float else s  # nan stays nan


def isnan(self: Tensor) -> Tensor:
    return self != self


def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    pos = (self == math.inf) if detect_positive else self.full_like(False, dtypes.bool)
    neg = (self == -math.inf) if detect_negative else self.full_like(False, dtypes.bool)
    return pos | neg if self.dtype.is_float else self.full_like(False, dtypes.bool)


def clip(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:
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


def square(self: Tensor) -> Tensor:
    return self * self


# --- activations -------------------------------------------------------------------------------------
def relu(self: Tensor) -> Tensor:
    # x < 0 is false for NaN: NaN comes out as NaN (as onnxruntime's Relu), with one compare per element
    return (self < 0).where(0, self)


def sigmoid(self: Tensor) -> Tensor:
    return (1 + (-self._float_operand()).exp()).reciprocal()


def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    return (self > 0).where(self, ((self.exp() - 1) * alpha))


def selu(self: Tensor, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
    return (self > 0).where(self * gamma, (self.exp() * alpha - alpha) * gamma)


def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
    return (self > 0).where(self, self * neg_slope)


def gelu(self: Tensor, approximate: str = "none") -> Tensor:
    x = self._float_operand()
    if approximate == "tanh":
        # 0.5 * (1 + tanh(z)) as sigmoid(2z): PoCL's tanhf(-inf) is -0.99999994, which made gelu(-inf) -inf
        # instead of onnxruntime's NaN (-inf * 0)
        return x * ((x + x * x * x * 0.044715) * (2 * math.sqrt(2 / math.pi))).sigmoid()
    return x * 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())


def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    x = self._float_operand() * beta
    # log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)
    return (x.maximum(0) + ((-x.abs()).exp() + 1).log()) * (1 / beta)


def mish(self: Tensor) -> Tensor:
    return self * self.softplus().tanh()


def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    return (self * alpha + beta).clip(0, 1)


def hardswish(self: Tensor) -> Tensor:
    return self * (self + 3).clip(0, 6) * (1 / 6)


def swish(self: Tensor) -> Tensor:
    return self * self.sigmoid()


TENSOR_METHODS: dict[str, Any] = {
    **{name: _alu_method(name, op, kind) for name, (op, kind) in ALU_OPS.items()},
    "sub": sub, "div": div, "idiv": idiv, "__floordiv__": floordiv, "mod": mod, "fmod": fmod, "pow": pow_,
    "neg": neg, "__rmatmul__": rmatmul, "__le__": less_equal, "logical_not": logical_not,
    "bitwise_not": bitwise_not, "__invert__": invert, "where": where,
    "exp2": exp2, "log2": log2, "rsqrt": rsqrt, "abs": abs_, "sign": sign, "isnan": isnan, "isinf": isinf,
    "clip": clip, "clamp": clip, "square": square,
    "relu": relu, "sigmoid": sigmoid, "elu": elu, "selu": selu, "leaky_relu": leaky_relu, "gelu": gelu,
    "softplus": softplus, "mish": mish, "hardsigmoid": hardsigmoid, "hardswish": hardswish,
    "swish": swish, "silu": swish,
    **{name: _operator(name, method, reflected) for name, (method, reflected) in OPERATORS.items()},
}
