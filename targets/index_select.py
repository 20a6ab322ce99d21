"""Lane selects, evaluated over intervals (for targets/index_walk.py and targets/index_calls.py).

The renderer writes a clamp or a where on vectors as a select: OpenCL's ``select(a, b, mask)``, and on CPU the
bit-select ``(A & -m) | (B & (m - 1))`` with ``m`` 0 or 1 per lane (a vector comparison negated: lanes of -1 or 0
become 1 or 0), so each lane is A's where ``m`` is 1 and B's where it is 0. A lane of a select holds one of the
two values; where the mask is one comparison and the value picked is the very variable it compares, the lane is
narrowed as a ternary would narrow it (``max(0, v)`` is ``v`` where ``0 < v``, else ``0``): that is what bounds
a GATHER's clamped index. Anything else about the mask is not used: both values are joined.

Only a mask that evaluates the same twice counts as a bit-select (no assignment, no memory read, no call), and
only one whose value is known to be 0 or 1 in every lane: otherwise ``-m`` and ``m - 1`` need not be
complementary, and the bitwise expression is evaluated as bits (targets/index_values.py ``int_op``). A mask may
be a variable declared as the comparison (``m = -(x < c)``) while neither it nor what it compares has been
assigned since (targets/index_walk.py ``Walker.definition``).

Float selects: the CPU renderer blends floats through their bits, ``(vt)(((it)A & -m) | ((it)B & (m - 1)))``
(``float_bit_select``), OpenCL uses ``select``. Their lanes are narrowed NaN-aware (targets/index_floats.py): the
value picked where the comparison held is not NaN and is bounded by it; the one picked where it failed may be
NaN unless both compared sides are NaN-free. A lane that may be NaN makes the whole select ``Opaque``.
"""

from __future__ import annotations

from typing import Protocol

from targets import index_floats
from targets.index_parse import CType, Expr, IndexParseError
from targets.index_values import INT, Addr, Floats, Img, Ints, Opaque, Ptr, Value, arith_type, join, narrow, wrap

SWAP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
NEGATE = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
# expression kinds that read only variables and constants: evaluated twice, they give one value
_PLAIN = frozenset({"num", "id", "bin", "cast", "ctor", "member", "tern"})
_WRITES = frozenset({"assign", "post", "stmts"})


class Walker(Protocol):
    """What selects use of targets/index_walk.py's evaluator."""

    def eval(self, e: Expr) -> Value: ...

    def pure(self, e: Expr) -> Value: ...

    def slot(self, name: str) -> tuple[int, list]: ...

    def definition(self, name: str) -> Expr | None: ...


def plain(e: Expr) -> bool:
    """Whether ``e`` reads variables and constants only (no assignment, memory or call): evaluated twice, it
    gives one value."""
    if e[0] == "un":
        return e[1] in ("-", "+", "!", "~") and plain(e[2])
    if e[0] not in _PLAIN:
        return False
    parts = e[2] if e[0] == "ctor" else e[1:]
    return all(plain(x) for x in parts if isinstance(x, tuple) and x and isinstance(x[0], str))


def _writes(e: Expr) -> bool:
    """Whether ``e`` may assign or store: a comparison in the same expression may then see another value."""
    if not isinstance(e, tuple) or not e or not isinstance(e[0], str):
        return False
    if e[0] in _WRITES or e[0] == "un" and e[1] in ("++", "--") or e[0] == "call" and (
            e[1] == "__builtin_memcpy" or e[1].startswith("vstore")):
        return True
    parts = e[2] if e[0] in ("ctor", "call") else e[1:]
    return any(_writes(x) for x in parts if isinstance(x, tuple))


def _variable(w: Walker, e: Expr) -> str | None:
    """The variable ``e`` is, through casts to its own declared type (which change nothing), or None."""
    if e[0] == "id":
        return e[1]
    if e[0] == "cast":
        name = _variable(w, e[2])
        if name is not None and w.slot(name)[1][0] == e[1]:
            return name
    return None


def _is_comparison(e: Expr) -> bool:
    return e[0] == "bin" and e[1] in SWAP


def _lanes(v: Value) -> int:
    return len(v.lanes) if isinstance(v, Ints | Floats) else v.t.lanes if isinstance(v, Opaque) else 1


def comparison(w: Walker | None, m: Expr, negations: int) -> Expr | None:
    """The comparison ``m`` is under exactly ``negations`` unary minuses, or None; a variable stands for the
    comparison it was declared as where ``w`` (the walker) still vouches for it (``definition``)."""
    for _ in range(4):  # a definition is a comparison under at most two minuses: no deeper chains
        if m[0] == "id" and w is not None and (d := w.definition(m[1])) is not None:
            m = d
        elif negations and m[0] == "un" and m[1] == "-":
            m, negations = m[2], negations - 1
        else:
            break
    return m if negations == 0 and _is_comparison(m) and plain(m) else None


def picked(w: Walker, cond: Expr | None, taken: bool, e: Expr, v: Value) -> list[tuple[int, int] | None] | None:
    """Where ``cond`` (a comparison, lane by lane) was ``taken`` and ``e`` (of value ``v``) is a variable it
    compares, that variable's lanes narrowed by it (None for a lane that never takes this side); else None."""
    if cond is None or not isinstance(v, Ints):
        return None
    name = _variable(w, e)
    if name is None:
        return None
    op = cond[1] if taken else NEGATE[cond[1]]
    for var, other, o in ((cond[2], cond[3], op), (cond[3], cond[2], SWAP[op])):
        if _variable(w, var) != name:
            continue
        k = w.pure(other)
        if not isinstance(k, Ints) or len(k.lanes) not in (1, len(v.lanes)):
            continue
        ks = k.lanes * len(v.lanes) if len(k.lanes) == 1 else k.lanes
        if not arith_type(v.t, k.t).signed and min(r[0] for r in (*v.lanes, *ks)) < 0:
            continue  # compared as unsigned: a negative value is a large one, not narrowed here
        return [narrow(r, o, kr) for r, kr in zip(v.lanes, ks, strict=True)]
    return None


def choose(w: Walker, cond: Expr | None, ea: Expr, a: Value, eb: Expr, b: Value, t: CType | None) -> Value:
    """Per lane ``ea``'s value ``a`` where ``cond`` holds, else ``eb``'s ``b``, as type ``t`` when given (the
    select's own type); ``cond`` narrows only where neither side may assign what it compares."""
    for v in (a, b):
        if isinstance(v, Ptr | Img | Addr) or v is None:
            raise IndexParseError("expected a select of values, got an address")
    if cond is not None and (_writes(ea) or _writes(eb)):
        cond = None
    if any(isinstance(v, Floats | Opaque) and v.t.kind == "float" for v in (a, b)):
        return _choose_floats(w, cond, ea, a, eb, b, t)
    na, nb = picked(w, cond, True, ea, a), picked(w, cond, False, eb, b)
    out = join(a, b)
    if isinstance(out, Ints) and isinstance(a, Ints) and isinstance(b, Ints) and (na or nb):
        lanes = []
        for x, y, wide in zip(na or a.lanes, nb or b.lanes, out.lanes, strict=True):
            lanes.append(wide if x is None and y is None else y if x is None else x if y is None else
                         (min(x[0], y[0]), max(x[1], y[1])))
        out = Ints(tuple(lanes), out.t)
    if t is not None and isinstance(out, Ints):
        out = Ints(tuple(wrap(r, t, True) for r in out.lanes), t)
    return out


def bit_select(w: Walker, ea: Expr, eb: Expr) -> Value | None:
    """``(A & -m) | (B & (m - 1))`` (operands in either order) with ``m`` plain and 0 or 1 in every lane: A
    where ``m`` is 1, else B. None: not this form (evaluated as bits then)."""
    if not (ea[0] == eb[0] == "bin" and ea[1] == eb[1] == "&"):
        return None
    for x, y in ((ea, eb), (eb, ea)):
        for va, ma in ((x[2], x[3]), (x[3], x[2])):
            if ma[0] != "un" or ma[1] != "-":
                continue
            m = ma[2]
            for vb, mb in ((y[2], y[3]), (y[3], y[2])):
                if mb != ("bin", "-", m, ("num", 1, "")) or not plain(m) or _writes(va) or _writes(vb):
                    continue
                mv = w.pure(m)
                if not isinstance(mv, Ints) or any(lo < 0 or hi > 1 for lo, hi in mv.lanes):
                    continue
                # operands evaluated: the bitwise evaluation would evaluate them again (twice per nesting level),
                # so whatever follows answers here
                a, b = w.eval(va), w.eval(vb)
                if not isinstance(a, Ints) or not isinstance(b, Ints):
                    raise IndexParseError("expected a bit-select of integers")
                n = max(len(a.lanes), len(b.lanes), len(mv.lanes))
                if any(len(v.lanes) not in (1, n) for v in (a, b, mv)):
                    raise IndexParseError("expected vectors of one width")
                a, b = (Ints(v.lanes * n, v.t) if len(v.lanes) < n else v for v in (a, b))
                t = arith_type(arith_type(a.t, mv.t), arith_type(b.t, mv.t))
                promoted = mv.t if mv.t.lanes > 1 or mv.t.size >= 4 else INT
                if not promoted.signed and promoted.size < t.size:
                    return Ints.full(t)  # -m zero-extended: not all ones, so not a select; any value
                # m = -(c): a vector comparison's -1 / 0 made 1 / 0; a scalar comparison is 0 / 1 itself
                cond = comparison(w, m, 1) if len(mv.lanes) > 1 else comparison(w, m, 0)
                return choose(w, cond, va, a, vb, b, t)
    return None


def select_call(w: Walker, args: tuple[Expr, ...]) -> Value:
    """OpenCL ``select(a, b, c)``: per lane ``b`` where ``c``'s top bit is set (a vector), or where ``c`` is not
    zero (a scalar), else ``a``."""
    if len(args) != 3 or any(x[0] == "type" for x in args):
        raise IndexParseError("expected select(a, b, mask)")
    a_e, b_e, c_e = args
    a, b, c = w.eval(a_e), w.eval(b_e), w.eval(c_e)
    if isinstance(c, Ptr | Img | Addr) or c is None:
        raise IndexParseError("expected select by a value mask")
    if _lanes(c) == 1:
        cond = comparison(w, c_e, 0)
    else:  # a vector comparison is -1 where it holds; -(-(c)) is too
        cond = comparison(w, c_e, 2) or comparison(w, c_e, 0)
    return choose(w, cond, b_e, b, a_e, a, None)


def _picked_floats(w: Walker, cond: Expr | None, taken: bool, e: Expr,
                   lanes: list[index_floats.FloatLane]) -> list[index_floats.FloatLane | bool]:
    """Float lanes ``lanes`` of ``e`` where ``cond`` evaluated to ``taken``, narrowed where ``e`` is a variable
    it compares (False: a lane that never takes this side)."""
    name = _variable(w, e) if cond is not None else None
    if cond is None or name is None:
        return list(lanes)
    for var, other, op in ((cond[2], cond[3], cond[1]), (cond[3], cond[2], SWAP[cond[1]])):
        if _variable(w, var) != name:
            continue
        ks = index_floats.lanes(w.pure(other), len(lanes))
        if ks is None:
            continue
        out: list[index_floats.FloatLane | bool] = []
        for r, k in zip(lanes, ks, strict=True):
            possible, narrowed = index_floats.narrow(r, op, k, taken)
            out.append(narrowed if possible else False)
        return out
    return list(lanes)


def _choose_floats(w: Walker, cond: Expr | None, ea: Expr, a: Value, eb: Expr, b: Value, t: CType | None) -> Value:
    """``choose`` of float values: ``Floats`` where every lane of both sides (as narrowed) is NaN-free, else
    ``Opaque`` of the select's type."""
    n = max(_lanes(a), _lanes(b))
    ref = a if isinstance(a, Floats | Opaque) and _lanes(a) == n else b
    out_t = t or ref.t  # type: ignore[union-attr]
    if out_t.lanes != n:
        out_t = CType(out_t.kind, out_t.size, out_t.signed, n)
    la, lb = index_floats.lanes(a, n), index_floats.lanes(b, n)
    if la is None or lb is None or a.t.size != b.t.size:  # type: ignore[union-attr]
        return Opaque(out_t)
    return index_floats.join_lanes(out_t, _picked_floats(w, cond, True, ea, la), _picked_floats(w, cond, False, eb, lb))


def _int_cast(e: Expr) -> tuple[CType, Expr] | None:
    """``(it)x`` for an integer vector type ``it``: (it, x); else None."""
    return (e[1], e[2]) if e[0] == "cast" and e[1].kind == "int" and e[1].lanes > 1 else None


def float_bit_select(w: Walker, t: CType, e: Expr) -> Value | None:
    """``(t)(((it)A & -m) | ((it)B & (m - 1)))`` (``&`` and ``|`` operands in either order), ``t`` a float vector
    type and ``it`` an integer vector type of its size: per lane A's bits where ``m`` is 1, B's where 0, so A's
    or B's float. None: not this form (evaluated as a cast of bits then). Once the form matches, A and B are
    evaluated here (once) and any other doubt about it gives ``Opaque``."""
    if not (e[0] == "bin" and e[1] == "|" and e[2][0] == e[3][0] == "bin" and e[2][1] == e[3][1] == "&"):
        return None
    for x, y in ((e[2], e[3]), (e[3], e[2])):
        for va, ma in ((x[2], x[3]), (x[3], x[2])):
            if ma[0] != "un" or ma[1] != "-":
                continue
            m = ma[2]
            for vb, mb in ((y[2], y[3]), (y[3], y[2])):
                ca, cb = _int_cast(va), _int_cast(vb)
                if mb != ("bin", "-", m, ("num", 1, "")) or ca is None or cb is None or ca[0] != cb[0] or \
                        not plain(m) or _writes(va) or _writes(vb):
                    continue
                it, (a_e, a), (b_e, b) = ca[0], (ca[1], w.eval(ca[1])), (cb[1], w.eval(cb[1]))
                mv = w.pure(m)
                mask_ok = isinstance(mv, Ints) and len(mv.lanes) == t.lanes and mv.t.size == it.size and \
                    all(0 <= lo and hi <= 1 for lo, hi in mv.lanes)
                same_shape = it.lanes == t.lanes and it.size == t.size and all(
                    isinstance(v, Floats | Opaque) and v.t.kind == "float" and v.t.size == t.size and
                    _lanes(v) == t.lanes for v in (a, b))
                if not (mask_ok and same_shape):
                    return Opaque(t)
                return _choose_floats(w, comparison(w, m, 1), a_e, a, b_e, b, t)
    return None
