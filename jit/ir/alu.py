"""Python semantics of each ALU op, matching the generated C (used to fold constants at compile time)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from jit.common.dtype import DType, truncate_const
from jit.ir.uop import Ops


def _idiv(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _imod(a: int, b: int) -> int:
    return 0 if b == 0 else a - _idiv(a, b) * b


def _fdiv(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _fmod(a: float, b: float) -> float:
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def _safe(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        try:
            return fn(*args)
        except (OverflowError, ValueError):
            return math.nan
    return run


def _pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


def _max(a: Any, b: Any) -> Any:
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return math.nan
    return a if a > b else b


def _min(a: Any, b: Any) -> Any:
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return math.nan
    return a if a < b else b


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _log(x: float) -> float:
    if x == 0:
        return -math.inf
    return math.nan if x < 0 or math.isnan(x) else math.log(x)


_PY: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: lambda x: -x if not isinstance(x, bool) else not x, Ops.EXP: _exp, Ops.LOG: _log,
    Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan, Ops.SIN: _safe(math.sin), Ops.COS: _safe(math.cos),
    Ops.TAN: _safe(math.tan), Ops.TANH: math.tanh, Ops.ERF: math.erf,
    Ops.RECIPROCAL: lambda x: _fdiv(1.0, x), Ops.TRUNC: _safe(lambda x: float(math.trunc(x))),
    Ops.FLOOR: _safe(lambda x: float(math.floor(x))), Ops.CEIL: _safe(lambda x: float(math.ceil(x))),
    Ops.RINT: _safe(lambda x: float(round(x))), Ops.ABS: abs,
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.FDIV: _fdiv, Ops.POW: _pow, Ops.MAX: _max, Ops.MIN: _min,
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPEQ: lambda a, b: a == b, Ops.CMPNE: lambda a, b: a != b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
    Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c,
}


def exec_alu(op: Ops, dtype: DType, args: tuple[Any, ...]) -> Any:
    """The value ``op`` computes on Python scalars ``args``, stored in ``dtype`` (wrapping ints, rounding floats)."""
    if op is Ops.IDIV:
        out: Any = _idiv(int(args[0]), int(args[1]))
    elif op is Ops.MOD:
        out = _imod(int(args[0]), int(args[1])) if dtype.is_int else _fmod(args[0], args[1])
    elif op is Ops.NOT:
        out = (not args[0]) if dtype.is_bool else ~int(args[0])
    elif op is Ops.SHL:
        out = int(args[0]) << int(args[1])
    elif op is Ops.SHR:
        out = int(args[0]) >> int(args[1])
    elif op is Ops.ABS and dtype.is_int:
        out = abs(int(args[0]))
    else:
        out = _PY[op](*args)
    return truncate_const(dtype, out)
