"""Small UOp builders for the integer bit manipulation the dtype emulations are written in.

Every builder returns a concretely typed node; constants take the dtype of the node they meet. Shift counts
are always kept in 0..31 by the callers (C leaves larger counts undefined).
"""

from __future__ import annotations

from jit.common.dtype import DType, dtypes
from jit.ir.uop import Ops, UOp

U32 = dtypes.uint32
I32 = dtypes.int32
F32 = dtypes.float32
F64 = dtypes.float64
BOOL = dtypes.bool


def u32(v: int) -> UOp:
    return UOp.const(U32, v)


def _operand(x: UOp, y: UOp | int) -> UOp:
    return y if isinstance(y, UOp) else x.const_like(y)


def shl(x: UOp, n: UOp | int) -> UOp:
    return UOp(Ops.SHL, x.dtype, (x, _operand(x, n)))


def shr(x: UOp, n: UOp | int) -> UOp:
    return UOp(Ops.SHR, x.dtype, (x, _operand(x, n)))


def band(x: UOp, y: UOp | int) -> UOp:
    return UOp(Ops.AND, x.dtype, (x, _operand(x, y)))


def bor(x: UOp, y: UOp | int) -> UOp:
    return UOp(Ops.OR, x.dtype, (x, _operand(x, y)))


def bxor(x: UOp, y: UOp | int) -> UOp:
    return UOp(Ops.XOR, x.dtype, (x, _operand(x, y)))


def bnot(x: UOp) -> UOp:
    return UOp(Ops.NOT, x.dtype, (x,))


def bitcast(x: UOp, d: DType) -> UOp:
    return x if x.dtype == d else UOp(Ops.BITCAST, d, (x,))


def eq(x: UOp, y: UOp | int | float) -> UOp:
    return x.eq(y)


def ne(x: UOp, y: UOp | int | float) -> UOp:
    return x.ne(y)


def lt(x: UOp, y: UOp | int | float) -> UOp:
    return x < y


def select(c: UOp, a: UOp | int, b: UOp | int) -> UOp:
    """``c ? a : b`` where an int branch takes the other branch's dtype."""
    ref = a if isinstance(a, UOp) else b
    assert isinstance(ref, UOp)
    return c.where(_operand(ref, a), _operand(ref, b))


def b2u(c: UOp) -> UOp:
    """A bool as a uint32 0 or 1."""
    return c.cast(U32)


def umin(x: UOp, y: UOp | int) -> UOp:
    return x.minimum(_operand(x, y))


def land(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.AND, BOOL, (a, b))


def lor(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.OR, BOOL, (a, b))


def lnot(a: UOp) -> UOp:
    return UOp(Ops.NOT, BOOL, (a,))
