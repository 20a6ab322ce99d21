"""The calls of the renderer's vocabulary, evaluated over intervals (for targets/index_walk.py).

Memory: ``vloadN(k, p)`` / ``vstoreN(v, k, p)`` access N elements at ``p + k*N``; ``__builtin_memcpy(dst, src,
n)`` accesses ``n`` bytes at a pointer side and may only read or fill a local of at least ``n`` bytes on the
other; ``__builtin_prefetch(p, 0, 3)`` is checked as a read of the byte at ``p``; ``dp_read_image(img, i,
width)`` reads element ``i`` of an image in rows of ``width`` texels;
``dp_scatter_<dtype>x16(p, i, v)`` stores lane l at ``p + i[l]``; ``dp_max_float32x<n>(a, b)`` is ``a > b ? a :
b`` lane by lane (``dp_min_...`` the same with ``<``: targets/index_floats.py ``ordered_max_min``). Work-item
functions give the launch's ranges. Conversions, lane selects and shuffles, integer min/max/clamp keep ranges
(a conversion of a NaN-free float to an integer type gives its truncated range: targets/index_floats.py); math
gives an opaque value. Any other call (or a pointer handed to one of these where it reads no memory) is an
IndexParseError: this evaluation does not know what it touches.
"""

from __future__ import annotations

import re
from typing import Protocol

from targets import index_floats
from targets.index_parse import CType, Expr, IndexParseError, scalar_type
from targets.index_select import select_call
from targets.index_values import INT, Addr, Floats, Img, Ints, Opaque, Ptr, Value, lanes_of, opaque, unknown, wrap
from targets.minmax import MINMAX_CALLS
from targets.scatter import SCATTER_CALLS


class Walker(Protocol):
    """What these calls use of targets/index_walk.py's evaluator."""

    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    images: dict[int, tuple[int, int, set[int]]]

    def eval(self, e: Expr) -> Value: ...

    def pure(self, e: Expr) -> Value: ...

    def scalar(self, v: Value) -> tuple[int, int]: ...

    def convert(self, v: Value, t: CType, cast: bool) -> Value: ...

    def convert_lanes(self, v: Value, t: CType, rounding: str = "") -> Value: ...

    def access(self, p: Value, extra: int, nbytes: int) -> None: ...

    def slot(self, name: str) -> tuple[int, list]: ...

    def set_local(self, name: str, value: Value) -> Value: ...

_MATH = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "trunc", "floor",
    "ceil", "rint", "round", "nearbyint", "fabs", "fmod", "remainder", "pow", "powr", "fmax", "fmin", "fma",
    "copysign", "hypot", "ldexp", "mad"})
_MATH = _MATH | {f"{m}f" for m in _MATH}  # C's float32 spellings
_FLOAT_CONSTANTS = frozenset({"__builtin_nanf", "__builtin_nan", "__builtin_inff", "__builtin_inf"})
_PREDICATES = frozenset({"isnan", "isinf", "isfinite", "signbit", "__builtin_isnan", "__builtin_isinf"})
_CONVERT = re.compile(r"(convert|as)_([a-z]+(?:2|3|4|8|16)?)((?:_rte|_rtz|_sat)*)")
_VLOAD = re.compile(r"v(load|store)(2|3|4|8|16)")
_WORK_ITEM = frozenset({"get_global_id", "get_local_id", "get_group_id", "get_local_size", "get_global_size",
                        "get_num_groups"})
ATOMICS = {"atomic_inc": 1, "atomic_add": 2}  # a team's counters (targets/cstyle/chains.py render_team): arguments
_FENCES = frozenset({"CLK_LOCAL_MEM_FENCE", "CLK_GLOBAL_MEM_FENCE", "CLK_IMAGE_MEM_FENCE"})
FLOAT = CType("float", 4)
SIZE_T = CType("int", 8, False)


def call(w: Walker, name: str, args: tuple[Expr, ...]) -> Value:
    """The value of ``name(args)``, recording the memory it accesses."""
    if name in ("barrier", "mem_fence"):
        if any(x[0] != "id" or x[1] not in _FENCES for x in _leaves(args)):
            raise IndexParseError(f"expected {name} of fence flags")
        return None
    if name in _WORK_ITEM:
        return work_item(w, name, args)
    if name == "select":
        return select_call(w, args)
    values = [w.eval(a) if a[0] != "type" else a[1] for a in args]
    if any(isinstance(v, Img) for v in values) and name != "dp_read_image":
        raise IndexParseError(f"expected images read by dp_read_image only, got one passed to {name}")
    if m := _VLOAD.fullmatch(name):
        return vector_access(w, m.group(1) == "store", int(m.group(2)), values)
    if name == "__builtin_memcpy":
        return memcpy(w, values)
    if name == "__builtin_prefetch":
        return prefetch(w, values)
    if name in SCATTER_CALLS:
        return scatter(w, name, values)
    if name == "dp_read_image":
        return read_image(w, values)
    if name in ATOMICS:
        return atomic(w, name, values)
    if any(isinstance(v, Ptr | Addr) for v in values):
        raise IndexParseError(f"expected no address passed to {name}, which this analysis does not follow")
    if name in MINMAX_CALLS and len(values) == 2:
        return index_floats.ordered_max_min(*MINMAX_CALLS[name], values[0], values[1])
    if name in index_floats.ROUNDINGS and len(values) == 1 and isinstance(values[0], Floats):
        return index_floats.rounded(name, values[0])
    if name in _MATH or name in ("max", "min", "clamp") and not all(isinstance(v, Ints) for v in values):
        first = next((v for v in values if isinstance(v, Opaque | Floats)), None)
        return Opaque(first.t if first is not None else FLOAT)
    if name in _FLOAT_CONSTANTS:
        return Opaque(FLOAT)
    if name in _PREDICATES:
        n = lanes_of(values[0]) if values else 1
        return Ints(((-1, 0) if n > 1 else (0, 1),) * n, CType("int", 4, True, n))
    if name in ("max", "min", "clamp"):
        return min_max(name, values)  # type: ignore[arg-type]
    if name in ("shuffle", "shuffle2", "__builtin_shuffle"):
        return shuffle(values)
    if name == "__builtin_convertvector":
        if len(values) != 2 or not isinstance(values[1], CType):
            raise IndexParseError("expected __builtin_convertvector(value, type)")
        return w.convert_lanes(values[0], values[1])
    if m := _CONVERT.fullmatch(name):
        t = scalar_type(m.group(2))
        if t is None or len(values) != 1:
            raise IndexParseError(f"expected a conversion to a vector or scalar type, got {name}")
        # a rounding mode other than toward zero rounds outward here; _sat changes nothing for a value that fits
        rounding = "_rte" if "_rte" in m.group(3) else ""
        return w.convert_lanes(values[0], t, rounding) if m.group(1) == "convert" else reinterpret(values[0], t)
    if name.startswith("dp_ipow_"):
        v = values[0] if values else None
        return Ints.full(v.t) if isinstance(v, Ints) else Ints.full(INT)
    raise IndexParseError(f"expected a call of the renderer's vocabulary, got {name}(")


def work_item(w: Walker, name: str, args: tuple[Expr, ...]) -> Value:
    """The work-item functions of dimension ``d`` over the launch: OpenCL returns 0 (ids) or 1 (sizes) past the
    launch's dimensions."""
    dim = w.scalar(w.eval(args[0])) if len(args) == 1 else (-1, -1)
    if dim[0] != dim[1] or not 0 <= dim[0] <= 2:
        raise IndexParseError(f"expected {name}(d) with a constant d in 0..2")
    d, g = dim[0], w.global_size
    if d >= len(g):
        return Ints.const(1 if name.endswith(("_size", "_groups")) else 0, SIZE_T)
    local = (1, g[d]) if w.local_size is None else (min(w.local_size[d], g[d]),) * 2
    groups = (1, g[d]) if w.local_size is None else ((g[d] + w.local_size[d] - 1) // max(w.local_size[d], 1),) * 2
    r = {"get_global_id": (0, g[d] - 1), "get_local_id": (0, local[1] - 1), "get_group_id": (0, groups[1] - 1),
         "get_local_size": local, "get_global_size": (g[d], g[d]), "get_num_groups": groups}[name]
    return Ints((r,), SIZE_T)


def vector_access(w: Walker, store: bool, n: int, values: list) -> Value:
    if len(values) != (3 if store else 2):
        raise IndexParseError(f"expected v{'store' if store else 'load'}{n} of {3 if store else 2} arguments")
    value, (k, p) = (values[0], values[1:]) if store else (None, values)
    if not isinstance(p, Ptr) or p.t.pointee is None:
        raise IndexParseError(f"expected v{'store' if store else 'load'}{n}({'value, ' if store else ''}offset, "
                              f"pointer)")
    lo, hi = w.scalar(k)
    size = p.t.pointee.nbytes
    if p.lo is None or p.hi is None:
        w.access(p, 0, 0)  # refused: unbounded
    w.access(Ptr(p.base, p.lo + lo * n * size, p.hi + hi * n * size, p.t), 0, n * size)  # type: ignore[operator]
    if store:
        if isinstance(value, Ptr | Img | Addr):
            raise IndexParseError("expected a value stored, got an address")
        return None
    lane = p.t.pointee
    return unknown(CType(lane.kind, lane.size, lane.signed, n))


def scatter(w: Walker, name: str, values: list) -> Value:
    """``dp_scatter_<dtype>x<lanes>(p, i, v)`` (targets/scatter.py): lane l of ``v`` stored at ``p + i[l]``."""
    size, lanes = SCATTER_CALLS[name]
    if len(values) != 3 or not isinstance(p := values[0], Ptr) or p.t.pointee is None or \
            p.t.pointee.nbytes != size or not isinstance(idx := values[1], Ints) or len(idx.lanes) != lanes \
            or isinstance(values[2], Ptr | Img | Addr):
        raise IndexParseError(f"expected {name}(pointer to {size}-byte elements, {lanes} int lanes, value)")
    if p.lo is None or p.hi is None:
        w.access(p, 0, 0)  # refused: unbounded
    for lo, hi in idx.lanes:
        w.access(Ptr(p.base, p.lo + lo * size, p.hi + hi * size, p.t), 0, size)  # type: ignore[operator]
    return None


def memcpy(w: Walker, values: list) -> Value:
    if len(values) != 3:
        raise IndexParseError("expected __builtin_memcpy(dst, src, n)")
    dst, src, n = values
    lo, hi = w.scalar(n)
    if lo != hi or lo < 0:
        raise IndexParseError("expected __builtin_memcpy of a constant size")
    for side in (dst, src):
        if isinstance(side, Addr):
            t = w.slot(side.name)[1][0]
            if t.nbytes < lo:
                raise IndexParseError(f"expected __builtin_memcpy of at most the {t.nbytes} bytes of {side.name}, "
                                      f"got {lo}")
        elif isinstance(side, Ptr):
            w.access(Ptr(side.base, side.lo, side.hi, side.t), 0, lo)
        else:
            raise IndexParseError("expected __builtin_memcpy between a pointer or local address")
    if isinstance(dst, Addr):
        w.set_local(dst.name, None)  # the bytes copied: any value of its type
    return None


def atomic(w: Walker, name: str, values: list) -> Value:
    """``atomic_inc(p)``, ``atomic_add(p, v)``: a read and write of the int at ``p``; the old value, any int (other
    work-items change it meanwhile)."""
    if len(values) != ATOMICS[name] or not isinstance(values[0], Ptr) or values[0].t.pointee != INT or \
            not all(isinstance(v, Ints) and v.t.lanes == 1 for v in values[1:]):
        raise IndexParseError(f"expected {name} of an int pointer{' and an int' if ATOMICS[name] == 2 else ''}")
    w.access(values[0], 0, INT.nbytes)
    return Ints.full(INT)


def prefetch(w: Walker, values: list) -> Value:
    """``__builtin_prefetch(p, 0, 3)``: a request to read the line at ``p``, held to the same bounds as a read of
    its byte (the renderer only asks for lines a later iteration reads)."""
    if len(values) != 3 or not isinstance(values[0], Ptr) or \
            (w.scalar(values[1]), w.scalar(values[2])) != ((0, 0), (3, 3)):
        raise IndexParseError("expected __builtin_prefetch(pointer, 0, 3)")
    w.access(values[0], 0, 1)
    return None


def read_image(w: Walker, values: list) -> Value:
    if len(values) != 3 or not isinstance(values[0], Img):
        raise IndexParseError("expected dp_read_image(image parameter, index, width)")
    lo, hi = w.scalar(values[1])
    width = w.scalar(values[2])
    if width[0] != width[1] or width[0] < 1:
        raise IndexParseError("expected dp_read_image with a constant row width")
    old = w.images.get(values[0].param)
    w.images[values[0].param] = (lo, hi, {width[0]}) if old is None else \
        (min(old[0], lo), max(old[1], hi), old[2] | {width[0]})
    return Opaque(FLOAT)


def reinterpret(v: Value, t: CType) -> Value:
    """``as_T(v)``: the same bits read as ``t``; integer lanes of the same width keep their values modulo 2**bits."""
    if t.kind != "int":
        return Opaque(t)
    if isinstance(v, Ints) and v.t.size == t.size and len(v.lanes) == t.lanes:
        return Ints(tuple(wrap(r, t, True) for r in v.lanes), t)
    return Ints.full(t)


def min_max(name: str, values: list[Ints]) -> Value:
    if len(values) != (3 if name == "clamp" else 2):
        raise IndexParseError(f"expected {name} of {3 if name == 'clamp' else 2} values")
    n = max(len(v.lanes) for v in values)
    lanes = [v.lanes * n if len(v.lanes) == 1 else v.lanes for v in values]
    out = []
    for rs in zip(*lanes, strict=True):
        if name == "max":
            out.append((max(rs[0][0], rs[1][0]), max(rs[0][1], rs[1][1])))
        elif name == "min":
            out.append((min(rs[0][0], rs[1][0]), min(rs[0][1], rs[1][1])))
        else:
            lo, hi = max(rs[0][0], rs[1][0]), max(rs[0][1], rs[1][1])
            out.append((min(lo, rs[2][0]), min(hi, rs[2][1])))
    t = next(v.t for v in values if len(v.lanes) == n)
    return Ints(tuple(out), t)


def shuffle(values: list) -> Value:
    """Lanes of ``a`` (and ``b``) picked by a mask: each picked lane's range where the mask is constant."""
    if len(values) not in (2, 3) or not isinstance(values[-1], Ints):
        raise IndexParseError("expected a shuffle by an integer mask")
    sources, mask = [opaque(v) for v in values[:-1]], values[-1]
    if all(isinstance(v, Ints) for v in sources):
        pool = [r for v in sources for r in v.lanes]
        out = []
        for lo, hi in mask.lanes:
            picked = [pool[i % len(pool)] for i in range(lo, hi + 1)] if hi - lo < len(pool) else pool
            out.append((min(r[0] for r in picked), max(r[1] for r in picked)))
        first = sources[0]
        return Ints(tuple(out), CType("int", first.t.size, first.t.signed, len(out)))
    first = sources[0]
    if not isinstance(first, Opaque):
        raise IndexParseError("expected a shuffle of vectors")
    return Opaque(CType(first.t.kind, first.t.size, first.t.signed, len(mask.lanes)))


def _leaves(args: tuple[Expr, ...]) -> list[Expr]:
    """The operands of ``a | b | ...`` trees (fence flags), depth first."""
    out, stack = [], list(args)
    while stack:
        e = stack.pop()
        if e[0] == "bin" and e[1] == "|":
            stack.extend(e[2:])
        else:
            out.append(e)
    return out
