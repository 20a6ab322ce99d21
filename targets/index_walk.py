"""Interval evaluation of a parsed kernel body (targets/index_parse.py) for one launch, for targets/index_ranges.py.

``Walker.run`` evaluates statements in order over the values of targets/index_values.py, recording in
``extents`` the byte range each buffer parameter is accessed at (``images``: the element range of each image
read). Whatever it cannot bound raises IndexParseError, which the caller turns into a refusal.

A variable's slot is ``[declared type, value, writes, definition]``: ``writes`` counts the assignments since
its declaration, and ``definition`` is the comparison a mask variable was declared as (``int8 m = -(x < c);``)
with the slots it read and their ``writes`` then, so that a select by ``m`` can be narrowed as if it spelled the
comparison, as long as neither ``m`` nor what it read has been assigned since (``Walker.definition``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from targets import index_floats
from targets.index_calls import call
from targets.index_parse import CType, Expr, IndexParseError, Stmt
from targets.index_select import NEGATE as _NEGATE
from targets.index_select import SWAP as _SWAP
from targets.index_select import bit_select, comparison, float_bit_select, plain
from targets.index_values import (
    INT,
    Addr,
    Floats,
    Img,
    Ints,
    Opaque,
    Ptr,
    Value,
    arith_type,
    bounds,
    compare,
    int_op,
    join,
    lanes_of,
    narrow,
    unknown,
    wrap,
)

MAX_ARRAY = 1 << 16  # elements of a local or park array (the renderer's are a work-group or a tile)
_LANE_MEMBERS = {"x": 0, "y": 1, "z": 2, "w": 3}


class Walker:
    """Evaluates one kernel body for one launch, recording the bytes each pointer base is accessed at."""

    def __init__(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None) -> None:
        self.global_size, self.local_size = global_size, local_size
        self.scopes: list[dict[str, list]] = [{}]  # name -> [declared type, value]
        self.extents: dict[int, tuple[int, int]] = {}
        self.images: dict[int, tuple[int, int, set[int]]] = {}
        self.arrays: dict[str, int] = {}  # local array -> bytes
        self.pure_floor = 0  # scopes below this may not be assigned (inside one branch of a ternary)

    # --- environment -------------------------------------------------------------------------------------
    def declare(self, name: str, t: CType, value: Value, definition: tuple | None = None) -> None:
        self.scopes[-1][name] = [t, value, 0, definition]

    def slot(self, name: str) -> tuple[int, list]:
        for depth in range(len(self.scopes) - 1, -1, -1):
            if name in self.scopes[depth]:
                return depth, self.scopes[depth][name]
        raise IndexParseError(f"expected a declared variable, got {name!r}")

    def snapshot(self) -> list[dict[str, list]]:
        return [{k: list(v) for k, v in s.items()} for s in self.scopes]

    def restore(self, saved: list[dict[str, list]]) -> None:
        self.scopes = saved

    # --- accesses ----------------------------------------------------------------------------------------
    def access(self, p: Value, extra: int, nbytes: int) -> None:
        """Record an access of ``nbytes`` bytes at ``p`` plus ``extra`` bytes."""
        if not isinstance(p, Ptr) or p.base == "?":
            raise IndexParseError("expected an access through a parameter or local array, got another address")
        if p.lo is None or p.hi is None:
            raise IndexParseError(f"expected accesses through {_base_name(p.base)} bounded, got a pointer "
                                  f"stepped where this analysis does not follow it")
        lo, hi = p.lo + extra, p.hi + extra + nbytes
        if isinstance(p.base, str):
            if lo < 0 or hi > self.arrays[p.base]:
                raise IndexParseError(f"expected accesses to {_base_name(p.base)} within its {self.arrays[p.base]} "
                                      f"bytes, got bytes {lo}..{hi - 1}")
            return
        old = self.extents.get(p.base)
        self.extents[p.base] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    # --- statements --------------------------------------------------------------------------------------
    def run(self, stmts: Iterable[Stmt]) -> None:
        for s in stmts:
            if self.stmt(s):
                return

    def stmt(self, s: Stmt) -> bool:
        """Evaluate statement ``s``; True when it returns."""
        kind = s[0]
        if kind == "expr":
            self.eval(s[1])
        elif kind == "decl":
            self.decl(*s[1:])
        elif kind == "seq":
            for d in s[1]:
                self.decl(*d[1:])
        elif kind == "block":
            self.scopes.append({})
            self.run(s[1])
            self.scopes.pop()
        elif kind == "for":
            self.loop(*s[1:])
        elif kind == "if":
            self.branch(*s[1:])
        elif kind == "wait":  # spins on its condition, which changes nothing but the counters it reads
            self.eval(s[1])
        elif kind == "return":
            return True
        return False

    def decl(self, t: CType, name: str, length: Expr | None, init: Expr | None) -> None:
        if length is not None:
            n = self.eval(length)
            if not isinstance(n, Ints) or len(n.lanes) != 1 or n.lanes[0][0] != n.lanes[0][1] or \
                    not 1 <= n.lanes[0][0] <= MAX_ARRAY or init is not None:
                raise IndexParseError(f"expected array {name} of a constant length 1..{MAX_ARRAY}")
            base = f"{name}#{len(self.arrays)}"  # one per declaration: an inner array may shadow an outer one
            self.arrays[base] = n.lanes[0][0] * t.nbytes
            self.declare(name, CType("ptr", 8, False, 1, t), Ptr(base, 0, 0, CType("ptr", 8, False, 1, t)))
            return
        if init is None:
            self.declare(name, t, unknown(t))
            return
        self.declare(name, t, self.convert(self.eval(init), t, True), self.mask_definition(t, init))

    def mask_definition(self, t: CType, init: Expr) -> tuple | None:
        """What ``Walker.definition`` needs of a variable of type ``t`` declared as ``init``: kept for a
        comparison under at most two minuses, plain, of a signed integer type (which keeps its 0, 1 or -1 lanes
        as they are), with the slots it reads and their write counts now; else None."""
        if t.kind != "int" or not t.signed or t.boolean or not plain(init) or \
                not any(comparison(None, init, k) is not None for k in (0, 1, 2)):
            return None
        reads = []
        for name in sorted(_names(init)):
            _, entry = self.slot(name)
            reads.append((name, entry, entry[2]))
        return init, tuple(reads)

    def definition(self, name: str) -> Expr | None:
        """The comparison variable ``name`` was declared as, where neither it nor any variable the comparison
        reads has been assigned (or shadowed) since: evaluated now, that expression has the variable's value."""
        entry = self.slot(name)[1]
        if entry[3] is None or entry[2] != 0:
            return None
        expr, reads = entry[3]
        for var, then, writes in reads:
            try:
                now = self.slot(var)[1]
            except IndexParseError:
                return None
            if now is not then or now[2] != writes:
                return None
        return expr

    def loop(self, var: str, start: Expr, bound: Expr, body: Stmt, assigned: frozenset[str]) -> None:
        """``for (int var = start; var < bound; var++) body``: ``var`` from start's least value to bound's greatest
        minus one; what the bound or body assign may hold any value of its type, in the loop and after it."""
        a = self.scalar(self.eval(start))
        if var in assigned:
            raise IndexParseError(f"expected loop variable {var} assigned only by its loop")
        self.widen(assigned)
        b = self.scalar(self.eval(bound))
        if b[1] - 1 < a[0]:
            return  # never runs
        self.scopes.append({var: [INT, Ints(((a[0], min(b[1] - 1, bounds(INT)[1])),), INT), 0, None]})
        self.stmt(body)
        self.scopes.pop()
        self.widen(assigned)

    def widen(self, names: frozenset[str]) -> None:
        """Every visible variable of ``names`` may hold any value of its type (a pointer: any offset from its base)."""
        for name in names:
            try:
                _, entry = self.slot(name)
            except IndexParseError:
                continue  # declared inside the loop body
            v = entry[1]
            entry[1] = Ptr(v.base, None, None, v.t) if isinstance(v, Ptr) else unknown(entry[0])
            entry[2], entry[3] = entry[2] + 1, None

    def branch(self, cond: Expr, then: Stmt, other: Stmt | None) -> None:
        c = self.eval(cond)
        decided = self.truth(c)
        saved = self.snapshot()
        outcomes = []
        for taken, stmt in ((True, then), (False, other)):
            if decided is not None and decided != taken:
                continue
            self.restore([{k: list(v) for k, v in s.items()} for s in saved])
            if self.refine(cond, taken, []) and stmt is not None:
                self.stmt(stmt)
            outcomes.append(self.scopes)
        self.restore(outcomes[0])
        for other_scopes in outcomes[1:]:
            for mine, theirs in zip(self.scopes, other_scopes, strict=True):
                for name, entry in mine.items():
                    entry[1] = join(entry[1], theirs[name][1])
                    if entry[2] != theirs[name][2]:  # assigned on one side only: no longer its definition
                        entry[2], entry[3] = max(entry[2], theirs[name][2]), None

    # --- conditions --------------------------------------------------------------------------------------
    def truth(self, v: Value) -> bool | None:
        if isinstance(v, Ints) and len(v.lanes) == 1:
            lo, hi = v.lanes[0]
            return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
        return None

    def refine(self, cond: Expr, taken: bool, undo: list[tuple[list, Value]]) -> bool:
        """Narrow the variables ``cond`` compares as if it evaluated to ``taken`` (each old value noted in
        ``undo``); False when it cannot (that branch never runs). Comparisons of a variable, or a variable plus a
        constant, with any integer expression narrow; && / || / ! / & combine them."""
        if cond[0] == "un" and cond[1] == "!":
            return self.refine(cond[2], not taken, undo)
        if cond[0] == "bin" and (cond[1] in ("&&", "&") and taken or cond[1] == "||" and not taken):
            return self.refine(cond[2], taken, undo) and self.refine(cond[3], taken, undo)
        if cond[0] != "bin" or cond[1] not in _SWAP:
            return True
        op = cond[1] if taken else _NEGATE[cond[1]]
        for var, other, o, raw in ((cond[2], cond[3], op, cond[1]), (cond[3], cond[2], _SWAP[op], _SWAP[cond[1]])):
            if var[0] == "id" and var[1] not in ("NAN", "INFINITY") and self.slot(var[1])[1][0].kind == "float":
                if not self.refine_float(var[1], raw, other, taken, undo):
                    return False
                continue
            offset = 0
            if var[0] == "bin" and var[1] in ("+", "-") and var[3][0] == "num" and var[3][1] is not None:
                offset, var = (var[3][1] if var[1] == "+" else -var[3][1]), var[2]
            if var[0] != "id":
                continue
            _, entry = self.slot(var[1])
            v, k = entry[1], self.pure(other)  # evaluated again: it may not assign
            if not (isinstance(v, Ints) and len(v.lanes) == 1 and isinstance(k, Ints) and len(k.lanes) == 1):
                continue
            if not arith_type(v.t, k.t).signed and min(v.lanes[0][0], k.lanes[0][0]) < 0:
                continue  # compared as unsigned: a negative value is a large one, not narrowed here
            r = narrow(v.lanes[0], o, (k.lanes[0][0] - offset, k.lanes[0][1] - offset))
            if r is None:
                return False
            undo.append((entry, v))
            entry[1] = Ints((r,), v.t)
        return True

    def refine_float(self, name: str, op: str, other: Expr, held: bool, undo: list[tuple[list, Value]]) -> bool:
        """Narrow scalar float variable ``name`` where ``name op other`` evaluated to ``held`` (NaN-aware:
        targets/index_floats.py ``narrow``); False when that cannot happen."""
        _, entry = self.slot(name)
        v, k = entry[1], self.pure(other)  # evaluated again: it may not assign
        mine, theirs = index_floats.lanes(v, 1), index_floats.lanes(k, 1)
        if entry[0].lanes != 1 or mine is None:
            return True
        possible, r = index_floats.narrow(mine[0], op, theirs[0] if theirs is not None else None, held)
        if not possible:
            return False
        if r is not None:
            undo.append((entry, v))
            entry[1] = Floats((r,), entry[0])
        return True

    def assuming(self, cond: Expr, taken: bool, e: Expr) -> Value:
        """``e`` evaluated where ``cond`` was ``taken`` (None: it never is), the narrowing undone after."""
        undo: list[tuple[list, Value]] = []
        try:
            return self.pure(e) if self.refine(cond, taken, undo) else None
        finally:
            for entry, old in reversed(undo):
                entry[1] = old

    # --- expressions -------------------------------------------------------------------------------------
    def scalar(self, v: Value) -> tuple[int, int]:
        if not isinstance(v, Ints) or len(v.lanes) != 1:
            raise IndexParseError("expected an integer value")
        return v.lanes[0]

    def convert(self, v: Value, t: CType, cast: bool) -> Value:
        """``v`` as a value of type ``t`` (an assignment's or cast's conversion)."""
        if t.kind == "ptr":
            if isinstance(v, Ptr):
                return Ptr(v.base, v.lo, v.hi, t)
            raise IndexParseError("expected a pointer from a pointer")
        if t.kind == "image":
            if isinstance(v, Img):
                return v
            raise IndexParseError("expected an image from an image")
        if isinstance(v, Ptr | Img | Addr):
            raise IndexParseError("expected an address to stay an address (no pointer arithmetic as integers)")
        if isinstance(v, Floats):  # a scalar's value converts; a vector cast (GCC) keeps the bits
            return index_floats.cast(v, t, len(v.lanes) == 1)
        if t.kind != "int":
            return Opaque(t)
        if not isinstance(v, Ints):
            return Ints.full(t)
        lanes = v.lanes if len(v.lanes) == t.lanes else v.lanes * t.lanes if len(v.lanes) == 1 else None
        if lanes is None:
            return Ints.full(t)
        return Ints(tuple(self.to_int(r, t, cast) for r in lanes), t)

    def convert_lanes(self, v: Value, t: CType, rounding: str = "") -> Value:
        """``v`` converted lane by lane to ``t`` (``__builtin_convertvector``, OpenCL ``convert_T`` with its
        ``rounding`` mode): values, not bits, for vectors too."""
        if isinstance(v, Floats):
            return index_floats.cast(v, t, True, rounding)
        return self.convert(v, t, True)

    def to_int(self, r: tuple[int, int], t: CType, cast: bool) -> tuple[int, int]:
        if t.boolean:
            return (1, 1) if r[0] > 0 or r[1] < 0 else (0, 0) if r == (0, 0) else (0, 1)
        return wrap(r, t, cast)

    def eval(self, e: Expr) -> Value:
        kind = e[0]
        if kind == "num":
            if e[1] is None:
                return index_floats.literal(e)
            t = _literal_type(e[1], e[2])
            return Ints.const(e[1], t)
        if kind == "id":
            if e[1] in ("NAN", "INFINITY"):
                return Opaque(CType("float", 4))
            return self.slot(e[1])[1][1]
        if kind == "bin":
            return self.binary(e[1], e[2], e[3])
        if kind == "un":
            return self.unary(e[1], e[2])
        if kind == "tern":
            return self.ternary(e[1], e[2], e[3])
        if kind == "cast":
            if e[1].kind == "float" and e[1].lanes > 1 and (picked := float_bit_select(self, e[1], e[2])) is not None:
                return picked
            return self.convert(self.eval(e[2]), e[1], True)
        if kind == "ctor":
            return self.ctor(e[1], [self.eval(x) for x in e[2]])
        if kind == "call":
            return call(self, e[1], e[2])
        if kind == "index":
            return self.subscript(self.eval(e[1]), self.eval(e[2]))
        if kind == "member":
            return self.lane(self.eval(e[1]), _member_lane(e[2]))
        if kind == "assign":
            return self.assign(e[1], e[2], e[3])
        if kind == "post":  # x++ is x's old value
            old = self.eval(e[2])
            self.assign(e[1][0] + "=", e[2], ("num", 1, ""))
            return old
        if kind == "stmts":
            self.scopes.append({})
            value: Value = None
            for s in e[1]:
                value = self.eval(s[1]) if s[0] == "expr" else None
                if s[0] != "expr" and self.stmt(s):
                    break
            self.scopes.pop()
            return value
        if kind == "sizeof_t":
            return Ints.const(e[1].nbytes, CType("int", 8, False))
        if kind == "sizeof_e" and e[1][0] == "id":
            return Ints.const(self.slot(e[1][1])[1][0].nbytes, CType("int", 8, False))
        raise IndexParseError(f"expected an expression of the renderer's grammar, got a {kind}")

    def ctor(self, t: CType, items: list[Value]) -> Value:
        lanes: list[tuple[int, int]] = []
        floats: list[tuple[float, float]] | None = [] if t.kind == "float" else None
        for v in items:
            if t.kind != "int":
                if isinstance(v, Ptr | Img | Addr):
                    raise IndexParseError("expected vector lanes of values, got an address")
                # a NaN-free float keeps its range as a lane of its own type or a wider one (converted exactly)
                if floats is not None and isinstance(v, Floats) and v.t.size <= t.size:
                    floats.extend(v.lanes)
                else:
                    floats = None
                continue
            c = self.convert(v, CType(t.kind, t.size, t.signed), True) if not (
                isinstance(v, Ints) and len(v.lanes) > 1) else v
            if not isinstance(c, Ints):
                raise IndexParseError("expected integer vector lanes")
            lanes.extend(self.to_int(r, CType(t.kind, t.size, t.signed), True) for r in c.lanes)
        if t.kind != "int":
            return Floats(tuple(floats), t) if floats is not None and len(floats) == t.lanes else Opaque(t)
        if len(lanes) != t.lanes:
            raise IndexParseError(f"expected {t.lanes} vector lanes, got {len(lanes)}")
        return Ints(tuple(lanes), t)

    def binary(self, op: str, ea: Expr, eb: Expr) -> Value:
        if op in ("&&", "||"):
            a = self.eval(ea)
            ta = self.truth(a)
            if ta is (op == "||"):
                return Ints.const(int(ta))
            right = self.assuming(ea, op == "&&", eb)
            tb = self.truth(right) if right is not None else None
            if ta is not None and tb is not None:
                return Ints.const(int(tb))
            return Ints(((0, 1),), INT)
        if op == "|" and (picked := bit_select(self, ea, eb)) is not None:
            return picked
        a, b = self.eval(ea), self.eval(eb)
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            return self.pointer_arith(op, a, b)
        if not isinstance(a, Ints) or not isinstance(b, Ints):
            if isinstance(a, Ptr | Img | Addr | None) or isinstance(b, Ptr | Img | Addr | None):
                raise IndexParseError(f"expected values around {op!r}, got an address")
            if op in ("+", "-") and isinstance(a, Floats) and isinstance(b, Floats):
                return index_floats.add_sub(op, a, b)
            lanes = max(lanes_of(a), lanes_of(b))
            if op in _SWAP:
                return Ints(((-1, 0) if lanes > 1 else (0, 1),) * lanes, CType("int", 4, True, lanes))
            t = a.t if isinstance(a, Opaque | Floats) else b.t  # type: ignore[union-attr]
            return Opaque(t if t.lanes >= lanes else CType(t.kind, t.size, t.signed, lanes))
        n = max(len(a.lanes), len(b.lanes))
        if n > 1 and 1 < min(len(a.lanes), len(b.lanes)) != n:
            raise IndexParseError("expected vectors of one width")
        la, lb = (a.lanes * n if len(a.lanes) == 1 else a.lanes), (b.lanes * n if len(b.lanes) == 1 else b.lanes)
        if op in _SWAP:
            t = CType("int", max(a.t.size, b.t.size) if n > 1 else 4, True, n)
            common = arith_type(a.t, b.t)
            if not common.signed:  # C compares as unsigned: -1 < 4u is false
                la, lb = [wrap(r, common, True) for r in la], [wrap(r, common, True) for r in lb]
            out = [compare(op, x, y) for x, y in zip(la, lb, strict=True)]
            return Ints(tuple((-r[1], -r[0]) for r in out) if n > 1 else tuple(out), t)
        shift = op in ("<<", ">>")
        t = (a.t if a.t.size >= 4 or n > 1 else INT) if shift else arith_type(a.t, b.t)
        lanes = tuple(wrap(int_op(op, x, y, 8 * t.size), t, False) for x, y in zip(la, lb, strict=True))
        return Ints(lanes, t)

    def pointer_arith(self, op: str, a: Value, b: Value) -> Value:
        if op == "+" and isinstance(b, Ptr):
            a, b = b, a
        if op not in ("+", "-") or not isinstance(a, Ptr) or not isinstance(b, Ints) or len(b.lanes) != 1:
            raise IndexParseError(f"expected a pointer plus or minus an integer, got {op!r}")
        assert a.t.pointee is not None
        size = a.t.pointee.nbytes
        lo, hi = (b.lanes[0][0] * size, b.lanes[0][1] * size) if op == "+" else \
            (-b.lanes[0][1] * size, -b.lanes[0][0] * size)
        if a.lo is None or a.hi is None:
            return a
        return Ptr(a.base, a.lo + lo, a.hi + hi, a.t)

    def unary(self, op: str, ea: Expr) -> Value:
        if op == "&":
            if ea[0] != "id" or not isinstance(self.slot(ea[1])[1][1], Ints | Floats | Opaque | None):
                raise IndexParseError("expected the address of a local value only")
            return Addr(ea[1])
        if op in ("++", "--"):
            return self.assign(op[0] + "=", ea, ("num", 1, ""))
        v = self.eval(ea)
        if op == "*":
            if not isinstance(v, Ptr):
                raise IndexParseError("expected a dereference of a pointer")
            assert v.t.pointee is not None
            self.access(v, 0, v.t.pointee.nbytes)
            return unknown(v.t.pointee)
        if isinstance(v, Floats):
            if op == "-":
                return index_floats.negate(v)
            v = Opaque(v.t) if op != "+" else v
        if not isinstance(v, Ints):
            if isinstance(v, Opaque | Floats):
                return Ints(((0, 1),), INT) if op == "!" and v.t.lanes == 1 else v
            raise IndexParseError(f"expected a value after {op!r}, got an address")
        t = v.t if v.t.size >= 4 or len(v.lanes) > 1 else INT
        if op == "!":
            return Ints(tuple(compare("==", r, (0, 0)) for r in v.lanes), INT) if len(v.lanes) == 1 else \
                Ints(tuple((-r[1], -r[0]) for r in (compare("==", x, (0, 0)) for x in v.lanes)), v.t)
        if op == "+":
            return Ints(v.lanes, t)
        if op == "-":
            return Ints(tuple(wrap((-hi, -lo), t, False) for lo, hi in v.lanes), t)
        return Ints(tuple(wrap((-hi - 1, -lo - 1), t, False) for lo, hi in v.lanes), t)  # ~x == -x - 1

    def ternary(self, ec: Expr, ea: Expr, eb: Expr) -> Value:
        c = self.eval(ec)
        decided = self.truth(c)
        out: Value = None
        for taken, e in ((True, ea), (False, eb)):
            if decided is not None and decided != taken:
                continue
            v = self.assuming(ec, taken, e)
            if v is not None:
                out = v if out is None else join(out, v)
        return out if out is not None else self.pure(ea)

    def set_local(self, name: str, value: Value) -> Value:
        """Assign ``value`` to variable ``name`` (converted to its type); refused where the assignment would be
        conditional (one branch of a ternary, the right of && or ||), which this evaluation does not join."""
        depth, entry = self.slot(name)
        if depth < self.pure_floor:
            raise IndexParseError(f"expected no assignment to {name} inside one branch of a ternary or && / ||")
        entry[1] = unknown(entry[0]) if value is None else self.convert(value, entry[0], False)
        entry[2], entry[3] = entry[2] + 1, None
        return entry[1]

    def pure(self, e: Expr) -> Value:
        """``e`` evaluated where it may or may not run: it may assign only what it declares itself."""
        floor, self.pure_floor = self.pure_floor, len(self.scopes)
        try:
            return self.eval(e)
        finally:
            self.pure_floor = floor

    def assign(self, op: str, lhs: Expr, rhs: Expr) -> Value:
        value = self.eval(rhs) if op == "=" else self.binary(op[:-1], lhs, rhs)
        if lhs[0] == "id":
            return self.set_local(lhs[1], value)
        if lhs[0] == "un" and lhs[1] == "*":
            p = self.eval(lhs[2])
        elif lhs[0] == "index":
            base, i = self.eval(lhs[1]), self.eval(lhs[2])
            if not isinstance(base, Ptr):
                raise IndexParseError("expected a store through a pointer or array")
            p = self.pointer_arith("+", base, i)
        else:
            raise IndexParseError(f"expected a store to a variable or through a pointer, got a {lhs[0]}")
        if not isinstance(p, Ptr) or p.t.pointee is None:
            raise IndexParseError("expected a store through a pointer")
        self.access(p, 0, p.t.pointee.nbytes)
        return value

    def subscript(self, a: Value, i: Value) -> Value:
        if isinstance(a, Ptr):
            p = self.pointer_arith("+", a, i)
            assert isinstance(p, Ptr) and p.t.pointee is not None
            self.access(p, 0, p.t.pointee.nbytes)
            return unknown(p.t.pointee)
        lo, hi = self.scalar(i)
        if lo != hi:
            raise IndexParseError("expected a constant vector lane")
        return self.lane(a, lo)

    def lane(self, v: Value, i: int) -> Value:
        if isinstance(v, Ints) and 0 <= i < len(v.lanes):
            return Ints((v.lanes[i],), CType("int", v.t.size, v.t.signed))
        if isinstance(v, Floats) and 0 <= i < len(v.lanes):
            return Floats((v.lanes[i],), CType(v.t.kind, v.t.size, v.t.signed))
        if isinstance(v, Opaque) and 0 <= i < max(v.t.lanes, 1):
            return Opaque(CType(v.t.kind, v.t.size, v.t.signed))
        raise IndexParseError(f"expected lane {i} of a vector")



def _names(e: Expr) -> set[str]:
    """The variables a plain expression reads."""
    if e[0] == "id":
        return {e[1]} if e[1] not in ("NAN", "INFINITY") else set()
    parts = e[2] if e[0] == "ctor" else e[1:]
    return {n for x in parts if isinstance(x, tuple) and x and isinstance(x[0], str) for n in _names(x)}


def _literal_type(v: int, suffix: str) -> CType:
    """C's type of a decimal literal: the first of int, long long (or their unsigned kinds with ``u``; long long
    only with ``l``/``ll``) that holds it."""
    for size in (8,) if "l" in suffix else (4, 8):
        t = CType("int", size, "u" not in suffix)
        if v <= bounds(t)[1]:
            return t
    raise IndexParseError(f"expected an integer literal its type holds, got {v}{suffix}")


def _member_lane(name: str) -> int:
    if name in _LANE_MEMBERS:
        return _LANE_MEMBERS[name]
    if re.fullmatch(r"s[0-9a-f]", name):
        return int(name[1], 16)
    raise IndexParseError(f"expected one vector lane (.s0 .. .sf, .x .. .w), got .{name}")


def _base_name(base: int | str) -> str:
    return f"data{base}" if isinstance(base, int) else base.split("#")[0]
