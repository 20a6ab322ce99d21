"""Emulate float16, bfloat16 and the fp8 formats with float32 compute over integer storage.

Before: a kernel graph (weak dtypes lowered) in which some narrow float dtypes, the ones the policy marks
emulated, appear on buffers, loads, constants, ALU nodes, CASTs and BITCASTs. After: none of them remains.
A buffer of such a dtype is a buffer of its bits (uint16 for float16/bfloat16, uint8 for fp8); a LOAD
converts the bits to float32 exactly; every ALU op computes in float32; a CAST to the format rounds to
nearest-even into the format's bits and back (so ``x.cast(half).cast(float)`` still rounds); a STORE writes
the bits. Values straight from memory or a BITCAST keep their bits, so copies, pads and gathers of narrow
buffers are bit-exact.

Conversions are integer rewrites on the float32 bit pattern and are bit-exact with numpy (float16) and
ml_dtypes (the others) in both directions, subnormals kept:

- float16 and e5m2 (IEEE-like): overflow -> inf. float16 keeps NaN payload bits as numpy does; e5m2 and
  bfloat16 produce a canonical quiet NaN with the sign kept (ml_dtypes);
- e4m3fn: no inf; overflow, inf and NaN -> 0x7f with the sign (the one NaN pattern per sign);
- e4m3fnuz / e5m2fnuz: no inf, no -0; overflow, inf and NaN -> 0x80, which decodes to NaN; -0 -> 0;
- conversions into a format go through float32, rounded to odd where float32 itself is inexact (float64 ->
  float16, and every integer wider than 24 bits): the second rounding then equals a direct, correctly rounded
  one, as numpy and ml_dtypes convert (a plain float32 step would round (1 << 30) + (1 << 22) + 1 to a
  bfloat16 tie and then down).

Saturating conversion (ONNX ``Cast(saturate=1)``) is a clamp the frontend adds before the CAST.

Internally an emulated value is a marker ``NOOP(dtype, (float32 value,))`` or ``NOOP(dtype, (value,
bits))``; consumers outside the format unwrap it, and no marker survives the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jit.codegen.passes.bits import (
    F32,
    F64,
    I32,
    U32,
    b2u,
    band,
    bitcast,
    bor,
    eq,
    land,
    lor,
    lt,
    ne,
    select,
    shl,
    shr,
    u32,
    umin,
)
from jit.common.dtype import DType, PtrDType, dtypes, to_numpy
from jit.common.errors import CompileError
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import GroupOp, Ops, UOp, toposort
from jit.schedule.lower import KernelInfo


@dataclass(frozen=True)
class FloatFormat:
    """Bit layout and special-value convention of one narrow float format."""

    dtype: DType
    storage: DType
    exp_bits: int
    mant_bits: int
    bias: int
    kind: str  # "ieee" (inf and NaN), "fn" (no inf, all-ones is NaN), "fnuz" (0x80 is the only NaN, no -0)


FORMATS: dict[DType, FloatFormat] = {
    dtypes.float16: FloatFormat(dtypes.float16, dtypes.uint16, 5, 10, 15, "ieee"),
    dtypes.bfloat16: FloatFormat(dtypes.bfloat16, dtypes.uint16, 8, 7, 127, "ieee"),
    dtypes.fp8e4m3fn: FloatFormat(dtypes.fp8e4m3fn, dtypes.uint8, 4, 3, 7, "fn"),
    dtypes.fp8e5m2: FloatFormat(dtypes.fp8e5m2, dtypes.uint8, 5, 2, 15, "ieee"),
    dtypes.fp8e4m3fnuz: FloatFormat(dtypes.fp8e4m3fnuz, dtypes.uint8, 4, 3, 8, "fnuz"),
    dtypes.fp8e5m2fnuz: FloatFormat(dtypes.fp8e5m2fnuz, dtypes.uint8, 5, 2, 16, "fnuz"),
}


# --- conversions ---------------------------------------------------------------------------------------
def decode(fmt: FloatFormat, bits: UOp) -> UOp:
    """The float32 value of ``bits`` (the format's storage integer); exact for every pattern."""
    b = bits.cast(U32)
    if fmt.dtype == dtypes.bfloat16:
        return bitcast(shl(b, 16), F32)  # bfloat16 is the top half of a float32, NaN payload included
    e_bits, m_bits, bias = fmt.exp_bits, fmt.mant_bits, fmt.bias
    sign = shl(shr(b, e_bits + m_bits), 31)
    e = band(shr(b, m_bits), (1 << e_bits) - 1)
    m = band(b, (1 << m_bits) - 1)
    normal = bor(bor(sign, shl(e + (127 - bias), 23)), shl(m, 23 - m_bits))
    # subnormal: m * 2^(1-bias-M), a normal float32 for every format here, so the multiply is exact
    sub = bor(bitcast(m.cast(F32) * UOp.const(F32, 2.0 ** (1 - bias - m_bits)), U32), sign)
    out = select(eq(e, 0), sub, normal)
    if fmt.kind == "ieee":
        nan = bor(bor(sign, 0x7F800000), shl(m, 23 - m_bits)) if fmt.dtype == dtypes.float16 else \
            bor(sign, 0x7FC00000)
        out = select(eq(e, (1 << e_bits) - 1), select(eq(m, 0), bor(sign, 0x7F800000), nan), out)
    elif fmt.kind == "fn":
        out = select(eq(band(b, 0x7F), 0x7F), bor(sign, 0x7FC00000), out)
    else:
        out = select(eq(b, 0x80), u32(0xFFC00000), out)
    return bitcast(out, F32)


def encode(fmt: FloatFormat, v: UOp) -> UOp:
    """The format's bits (storage dtype) of float32 ``v``, rounded to nearest-even."""
    u = bitcast(v, U32)
    sign = shr(u, 31)
    a = band(u, 0x7FFFFFFF)
    is_nan = lt(u32(0x7F800000), a)
    e_bits, m_bits, bias = fmt.exp_bits, fmt.mant_bits, fmt.bias
    if fmt.dtype == dtypes.bfloat16:  # same exponent range as float32: one rounding of the top half
        r = shr(a + 0x7FFF + band(shr(a, 16), 1), 16)
        return bor(select(is_nan, 0x7FC0, r), shl(sign, 15)).cast(fmt.storage)
    shift = 23 - m_bits
    # normal result: round the whole magnitude; a carry out of the mantissa bumps the exponent
    r_norm = shr(a + ((1 << (shift - 1)) - 1) + band(shr(a, shift), 1), shift) - ((127 - bias) << m_bits)
    # subnormal result: shift the full significand right by s (clamped to 1..31, a larger s rounds to 0)
    ef = shr(a, 23)
    mf = bor(band(a, 0x7FFFFF), 0x800000)
    s = (UOp.const(I32, 151 - bias - m_bits) - ef.cast(I32)).maximum(1).minimum(31).cast(U32)
    q = shr(mf, s)
    rem = band(mf, shl(u32(1), s) - 1)
    half = shl(u32(1), s - 1)
    up = lor(lt(half, rem), land(eq(rem, half), eq(band(q, 1), 1)))
    r = select(lt(u32(127 - bias), ef), r_norm, q + b2u(up))
    if fmt.kind == "ieee":
        r = umin(r, ((1 << e_bits) - 1) << m_bits)  # overflow and inf -> inf
        if fmt.dtype == dtypes.float16:  # numpy: keep the top payload bits, never turn a NaN into inf
            nan = bor(shr(band(a, 0x7FFFFF), 13), 0x7C00)
            nan = select(eq(nan, 0x7C00), 0x7C01, nan)
        else:
            nan = u32((((1 << e_bits) - 1) << m_bits) | (1 << (m_bits - 1)))
        out = bor(select(is_nan, nan, r), shl(sign, e_bits + m_bits))
    elif fmt.kind == "fn":
        out = bor(umin(r, 0x7F), shl(sign, 7))  # overflow, inf, NaN -> 0x7f (NaN)
    else:
        out = select(lt(u32(0x7F), r), 0x80, select(eq(r, 0), 0, bor(r, shl(sign, 7))))
    return out.cast(fmt.storage)


def round_to_odd_f32(x: UOp) -> UOp:
    """float64 ``x`` rounded to float32 by round-to-odd: a later rounding to <= 22 bits then equals a direct one."""
    f = x.cast(F32)
    back = f.cast(F64)
    inexact = land(ne(back, x), eq(x, x))
    fb = bitcast(f, U32)
    toward_zero = select(lt(UOp(Ops.ABS, F64, (x,)), UOp(Ops.ABS, F64, (back,))), fb - 1, fb)
    return bitcast(select(inexact, bor(toward_zero, 1), fb), F32)


def int_round_to_odd_f32(x: UOp) -> UOp:
    """An integer wider than float32's 24-bit significand as a float32 that a later rounding to <= 22 bits turns
    into the correctly rounded result: the magnitude is cut to its top 17-24 bits (a shift by a multiple of 8)
    with every dropped bit ORed into the lowest kept one, which lies below any such rounding position."""
    unsigned = dtypes.uint64 if x.dtype.itemsize == 8 else U32
    bits = bitcast(x, unsigned)
    magnitude = bits if x.dtype.is_unsigned else select(lt(x, 0), bits.const_like(0) - bits, bits)
    fits = magnitude.const_like(1 << 24)
    value = magnitude.cast(F32)  # exact below 2**24
    for shift in range(8, 8 * x.dtype.itemsize - 16, 8):  # the smallest shift whose kept part fits 24 bits wins
        kept = bor(shr(magnitude, shift), ne(band(magnitude, (1 << shift) - 1), 0).cast(unsigned))
        scaled = kept.cast(F32) * UOp.const(F32, float(1 << shift))
        value = select(lt(shr(magnitude, shift - 8), fits), value, scaled)
    return value if x.dtype.is_unsigned else select(lt(x, 0), -value, value)


def to_f32(fmt: FloatFormat, x: UOp) -> UOp:
    """A non-emulated value as the float32 the format's rounding starts from."""
    if x.dtype == F32:
        return x
    if x.dtype == F64 and fmt.dtype == dtypes.float16:
        return round_to_odd_f32(x)
    if x.dtype.is_int and x.dtype.itemsize >= 4:
        return int_round_to_odd_f32(x)
    return x.cast(F32)


def const_bits(fmt: FloatFormat, value: float) -> int:
    """The storage bits of a constant (already rounded to the format), from numpy / ml_dtypes."""
    arr = np.array([value], dtype=np.float64).astype(to_numpy(fmt.dtype))
    return int(arr.view(to_numpy(fmt.storage))[0])


# --- the pass ------------------------------------------------------------------------------------------
def marker(d: DType, value: UOp, bits: UOp | None = None) -> UOp:
    return UOp(Ops.NOOP, d, (value,) if bits is None else (value, bits))


def is_marker(u: UOp, ctx: frozenset[DType]) -> bool:
    return u.op is Ops.NOOP and u.dtype in ctx


def _value(u: UOp, ctx: frozenset[DType]) -> UOp:
    return u.src[0] if is_marker(u, ctx) else u


def _bits(u: UOp, ctx: frozenset[DType]) -> UOp:
    """The storage bits of an emulated value (its own when it came from memory, else encoded)."""
    assert isinstance(u.dtype, DType)
    if not is_marker(u, ctx):
        raise CompileError(f"float emulation: expected an emulated {u.dtype.name} value, got {u.op.name}")
    return u.src[1] if len(u.src) == 2 else encode(FORMATS[u.dtype], u.src[0])


def storage_global(g: UOp, storage: DType) -> UOp:
    assert isinstance(g.dtype, PtrDType)
    return UOp(Ops.DEFINE_GLOBAL, PtrDType(storage, g.dtype.size), (), g.arg)


def emu_const(ctx: frozenset[DType], c: UOp) -> UOp | None:
    if c.dtype not in ctx:
        return None
    fmt = FORMATS[c.dtype]  # type: ignore[index]
    return marker(fmt.dtype, UOp.const(F32, c.arg), UOp.const(fmt.storage, const_bits(fmt, c.arg)))


def emu_sink(ctx: frozenset[DType], sink: UOp) -> UOp | None:
    """The kernel signature declares the storage integer for every emulated buffer."""
    info = sink.arg
    if not isinstance(info, KernelInfo) or not any(p.base in ctx for p in info.params):
        return None
    params = tuple(PtrDType(FORMATS[p.base].storage, p.size) if p.base in ctx else p for p in info.params)
    return UOp(Ops.SINK, sink.dtype, sink.src, KernelInfo(params))


def emu_load(ctx: frozenset[DType], ld: UOp) -> UOp | None:
    if ld.dtype not in ctx:
        return None
    fmt = FORMATS[ld.dtype]  # type: ignore[index]
    idx = ld.src[0]
    g2 = storage_global(idx.src[0], fmt.storage)
    bits = UOp(Ops.LOAD, fmt.storage, (UOp(Ops.INDEX, g2.dtype, (g2, idx.src[1])),))
    return marker(fmt.dtype, decode(fmt, bits), bits)


def emu_store(ctx: frozenset[DType], st: UOp) -> UOp | None:
    idx, val = st.src
    g = idx.src[0]
    if not isinstance(g.dtype, PtrDType) or g.dtype.base not in ctx:
        return None
    fmt = FORMATS[g.dtype.base]
    g2 = storage_global(g, fmt.storage)
    return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, g2.dtype, (g2, idx.src[1])), _bits(val, ctx)))


def emu_cast(ctx: frozenset[DType], c: UOp) -> UOp | None:
    if c.dtype not in ctx:
        return None
    fmt = FORMATS[c.dtype]  # type: ignore[index]
    x = c.src[0]
    if is_marker(x, ctx) and x.dtype == c.dtype:
        return x
    v = x.src[0] if is_marker(x, ctx) else to_f32(fmt, x)
    bits = encode(fmt, v)
    return marker(fmt.dtype, decode(fmt, bits), bits)


def emu_bitcast(ctx: frozenset[DType], c: UOp) -> UOp | None:
    x = c.src[0]
    if c.dtype in ctx:
        fmt = FORMATS[c.dtype]  # type: ignore[index]
        bits = _bits(x, ctx) if is_marker(x, ctx) else x
        bits = bitcast(bits, fmt.storage)
        return marker(fmt.dtype, decode(fmt, bits), bits)
    if is_marker(x, ctx):
        return bitcast(_bits(x, ctx), c.dtype)  # type: ignore[arg-type]
    return None


def emu_alu(ctx: frozenset[DType], x: UOp) -> UOp | None:
    if x.dtype not in ctx:
        return None
    value = UOp(x.op, F32, tuple(_value(s, ctx) for s in x.src), x.arg)
    if x.op is Ops.WHERE and all(is_marker(s, ctx) and len(s.src) == 2 for s in x.src[1:]):
        return marker(x.dtype, value, x.src[0].where(x.src[1].src[1], x.src[2].src[1]))  # type: ignore[arg-type]
    return marker(x.dtype, value)  # type: ignore[arg-type]


def unwrap(ctx: frozenset[DType], x: UOp) -> UOp | None:
    """A consumer outside the emulated formats reads the float32 value."""
    if is_marker(x, ctx) or not any(is_marker(s, ctx) for s in x.src):
        return None
    return x.replace(src=tuple(_value(s, ctx) for s in x.src))


pm_float_emulation = PatternMatcher([
    (UPat(Ops.CONST, name="c"), emu_const),
    (UPat(Ops.LOAD, name="ld"), emu_load),
    (UPat(Ops.STORE, name="st"), emu_store),
    (UPat(Ops.SINK, name="sink"), emu_sink),
    (UPat(Ops.CAST, name="c"), emu_cast),
    (UPat(Ops.BITCAST, name="c"), emu_bitcast),
    (UPat(GroupOp.ALU | {Ops.REDUCE}, name="x"), emu_alu),
    (UPat(name="x"), unwrap),
])


def check_gone(sink: UOp, gone: frozenset[DType], what: str) -> None:
    """CompileError naming the first node (sources first) that still carries one of ``gone``."""
    if isinstance(sink.arg, KernelInfo):
        for i, p in enumerate(sink.arg.params):
            if p.base in gone:
                raise CompileError(f"{what}: kernel parameter {i} still declared {p.base.name}")
    for u in toposort([sink]):
        d = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        if d in gone or any(s.op is Ops.NOOP and s.dtype in gone for s in u.src):
            name = d.name if isinstance(d, DType) else str(d)
            raise CompileError(f"{what}: no decomposition for {u.op.name} on {name}")


def emulate_floats(sink: UOp, floats: frozenset[DType]) -> UOp:
    """``sink`` with every dtype in ``floats`` emulated (a no-op when ``floats`` is empty)."""
    if not floats:
        return sink
    out = graph_rewrite(sink, pm_float_emulation, ctx=floats, name="float emulation")
    check_gone(out, floats, "float emulation")
    return out
