"""The walk over a kernel graph: where each value is placed, and the statements that compute it.

Placement: every value is emitted in the innermost loop among the ranges it depends on. Before a reduce
loop opens, the parts of its body that do not depend on the loop's ranges are emitted outside it, base pointers
its addresses count from (jit/codegen/opt/hoist.py) are declared, and accumulators waiting in the park array
(jit/codegen/opt/park.py) are stored to it. The walk renders the nodes the optimizer built; it decides no
transformation itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jit.common.dtype import DType, ImageDType, PtrDType, dtypes
from jit.common.errors import CompileError
from jit.ir.uop import GroupOp, Ops, UOp, add_terms, toposort
from targets.cstyle.language import FLOAT_FN, INFIX, MAX_INLINE_DEPTH, CStyleLanguage, paren_depth, render_const
from targets.cstyle.vectors import VectorExprs, lane32

_INLINE = frozenset({Ops.CONST, Ops.RANGE, Ops.INDEX, Ops.DEFINE_GLOBAL})
# signed integer ops that can overflow (C leaves that undefined; numpy wraps)
_WRAPPING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL, Ops.NEG})


def _cannot_wrap(u: UOp) -> bool:
    """Whether integer op ``u`` provably stays in its type's range for every value its sources can take (their
    value ranges), so that C's signed arithmetic is defined for it without going through the unsigned type."""
    return isinstance(u.dtype, DType) and u.dtype.is_int and (u.vmin, u.vmax) != (u.dtype.min, u.dtype.max)


def walk_order(root: UOp) -> list[UOp]:
    """``toposort([root])`` without the base pointers of INDEXes (jit/codegen/opt/hoist.py) and what only they
    use: the walk declares a base pointer where its first access is, spelling its address there."""
    return toposort([root], lambda node: node.src[:2] if node.op is Ops.INDEX else node.src)


def park_array_name(t: str) -> str:
    """The park array of values of C type ``t``."""
    return f"park_{t.replace(' ', '_')}"


class KernelRenderer(VectorExprs):
    """Renders one kernel graph (a SINK of STOREs) to source text."""

    def __init__(self, lang: CStyleLanguage, name: str, sink: UOp, param_names: Sequence[str] = (),
                 first_var: int = 0) -> None:
        self.lang, self.name, self.sink = lang, name, sink
        self.param_names = param_names  # each buffer parameter's name where not ``data<i>`` (a chain's member)
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counter = first_var
        self._deps: dict[UOp, frozenset[UOp]] = {}
        self.open_ranges: frozenset[UOp] = frozenset()
        self.loop_stack: list[UOp] = []
        self.scope_names: list[list[UOp]] = [[]]
        self.uses: dict[UOp, int] = {}
        self.helpers: dict[str, str] = {}  # helper functions the kernel calls, emitted before its signature
        self.parallel_loops = 0  # output loops shared out over threads (set by render)
        self.parallel_trips = 0  # their iterations, flattened: the n of a range-parameter kernel's launch
        self._fused: set[UOp] = set()  # parallel loops after the first: one flattened loop opens and closes them
        # REDUCEs by their ranges, in graph order: candidates for sharing one loop nest
        self.reduces: dict[tuple[UOp, ...], list[UOp]] = {}
        self._reduce_inputs: dict[UOp, set[UOp]] = {}
        for node in toposort([sink]):
            if node.op is Ops.REDUCE:
                self.reduces.setdefault(node.src[1:], []).append(node)
        users: dict[UOp, list[UOp]] = {}
        for node in toposort([sink]):
            for src in node.src:
                self.uses[src] = self.uses.get(src, 0) + 1
                users.setdefault(src, []).append(node)
        # integer values that only ever address memory (loop indices and their arithmetic) or whose value range
        # fits their type (mask and clamp arithmetic of pads): C may assume they do not overflow, which lets the
        # compiler strength-reduce them into pointer increments and vectorize the loops they index; every other
        # signed +, -, *, << is rendered through the unsigned type, so values wrap as numpy's do (no -fwrapv)
        index_only: set[UOp] = set()
        for node in reversed(toposort([sink])):
            if isinstance(node.dtype, DType) and node.dtype.is_int and users.get(node) and all(
                    (usr.op is Ops.INDEX and usr.src[1] is node) or usr in index_only for usr in users[node]):
                index_only.add(node)
        self.no_overflow = index_only | {u for u in users if _cannot_wrap(u)}
        self.deps(sink)  # one walk fills the dependency table for every node
        # the tile row computed as vectors (jit/codegen/opt/vectorize.py): never a loop, always "open"
        lanes = [u for u in self._deps if u.op is Ops.RANGE and u.arg[1] == "vector"]
        if len(lanes) > 1 or (lanes and not lang.vector_type):
            raise CompileError(f"{name}: {len(lanes)} vector ranges, this language renders "
                               f"{'one' if lang.vector_type else 'none'}")
        self.lane: UOp | None = lanes[0] if lanes else None
        self.lanes = int(self.lane.src[0].arg) if self.lane is not None else 0
        self.group: UOp | None = group_range(sink)
        if self.group is not None and (not lang.local_index_fn or self.lane is not None):
            raise CompileError(f"{name}: a group reduce needs work-group local memory and no vector range, this "
                               f"language has {'it' if lang.local_index_fn else 'none'}")
        self.local_arrays: list[str] = []  # declared at kernel scope, as OpenCL requires of __local arrays
        # PARK nodes by the value they keep (jit/codegen/opt/park.py), and the slots taken in each park array
        self.parks: dict[UOp, UOp] = {u.src[0]: u for u in self._deps if u.op is Ops.PARK}
        self.parked: dict[str, int] = {}
        # where accumulators are parked (the options the SINK records say so), a node's reduce operands are computed
        # before its other operands: an operand's text taken before a later reduce's loop stores a parked one would
        # keep its accumulator live through that loop
        opts = getattr(sink.arg, "opts", None)
        self.reduces_first = bool(self.parks) or bool(getattr(opts, "park_accumulators", False))

    # --- dependency analysis ------------------------------------------------------------------------
    def deps(self, u: UOp) -> frozenset[UOp]:
        """The RANGE nodes a value depends on (a REDUCE does not depend on the ranges it reduces over)."""
        if (known := self._deps.get(u)) is not None:
            return known  # the walk below is the whole subgraph: renders ask about every node many times
        for node in toposort([u]):
            if node in self._deps:
                continue
            if node.op is Ops.RANGE:
                self._deps[node] = frozenset((node,))
            elif node.op is Ops.REDUCE:
                self._deps[node] = self._deps[node.src[0]] - frozenset(node.src[1:])
            else:
                self._deps[node] = frozenset().union(*(self._deps[s] for s in node.src))
        return self._deps[u]

    # --- emission -----------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def new_var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def tname(self, d: DType | PtrDType) -> str:
        if isinstance(d, PtrDType):
            return self.lang.type_name(d.base) + "*"
        return self.lang.type_name(d)

    def expr(self, u: UOp, force_var: bool = False) -> str:
        """The C expression for ``u``, emitting statements for it (and its sources) if needed.

        A value with a single user is inlined into that user's expression unless ``force_var`` (hoisting
        needs a variable: an inlined invariant would be recomputed inside the loop).
        """
        if u in self.names:
            return self.names[u]
        op = u.op
        if op is Ops.CONST:
            return render_const(self.lang, u.arg, u.dtype)  # type: ignore[arg-type]
        if op is Ops.REDUCE:
            return self.emit_reduce(u)
        if op is Ops.PARK:
            self.store_park(u)  # no reduce loop opened since its value was computed: stored right here
            return self.names[u]
        if op is Ops.PREFETCH:
            return self.emit_prefetch(u)
        if self.reduces_first:
            for s in u.src:
                if s.op in (Ops.REDUCE, Ops.PARK):
                    self.expr(s.src[0] if s.op is Ops.PARK else s)
        if self.lane is not None and self.lane in self.deps(u):
            return self.vector_expr(u, force_var)
        if op is Ops.STORE:
            idx, val = u.src
            store = f"*({self.expr(idx)}) = {self.expr(val)};"
            # after a group reduce every work-item of the group holds the same values: one of them stores
            self.line(store if self.group is None else f"if ({self.names[self.group]} == 0) {store}")
            return ""
        if op is Ops.INDEX:
            if len(u.src) == 3:  # from a base pointer: the terms its offset lacks, added one by one
                fixed = set(add_terms(u.src[2].src[1]))
                moving = [t for t in add_terms(u.src[1]) if t not in fixed]
                return f"{self.expr(u.src[2])}+{'+'.join(f'({self.expr(t)})' for t in moving)}"
            return f"{self.expr(u.src[0])}+{self.expr(u.src[1])}"
        # these spell an operand more than once: inlining would duplicate (and nest exponentially) its text
        repeats = op in (Ops.MAX, Ops.MIN, Ops.IDIV, Ops.MOD, Ops.ABS)
        srcs = [self.expr(s, force_var=repeats) for s in u.src]
        text = self.alu_text(u, srcs)
        if op is Ops.LOAD and isinstance(image := u.src[0].src[0].dtype, ImageDType):
            self.helpers["image"] = self.lang.image_helper
            text = self.lang.image_read.format(buf=self.expr(u.src[0].src[0]), idx=self.expr(u.src[0].src[1]),
                                               width=image.width)
        elif op is Ops.LOAD:
            text = f"*({srcs[0]})"
        elif self.uses.get(u, 0) <= 1 and not force_var and paren_depth(text) <= MAX_INLINE_DEPTH:
            # C computes narrow types in int/float: an inlined value must be wrapped/rounded to its own type,
            # as assigning it to a variable would
            narrow = isinstance(u.dtype, DType) and u.dtype.itemsize < 4 and not u.dtype.is_bool \
                and op not in GroupOp.Comparison and op is not Ops.CAST
            return f"(({self.tname(u.dtype)}){text})" if narrow else text
        var = self.new_var("val" if op is Ops.LOAD else "alu")
        self.line(f"{self.tname(u.dtype)} {var} = {text};")
        self.name_here(u, var)
        return var

    def emit_prefetch(self, u: UOp) -> str:
        """PREFETCH(value, index, gate): the language's request for ``index``'s line under ``gate`` (none where the
        language has no such request), then ``value``, named for the rest of the loop body."""
        value, index, gate = u.src
        if self.lang.prefetch:
            self.line(f"if ({self.expr(gate)}) {self.lang.prefetch.format(p=self.expr(index))};")
        var = self.expr(value, force_var=True)
        self.name_here(u, var)
        return var

    def name_here(self, u: UOp, var: str) -> None:
        """Bind ``u`` to ``var`` for the rest of the current loop body."""
        self.names[u] = var
        self.scope_names[-1].append(u)

    def alu_text(self, u: UOp, s: list[str]) -> str:
        op, d = u.op, u.dtype
        assert isinstance(d, DType) or op is Ops.LOAD
        if op is Ops.LOAD:
            return ""
        src_d = u.src[0].dtype if u.src else d
        assert isinstance(src_d, DType)
        if op is Ops.CAST:
            if d.is_bool:
                return f"({s[0]} != 0)"
            return f"({self.tname(d)})({s[0]})"
        if op is Ops.BITCAST:
            return self.lang.bitcast_fmt.format(src_t=self.tname(src_d), dst_t=self.tname(d), x=s[0])
        if op in _WRAPPING and d.is_int and not d.is_unsigned and d.itemsize >= 4 and u not in self.no_overflow:
            ut = self.lang.type_name(dtypes.uint64 if d.itemsize == 8 else dtypes.uint32)
            s = [f"({ut})({x})" for x in s]
            return f"(({self.tname(d)})({s[0]}{INFIX[op]}{s[1]}))" if op in INFIX else \
                f"(({self.tname(d)})(({ut})0-{s[0]}))"
        if op in INFIX:
            return f"({s[0]}{INFIX[op]}{s[1]})"
        if op is Ops.WHERE:
            return f"({s[0]}?{s[1]}:{s[2]})"
        if op is Ops.MULACC:
            return f"(({s[0]}*{s[1]})+{s[2]})"
        if op is Ops.NEG:
            return f"(!{s[0]})" if d.is_bool else f"(-{s[0]})"
        if op is Ops.NOT:
            return f"(!{s[0]})" if d.is_bool else f"(~{s[0]})"
        if op in (Ops.MAX, Ops.MIN):
            cmp = ">" if op is Ops.MAX else "<"
            if d.is_float:
                # numpy's maximum/minimum: ``a`` where it wins or is NaN, else ``b`` (ties and NaN ``b`` too), spelled
                # with the tests on ``b``: on ``a`` (a reduce's accumulator) the C compiler branches instead of
                # selecting, and a max-pool ran about three times slower
                return f"(({s[1]}!={s[1]}||{s[1]}{cmp}={s[0]})?{s[1]}:{s[0]})"
            return f"(({s[0]}{cmp}{s[1]})?{s[0]}:{s[1]})"
        if op in (Ops.IDIV, Ops.MOD) and not d.is_float and u.src[1].op is Ops.CONST and u.src[1].arg not in (0, -1):
            return f"({s[0]}{'/' if op is Ops.IDIV else '%'}{s[1]})"  # no trap to guard against
        if op is Ops.IDIV:
            # x/0 and INT_MIN/-1 trap on x86: define them (0 and wrapped negation) like numpy does
            return f"(({s[1]})==0?0:({s[1]})==-1?-({s[0]}):({s[0]})/({s[1]}))" if not d.is_unsigned \
                else f"(({s[1]})==0?0:({s[0]})/({s[1]}))"
        if op is Ops.MOD:
            if d.is_float:
                return self.fcall("fmod", d, s)
            return f"(({s[1]})==0||({s[1]})==-1?0:({s[0]})%({s[1]}))" if not d.is_unsigned \
                else f"(({s[1]})==0?0:({s[0]})%({s[1]}))"
        if op is Ops.FDIV:
            return f"({s[0]}/{s[1]})"
        if op is Ops.RECIPROCAL:
            return f"(({self.tname(d)})1/{s[0]})"
        if op is Ops.POW:
            if d.is_float:
                return self.fcall("pow", d, s)
            if self.lang.int_pow == "loop":
                return self.int_pow_call(d, s)
            return f"({self.tname(d)})pow((double)({s[0]}),(double)({s[1]}))"
        if op is Ops.ABS and not d.is_float:
            neg = self.alu_text(UOp(Ops.NEG, d, u.src[:1]), s)  # INT_MIN wraps to itself, as numpy's abs
            return f"(({s[0]})<0?{neg}:({s[0]}))"
        if op in FLOAT_FN:
            if not d.is_float:
                raise CompileError(f"{self.name}: {op.name} expects a float operand, got {d.name}")
            return self.fcall(FLOAT_FN[op], d, s)
        raise CompileError(f"{self.name}: no C rendering for {op.name} on {d.name}")

    def int_pow_call(self, d: DType, s: list[str]) -> str:
        """``s[0] ** s[1]`` on integers by squaring in a helper function, guarded so that several kernels built
        as one program define it once. A negative exponent truncates 1/b**-e as C's (int)pow does."""
        t = self.tname(d)
        ut = self.lang.type_name(dtypes.uint64 if d.bits == 64 else dtypes.uint32)
        fn = f"dp_ipow_{t.replace(' ', '_')}"
        neg = "" if d.is_unsigned else "  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;\n"
        self.helpers[fn] = (f"#ifndef {fn.upper()}\n#define {fn.upper()}\n{t} {fn}({t} b, {t} e) {{\n{neg}"
                            f"  {ut} r = 1, x = ({ut})b;\n  while (e > 0) {{ if (e & 1) r *= x; x *= x; e >>= 1; }}\n"
                            f"  return ({t})r;\n}}\n#endif")
        return f"{fn}({s[0]},{s[1]})"

    def fcall(self, fn: str, d: DType, args: list[str]) -> str:
        if d is dtypes.float64:
            return f"{fn}({', '.join(args)})"
        if d is dtypes.float32:
            return f"{fn}{self.lang.f32_math_suffix}({', '.join(args)})"
        # narrow floats compute in float32 and round once
        inner = ", ".join(f"(float)({a})" for a in args)
        return f"(({self.tname(d)}){fn}{self.lang.f32_math_suffix}({inner}))"

    def identity(self, r: UOp) -> str:
        d = r.dtype
        assert isinstance(d, DType)
        value: object = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: d.min, Ops.MIN: d.max}[r.arg]
        return render_const(self.lang, value, d)

    def reduce_group(self, r: UOp) -> list[UOp]:
        """``r`` and every other REDUCE over the very same RANGEs that can be computed here too: not computed yet,
        depending only on loops open now, and not feeding one another. They share one loop nest (register tiles:
        the optimizer's copies of one reduce), each with its own accumulator."""
        group = [r]
        for other in self.reduces.get(r.src[1:], ()):
            if other is r or other in self.names or not self.deps(other) <= self.open_ranges:
                continue
            inside = self.reduce_inputs(other)
            if any(g in inside or other in self.reduce_inputs(g) for g in group):
                continue
            group.append(other)
        return group

    def reduce_inputs(self, r: UOp) -> set[UOp]:
        if r not in self._reduce_inputs:
            self._reduce_inputs[r] = set(toposort([r.src[0]]))
        return self._reduce_inputs[r]

    def emit_group_combine(self, r: UOp) -> str:
        """The reduce over the work-group's range: each item's partial into a local array, a barrier, every item
        combining the array in order, and a second barrier before the array can be written again (the next
        iteration of an output loop)."""
        assert self.group is not None and isinstance(r.dtype, DType)
        size, lid = int(self.group.src[0].arg), self.names[self.group]
        partial = self.expr(r.src[0])
        arr, acc, i = self.new_var("part"), self.new_var("acc"), self.new_var("i")
        self.local_arrays.append(self.lang.local_array.format(t=self.tname(r.dtype), name=arr, n=size))
        self.line(f"{arr}[{lid}] = {partial};")
        self.line(self.lang.local_barrier)
        self.line(f"{self.tname(r.dtype)} {acc} = {self.identity(r)};")
        combine = self.alu_text(UOp(r.arg, r.dtype, (r.src[0], r.src[0])), [acc, f"{arr}[{i}]"])
        self.line(f"for (int {i} = 0; {i} < {size}; {i}++) {acc} = {combine};")
        self.line(self.lang.local_barrier)
        self.name_here(r, acc)
        return acc

    def emit_lane_combine(self, r: UOp) -> str:
        """The reduce over the vector range (jit/codegen/opt/reduce_lanes.py): its operand's lanes combined in pairs,
        then pairs of those, down to one scalar."""
        combine = UOp(r.arg, r.dtype, (r.src[0], r.src[0]))
        level = [self.lane_text(self.expr(r.src[0], force_var=True), i) for i in range(self.lanes)]
        while len(level) > 1:
            pairs = []
            for a, b in zip(level[::2], level[1::2], strict=True):
                pairs.append(self.new_var("lanes"))
                self.line(f"{self.tname(r.dtype)} {pairs[-1]} = {self.alu_text(combine, [a, b])};")
            level = pairs
        self.name_here(r, level[0])
        return level[0]

    def emit_reduce(self, r: UOp) -> str:
        if r.src[1:] == (self.group,):
            return self.emit_group_combine(r)
        if self.lane is not None and r.src[1:] == (self.lane,):
            return self.emit_lane_combine(r)
        group = self.reduce_group(r)
        ranges = r.src[1:]
        self.store_parks()
        # hoist what the loop body does not need the loop for
        for red in group:
            for node in walk_order(red.src[0]):
                if node.op is Ops.INDEX and len(node.src) == 3:
                    self.declare_base_pointer(node.src[2])
                if node in self.names or node.op in _INLINE or not self.deps(node) <= self.open_ranges:
                    continue
                self.expr(node, force_var=True)
        accs = []
        combines = [UOp(red.arg, red.dtype, (red.src[0], red.src[0])) for red in group]
        vector = [self.lane is not None and self.lane in self.deps(red) for red in group]
        for red, vec in zip(group, vector, strict=True):
            accs.append(self.new_var("acc"))
            assert isinstance(red.dtype, DType)
            init = self.ctor(red.dtype, [self.identity(red)] * self.lanes) if vec else self.identity(red)
            self.line(f"{self.vtname(red.dtype) if vec else self.tname(red.dtype)} {accs[-1]} = {init};")
        for rng in ranges:
            self.open_loop(rng)
        # a combine computed lane by lane reads its value once per lane, a min/max spells it more than once: it
        # needs a variable
        values = [self.expr(red.src[0], force_var=(vec and not self.vector_native(c)) or c.op in (Ops.MAX, Ops.MIN))
                  for red, vec, c in zip(group, vector, combines, strict=True)]
        for red, acc, v, vec, c in zip(group, accs, values, vector, combines, strict=True):
            if vec and c.op in (Ops.MAX, Ops.MIN) and self.lang.vector_select and lane32(red.dtype):
                assert isinstance(red.dtype, DType)
                combine = self.vector_min_max(c.op, red.dtype, acc, v)
            elif vec and not self.vector_native(c):
                assert isinstance(red.dtype, DType)
                combine = self.ctor(red.dtype, [self.alu_text(c, [self.lane_text(acc, i), self.lane_text(v, i)])
                                                for i in range(self.lanes)])
            else:
                combine = self.alu_text(c, [acc, v])
            self.line(f"{acc} = {combine};")
        for _ in ranges:
            self.close_loop()
        for red, acc in zip(group, accs, strict=True):
            self.name_here(red, acc)
        return accs[0]

    def store_parks(self) -> None:
        """Store every value waiting to be parked (computed, in scope, not stored yet) to its park array, in the
        order of the values' names: a reduce loop is about to open, which they must not stay live through."""
        waiting = [p for v, p in self.parks.items() if v in self.names and p not in self.names]
        for p in sorted(waiting, key=lambda p: self.names[p.src[0]]):
            self.store_park(p)

    def store_park(self, p: UOp) -> None:
        """Store PARK ``p``'s value to the next slot of the park array of its type; ``p`` reads that slot while the
        value is in scope."""
        value = p.src[0]
        text = self.expr(value)
        assert isinstance(value.dtype, DType)
        t = self.vtname(value.dtype) if self.lane is not None and self.lane in self.deps(value) else \
            self.tname(value.dtype)
        n = self.parked.get(t, 0)
        self.parked[t] = n + 1
        slot = f"{park_array_name(t)}[{n}]"
        self.line(f"{slot} = {text};")
        self.names[p] = slot
        # bound where the value is: the slot holds it as long as the value's own variable would
        next((scope for scope in reversed(self.scope_names) if value in scope), self.scope_names[-1]).append(p)

    def declare_base_pointer(self, base: UOp) -> None:
        """Declare base pointer ``base`` (an INDEX other INDEXes count from: jit/codegen/opt/hoist.py) before the
        loop about to open, once it is computable here and not declared yet."""
        buf = base.src[0]
        if base in self.names or not self.deps(base) <= self.open_ranges:
            return
        assert isinstance(buf.dtype, PtrDType)
        var = self.new_var("ptr")
        self.line(f"{self.lang.buffer_prefix}{self.tname(buf.dtype.base)}* {var} = {self.expr(base)};")
        self.name_here(base, var)

    def open_loop(self, rng: UOp) -> None:
        var = f"ridx{rng.arg[0]}"
        self.names[rng] = var
        self.open_ranges |= {rng}
        self.loop_stack.append(rng)
        self.scope_names.append([])
        if rng.arg[2:] == ("unroll",) and self.lang.unroll_hint:  # marked by jit/codegen/opt/hints.py
            self.line(self.lang.unroll_hint)
        self.line(f"for (int {var} = 0; {var} < {self.expr(rng.src[0])}; {var}++) {{")
        self.depth += 1

    def close_loop(self) -> None:
        # values computed inside the loop body are out of scope after it (unrolled copies reopen the loop)
        for u in self.scope_names.pop():
            del self.names[u]
        rng = self.loop_stack.pop()
        self.open_ranges -= {rng}
        if rng in self._fused:
            return  # closed with the flattened loop it is part of
        self.depth -= 1
        self.line("}")

    def open_range_loops(self, loops: list[UOp]) -> None:
        """The parallel ``loops`` as one loop over ``[dp_lo, dp_hi)`` of their flattened iterations (the range
        parameters): each loop's variable is recovered from the flat index by division and remainder."""
        trips = [int(rng.src[0].arg) for rng in loops]
        if len(loops) == 1:
            self.line(f"for (int ridx{loops[0].arg[0]} = dp_lo; ridx{loops[0].arg[0]} < dp_hi; "
                      f"ridx{loops[0].arg[0]}++) {{")
        else:
            self.line("for (int dp_i = dp_lo; dp_i < dp_hi; dp_i++) {")
        self.depth += 1
        for k, rng in enumerate(loops):
            var = f"ridx{rng.arg[0]}"
            self.names[rng] = var
            self.open_ranges |= {rng}
            self.loop_stack.append(rng)
            self.scope_names.append([])
            if k:
                self._fused.add(rng)
            if len(loops) > 1:
                stride = math.prod(trips[k + 1:])
                flat = "dp_i" if stride == 1 else f"(dp_i / {stride})"
                self.line(f"int {var} = {flat if k == 0 else f'{flat} % {trips[k]}'};")

    def parallel_depth(self, loops: list[UOp]) -> int:
        """How many of the outermost output ``loops`` the thread pragma collapses (0: no pragma): the fewest
        whose trip count reaches ``parallel_min_trips``, when the kernel has enough work to share or loads
        nothing (a padded copy's border, jit/schedule/lower.py ``lower_border``: its few stores land on lines its
        producer's threads just wrote, one per row side, which a single thread would fetch from the other cores'
        caches line by line).

        The output loops are opened back to back with nothing between them (perfectly nested, as ``collapse``
        requires), and each iteration of them stores to its own output elements, so iterations are independent.
        """
        if not (self.lang.parallel_for or self.lang.parallel_range) or not loops:
            return 0
        # unrolled copies of the stores (tiles, stacks) are work the ranges no longer count
        nodes = toposort([self.sink])
        work = math.prod(int(u.src[0].arg) for u in nodes if u.op is Ops.RANGE) * len(self.sink.src)
        if work < self.lang.parallel_min_work and any(u.op is Ops.LOAD for u in nodes):
            return 0
        trips = 1
        for depth, rng in enumerate(loops, 1):
            trips *= int(rng.src[0].arg)
            if trips >= self.lang.parallel_min_trips:
                return depth
        return len(loops) if trips > 1 else 0

    def param(self, i: int, d: PtrDType) -> str:
        if not isinstance(d, ImageDType):
            return f"{self.lang.buffer_prefix}{self.tname(d.base)}* {self.lang.restrict} data{i}"
        if not self.lang.image_param:
            raise CompileError(f"{self.name}: parameter {i} is an image, which this target's language lacks")
        return f"{self.lang.image_param} data{i}"

    def render(self) -> str:
        params = self.render_body()
        head = "\n".join((*self.lang.headers, *self.helpers.values()))
        sig = f"{self.lang.kernel_prefix} {self.name}({', '.join(params)}) {{"
        return f"{head}\n{sig}\n" + "\n".join(self.lines) + "\n}\n"

    def render_body(self) -> list[str]:
        """Fill ``lines`` with the kernel's body and ``helpers`` with what it calls; the parameters' texts."""
        for g in toposort([self.sink]):
            if g.op is Ops.DEFINE_GLOBAL:
                self.names[g] = self.param_names[g.arg] if self.param_names else f"data{g.arg}"
        params = [self.param(i, d) for i, d in enumerate(self.sink.arg.params)]
        out_ranges = global_ranges(self.sink)
        first = 0 if self.group is None else 1  # a group reduce's range is launch dimension 0
        n_hw = min(self.lang.global_dims - first, len(out_ranges))  # global_launch_size() mirrors this mapping
        if self.group is not None:
            self.names[self.group] = "lidx0"
            self.open_ranges |= {self.group}
            self.line(f"int lidx0 = {self.lang.local_index_fn}(0);")
        for i, rng in enumerate(out_ranges[:n_hw]):
            var = f"gidx{i}"
            self.names[rng] = var
            self.open_ranges |= {rng}
            self.line(f"int {var} = {self.lang.global_index_fn}({first + n_hw - 1 - i});")
        lane_at = len(self.lines)  # where the lane ids go, if a gathered index reads them
        if self.lane is not None:
            self.names[self.lane] = "lane"
            self.open_ranges |= {self.lane}
        loops = out_ranges[n_hw:]
        self.parallel_loops = self.parallel_depth(loops)
        if self.parallel_loops:
            self.parallel_trips = math.prod(int(rng.src[0].arg) for rng in loops[:self.parallel_loops])
        if self.parallel_loops and self.lang.parallel_range:
            params += ["int dp_lo", "int dp_hi"]
            self.open_range_loops(loops[:self.parallel_loops])
            loops = loops[self.parallel_loops:]
        elif self.parallel_loops:
            self.line(self.lang.parallel_for.format(collapse=self.parallel_loops))
            if self.lang.parallel_setup:
                self.helpers["parallel_setup"] = self.lang.parallel_setup
        for rng in loops:
            self.open_loop(rng)
        park_at, park_depth = len(self.lines), self.depth
        for store in self.sink.src:
            # a peeled interior (jit/codegen/opt/peel.py) is a loop of its own around the one store that uses it
            peeled = sorted((r for r in self.deps(store) if r.arg[1] == "peel"), key=lambda r: r.arg[0])
            for rng in peeled:
                self.open_loop(rng)
            self.expr(store)
            for _ in peeled:
                self.close_loop()
        while self.loop_stack:
            self.close_loop()
        parks = [self.lang.park_array.format(t=t, name=park_array_name(t), n=n) for t, n in self.parked.items()]
        if self.parallel_loops:  # threads share what is declared outside their loops: each needs its own
            self.lines[park_at:park_at] = ["  " * park_depth + decl for decl in parks]
        if self.lane is not None and any(re.search(r"\blane\b", ln) for ln in self.lines[lane_at:]):
            lane_ids = self.ctor(dtypes.int32, [str(i) for i in range(self.lanes)])
            self.lines.insert(lane_at, f"  {self.vtname(dtypes.int32)} lane = {lane_ids};")
        self.lines[:0] = [f"  {decl}" for decl in self.local_arrays]
        if not self.parallel_loops:
            self.lines[:0] = [f"  {decl}" for decl in parks]
        return params


def global_ranges(sink: UOp) -> list[UOp]:
    return sorted({u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global"}, key=lambda u: u.arg[0])


def group_range(sink: UOp) -> UOp | None:
    """The RANGE of kind "group" of ``sink`` (jit/codegen/opt/group.py), if it has one."""
    return next((u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "group"), None)


def global_launch_size(lang: CStyleLanguage, sink: UOp) -> tuple[int, ...]:
    """The global work size of ``sink`` rendered in ``lang``: entry d is the extent of the range read through
    ``global_index_fn(d)`` (the outermost output range is the highest dimension; a group reduce's range is
    dimension 0, whose work-group must hold all of it); (1,) when no range became one."""
    group = group_range(sink)
    first = () if group is None else (int(group.src[0].arg),)
    hw = global_ranges(sink)[:lang.global_dims - len(first)]
    return (*first, *(int(r.src[0].arg) for r in reversed(hw))) or (1,)


@dataclass(frozen=True)
class RenderedKernel:
    """Kernel source and what the target must know to build it (``parallel``: it is split over threads, by the
    pragma or through its range parameters; ``trips``: the iterations of its flattened parallel loops)."""

    source: str
    parallel: bool
    trips: int = 0


def render_kernel(lang: CStyleLanguage, name: str, sink: UOp) -> str:
    return render_kernel_info(lang, name, sink).source


def check_kernel_graph(name: str, sink: UOp) -> None:
    if sink.op is not Ops.SINK:
        raise CompileError(f"{name}: expected a SINK at the kernel root, got {sink.op.name}")
    for u in toposort([sink]):
        if u.op in GroupOp.Movement or u.op in (Ops.BUFFER, Ops.REDUCE_AXIS):
            raise CompileError(f"{name}: tensor-level op {u.op.name} reached the renderer")


def render_kernel_info(lang: CStyleLanguage, name: str, sink: UOp) -> RenderedKernel:
    check_kernel_graph(name, sink)
    renderer = KernelRenderer(lang, name, sink)
    source = renderer.render()
    return RenderedKernel(source, renderer.parallel_loops > 0, renderer.parallel_trips)
