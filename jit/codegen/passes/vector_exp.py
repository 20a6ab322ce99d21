"""``lower_vector_exp``: float32 EXP over vector lanes as arithmetic the vector units run, for a target whose
language has no vector ``exp`` (C's ``expf`` takes one float: a vector of them is computed lane by lane, eight
library calls, and an EfficientNet's SiLU epilogues cost more than its convolutions).

Before: a kernel graph after the optimizer, where a value depending on a RANGE of kind "vector" is a vector of
lanes. After: every float32 EXP depending on such a range is replaced by the range-reduced polynomial below, built
from ops the renderer spells as whole vectors (multiply-add, compare and select, float-int conversion, bitcast);
EXP elsewhere (scalars, other dtypes) is left to the library. A sum ``1 + e^x`` on vector lanes (a sigmoid's
denominator, so SiLU's and Swish's) is lowered first, as a whole, with one power of two (``vector_exp_plus_one``:
the same bits, a quarter fewer operations in the epilogues of EfficientNet's convs). The same walk lowers
float32 ERF on vector lanes (``jit.codegen.passes.vector_erf``: the same reason, the exact GELU's erf).

The math (Cephes' ``expf``, with a shorter polynomial): ``x`` is clamped to [-104, 89] (beyond, the result is 0 or
+inf anyway; NaN passes through), ``n = rint(x / ln 2)``, ``r = x - n ln 2`` in two parts (Cody-Waite, exact
products), ``e^r`` by a degree-6 polynomial on |r| <= ln 2 / 2 (``POLY``), and ``2^n`` applied as two powers of two
``2^a 2^(n-a)`` with ``a = rint(n / 2)``, so that both stay normal for every ``n`` in [-150, 128] and the product
overflows to +inf or rounds into the subnormals as ``expf`` does. Both roundings are two adds (``_rint_small``: the
values are small), which the C compiler may fuse with the multiply before them; a tie then rounds by the exact
product, and ``r`` stays as small. The first add leaves the integer in the float's low bits, which the powers of
two read through a bitcast (``_pow2``): no float-to-int conversion, so no NaN lane needs a guard before one.
Within 2 ulp of the correctly rounded result over the whole float range.
"""

from __future__ import annotations

from jit.codegen.passes.vector_erf import pm_vector_erf
from jit.common.dtype import dtypes
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import Ops, UOp

F32, I32 = dtypes.float32, dtypes.int32
LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
# e^r = 1 + r + r^2 (P0 r^4 + P1 r^3 + ... + P4), |r| <= ln 2 / 2: a minimax fit of relative error 3.8e-9 with
# float32 coefficients, 0.06 ulp; Cephes' one degree higher (1.1e-9) costs every exp a multiply-add more for the
# same 0.80 ulp of the polynomial evaluated in float32
POLY = (1.3814604608e-03, 8.3687109873e-03, 4.1668388993e-02, 1.6666521132e-01, 4.9999994040e-01)
LOW, HIGH = -104.0, 89.0
# e^-86 is normal, and far below the 2**-24 under which 1 + e^x rounds to 1 (``vector_exp_plus_one``)
ONE_PLUS_LOW = -86.0
RINT_SHIFT = 1.5 * 2 ** 23  # (v + RINT_SHIFT) - RINT_SHIFT rounds |v| < 2**22 to an integer (``_rint_small``)
RINT_SHIFT_BITS = 0x4B400000  # RINT_SHIFT's float32 bits: v + RINT_SHIFT has these plus rint(v) (``_pow2``)


def _f(v: float) -> UOp:
    return UOp.const(F32, v)


def _alu(op: Ops, *src: UOp) -> UOp:
    return UOp(op, src[0].dtype, src)


def _pow2(shifted: UOp, bias: int = 127) -> UOp:
    """``2 ** (n + bias - 127)`` from ``shifted``, the float32 ``n + RINT_SHIFT`` for an integer ``n`` that puts it in
    [-126, 127]: that float's bits are ``RINT_SHIFT``'s plus ``n`` (it lies where float32 steps by 1), so ``n +
    bias`` is its bits plus a constant, shifted into the exponent field. No float-to-int conversion: a NaN lane
    gives some power of two, times a NaN."""
    biased = _alu(Ops.ADD, UOp(Ops.BITCAST, I32, (shifted,)), UOp.const(I32, bias - RINT_SHIFT_BITS))
    return UOp(Ops.BITCAST, F32, (_alu(Ops.MUL, biased, UOp.const(I32, 1 << 23)),))


def _shifted(v: UOp) -> UOp:
    """``v + 1.5 * 2**23`` for float32 ``v`` with |v| < 2**22 (or NaN): it lies where float32 steps by 1, so the add
    rounds ``v`` to an integer, half to even (``_rint_small``, ``_pow2``)."""
    return _alu(Ops.ADD, v, _f(RINT_SHIFT))


def _rint_small(shifted: UOp) -> UOp:
    """``rint(v)`` from ``shifted = _shifted(v)``: ``shifted - 1.5 * 2**23``, two adds in all instead of a rounding
    the C vector extensions spell lane by lane. A zero may come out +0 for -0: every use below is sign-blind."""
    return _alu(Ops.SUB, shifted, _f(RINT_SHIFT))


def _reduced(x: UOp, low: float, scale: float, negated: bool = False) -> tuple[UOp, UOp]:
    """``(n + RINT_SHIFT, scale * e^r)`` for ``x`` clamped to [``low``, HIGH]: ``x = n ln 2 + r``, the polynomial's
    coefficients times ``scale`` (a power of two: the same roundings, each result exactly ``scale`` times the
    unscaled one). ``n`` stays a float: the powers of two take its bits (``_pow2``), and NaN needs no guard.

    ``negated``: the same for ``-x`` (a sigmoid's ``e^-x``) without computing ``-x``: the clamp, ``q = -r`` and the
    polynomial in ``q`` (odd coefficients negated) are each exactly the negation of what ``-x`` gives, since IEEE
    rounding is symmetric, so the result is bit for bit the same with one operation fewer."""
    sign = -1.0 if negated else 1.0
    if negated:
        clamped = _alu(Ops.MAX, _alu(Ops.MIN, x, _f(-low)), _f(-HIGH))
    else:
        clamped = _alu(Ops.MIN, _alu(Ops.MAX, x, _f(low)), _f(HIGH))
    shifted = _shifted(_alu(Ops.MUL, clamped, _f(sign * LOG2E)))  # |n| <= 151
    n = _rint_small(shifted)
    # r, or q = -r: the reduced argument of x (or of -x)
    step = Ops.ADD if negated else Ops.SUB
    r = _alu(step, _alu(step, clamped, _alu(Ops.MUL, n, _f(LN2_HI))), _alu(Ops.MUL, n, _f(LN2_LO)))
    degree = len(POLY) - 1
    poly = _f(sign ** degree * POLY[0] * scale)
    for i, c in enumerate(POLY[1:], 1):
        poly = _alu(Ops.ADD, _alu(Ops.MUL, poly, r), _f(sign ** (degree - i) * c * scale))
    r_scaled = r if scale == 1 else _alu(Ops.ADD, r, r)  # an add: the compiler fuses no multiply into it
    # e^r = 1 + r + r^2 P(r): with q, 1 - q + q^2 P(-q)
    linear = Ops.SUB if negated else Ops.ADD
    return shifted, _alu(Ops.ADD, _alu(linear, _alu(Ops.MUL, poly, _alu(Ops.MUL, r, r)), r_scaled), _f(scale))


def vector_exp(x: UOp) -> UOp:
    """``e ** x`` for float32 ``x`` as the module docstring's arithmetic."""
    shifted, er = _reduced(x, LOW, 1.0)
    n = _rint_small(shifted)
    half_shifted = _shifted(_alu(Ops.MUL, n, _f(0.5)))
    rest_shifted = _shifted(_alu(Ops.SUB, n, _rint_small(half_shifted)))
    return _alu(Ops.MUL, _alu(Ops.MUL, er, _pow2(half_shifted)), _pow2(rest_shifted))


def vector_exp_plus_one(x: UOp, negated: bool = False) -> UOp:
    """``e ** x + 1`` for float32 ``x`` (a sigmoid's denominator): bit for bit ``vector_exp(x) + 1``. Where ``e ** x``
    is below 2**-24 the sum rounds to 1 whatever it is, so ``x`` may be clamped at ``ONE_PLUS_LOW`` instead of LOW,
    where the result is normal; then ``2 ** n`` is one power of two, ``2 ** (n - 1)`` (n in [-125, 128]), times the
    2 folded into the polynomial: the same product as the two powers of two, six operations fewer. ``negated``:
    ``e ** -x + 1`` (``_reduced``)."""
    shifted, er2 = _reduced(x, ONE_PLUS_LOW, 2.0, negated)
    return _alu(Ops.ADD, _alu(Ops.MUL, er2, _pow2(shifted, bias=126)), _f(1.0))


def _on_lanes(u: UOp) -> bool:
    return any(n.op is Ops.RANGE and n.arg[1] == "vector" for n in u.toposort())


pm_vector_exp = PatternMatcher([
    (UPat(Ops.EXP, dtype=F32, name="e"), lambda e: vector_exp(e.src[0]) if _on_lanes(e.src[0]) else None),
])


def _exp_plus_one(a: UOp) -> UOp | None:
    exp, one = a.src if a.src[0].op is Ops.EXP else a.src[::-1]
    if exp.op is not Ops.EXP or exp.dtype != F32 or one.op is not Ops.CONST or one.arg != 1.0 or \
            not _on_lanes(exp.src[0]):
        return None
    arg = exp.src[0]
    return vector_exp_plus_one(arg.src[0], negated=True) if arg.op is Ops.NEG else vector_exp_plus_one(arg)


# run before pm_vector_exp (a bottom-up rewrite would lower the EXP before its ADD is matched)
pm_vector_exp_plus_one = PatternMatcher([(UPat(Ops.ADD, dtype=F32, name="a"), _exp_plus_one)])


def lower_vector_exp(sink: UOp) -> UOp:
    """The pass (module docstring) over ``sink``, and with it ``jit.codegen.passes.vector_erf`` (ERF on vector
    lanes, for the same reason: the language's libm takes one float); ``1 + e^x`` first, as
    ``vector_exp_plus_one``; the same node when no EXP or ERF is on vector lanes."""
    ops = {u.op for u in sink.toposort()}
    if Ops.EXP not in ops and Ops.ERF not in ops:
        return sink
    if Ops.EXP in ops:
        sink = graph_rewrite(sink, pm_vector_exp_plus_one, name="vector exp plus one")
    return graph_rewrite(sink, pm_vector_exp + pm_vector_erf, name="vector exp and erf")
