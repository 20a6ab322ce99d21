"""Symbolic simplification and constant folding.

Before: a kernel graph whose ALU nodes may have constant operands, identity operations, and integer index
arithmetic in any association (``(i*4 + j) // 4`` from reshapes, ``x + 3 + 4`` from the user).
After: every ALU node with only constant sources is a CONST; integer sums are canonical
(``atom*coef + ... + const``, atoms in a fixed structural order, so equal sums are the same UOp);
``//`` and ``%`` by a positive constant are split where value ranges prove it exact; comparisons, MAX/MIN
and WHERE that value ranges decide are folded. Float expressions are only changed where the result is
bit-identical (``x*1``, ``x/1``, ``x-0``, ``x / 2**k`` as ``x * 2**-k``); float reassociation never happens.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from jit.common.dtype import DType, dtypes
from jit.ir.alu import exec_alu
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import GroupOp, Ops, UOp


def structural_key(u: UOp) -> str:
    """A digest of a node's structure that is the same in every process (for deterministic ordering)."""
    def compute(n: UOp) -> str:
        text = f"{n.op.name}|{n.dtype!r}|{n.arg!r}|" + ",".join(structural_key(s) for s in n.src)
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return u.cached("skey", compute)


def _is_int(u: UOp) -> bool:
    return isinstance(u.dtype, DType) and u.dtype.is_int


# --- constant folding ----------------------------------------------------------------------------------
def fold_consts(alu: UOp) -> UOp | None:
    if not all(s.op is Ops.CONST for s in alu.src) or not isinstance(alu.dtype, DType):
        return None
    src_dtype = alu.src[-1].dtype
    if alu.op in GroupOp.Comparison or alu.op is Ops.WHERE:
        return UOp.const(alu.dtype, exec_alu(alu.op, src_dtype if alu.op is not Ops.WHERE else alu.dtype,
                                             tuple(s.arg for s in alu.src)))
    return UOp.const(alu.dtype, exec_alu(alu.op, alu.dtype, tuple(s.arg for s in alu.src)))


def fold_cast(c: UOp, x: UOp) -> UOp | None:
    if not isinstance(c.dtype, DType):
        return None
    value: Any = x.arg
    if c.dtype.is_int and isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None  # C leaves this implementation-defined: keep the runtime conversion
    return UOp.const(c.dtype, value)


# --- integer linear forms ------------------------------------------------------------------------------
def linear_terms(u: UOp) -> tuple[dict[UOp, int], int]:
    """``u`` as ``sum(coef * atom) + const`` over int atoms (nodes that are not +, -, neg or *const)."""
    terms: dict[UOp, int] = {}
    const = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        node, k = stack.pop()
        if node.op is Ops.CONST:
            const += k * int(node.arg)
        elif node.op is Ops.ADD:
            stack.extend(((node.src[0], k), (node.src[1], k)))
        elif node.op is Ops.SUB:
            stack.extend(((node.src[0], k), (node.src[1], -k)))
        elif node.op is Ops.NEG:
            stack.append((node.src[0], -k))
        elif node.op is Ops.MUL and node.src[1].op is Ops.CONST:
            stack.append((node.src[0], k * int(node.src[1].arg)))
        elif node.op is Ops.MUL and node.src[0].op is Ops.CONST:
            stack.append((node.src[1], k * int(node.src[0].arg)))
        else:
            terms[node] = terms.get(node, 0) + k
    return {a: c for a, c in terms.items() if c != 0}, const


def build_linear(dtype: DType, terms: dict[UOp, int], const: int) -> UOp:
    out: UOp | None = None
    for atom in sorted(terms, key=structural_key):
        coef = terms[atom]
        term = atom if coef == 1 else atom * UOp.const(dtype, coef)
        out = term if out is None else out + term
    if out is None:
        return UOp.const(dtype, const)
    return out if const == 0 else out + UOp.const(dtype, const)


def _rejoin_divmod(terms: dict[UOp, int]) -> dict[UOp, int]:
    """``terms`` with every pair ``m*c*(x // c) + m*(x % c)`` replaced by ``m*x`` (x non-negative): a reshape of a
    row back to its own length (efficientnet's 56x56 plane read as 49 rows of 64) indexes it through both."""
    for atom, k in list(terms.items()):
        if atom.op is not Ops.IDIV or atom not in terms or atom.src[1].op is not Ops.CONST or atom.src[0].vmin < 0:
            continue
        c = int(atom.src[1].arg)
        rem = next((a for a in terms if a.op is Ops.MOD and a.src[0] is atom.src[0] and a.src[1].op is Ops.CONST
                    and int(a.src[1].arg) == c), None)
        if rem is None or c <= 0 or k % c or terms[rem] != k // c:
            continue
        x = atom.src[0]
        del terms[atom], terms[rem]
        terms[x] = terms.get(x, 0) + k // c
        if terms[x] == 0:
            del terms[x]
    return terms


def canonical_sum(x: UOp) -> UOp | None:
    """Rewrite an integer +,-,neg,*const tree into its canonical linear form (no-op if already canonical).
    Kept on the node: every symbolic pass of a kernel meets most of its index sums again, unchanged."""
    return x.cached("canonical_sum", _canonical_sum) if _is_int(x) else None


def _canonical_sum(x: UOp) -> UOp | None:
    assert isinstance(x.dtype, DType)
    terms, const = linear_terms(x)
    terms = _rejoin_divmod(terms)
    out = build_linear(x.dtype, terms, const)
    return None if out is x else out


def _split_at_block(d: UOp, terms: dict[UOp, int], const: int, c: int) -> UOp | None:
    """``x // c`` and ``x % c`` where x = k*B + r with k dividing c and the remainder terms r within [0, k): then
    x // c == B // (c/k) and x % c == B % (c/k) * k + r. A tile of 32 columns (``32*t + lane``) reading weights
    stored in blocks of 64 is the case: its block is ``t // 2`` and its column in the block ``t % 2 * 32 + lane``,
    contiguous in the lane. k is the gcd of c and the coefficients at or above each candidate threshold."""
    assert isinstance(d.dtype, DType)
    for threshold in sorted({abs(v) for v in terms.values()}, reverse=True):
        big = {a: v for a, v in terms.items() if abs(v) >= threshold}
        k = math.gcd(c, *big.values())
        if k <= 1 or k == c:  # k == c: every big term is a whole multiple, the plain split handles it
            continue
        q, r = divmod(const, k)
        rest = build_linear(d.dtype, {a: v for a, v in terms.items() if a not in big}, r)
        if rest.vmin < 0 or rest.vmax >= k:
            continue
        blocks = build_linear(d.dtype, {a: v // k for a, v in big.items()}, q)
        if d.op is Ops.IDIV:
            return blocks // UOp.const(d.dtype, c // k)
        return (blocks % UOp.const(d.dtype, c // k)) * UOp.const(d.dtype, k) + rest
    return None


def split_divmod(d: UOp) -> UOp | None:
    """``x // c`` and ``x % c`` for a positive constant c and non-negative x, using x's linear form."""
    x, c_node = d.src
    if not _is_int(d) or c_node.op is not Ops.CONST or c_node.arg <= 0 or x.vmin < 0:
        return None
    assert isinstance(d.dtype, DType)
    c = int(c_node.arg)
    if c == 1:
        return x if d.op is Ops.IDIV else UOp.const(d.dtype, 0)
    if x.vmax < c:
        return UOp.const(d.dtype, 0) if d.op is Ops.IDIV else x
    terms, const = linear_terms(x)
    quotient_terms = {a: k // c for a, k in terms.items() if k % c == 0}
    rest_terms = {a: k for a, k in terms.items() if k % c != 0}
    q_const, r_const = divmod(const, c)
    rest = build_linear(d.dtype, rest_terms, r_const)
    if rest.vmin >= 0 and rest.vmax < c:
        if d.op is Ops.IDIV:
            return build_linear(d.dtype, quotient_terms, q_const)
        return rest
    # common factor: (g*a + g*b) // (g*k) == (a + b) // k
    g = math.gcd(c, *terms.values()) if terms else c
    g = math.gcd(g, const)
    if g > 1:
        inner = build_linear(d.dtype, {a: k // g for a, k in terms.items()}, const // g)
        if d.op is Ops.IDIV:
            return inner // UOp.const(d.dtype, c // g)
        return (inner % UOp.const(d.dtype, c // g)) * UOp.const(d.dtype, g)
    blocked = _split_at_block(d, terms, const, c)
    if blocked is not None:
        return blocked
    if not quotient_terms and q_const == 0:
        if d.op is Ops.IDIV and x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
            return x.src[0] // UOp.const(d.dtype, int(x.src[1].arg) * c)
        if d.op is Ops.MOD and x.op is Ops.MOD and x.src[1].op is Ops.CONST and int(x.src[1].arg) % c == 0:
            return x.src[0] % c_node
        return None
    if d.op is Ops.MOD:
        # C's % keeps the dividend's sign: dropping multiples of c is only exact while rest stays >= 0
        return None if rest is x or rest.vmin < 0 else rest % c_node
    # x // c == q + rest // c when q's terms are exact multiples and rest stays non-negative
    if rest.vmin >= 0:
        return build_linear(d.dtype, quotient_terms, q_const) + rest // c_node
    return None


# --- range-decided folds ---------------------------------------------------------------------------------
def fold_by_range(alu: UOp) -> UOp | None:
    a, b = alu.src[0], alu.src[1]
    if not isinstance(a.dtype, DType) or a.dtype.is_float:
        return None
    if alu.op is Ops.CMPLT:
        if a.vmax < b.vmin:
            return UOp.const(dtypes.bool, True)
        if a.vmin >= b.vmax:
            return UOp.const(dtypes.bool, False)
    elif alu.op is Ops.MAX:
        if a.vmin >= b.vmax:
            return a
        if b.vmin >= a.vmax:
            return b
    elif alu.op is Ops.MIN:
        if a.vmax <= b.vmin:
            return a
        if b.vmax <= a.vmin:
            return b
    elif alu.op is Ops.CMPNE and (a.vmax < b.vmin or b.vmax < a.vmin):
        return UOp.const(dtypes.bool, True)
    elif alu.op is Ops.CMPEQ and (a.vmax < b.vmin or b.vmax < a.vmin):
        return UOp.const(dtypes.bool, False)
    return None


def _and_const(x: UOp, c: UOp) -> UOp | None:
    if x.dtype is not dtypes.bool or c.dtype is not dtypes.bool:
        return None
    return x if c.arg else c


_EXACT_RECIPROCAL_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def _div_by_power_of_two(x: UOp, c: UOp) -> UOp | None:
    """``x / 2**k`` as ``x * 2**-k`` where ``2**-k`` is a normal number of the dtype: both round the same real
    value once, so the result is bit-identical (infinities, NaN and subnormal results included), and a multiply
    is several times cheaper than a divide (the uint8 camera normalize divides every pixel by 128)."""
    if c.dtype not in _EXACT_RECIPROCAL_DTYPES or not isinstance(c.arg, float) or not math.isfinite(c.arg):
        return None
    mantissa, exponent = math.frexp(c.arg)
    if abs(mantissa) != 0.5:
        return None
    bias = (1 << (c.dtype.exp_bits - 1)) - 1  # type: ignore[union-attr]
    if not 1 - bias <= 1 - exponent <= bias:  # 1/c = +-2**(1 - exponent) must be a normal number
        return None
    return x * c.const_like(1.0 / c.arg)


def _int_zero(x: UOp) -> UOp | None:
    return UOp.const(x.dtype, 0) if _is_int(x) else None  # type: ignore[arg-type]


pm_symbolic = PatternMatcher([
    # fold an ALU node whose sources are all constants
    (UPat(GroupOp.ALU, name="alu", src=UPat(Ops.CONST)), fold_consts),
    (UPat(Ops.CAST, name="c", src=(UPat.cvar("x"),)), fold_cast),
    (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
    # identities that are exact for every dtype
    (UPat.var("x") * 1, lambda x: x),
    (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.const(None, 1.0))), lambda x: x),
    (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.cvar("c"))), _div_by_power_of_two),
    (UPat(Ops.SUB, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x if _is_int(x) else None),
    (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
    (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
    # a mask term decided by value ranges (a peeled loop's pad bounds) drops out of its conjunction
    (UPat(Ops.AND, src=[UPat.var("x"), UPat.cvar("c")]), _and_const),
    # integer-only identities (float x*0 is not 0 for inf/nan)
    (UPat.var("x") * 0, _int_zero),
    (UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x if _is_int(x) else None),
    # integer index arithmetic
    (UPat((Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL), name="x"), canonical_sum),
    (UPat((Ops.IDIV, Ops.MOD), name="d"), split_divmod),
    (UPat((Ops.CMPLT, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ), name="alu"), fold_by_range),
])
