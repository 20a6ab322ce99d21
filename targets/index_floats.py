"""Float ranges of the interval evaluation (targets/index_walk.py), as narrow as a clamped index needs.

A float is ``Opaque`` (any value, NaN included) unless this module proves it ``Floats``: never NaN, and each lane
within an inclusive range. Only these things give one: a float literal (its value, or the two floats around it
where the text does not name one exactly); a select or ternary picking a variable where a comparison held,
which a NaN fails (``lo < x ? x : lo`` is ``x`` only where ``x > lo``, else ``lo``); conversions that keep a
value (to the same float type, or a scalar widened); a sum or difference of finite ranges (the bounds' sums rounded
as the type rounds: rounding is monotone); and the monotone roundings ``rint``, ``floor``,
``ceil``, ``trunc`` and ``round`` of one. A conversion of a ``Floats`` to an integer type gives the truncated
range (C's conversion, OpenCL's default ``_rtz``; the other rounding modes round outward here) where it fits the
type; everything else about floats (products, other math calls) forgets the range. A comparison that did not
hold says nothing where either side may be NaN, since NaN fails every ``<``, ``<=``, ``>``, ``>=``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from targets.index_parse import CType, Expr
from targets.index_values import Floats, Ints, Opaque, Value, bounds

FloatLane = tuple[float, float] | None  # a lane's range; None: any value, NaN included
NEGATE = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}  # for NaN-free sides only


def literal(e: Expr) -> Floats:
    """A float literal ``("num", None, suffix, text)``: float where suffixed ``f``, else double. The range holds
    the float32 values around the literal's double value: the compiler's rounding of the decimal text is one
    of them (and an unsuffixed literal, a double, lies between them too, so a device that reads it as a float
    is covered as well)."""
    return _literal(e[2], e[3])


@lru_cache(maxsize=4096)  # kernels repeat their literals (every lane of a vector constant): the same Floats
def _literal(suffix: str, text: str) -> Floats:
    v = float(text)
    f = float(np.float32(v)) if v <= float(np.finfo(np.float32).max) else math.inf
    lo = f if f <= v else float(np.nextafter(np.float32(f), np.float32(-np.inf)))
    hi = f if f >= v else float(np.nextafter(np.float32(f), np.float32(np.inf)))
    return Floats(((lo, hi),), CType("float", 4 if suffix == "f" else 8))


def lanes(v: Value, n: int) -> list[FloatLane] | None:
    """``v``'s ``n`` lanes (a scalar to every lane) as float ranges; None where ``v`` is not a float value of
    1 or ``n`` lanes."""
    if isinstance(v, Floats) and len(v.lanes) in (1, n):
        return list(v.lanes * n if len(v.lanes) == 1 else v.lanes)
    if isinstance(v, Opaque) and v.t.kind == "float" and v.t.lanes in (1, n):
        return [None] * n
    return None


def narrow(r: FloatLane, op: str, k: FloatLane, held: bool) -> tuple[bool, FloatLane]:
    """Lane ``r`` where ``r op k`` evaluated to ``held``: (whether that can happen, ``r`` narrowed). A comparison
    that held had neither side NaN; one that failed narrows only where neither side may be NaN."""
    if not held:
        if r is None or k is None:
            return True, r
        op = NEGATE[op]
    if op not in ("<", "<=", ">", ">=", "=="):
        return True, r
    lo, hi = r if r is not None else (-math.inf, math.inf)
    k_lo, k_hi = k if k is not None else (-math.inf, math.inf)
    if op in ("<", "<=", "=="):
        hi = min(hi, k_hi)
    if op in (">", ">=", "=="):
        lo = max(lo, k_lo)
    return lo <= hi, (lo, hi)


def join_lanes(t: CType, a: list[FloatLane | bool], b: list[FloatLane | bool]) -> Value:
    """Per lane one of ``a``'s or ``b``'s values (False: that side never gives this lane): ``Floats`` where
    every lane is bounded, else ``Opaque``."""
    out = []
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            return Opaque(t)
        picked = [r for r in (x, y) if r is not False]
        if not picked:  # neither side for this lane: cannot happen, so say nothing
            return Opaque(t)
        out.append((min(r[0] for r in picked), max(r[1] for r in picked)))  # type: ignore[index]
    return Floats(tuple(out), t)


def cast(v: Floats, t: CType, value_conversion: bool, rounding: str = "") -> Value:
    """``v`` converted to ``t``. ``value_conversion``: a conversion of each lane's value (C's scalar casts,
    ``__builtin_convertvector``, OpenCL's ``convert_T`` and its scalar-to-vector literal); else a vector cast,
    which GCC reads as the same bits. ``rounding``: an OpenCL ``convert_T`` mode (``_rte``, ``_rtz``, ...)."""
    n = t.lanes
    src = v.lanes * n if len(v.lanes) == 1 and n > 1 and value_conversion else v.lanes
    if len(src) != n:
        return Ints.full(t) if t.kind == "int" else Opaque(t)
    if t.kind == "float":
        same = t.size == v.t.size
        widened = value_conversion and t.size > v.t.size
        return Floats(tuple(src), t) if same or widened else Opaque(t)
    if t.kind != "int" or t.boolean or not value_conversion:
        return Ints.full(t) if t.kind == "int" else Opaque(t)
    out = []
    for lo, hi in src:
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return Ints.full(t)
        r = (math.trunc(lo), math.trunc(hi)) if rounding in ("", "_rtz") else (math.floor(lo), math.ceil(hi))
        t_lo, t_hi = bounds(t)
        if not t_lo <= r[0] <= r[1] <= t_hi:
            return Ints.full(t)  # the conversion overflows: undefined in C, any value here
        out.append(r)
    return Ints(tuple(out), t)


def negate(v: Floats) -> Floats:
    """``-v``: exact for floats."""
    return Floats(tuple((-hi, -lo) for lo, hi in v.lanes), v.t)


def _down(v: float, t: CType) -> float:
    """The largest value of type ``t`` (float or double) at most ``v``."""
    if t.size == 8:
        return v
    f = np.float32(v)
    return float(f if f <= v else np.nextafter(f, np.float32(-np.inf)))


def _up(v: float, t: CType) -> float:
    return -_down(-v, t)


def add_sub(op: str, a: Floats, b: Floats) -> Value:
    """``a + b`` or ``a - b`` (``op``) lane by lane, computed as type float or double (the wider operand's, as C
    and OpenCL evaluate it); ``Opaque`` for half, where a bound is infinite (inf - inf is NaN) or the lanes do not
    pair. Rounding to nearest is monotone, so the rounded sums of the bounds hold every rounded sum of the lanes'
    values."""
    n = max(len(a.lanes), len(b.lanes))
    t = a.t if a.t.size >= b.t.size else b.t
    t = t if t.lanes >= n else CType(t.kind, t.size, t.signed, n)
    if t.size not in (4, 8) or 1 < min(len(a.lanes), len(b.lanes)) != n:
        return Opaque(t)
    wide = np.float64 if t.size == 8 else np.float32
    out = []
    for (a_lo, a_hi), (b_lo, b_hi) in zip(a.lanes * (n // len(a.lanes)), b.lanes * (n // len(b.lanes)), strict=True):
        if not all(math.isfinite(v) for v in (a_lo, a_hi, b_lo, b_hi)):
            return Opaque(t)
        lo_a, hi_a = wide(_down(a_lo, t)), wide(_up(a_hi, t))
        lo_b, hi_b = wide(_down(b_lo, t)), wide(_up(b_hi, t))
        with np.errstate(over="ignore"):
            lo, hi = (lo_a + lo_b, hi_a + hi_b) if op == "+" else (lo_a - hi_b, hi_a - lo_b)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return Opaque(t)
        out.append((float(lo), float(hi)))
    return Floats(tuple(out), t)


ROUNDINGS = {"rint": round, "nearbyint": round, "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
             "round": lambda v: math.floor(v + 0.5) if v >= 0 else math.ceil(v - 0.5)}
ROUNDINGS |= {f"{k}f": f for k, f in ROUNDINGS.items()}


def rounded(name: str, v: Floats) -> Floats:
    """A rounding function ``name`` (a key of ``ROUNDINGS``) of ``v``: each bound rounded, as the function is
    monotone; infinite bounds stay."""
    f = ROUNDINGS[name]
    return Floats(tuple(tuple(float(f(b)) if math.isfinite(b) else b for b in r) for r in v.lanes), v.t)


def ordered_max_min(op: str, n: int, a: Value, b: Value) -> Value:
    """``a > b ? a : b`` (op max) or ``a < b ? a : b`` (min) over ``n`` float32 lanes (targets/minmax.py): where
    ``b`` may be NaN, anything; where only ``a`` may be, ``b``'s lane or beyond it (NaN fails the comparison and
    gives ``b``); else the larger (smaller) of each bound."""
    t = CType("float", 4, True, n)
    la, lb = lanes(a, n), lanes(b, n)
    if la is None or lb is None or any(y is None for y in lb):
        return Opaque(t)
    pick = max if op == "max" else min
    out = []
    for x, y in zip(la, lb, strict=True):
        assert y is not None
        if x is None:  # NaN in a gives b: a max is at least b's, a min at most
            out.append((y[0], math.inf) if op == "max" else (-math.inf, y[1]))
        else:
            out.append((pick(x[0], y[0]), pick(x[1], y[1])))
    return Floats(tuple(out), t)
