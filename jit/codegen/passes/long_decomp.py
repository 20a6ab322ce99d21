"""Decompose int64 / uint64 into pairs of 32-bit words.

Before: a kernel graph (weak dtypes lowered, emulated floats already float32) with int64/uint64 buffers,
loads, constants, casts and ALU ops. After: no 64-bit integer remains; every 64-bit value is a (low, high)
pair of uint32 words, little-endian in memory, so a buffer of n int64 is a buffer of 2n uint32 and the host
sees the same bytes. Covered, with the semantics the C renderer gives native int64:

- CONST, LOAD (two word loads), STORE (two word stores), WHERE, bitcast int64 <-> uint64;
- CAST from bool / 8..32-bit ints (sign or zero extension), from float (truncating; NaN and values out of
  range give 0x8000000000000000 as x86 and numpy do), to bool / narrower ints (truncation), to float32
  (correctly rounded), to float64 (one rounding), to float16 (via float32, equal to a direct rounding);
- NEG, ADD / SUB with carry, MUL (low 64 bits of the product, 16-bit partial products for the high word),
  IDIV / MOD truncating toward zero (x/0 = x%0 = 0, x/-1 = -x wrapped; the floor variants are built on
  these by the frontend), comparisons signed or unsigned, SHL / SHR by 0..63 (arithmetic for int64,
  logical for uint64), AND / OR / XOR / NOT, MAX / MIN / ABS, MULACC, POW (through float64, as native);
- REDUCE ADD (as 16-bit or 8-bit partial word sums, exact up to 16,843,009 reduced elements), MAX / MIN
  (high words first, then low words among the maxima).

Not covered, each a CompileError naming the op: REDUCE MUL, BITCAST to/from float64, POW on a target
without float64, word buffers of more than 2**31-1 words. Index expressions stay int32: a buffer whose
word count does not fit int32 is refused rather than silently wrapped.
"""

from __future__ import annotations

import math

from jit.codegen.passes.bits import (
    F32,
    F64,
    I32,
    U32,
    b2u,
    band,
    bitcast,
    bnot,
    bor,
    bxor,
    eq,
    land,
    lnot,
    lor,
    lt,
    ne,
    select,
    shl,
    shr,
    u32,
)
from jit.codegen.passes.float_emulation import check_gone
from jit.common.dtype import DType, PtrDType, dtypes
from jit.common.errors import CompileError
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import GroupOp, Ops, UOp
from jit.schedule.lower import KernelInfo

LONGS = (dtypes.int64, dtypes.uint64)
Words = tuple[UOp, UOp]
MAX_WORDS = 2**31 - 1


# --- pairs -----------------------------------------------------------------------------------------------
def pair(d: DType, w: Words) -> UOp:
    return UOp(Ops.NOOP, d, w)


def is_pair(u: UOp) -> bool:
    return u.op is Ops.NOOP and u.dtype in LONGS


def words(u: UOp) -> Words:
    return u.src[0], u.src[1]


def const_words(v: int) -> Words:
    v &= (1 << 64) - 1
    return u32(v & 0xFFFFFFFF), u32(v >> 32)


ZERO: Words = (u32(0), u32(0))


def as_i32(x: UOp) -> UOp:
    return x.cast(I32)


def sign_word(hi: UOp) -> UOp:
    """All ones when the high word's top bit is set, else 0."""
    return shr(as_i32(hi), 31).cast(U32)


# --- arithmetic on words ----------------------------------------------------------------------------------
def add64(a: Words, b: Words) -> Words:
    lo = a[0] + b[0]
    return lo, a[1] + b[1] + b2u(lt(lo, a[0]))


def sub64(a: Words, b: Words) -> Words:
    return a[0] - b[0], a[1] - b[1] - b2u(lt(a[0], b[0]))


def neg64(a: Words) -> Words:
    return sub64(ZERO, a)


def where64(c: UOp, a: Words, b: Words) -> Words:
    return c.where(a[0], b[0]), c.where(a[1], b[1])


def mulhi32(a: UOp, b: UOp) -> UOp:
    """High 32 bits of the 64-bit product of two uint32, from 16-bit partial products."""
    a0, a1, b0, b1 = band(a, 0xFFFF), shr(a, 16), band(b, 0xFFFF), shr(b, 16)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = shr(p00, 16) + band(p01, 0xFFFF) + band(p10, 0xFFFF)
    return p11 + shr(p01, 16) + shr(p10, 16) + shr(mid, 16)


def mul64(a: Words, b: Words) -> Words:
    return a[0] * b[0], mulhi32(a[0], b[0]) + a[0] * b[1] + a[1] * b[0]


def eq64(a: Words, b: Words) -> UOp:
    return land(eq(a[0], b[0]), eq(a[1], b[1]))


def lt64(a: Words, b: Words, signed: bool) -> UOp:
    hi_lt = lt(as_i32(a[1]), as_i32(b[1])) if signed else lt(a[1], b[1])
    return lor(hi_lt, land(eq(a[1], b[1]), lt(a[0], b[0])))


def is_neg(a: Words) -> UOp:
    return lt(as_i32(a[1]), UOp.const(I32, 0))


def shl64(a: Words, n: UOp) -> Words:
    """``a << n`` for n in 0..63 (n is a uint32 count, taken mod 64)."""
    m = band(n, 31)
    big = ne(band(n, 32), 0)
    carry = select(eq(m, 0), 0, shr(a[0], band(32 - m, 31)))
    lo_s, hi_s = shl(a[0], m), bor(shl(a[1], m), carry)
    return select(big, 0, lo_s), select(big, lo_s, hi_s)


def shr64(a: Words, n: UOp, signed: bool) -> Words:
    """``a >> n`` for n in 0..63, arithmetic when ``signed``."""
    m = band(n, 31)
    big = ne(band(n, 32), 0)
    carry = select(eq(m, 0), 0, shl(a[1], band(32 - m, 31)))
    hi_s = shr(as_i32(a[1]), as_i32(m)).cast(U32) if signed else shr(a[1], m)
    fill = sign_word(a[1]) if signed else u32(0)
    return select(big, hi_s, bor(shr(a[0], m), carry)), select(big, fill, hi_s)


def udivmod64(a: Words, b: Words) -> tuple[Words, Words]:
    """Unsigned quotient and remainder by restoring division, one quotient bit per step (b != 0)."""
    r: Words = ZERO
    q_lo, q_hi = u32(0), u32(0)
    for i in range(63, -1, -1):
        word, k = (a[1], i - 32) if i >= 32 else (a[0], i)
        bit = band(shr(word, k), 1)
        top = shr(r[1], 31)  # the bit shifted out of the 64-bit remainder (it can be set when b > 2**63)
        r2: Words = (bor(shl(r[0], 1), bit), bor(shl(r[1], 1), shr(r[0], 31)))
        ge = lor(ne(top, 0), lnot(lt64(r2, b, signed=False)))
        r = where64(ge, sub64(r2, b), r2)
        if i >= 32:
            q_hi = bor(q_hi, shl(b2u(ge), i - 32))
        else:
            q_lo = bor(q_lo, shl(b2u(ge), i))
    return (q_lo, q_hi), r


def divmod64(a: Words, b: Words, signed: bool) -> tuple[Words, Words]:
    """Truncating quotient and remainder with the renderer's rules: x/0 = x%0 = 0, x/-1 = -x (wrapping)."""
    if signed:
        na, nb = is_neg(a), is_neg(b)
        (uq, ur) = udivmod64(where64(na, neg64(a), a), where64(nb, neg64(b), b))
        q, r = where64(bxor(na, nb), neg64(uq), uq), where64(na, neg64(ur), ur)
    else:
        q, r = udivmod64(a, b)
    zero = eq64(b, ZERO)
    return where64(zero, ZERO, q), where64(zero, ZERO, r)


# --- conversions -----------------------------------------------------------------------------------------
def from_narrow(x: UOp) -> Words:
    """Sign- or zero-extend a bool / 8..32-bit integer."""
    d = x.dtype
    assert isinstance(d, DType)
    if d.is_bool or d.is_unsigned:
        return x.cast(U32), u32(0)
    v = x.cast(I32)
    return v.cast(U32), shr(v, 31).cast(U32)


def from_float(x: UOp, signed: bool) -> Words:
    """Truncate a float32 / float64 to 64 bits; NaN and out-of-range values give 0x8000000000000000."""
    if x.dtype not in (F32, F64):
        x = x.cast(F32)
    fd = x.dtype
    assert isinstance(fd, DType)
    hi_limit = 2.0 ** 63 if signed else 2.0 ** 64
    valid = land(lt(x, UOp.const(fd, hi_limit)), lnot(lt(x, UOp.const(fd, -2.0 ** 63))))  # NaN: False
    x = select(valid, x, UOp.const(fd, 0.0))  # keep every float -> uint32 conversion below in range
    t = UOp(Ops.TRUNC, fd, (x,))
    neg = lt(t, UOp.const(fd, 0.0))
    mag = select(neg, -t, t)
    h = UOp(Ops.FLOOR, fd, (mag * UOp.const(fd, 2.0 ** -32),))
    low = mag - h * UOp.const(fd, 2.0 ** 32)  # exact: the low bits of an integral float
    w: Words = (low.cast(U32), h.cast(U32))
    w = where64(neg, neg64(w), w)
    return where64(valid, w, (u32(0), u32(0x80000000)))


def bit_length32(v: UOp) -> UOp:
    """Number of significant bits of a uint32 (0 for 0), by binary search."""
    n = u32(0)
    for step in (16, 8, 4, 2, 1):
        big = lnot(lt(v, u32(1 << step)))
        n = n + select(big, u32(step), u32(0))
        v = select(big, shr(v, step), v)
    return n + v  # v is 0 or 1 here


def to_f32(a: Words, signed: bool) -> UOp:
    """Correctly rounded float32 of a 64-bit value: a sticky 32-bit window, one rounding, exact scaling."""
    neg = is_neg(a) if signed else None
    m = where64(neg, neg64(a), a) if neg is not None else a
    lo, hi = m
    s = bit_length32(hi)  # 1..32 when hi != 0
    inv = band(32 - s, 31)
    window = bor(shl(hi, inv), select(eq(s, 32), 0, shr(lo, band(s, 31))))
    sticky = b2u(ne(band(lo, shr(u32(0xFFFFFFFF), inv)), 0))
    scale = bitcast(shl(s + 127, 23), F32)
    big = bor(window, sticky).cast(F32) * scale
    out = select(eq(hi, 0), lo.cast(F32), big)
    return select(neg, -out, out) if neg is not None else out


def to_f64(a: Words, signed: bool) -> UOp:
    """float64 of a 64-bit value: both word values are exact doubles, so the sum rounds once."""
    hi = as_i32(a[1]).cast(F64) if signed else a[1].cast(F64)
    return hi * UOp.const(F64, 2.0 ** 32) + a[0].cast(F64)


def to_narrow(a: Words, d: DType) -> UOp:
    if d.is_bool:
        return ne(bor(a[0], a[1]), 0)
    return a[0].cast(d)


# --- rules -----------------------------------------------------------------------------------------------
def _signed(d: object) -> bool:
    return d == dtypes.int64


def word_ptr(p: PtrDType, what: str) -> PtrDType:
    """The uint32 pointer type holding ``p``'s 64-bit elements as word pairs."""
    if p.size > 0 and 2 * p.size > MAX_WORDS:
        raise CompileError(f"int64 emulation: {what} of {p.size} elements needs {2 * p.size} 32-bit words, "
                           f"more than int32 indexing reaches ({MAX_WORDS})")
    return PtrDType(U32, 2 * p.size if p.size > 0 else p.size)


def word_global(g: UOp) -> UOp:
    assert isinstance(g.dtype, PtrDType)
    return UOp(Ops.DEFINE_GLOBAL, word_ptr(g.dtype, f"buffer {g.arg}"), (), g.arg)


def word_index(idx: UOp, k: int) -> UOp:
    g2 = word_global(idx.src[0])
    return UOp(Ops.INDEX, g2.dtype, (g2, idx.src[1] * 2 + k))


def long_const(c: UOp) -> UOp | None:
    return pair(c.dtype, const_words(int(c.arg))) if c.dtype in LONGS else None  # type: ignore[arg-type]


def long_load(ld: UOp) -> UOp | None:
    if ld.dtype not in LONGS:
        return None
    idx = ld.src[0]
    return pair(ld.dtype, (UOp(Ops.LOAD, U32, (word_index(idx, 0),)), UOp(Ops.LOAD, U32, (word_index(idx, 1),))))  # type: ignore[arg-type]


def long_store(st: UOp) -> UOp | None:
    idx, val = st.src
    if not is_pair(val):
        return None
    lo, hi = words(val)
    stores = tuple(UOp(Ops.STORE, dtypes.void, (word_index(idx, k), w)) for k, w in enumerate((lo, hi)))
    return UOp(Ops.NOOP, dtypes.void, stores)


def long_sink(sink: UOp) -> UOp | None:
    """Word stores become SINK sources, and the kernel signature declares word buffers."""
    info = sink.arg
    retype = isinstance(info, KernelInfo) and any(p.base in LONGS for p in info.params)
    if not retype and not any(s.op is Ops.NOOP and s.dtype == dtypes.void for s in sink.src):
        return None
    out: list[UOp] = []
    for s in sink.src:
        out.extend(s.src if s.op is Ops.NOOP and s.dtype == dtypes.void else (s,))
    if retype:
        info = KernelInfo(tuple(word_ptr(p, f"parameter {i}") if p.base in LONGS else p
                                for i, p in enumerate(info.params)))
    return UOp(Ops.SINK, sink.dtype, tuple(out), info)


def long_cast(c: UOp) -> UOp | None:
    x, d = c.src[0], c.dtype
    assert isinstance(d, DType)
    if d in LONGS:
        if is_pair(x):
            return pair(d, words(x))
        xd = x.dtype
        assert isinstance(xd, DType)
        if xd.is_float:
            return pair(d, from_float(x, _signed(d)))
        if xd.is_int or xd.is_bool:
            return pair(d, from_narrow(x))
        return None
    if not is_pair(x):
        return None
    signed = _signed(x.dtype)
    if d == F32:
        return to_f32(words(x), signed)
    if d == F64:
        return to_f64(words(x), signed)
    if d.is_float:
        return to_f32(words(x), signed).cast(d)
    return to_narrow(words(x), d)


def long_bitcast(c: UOp) -> UOp | None:
    x, d = c.src[0], c.dtype
    if d in LONGS and is_pair(x):
        return pair(d, words(x))  # type: ignore[arg-type]
    if d in LONGS or is_pair(x):
        src = x.dtype.name if isinstance(x.dtype, DType) else "?"
        raise CompileError(f"int64 emulation: BITCAST {src} -> {d.name} is not decomposed "  # type: ignore[union-attr]
                           "(a float64 cannot be assembled from 32-bit words)")
    return None


def long_cmp(x: UOp) -> UOp | None:
    a, b = x.src
    if not (is_pair(a) and is_pair(b)):
        return None
    wa, wb = words(a), words(b)
    if x.op is Ops.CMPLT:
        return lt64(wa, wb, _signed(a.dtype))
    same = eq64(wa, wb)
    return same if x.op is Ops.CMPEQ else lnot(same)


def long_alu(ctx: frozenset[DType], x: UOp) -> UOp | None:
    d = x.dtype
    if d not in LONGS or x.op in GroupOp.Comparison:
        return None
    assert isinstance(d, DType)
    signed = _signed(d)
    branches = x.src[1:] if x.op is Ops.WHERE else x.src
    if not all(is_pair(s) for s in branches):
        return None
    w = [words(s) for s in branches]
    op = x.op
    out: Words
    if op is Ops.WHERE:
        out = where64(x.src[0], w[0], w[1])
    elif op is Ops.ADD:
        out = add64(w[0], w[1])
    elif op is Ops.SUB:
        out = sub64(w[0], w[1])
    elif op is Ops.NEG:
        out = neg64(w[0])
    elif op is Ops.MUL:
        out = mul64(w[0], w[1])
    elif op is Ops.MULACC:
        out = add64(mul64(w[0], w[1]), w[2])
    elif op in (Ops.IDIV, Ops.MOD):
        q, r = divmod64(w[0], w[1], signed)
        out = q if op is Ops.IDIV else r
    elif op in (Ops.AND, Ops.OR, Ops.XOR):
        fn = {Ops.AND: band, Ops.OR: bor, Ops.XOR: bxor}[op]
        out = fn(w[0][0], w[1][0]), fn(w[0][1], w[1][1])
    elif op is Ops.NOT:
        out = bnot(w[0][0]), bnot(w[0][1])
    elif op is Ops.SHL:
        out = shl64(w[0], band(w[1][0], 63))
    elif op is Ops.SHR:
        out = shr64(w[0], band(w[1][0], 63), signed)
    elif op in (Ops.MAX, Ops.MIN):
        a_lt_b = lt64(w[0], w[1], signed)
        out = where64(a_lt_b, w[1], w[0]) if op is Ops.MAX else where64(a_lt_b, w[0], w[1])
    elif op is Ops.ABS:
        out = where64(is_neg(w[0]), neg64(w[0]), w[0]) if signed else w[0]
    elif op is Ops.POW:
        if F64 not in ctx:
            raise CompileError("int64 emulation: POW on int64 computes through float64, which the target lacks")
        p = UOp(Ops.POW, F64, (to_f64(w[0], signed), to_f64(w[1], signed)))
        out = from_float(p, signed)
    else:
        raise CompileError(f"int64 emulation: no decomposition for {op.name} on {d.name}")
    return pair(d, out)


def long_reduce(r: UOp) -> UOp | None:
    d = r.dtype
    if d not in LONGS:
        return None
    assert isinstance(d, DType)
    value, ranges = r.src[0], r.src[1:]
    if not is_pair(value):
        return None
    lo, hi = words(value)

    def red(op: Ops, v: UOp) -> UOp:
        return UOp(Ops.REDUCE, v.dtype, (v, *ranges), op)

    if r.arg is Ops.ADD:
        n = math.prod(int(rng.src[0].arg) for rng in ranges)
        hi_sum = red(Ops.ADD, hi)
        total: Words = (u32(0), hi_sum)
        if n <= 65537:  # 16-bit pieces: n * 0xffff fits a uint32
            pieces = [(0, red(Ops.ADD, band(lo, 0xFFFF))), (16, red(Ops.ADD, shr(lo, 16)))]
        elif n <= 16843009:  # bytes: n * 0xff fits a uint32
            pieces = [(k, red(Ops.ADD, band(shr(lo, k), 0xFF))) for k in (0, 8, 16, 24)]
        else:
            raise CompileError(f"int64 emulation: REDUCE ADD over {n} elements exceeds the exact word-sum "
                               "limit of 16843009")
        for k, s in pieces:
            total = add64(total, (shl(s, k), shr(s, 32 - k) if k else u32(0)))
        return pair(d, total)
    if r.arg in (Ops.MAX, Ops.MIN):
        key = as_i32(hi) if _signed(d) else hi
        best_hi = red(r.arg, key)
        fill = 0 if r.arg is Ops.MAX else 0xFFFFFFFF
        best_lo = red(r.arg, select(eq(key, best_hi), lo, fill))
        return pair(d, (best_lo, best_hi.cast(U32)))
    raise CompileError(f"int64 emulation: no decomposition for REDUCE {r.arg.name} on {d.name}")


pm_long_decomp = PatternMatcher([
    (UPat(Ops.CONST, name="c"), long_const),
    (UPat(Ops.LOAD, name="ld"), long_load),
    (UPat(Ops.STORE, name="st"), long_store),
    (UPat(Ops.SINK, name="sink"), long_sink),
    (UPat(Ops.CAST, name="c"), long_cast),
    (UPat(Ops.BITCAST, name="c"), long_bitcast),
    (UPat((Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE), name="x"), long_cmp),
    (UPat(GroupOp.ALU, name="x"), long_alu),
    (UPat(Ops.REDUCE, name="r"), long_reduce),
])


def decompose_longs(sink: UOp, native: frozenset[DType]) -> UOp:
    """``sink`` with int64/uint64 as 32-bit word pairs; ``native`` are the dtypes the target computes in
    natively (POW goes through float64 only when it is there)."""
    out = graph_rewrite(sink, pm_long_decomp, ctx=native, name="long decomposition")
    check_gone(out, frozenset(LONGS), "int64 emulation")
    return out

