"""The C-style renderer shared by every target: a lowered kernel graph in, C or OpenCL C source out.

Targets differ only in a declared ``CStyleLanguage`` (type names, qualifiers, how global indices are
obtained, math function spelling); the walk over the graph is one piece of code.

Placement: every value is emitted in the innermost loop among the ranges it depends on. Before a reduce
loop opens, the parts of its body that do not depend on the loop's ranges are emitted outside it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from jit.common.dtype import DType, ImageDType, PtrDType, dtypes
from jit.common.errors import CompileError
from jit.ir.uop import GroupOp, Ops, UOp, toposort

_INFIX: dict[Ops, str] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPEQ: "==",
                          Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
_INLINE = frozenset({Ops.CONST, Ops.RANGE, Ops.INDEX, Ops.DEFINE_GLOBAL})
UNROLL_HINT_TRIPS = 4
# ops a language's vector types compute directly on 32-bit lanes (vector op vector, or vector op scalar); more are
# whole-vector expressions where the language spells them (``KernelRenderer.whole_vector_text``), the rest are
# computed lane by lane with their scalar spelling. Bool lanes are int32 lanes holding 0 or 1, as the scalar
# expressions compute them.
_VECTOR_NATIVE_FLOAT = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG})
_VECTOR_NATIVE_INT = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})
_SAME_WIDTH_INTS = {1: (dtypes.int8, dtypes.uint8), 2: (dtypes.int16, dtypes.uint16), 4: (dtypes.int32, dtypes.uint32),
                    8: (dtypes.int64, dtypes.uint64)}
# signed integer ops that can overflow (C leaves that undefined; numpy wraps)
_WRAPPING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL, Ops.NEG})
_FLOAT_FN: dict[Ops, str] = {Ops.EXP: "exp", Ops.LOG: "log", Ops.SQRT: "sqrt", Ops.SIN: "sin", Ops.COS: "cos",
                             Ops.TAN: "tan", Ops.TANH: "tanh", Ops.ERF: "erf", Ops.TRUNC: "trunc",
                             Ops.FLOOR: "floor", Ops.CEIL: "ceil", Ops.RINT: "rint", Ops.ABS: "fabs"}


# lane types whole-vector conversions take (bool lanes are int32 0/1: converting them gives 0/1 too)
_VECTOR_LANE_TYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16,
                                dtypes.uint32, dtypes.float32})


def _cannot_wrap(u: UOp) -> bool:
    """Whether integer op ``u`` provably stays in its type's range for every value its sources can take (their
    value ranges), so that C's signed arithmetic is defined for it without going through the unsigned type."""
    return isinstance(u.dtype, DType) and u.dtype.is_int and (u.vmin, u.vmax) != (u.dtype.min, u.dtype.max)


def _lane32(d: object) -> bool:
    """Whether ``d`` is a 32-bit lane type the vector compare and select take (float32, 32-bit ints; not bool)."""
    return d is dtypes.float32 or (isinstance(d, DType) and d.is_int and not d.is_bool and d.itemsize == 4)


@dataclass(frozen=True)
class CStyleLanguage:
    """What one C dialect spells differently."""

    kernel_prefix: str = "void"
    buffer_prefix: str = ""
    restrict: str = "restrict"
    headers: tuple[str, ...] = ()
    type_names: dict[DType, str] = field(default_factory=dict)
    float_suffix: dict[DType, str] = field(default_factory=lambda: {dtypes.float32: "f"})
    # math on float32 uses C's f-suffixed names (expf); OpenCL overloads the plain names
    f32_math_suffix: str = "f"
    # how many outer global ranges become hardware indices (0 on a CPU: all become loops)
    global_dims: int = 0
    global_index_fn: str = "get_global_id"
    # work-group local memory (jit/codegen/opt/group.py): the local id function (its dimension 0 is a group reduce's),
    # a local array declaration of ``n`` elements of type ``t``, and the barrier that makes its writes visible to
    # the group; "" = none (a kernel with a "group" range is refused)
    local_index_fn: str = ""
    local_array: str = ""
    local_barrier: str = ""
    bitcast_fmt: str = "({{ {src_t} _s = ({x}); {dst_t} _d; __builtin_memcpy(&_d, &_s, sizeof(_d)); _d; }})"
    # integer POW: "double" computes (T)pow((double)a, (double)b) (C with fp64); "loop" calls a helper doing
    # exponentiation by squaring in the unsigned type (exact, wraps; for targets without fp64)
    int_pow: str = "double"
    # CPU threads: the pragma that splits the outermost output loops over a thread team ("" = single-threaded;
    # ``{collapse}`` is filled in), the definitions it needs (emitted once per compiled file), the work (loop
    # iterations of the whole kernel) below which a thread team costs more than it saves, and the fewest
    # iterations the collapsed loops must have. The thread count itself is not in the source: the target sets
    # it at load time, so one compiled kernel serves any count.
    parallel_for: str = ""
    parallel_setup: str = ""
    parallel_min_work: int = 1 << 15
    parallel_min_trips: int = 8
    # weights in images (jit/codegen/passes/images.py): how a parameter of ImageDType is declared, the helper
    # definitions that read one float of it, and the read itself ({buf}, {idx}, {width}); "" = no images
    image_param: str = ""
    image_helper: str = ""
    image_read: str = ""
    # vector types (codegen/opt/vectorize.py): float32 lanes of the widest vector the optimizer may ask for (0 = none);
    # the name of ``n`` lanes of scalar type ``t`` (``name``: the dtype's name), the definition that name needs
    # (emitted once per file; "" = built in), a load/store of ``n`` contiguous elements at ``ptr`` (any
    # alignment), lane ``i`` of vector ``x`` (``hexi``: i in hex), and a vector built from its ``lanes``
    vector_width: int = 0
    vector_type: str = ""
    vector_typedef: str = ""
    vector_load: str = ""
    vector_store: str = ""
    vector_lane: str = "{x}[{i}]"
    # lanes of two vectors a, b picked by ``mask`` (indices into a's lanes then b's); ``it``/``ut``: the signed /
    # unsigned int vector types of as many lanes as wide as a's; "" = no shuffles (strided loads are gathered)
    vector_shuffle: str = ""
    vector_ctor: str = "(({vt}){{{lanes}}})"
    # a comparison ``a op b`` of 32-bit lanes as 0/1 int32 lanes, and lanes of a where int32 lanes c are 1, else of
    # b (``vt``: a's vector type, ``it``: the int32 vector of as many lanes); "" = lane by lane. A select computed
    # lane by lane keeps every accumulator of a tile live across per-lane code: GCC spilled one of a conv's eight
    # accumulators in its reduce loop for a ReLU epilogue (43 vs 66 GFLOP/s)
    vector_compare: str = ""
    vector_select: str = ""
    # vector ``x`` as vector type ``vt``: its bits (``vector_reinterpret``, same size) or its lanes' values converted
    # as C casts convert them (``vector_convert``, same lane count); "" = lane by lane
    vector_reinterpret: str = ""
    vector_convert: str = ""
    # conversions from 8- or 16-bit lanes to 32-bit ones widen one step at a time (8 -> 16 -> 32 bits, then to
    # float): GCC 12 compiles a direct uint8x8 -> float32x8 convert (and the byte shuffle before it) lane by lane,
    # eight scalar converts per vector; through uint16x8 and int32x8 it is two zero-extends and one vcvtdq2ps
    # (vision's uint8 input copy: 302 -> 204 us on one core). Every step is exact, so the value is the C cast's
    widen_stepwise: bool = False
    # scalar loads in a reduce loop at (loop-invariant part) + (part that moves with the loop) read through a
    # pointer to the invariant part, declared before the loop. LLVM (PoCL) otherwise packs the four adds of a
    # tile's four broadcast addresses into one vector add plus extracts per iteration: the Winograd GEMM ran at
    # 28 GFLOP/s, at 56 with the pointers. GCC strength-reduces either form, so C keeps the plain sums.
    hoist_base_pointers: bool = False
    # before a reduce loop opens, finished vector accumulators still waiting for their use (a stride-2 conv's first
    # phase while the second phase's loop runs) are stored once to a volatile private array and read back when
    # used. PoCL's LLVM otherwise spills and reloads them inside the second loop, every iteration (conv2 of the
    # vision model: 0.94 -> 0.75 ms). The values are unchanged, bit for bit; GCC spills outside the loop itself.
    park_accumulators: bool = False
    # the device runs a work-item's own loops as cheaply as launched dimensions (a CPU device): an elementwise
    # kernel's padded row is peeled into a vector loop inside one work-item, as on the C target, instead of one
    # work-item per element (PoCL: vision's pad copies 0.107 -> 0.03 ms)
    peel_launched_rows: bool = False
    # the line asking the compiler to unroll the next loop, put before reduce loops of at most
    # ``UNROLL_HINT_TRIPS`` iterations (a conv's kernel rows and phase taps); "" = none. PoCL's LLVM left a
    # stride-2 conv's 2- and 3-trip loops rolled (conv2 of the vision model: 0.78 -> 0.66 ms with the hint);
    # GCC unrolls them itself
    unroll_hint: str = ""

    def type_name(self, d: DType) -> str:
        return self.type_names.get(d, d.cname)


def render_const(lang: CStyleLanguage, value: object, d: DType) -> str:
    if d.is_bool:
        return "1" if value else "0"
    if d.is_float:
        v = float(value)  # type: ignore[arg-type]
        ctype = lang.type_name(d)
        if math.isnan(v):
            text = "NAN"
        elif math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            # repr is the shortest text that round-trips; the value is already rounded to d
            text = repr(v) + lang.float_suffix.get(d, "")
            if v < 0:
                text = f"({text})"  # so that x - (-1.0f) never reads as x--1.0f
        return text if d in (dtypes.float32, dtypes.float64) else f"(({ctype}){text})"
    iv = int(value)  # type: ignore[call-overload]
    if d.is_unsigned:
        return f"{iv}u" if d.bits <= 32 else f"{iv}ull"
    if d.bits == 64:
        return f"({iv + 1}ll-1)" if iv == d.min else f"{iv}ll"
    if iv == d.min:
        return f"(({lang.type_name(d)})({iv + 1}-1))"
    return str(iv) if d.bits == 32 else f"(({lang.type_name(d)}){iv})"


class KernelRenderer:
    """Renders one kernel graph (a SINK of STOREs) to source text."""

    def __init__(self, lang: CStyleLanguage, name: str, sink: UOp) -> None:
        self.lang, self.name, self.sink = lang, name, sink
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self._deps: dict[UOp, frozenset[UOp]] = {}
        self.open_ranges: frozenset[UOp] = frozenset()
        self.loop_stack: list[UOp] = []
        self.scope_names: list[list[UOp]] = [[]]
        self.uses: dict[UOp, int] = {}
        self.helpers: dict[str, str] = {}  # helper functions the kernel calls, emitted before its signature
        self.parallel_loops = 0  # output loops shared out over threads (set by render)
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
        # INDEX -> (the INDEX of its loop-invariant part, the terms that move with the loop): see hoist_base_pointers
        self.rebased: dict[UOp, tuple[UOp, list[UOp]]] = {}
        self.vector_accs: set[UOp] = set()  # vector REDUCEs named by their accumulator variable
        self.parked: dict[str, int] = {}  # vector type -> slots of its park array (see park_accumulators)

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
        if self.lang.park_accumulators:
            # every reduce operand first: an operand's text taken before a later reduce parks it would keep its
            # accumulator live through that reduce's loop
            for s in u.src:
                if s.op is Ops.REDUCE:
                    self.expr(s)
        if self.lane is not None and self.lane in self.deps(u):
            return self.vector_expr(u, force_var)
        if op is Ops.STORE:
            idx, val = u.src
            store = f"*({self.expr(idx)}) = {self.expr(val)};"
            # after a group reduce every work-item of the group holds the same values: one of them stores
            self.line(store if self.group is None else f"if ({self.names[self.group]} == 0) {store}")
            return ""
        if op is Ops.INDEX:
            if (rebased := self.rebased.get(u)) is not None:
                base, moving = rebased
                return f"{self.expr(base)}+{'+'.join(f'({self.expr(t)})' for t in moving)}"
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
        elif self.uses.get(u, 0) <= 1 and not force_var:
            # C computes narrow types in int/float: an inlined value must be wrapped/rounded to its own type,
            # as assigning it to a variable would
            narrow = isinstance(u.dtype, DType) and u.dtype.itemsize < 4 and not u.dtype.is_bool \
                and op not in GroupOp.Comparison and op is not Ops.CAST
            return f"(({self.tname(u.dtype)}){text})" if narrow else text
        var = self.new_var("val" if op is Ops.LOAD else "alu")
        self.line(f"{self.tname(u.dtype)} {var} = {text};")
        self.name_here(u, var)
        return var

    # --- vectors: values that depend on the tile row's lane range ----------------------------------------
    def vtname(self, d: DType) -> str:
        """The vector type of ``self.lanes`` lanes of ``d`` (bool lanes are int32: 0 or 1), defined on first use."""
        lane_d = dtypes.int32 if d.is_bool else d
        vt = self.lang.vector_type.format(t=self.lang.type_name(lane_d), name=lane_d.name, n=self.lanes)
        if self.lang.vector_typedef and vt not in self.helpers:
            typedef = self.lang.vector_typedef.format(t=self.lang.type_name(lane_d), vt=vt,
                                                      nbytes=lane_d.itemsize * self.lanes)
            self.helpers[vt] = f"#ifndef {vt.upper()}_T\n#define {vt.upper()}_T\n{typedef}\n#endif"
        return vt

    def lane_of(self, src: UOp, text: str, i: int) -> str:
        """Lane ``i`` of operand ``src`` spelled ``text`` (a scalar operand is the same in every lane)."""
        return self.lane_text(text, i) if self.lane is not None and self.lane in self.deps(src) else text

    def lane_text(self, vector: str, i: int) -> str:
        return self.lang.vector_lane.format(x=vector, i=i, hexi=f"{i:x}")

    def ctor(self, d: DType, lanes: list[str]) -> str:
        return self.lang.vector_ctor.format(vt=self.vtname(d), lanes=", ".join(lanes))

    def lane_offset(self, idx: UOp) -> tuple[int, UOp | None]:
        """``(stride, base)`` when ``idx`` is ``base + lane * stride`` for a constant stride >= 1 (``base`` None: no
        base), else ``(0, None)``."""
        if idx is self.lane:
            return 1, None
        if idx.op is Ops.MUL and self.lane in idx.src:
            step = idx.src[1] if idx.src[0] is self.lane else idx.src[0]
            return (int(step.arg), None) if step.op is Ops.CONST and int(step.arg) >= 1 else (0, None)
        if idx.op is not Ops.ADD:
            return 0, None
        a, b = idx.src
        if self.lane in self.deps(b):
            a, b = b, a
        if self.lane in self.deps(b):
            return 0, None
        stride, base = self.lane_offset(a)
        if base is None:
            return stride, b
        self.no_overflow.add(base := base + b)  # a new node, only ever an address
        return stride, base

    def strided_ptr(self, index: UOp, d: DType) -> tuple[int, str] | None:
        """``(stride, "buf+base")`` when ``index`` (an INDEX) addresses elements ``base + lane * stride`` stored as
        ``d`` and lanes of ``d`` are stored as ``d`` (not bool, not an image); None otherwise."""
        buf, idx = index.src
        stride, base = self.lane_offset(idx)
        if not stride or d.is_bool or isinstance(buf.dtype, ImageDType):
            return None
        return stride, self.expr(buf) if base is None else f"{self.expr(buf)}+{self.expr(base)}"

    def strided_load(self, stride: int, ptr: str, d: DType) -> str | None:
        """Lanes ``ptr[0], ptr[stride], ...`` from contiguous vector loads: one load (stride 1), or two overlapping
        loads and a shuffle of their even elements (stride 2; the loads stay within the elements the lanes span).
        None for other strides (the caller gathers lane by lane)."""
        n, vt = self.lanes, self.vtname(d)
        if stride == 1:
            return self.lang.vector_load.format(ptr=ptr, n=n, vt=vt)
        if stride != 2 or not self.lang.vector_shuffle:
            return None
        lo, hi = self.new_var("lo"), self.new_var("hi")
        self.line(f"{vt} {lo} = {self.lang.vector_load.format(ptr=ptr, n=n, vt=vt)};")
        self.line(f"{vt} {hi} = {self.lang.vector_load.format(ptr=f'{ptr}+{n - 1}', n=n, vt=vt)};")
        # lanes 0..n/2-1 are the even elements of lo; the rest are elements n, n+2, .. = hi's odd ones
        mask = [2 * i for i in range(n // 2)] + [n + 2 * i + 1 for i in range(n // 2)]
        signed, unsigned = _SAME_WIDTH_INTS[d.itemsize]  # a mask's lanes are as wide as the data's
        return self.lang.vector_shuffle.format(a=lo, b=hi, mask=", ".join(map(str, mask)), n=n,
                                               it=self.vtname(signed), ut=self.vtname(unsigned))

    def vector_native(self, u: UOp) -> bool:
        d = u.dtype
        assert isinstance(d, DType)
        if d.is_float:
            return d is dtypes.float32 and u.op in _VECTOR_NATIVE_FLOAT
        if d.is_bool:
            return False  # a scalar _Bool operand does not mix with int lanes
        return d.itemsize == 4 and u.op in _VECTOR_NATIVE_INT and (d.is_unsigned or u in self.no_overflow)

    def vector_operand(self, s: UOp, d: DType) -> str:
        """Operand ``s`` of a whole-vector op on lanes of ``d``: a vector as it is, a scalar cast to ``d``'s C type
        (a _Bool or narrow scalar would not convert to the lanes' type by itself)."""
        text = self.expr(s)
        return text if self.lane in self.deps(s) else f"({self.tname(d)})({text})"

    def as_vector(self, s: UOp, d: DType) -> str:
        """Operand ``s`` as a vector variable of lanes of ``d``: a scalar is broadcast to every lane."""
        if self.lane in self.deps(s):
            return self.expr(s, force_var=True)
        return self.ctor(d, [self.expr(s, force_var=True)] * self.lanes)

    def vector_min_max(self, op: Ops, d: DType, a: str, b: str) -> str:
        """MAX/MIN of vectors ``a``, ``b`` (variables: each is spelled more than once) as the scalar spelling
        computes it: ``a`` where it is the larger (smaller) or, for floats, NaN (NaN propagates), else ``b``."""
        cmp = self.lang.vector_compare
        cond = cmp.format(a=b, b=a, op="<") if op is Ops.MAX else cmp.format(a=a, b=b, op="<")
        if d.is_float:
            cond = f"({cond}|{cmp.format(a=a, b=a, op='!=')})"
        return self.lang.vector_select.format(c=cond, a=a, b=b, vt=self.vtname(d), it=self.vtname(dtypes.int32))

    def vector_convert_text(self, src: UOp, d: DType) -> str:
        """Vector ``src`` converted lane by lane to ``d``, through the wider integer lanes first where the
        language asks for it (``widen_stepwise``)."""
        lang, text, s = self.lang, self.expr(src), src.dtype
        if lang.widen_stepwise and not s.is_bool and s.is_int and s.itemsize < 4 and d.itemsize == 4:
            steps = ([dtypes.uint16 if s.is_unsigned else dtypes.int16] if s.itemsize == 1 else []) + [dtypes.int32]
            for step in steps:
                text = lang.vector_convert.format(x=text, vt=self.vtname(step))
            if d == dtypes.int32:
                return text
        return lang.vector_convert.format(x=text, vt=self.vtname(d))

    def whole_vector_text(self, u: UOp) -> str | None:
        """One vector expression for ``u`` where the language spells it (None: computed lane by lane):
        comparisons of and selects between 32-bit lanes; signed 32-bit + - * wrapping through the unsigned type
        (as the scalar spelling does); integer min/max as compare and select; and/or/xor/not of bool lanes (int32
        0/1); conversions between lane types; a select whose condition is one scalar for every lane."""
        lang, op, d = self.lang, u.op, u.dtype
        assert isinstance(d, DType)
        if op is Ops.CAST and lang.vector_convert and not d.is_bool and d in _VECTOR_LANE_TYPES and \
                u.src[0].dtype in _VECTOR_LANE_TYPES:
            return self.vector_convert_text(u.src[0], d)
        if op in (Ops.ADD, Ops.SUB, Ops.MUL) and lang.vector_reinterpret and _lane32(d) and d.is_int and \
                not d.is_unsigned and u not in self.no_overflow:
            ut = dtypes.uint32
            a, b = (self.vector_operand(s, ut) if self.lane not in self.deps(s) else
                    lang.vector_reinterpret.format(x=self.expr(s), vt=self.vtname(ut)) for s in u.src)
            return lang.vector_reinterpret.format(x=f"({a}{_INFIX[op]}{b})", vt=self.vtname(d))
        if op in (Ops.MAX, Ops.MIN) and lang.vector_select and _lane32(d):
            return self.vector_min_max(op, d, self.as_vector(u.src[0], d), self.as_vector(u.src[1], d))
        if d.is_bool and op in (Ops.AND, Ops.OR, Ops.XOR) and all(s.dtype == dtypes.bool for s in u.src):
            a, b = (self.vector_operand(s, dtypes.int32) for s in u.src)
            return f"({a}{_INFIX[op]}{b})"
        if d.is_bool and op is Ops.NOT:
            return f"({self.expr(u.src[0])}^1)"
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) and lang.vector_compare and all(_lane32(s.dtype) for s in u.src):
            return lang.vector_compare.format(a=self.expr(u.src[0]), b=self.expr(u.src[1]), op=_INFIX[op])
        if op is Ops.WHERE and lang.vector_select and _lane32(d) and self.lane in self.deps(u.src[0]):
            return lang.vector_select.format(c=self.expr(u.src[0]), a=self.as_vector(u.src[1], d),
                                             b=self.as_vector(u.src[2], d), vt=self.vtname(d),
                                             it=self.vtname(dtypes.int32))
        if op is Ops.WHERE and self.lane not in self.deps(u.src[0]) and not d.is_bool:
            # one condition for every lane (a pad's row mask around a peeled row): C's ?: picks a whole vector
            return f"({self.expr(u.src[0])}?{self.as_vector(u.src[1], d)}:{self.as_vector(u.src[2], d)})"
        return None

    def vector_expr(self, u: UOp, force_var: bool) -> str:
        """``u`` as a vector of ``self.lanes`` lanes (``u`` depends on the lane range)."""
        op = u.op
        if op is Ops.STORE:
            index, val = u.src
            at = self.strided_ptr(index, val.dtype) if self.lane in self.deps(val) else None
            if at is not None and at[0] == 1:
                self.line(self.lang.vector_store.format(ptr=at[1], val=self.expr(val), n=self.lanes,
                                                        vt=self.vtname(val.dtype)))
                return ""
            idx, v = self.expr(index.src[1], force_var=True), self.expr(val, force_var=True)
            buf = self.expr(index.src[0])
            for i in range(self.lanes):
                self.line(f"*({buf}+{self.lane_of(index.src[1], idx, i)}) = {self.lane_of(val, v, i)};")
            return ""
        d = u.dtype
        assert isinstance(d, DType)
        if op is Ops.LOAD:
            at = self.strided_ptr(u.src[0], d)
            if (text := self.strided_load(*at, d) if at is not None else None) is None:
                buf, idx = u.src[0].src
                if at is not None:  # a constant stride (channels of a pixel): one scalar base, constant offsets
                    ptr = self.new_var("ptr")
                    self.line(f"{self.lang.buffer_prefix}{self.tname(d)}* {ptr} = {at[1]};")
                    text = self.ctor(d, [f"*({ptr}+{i * at[0]})" for i in range(self.lanes)])
                else:
                    idx_text, buf_text = self.expr(idx, force_var=True), self.expr(buf)
                    if isinstance(image := buf.dtype, ImageDType):
                        self.helpers["image"] = self.lang.image_helper
                        lanes = [self.lang.image_read.format(buf=buf_text, idx=self.lane_of(idx, idx_text, i),
                                                             width=image.width) for i in range(self.lanes)]
                    else:
                        lanes = [f"*({buf_text}+{self.lane_of(idx, idx_text, i)})" for i in range(self.lanes)]
                    text = self.ctor(d, lanes)
            var = self.new_var("val")
        elif (text := self.whole_vector_text(u)) is not None:
            var = self.new_var("alu")
        elif self.vector_native(u):
            text = self.alu_text(u, [self.expr(s) for s in u.src])
            if self.uses.get(u, 0) <= 1 and not force_var:
                return text
            var = self.new_var("alu")
        else:
            srcs = [self.expr(s, force_var=True) for s in u.src]
            text = self.ctor(d, [self.alu_text(u, [self.lane_of(s, t, i) for s, t in zip(u.src, srcs, strict=True)])
                                 for i in range(self.lanes)])
            var = self.new_var("alu")
        self.line(f"{self.vtname(d)} {var} = {text};")
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
            return f"(({self.tname(d)})({s[0]}{_INFIX[op]}{s[1]}))" if op in _INFIX else \
                f"(({self.tname(d)})(({ut})0-{s[0]}))"
        if op in _INFIX:
            return f"({s[0]}{_INFIX[op]}{s[1]})"
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
            if d.is_float:  # NaN propagates, as numpy's maximum/minimum
                return f"(({s[0]}{cmp}{s[1]}||{s[0]}!={s[0]})?{s[0]}:{s[1]})"
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
        if op in _FLOAT_FN:
            if not d.is_float:
                raise CompileError(f"{self.name}: {op.name} expects a float operand, got {d.name}")
            return self.fcall(_FLOAT_FN[op], d, s)
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

    def emit_reduce(self, r: UOp) -> str:
        if r.src[1:] == (self.group,):
            return self.emit_group_combine(r)
        group = self.reduce_group(r)
        ranges = r.src[1:]
        if self.lang.park_accumulators:
            self.park_vector_accumulators()
        # hoist what the loop body does not need the loop for
        for red in group:
            for node in toposort([red.src[0]]):
                if self.lang.hoist_base_pointers and node.op is Ops.INDEX:
                    self.hoist_base_pointer(node)
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
            if self.lang.unroll_hint and rng.src[0].op is Ops.CONST and int(rng.src[0].arg) <= UNROLL_HINT_TRIPS:
                self.line(self.lang.unroll_hint)
            self.open_loop(rng)
        # a combine computed lane by lane reads its value once per lane: it needs a variable
        values = [self.expr(red.src[0], force_var=vec and not self.vector_native(c))
                  for red, vec, c in zip(group, vector, combines, strict=True)]
        for red, acc, v, vec, c in zip(group, accs, values, vector, combines, strict=True):
            if vec and c.op in (Ops.MAX, Ops.MIN) and self.lang.vector_select and _lane32(red.dtype):
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
        for red, acc, vec in zip(group, accs, vector, strict=True):
            self.name_here(red, acc)
            if vec:
                self.vector_accs.add(red)
        return accs[0]

    def park_vector_accumulators(self) -> None:
        """Store every finished vector accumulator in scope to its type's park array and name it by its slot
        there (see ``CStyleLanguage.park_accumulators``)."""
        for red in sorted(self.vector_accs & self.names.keys(), key=lambda u: self.names[u]):
            vt = self.vtname(red.dtype)  # type: ignore[arg-type]
            slot = f"park_{vt}[{self.parked.get(vt, 0)}]"
            self.parked[vt] = self.parked.get(vt, 0) + 1
            self.line(f"{slot} = {self.names[red]};")
            self.names[red] = slot
        self.vector_accs.clear()

    def hoist_base_pointer(self, index: UOp) -> None:
        """Declare a pointer to the loop-invariant part of a scalar global ``index`` inside the loop about to open
        and remember the terms that move with the loop (see ``CStyleLanguage.hoist_base_pointers``)."""
        buf, idx = index.src[0], index.src[1]
        if (index in self.rebased or buf.op is not Ops.DEFINE_GLOBAL or isinstance(buf.dtype, ImageDType)
                or self.deps(index) <= self.open_ranges or (self.lane is not None and self.lane in self.deps(index))):
            return
        terms, stack = [], [idx]
        while stack:
            t = stack.pop()
            if t.op is Ops.ADD:
                stack += t.src
            else:
                terms.append(t)
        fixed = [t for t in terms if self.deps(t) <= self.open_ranges and t.op is not Ops.CONST]
        moving = [t for t in terms if t not in fixed]
        if not fixed or not moving:
            return
        offset = fixed[0]
        for t in fixed[1:]:
            offset = offset + t
            self.no_overflow.add(offset)  # part of an address the loop's own sum already formed
        base = UOp(Ops.INDEX, index.dtype, (buf, offset))
        if base not in self.names:
            var = self.new_var("ptr")
            assert isinstance(buf.dtype, PtrDType)
            self.line(f"{self.lang.buffer_prefix}{self.tname(buf.dtype.base)}* {var} = {self.expr(base)};")
            self.name_here(base, var)
        self.rebased[index] = (base, moving)

    def open_loop(self, rng: UOp) -> None:
        var = f"ridx{rng.arg[0]}"
        self.names[rng] = var
        self.open_ranges |= {rng}
        self.loop_stack.append(rng)
        self.scope_names.append([])
        self.line(f"for (int {var} = 0; {var} < {self.expr(rng.src[0])}; {var}++) {{")
        self.depth += 1

    def close_loop(self) -> None:
        # values computed inside the loop body are out of scope after it (unrolled copies reopen the loop)
        for u in self.scope_names.pop():
            del self.names[u]
        self.open_ranges -= {self.loop_stack.pop()}
        self.depth -= 1
        self.line("}")

    def parallel_depth(self, loops: list[UOp]) -> int:
        """How many of the outermost output ``loops`` the thread pragma collapses (0: no pragma): the fewest
        whose trip count reaches ``parallel_min_trips``, when the kernel has enough work to share.

        The output loops are opened back to back with nothing between them (perfectly nested, as ``collapse``
        requires), and each iteration of them stores to its own output elements, so iterations are independent.
        """
        if not self.lang.parallel_for or not loops:
            return 0
        # unrolled copies of the stores (tiles, stacks) are work the ranges no longer count
        work = math.prod(int(u.src[0].arg) for u in toposort([self.sink]) if u.op is Ops.RANGE) * len(self.sink.src)
        if work < self.lang.parallel_min_work:
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
        for g in toposort([self.sink]):
            if g.op is Ops.DEFINE_GLOBAL:
                self.names[g] = f"data{g.arg}"
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
            self.line(self.lang.parallel_for.format(collapse=self.parallel_loops))
            if self.lang.parallel_setup:
                self.helpers["parallel_setup"] = self.lang.parallel_setup
        for rng in loops:
            self.open_loop(rng)
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
        if self.lane is not None and any(re.search(r"\blane\b", ln) for ln in self.lines[lane_at:]):
            lane_ids = self.ctor(dtypes.int32, [str(i) for i in range(self.lanes)])
            self.lines.insert(lane_at, f"  {self.vtname(dtypes.int32)} lane = {lane_ids};")
        self.lines[:0] = [f"  {decl}" for decl in self.local_arrays]
        self.lines[:0] = [f"  volatile {vt} park_{vt}[{n}];" for vt, n in self.parked.items()]
        head = "\n".join((*self.lang.headers, *self.helpers.values()))
        sig = f"{self.lang.kernel_prefix} {self.name}({', '.join(params)}) {{"
        return f"{head}\n{sig}\n" + "\n".join(self.lines) + "\n}\n"


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
    """Kernel source and what the target must know to build it (``parallel``: it uses the thread pragma)."""

    source: str
    parallel: bool


def render_kernel(lang: CStyleLanguage, name: str, sink: UOp) -> str:
    return render_kernel_info(lang, name, sink).source


def render_kernel_info(lang: CStyleLanguage, name: str, sink: UOp) -> RenderedKernel:
    if sink.op is not Ops.SINK:
        raise CompileError(f"{name}: expected a SINK at the kernel root, got {sink.op.name}")
    for u in toposort([sink]):
        if u.op in GroupOp.Movement or u.op in (Ops.BUFFER, Ops.REDUCE_AXIS):
            raise CompileError(f"{name}: tensor-level op {u.op.name} reached the renderer")
    renderer = KernelRenderer(lang, name, sink)
    source = renderer.render()
    return RenderedKernel(source, renderer.parallel_loops > 0)
