"""``lower_vector_rint``: float32 RINT over vector lanes as adds, for a target whose language declares its vector
rint slow (``CStyleLanguage.vector_rint``). PoCL's ``rint(float8)`` and ``convert_int8_rte`` are library code on
a CPU device: the modeld warp's two roundings per sample cost it more than the rest of the warp.

Before: a kernel graph after the optimizer, where a value depending on a RANGE of kind "vector" is a vector of
lanes. After: every float32 RINT depending on such a range is computed from adds (and, unless it is converted to
an integer and its source is known to lie in [0, 2**23), compares and selects), and every other RINT is left as it
was.

The math: for |x| < 2**23, ``(x + c) - c`` with ``c = 2**23`` signed as ``x`` rounds ``x`` to an integer in
round-half-to-even (the sum lies where float32's spacing is 1, and ``c`` is even) and the subtraction is exact; a
zero result takes ``x``'s sign (``x * 0``), as rint(-0.3) is -0.0. Where |x| >= 2**23 (already an integer),
infinite or NaN, ``x + 0``: ``x`` itself, a signalling NaN quieted. The same bits as ``rint`` for every input.
A RINT converted to an integer type whose source's value range (jit/ir/uop.py) is NaN-free within [0, 2**23) (a
clamped pixel coordinate) is ``(x + 2**23) - 2**23`` alone: the sign of a zero is lost in the conversion.
"""

from __future__ import annotations

from jit.common.dtype import DType, dtypes
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import Ops, UOp, nan_free

F32 = dtypes.float32
ALL_INTEGERS = float(1 << 23)  # float32 values of this magnitude and above are integers


def _f(v: float) -> UOp:
    return UOp.const(F32, v)


def _cmp(op: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(op, dtypes.bool, (a, b))


def _where(c: UOp, a: UOp, b: UOp) -> UOp:
    return UOp(Ops.WHERE, F32, (c, a, b))


def vector_rint(x: UOp) -> UOp:
    """``rint(x)`` for float32 ``x`` as the module docstring's arithmetic."""
    c = _where(_cmp(Ops.CMPLT, x, _f(0.0)), _f(-ALL_INTEGERS), _f(ALL_INTEGERS))
    rounded = UOp(Ops.SUB, F32, (UOp(Ops.ADD, F32, (x, c)), c))
    signed = _where(_cmp(Ops.CMPEQ, rounded, _f(0.0)), UOp(Ops.MUL, F32, (x, _f(0.0))), rounded)
    # x + 0 is x there, NaN quieted as rint quiets it
    return _where(_cmp(Ops.CMPLT, UOp(Ops.ABS, F32, (x,)), _f(ALL_INTEGERS)), signed, UOp(Ops.ADD, F32, (x, _f(0.0))))


def _on_lanes(u: UOp) -> bool:
    return any(n.op is Ops.RANGE and n.arg[1] == "vector" for n in u.toposort())


def _nonnegative_rint_to_int(c: UOp, r: UOp) -> UOp | None:
    x = r.src[0]
    if not (isinstance(c.dtype, DType) and c.dtype.is_int and _on_lanes(x) and nan_free(x)):
        return None
    if not (x.vmin >= 0 and x.vmax < ALL_INTEGERS):
        return None
    return c.replace(src=(UOp(Ops.SUB, F32, (UOp(Ops.ADD, F32, (x, _f(ALL_INTEGERS))), _f(ALL_INTEGERS))),))


# first, while a conversion still sees its RINT (rewrites go bottom-up, so one matcher would lower the RINT first)
pm_rint_to_int = PatternMatcher([
    (UPat(Ops.CAST, name="c", src=(UPat(Ops.RINT, dtype=F32, name="r"),)), _nonnegative_rint_to_int),
])
pm_vector_rint = PatternMatcher([
    (UPat(Ops.RINT, dtype=F32, name="r"), lambda r: vector_rint(r.src[0]) if _on_lanes(r.src[0]) else None),
])


def lower_vector_rint(sink: UOp) -> UOp:
    """The pass (module docstring) over ``sink``; the same node when no RINT is on vector lanes."""
    if not any(u.op is Ops.RINT for u in sink.toposort()):
        return sink
    sink = graph_rewrite(sink, pm_rint_to_int, name="vector rint to int")
    return graph_rewrite(sink, pm_vector_rint, name="vector rint")
