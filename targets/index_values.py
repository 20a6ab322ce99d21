"""The values of the interval evaluation of a kernel body (targets/index_walk.py) and their arithmetic.

``Ints`` (one integer range per lane, with the C type that wraps them), ``Floats`` (one float range per lane, of a
value that is never NaN: targets/index_floats.py), ``Opaque`` (any other float, NaN included, or anything whose
value does not matter to an address), ``Ptr`` (a buffer parameter or local array, plus a range of byte offsets),
``Img`` (an image parameter) and ``Addr`` (the address of a local variable, for ``__builtin_memcpy``). The
functions take ranges over unbounded integers and give C's results: ``wrap`` applies a type's wrapping.
"""

from __future__ import annotations

from dataclasses import dataclass

from targets.index_parse import CType, IndexParseError

INT = CType("int", 4, True)


def bounds(t: CType) -> tuple[int, int]:
    bits = 8 * t.size
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t.signed else (0, (1 << bits) - 1)


def wrap(r: tuple[int, int] | None, t: CType, overflow_ok: bool) -> tuple[int, int]:
    """Range ``r`` as a value of int type ``t``: kept where it fits; reduced modulo 2**bits when it wraps as one
    piece and wrapping is defined (a cast, or unsigned arithmetic); else every value of ``t``."""
    lo_t, hi_t = bounds(t)
    if r is None:
        return lo_t, hi_t
    lo, hi = r
    if lo_t <= lo and hi <= hi_t:
        return lo, hi
    m = 1 << (8 * t.size)
    if not (overflow_ok or not t.signed) or hi - lo >= m:
        return lo_t, hi_t
    lo2 = (lo - lo_t) % m + lo_t
    return (lo2, lo2 + hi - lo) if lo2 + hi - lo <= hi_t else (lo_t, hi_t)


@dataclass(frozen=True)
class Ints:
    """Integers: one inclusive range per lane (one lane: a scalar) of C type ``t``."""

    lanes: tuple[tuple[int, int], ...]
    t: CType

    @staticmethod
    def full(t: CType) -> Ints:
        return Ints((bounds(t),) * t.lanes, t)

    @staticmethod
    def const(v: int, t: CType = INT) -> Ints:
        return Ints(((v, v),), t)


@dataclass(frozen=True)
class Floats:
    """Floats that are never NaN: one inclusive range per lane (bounds may be infinite) of C float type ``t``.
    Only what targets/index_floats.py proves (literals, clamping selects) is one; everything else float is
    ``Opaque``."""

    lanes: tuple[tuple[float, float], ...]
    t: CType


@dataclass(frozen=True)
class Opaque:
    """A value whose bits no address depends on (floats) of type ``t``."""

    t: CType


@dataclass(frozen=True)
class Ptr:
    """An address: ``base`` plus a byte offset in ``lo..hi``."""

    base: int | str  # a parameter index, or a local array's declaration ("name#k")
    lo: int | None  # byte offsets from the base; None: unbounded
    hi: int | None
    t: CType


@dataclass(frozen=True)
class Img:
    """Image parameter ``param`` (read through dp_read_image only)."""

    param: int


@dataclass(frozen=True)
class Addr:
    """The address of local variable ``name`` (a memcpy's local side)."""

    name: str


Value = Ints | Floats | Opaque | Ptr | Img | Addr | None


def unknown(t: CType) -> Value:
    """Any value of type ``t`` (a pointer: to no known base)."""
    if t.kind == "int":
        return Ints.full(t)
    if t.kind == "ptr":
        return Ptr("?", None, None, t)
    return Opaque(t)


def _join_ranges(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return min(a[0], b[0]), max(a[1], b[1])


def join(a: Value, b: Value) -> Value:
    """The least value holding both ``a`` and ``b`` (either branch of a condition)."""
    if isinstance(a, Ints) and isinstance(b, Ints) and len(a.lanes) == len(b.lanes):
        return Ints(tuple(_join_ranges(x, y) for x, y in zip(a.lanes, b.lanes, strict=True)), a.t)
    if isinstance(a, Ptr) and isinstance(b, Ptr) and a.base == b.base and a.t.pointee == b.t.pointee:
        if a.lo is None or b.lo is None or a.hi is None or b.hi is None:
            return Ptr(a.base, None, None, a.t)
        return Ptr(a.base, min(a.lo, b.lo), max(a.hi, b.hi), a.t)
    if isinstance(a, Floats) and isinstance(b, Floats) and len(a.lanes) == len(b.lanes) and a.t == b.t:
        return Floats(tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a.lanes, b.lanes, strict=True)), a.t)
    if a == b:
        return a
    a, b = opaque(a), opaque(b)  # floats of other types or widths: only that they are floats
    if isinstance(a, Opaque) and isinstance(b, Opaque | Ints):
        return a
    if isinstance(b, Opaque) and isinstance(a, Ints):
        return b
    raise IndexParseError("expected both branches of a condition to hold the same kind of value")


def arith_type(a: CType, b: CType) -> CType:
    """C's usual arithmetic conversions of two integer types (vectors keep their own type)."""
    if a.lanes > 1 or b.lanes > 1:
        return a if a.lanes > 1 else b
    a = a if a.size >= 4 else INT
    b = b if b.size >= 4 else INT
    if a.size != b.size:
        return a if a.size > b.size else b
    return a if not a.signed else b


def _div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def int_op(op: str, x: tuple[int, int], y: tuple[int, int], bits: int) -> tuple[int, int] | None:
    """The range of ``x op y`` over unbounded integers (None: not bounded by this analysis)."""
    (a, b), (c, d) = x, y
    if op == "+":
        return a + c, b + d
    if op == "-":
        return a - d, b - c
    if op == "*":
        p = (a * c, a * d, b * c, b * d)
        return min(p), max(p)
    if op in ("/", "%"):
        if c <= 0 <= d:
            return None
        if op == "/":
            q = [_div(p, r) for p in (a, b) for r in (c, d)]
            return min(q), max(q)
        m = max(abs(c), abs(d)) - 1
        if 0 <= a and b <= min(abs(c), abs(d)) - 1:
            return a, b
        return (0 if a >= 0 else -m, m if b > 0 else 0) if a >= 0 or b <= 0 else (-m, m)
    if op in ("<<", ">>"):
        if c < 0 or d >= bits:
            return None
        if op == "<<":
            p = (a << c, a << d, b << c, b << d)
            return min(p), max(p)
        p = (a >> c, a >> d, b >> c, b >> d)
        return min(p), max(p)
    if op == "&":
        if a >= 0 and c >= 0:
            return 0, min(b, d)
        if a >= 0 or c >= 0:
            return 0, b if a >= 0 else d
        return None
    if op in ("|", "^"):
        if a >= 0 and c >= 0:
            return (max(a, c) if op == "|" else 0), (1 << max(b, d).bit_length()) - 1
        return None
    return None


def compare(op: str, x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    """0/1 range of ``x op y``: decided where the ranges decide it."""
    (a, b), (c, d) = x, y
    always = {"<": b < c, "<=": b <= c, ">": a > d, ">=": a >= d, "==": a == b == c == d, "!=": b < c or d < a}
    never = {"<": a >= d, "<=": a > d, ">": b <= c, ">=": b < c, "==": b < c or d < a, "!=": a == b == c == d}
    return (1, 1) if always[op] else (0, 0) if never[op] else (0, 1)


def narrow(r: tuple[int, int], op: str, k: tuple[int, int]) -> tuple[int, int] | None:
    """``r`` restricted to the values ``v`` for which ``v op k`` may hold (None: none)."""
    lo, hi = r
    if op == "<":
        hi = min(hi, k[1] - 1)
    elif op == "<=":
        hi = min(hi, k[1])
    elif op == ">":
        lo = max(lo, k[0] + 1)
    elif op == ">=":
        lo = max(lo, k[0])
    elif op == "==":
        lo, hi = max(lo, k[0]), min(hi, k[1])
    elif op == "!=" and k[0] == k[1]:
        lo, hi = lo + (lo == k[0]), hi - (hi == k[0])
    return (lo, hi) if lo <= hi else None




def lanes_of(v: Value) -> int:
    """The lanes of a value (1: a scalar)."""
    return len(v.lanes) if isinstance(v, Ints | Floats) else v.t.lanes if isinstance(v, Opaque) else 1


def opaque(v: Value) -> Value:
    """``v`` with what is known of a float's range forgotten (``Floats`` as ``Opaque``; anything else as is)."""
    return Opaque(v.t) if isinstance(v, Floats) else v
