"""Vector expressions: values that depend on the tile row's lane range, spelled as the language's vector types.

The optimizer (jit/codegen/opt/vectorize.py) marks one RANGE of kind "vector": every value depending on it is a
vector of that many lanes. ``VectorExprs`` spells them: vector type names, lane access, contiguous and strided
vector loads and stores, conversions, and whole-vector expressions where the language has them; the rest is
computed lane by lane with the scalar spelling. It is the vector half of ``KernelRenderer``
(targets/cstyle/walk.py), which provides the walk it calls back into.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

from jit.codegen.passes.symbolic import linear_terms
from jit.common.dtype import DType, ImageDType, PtrDType, dtypes
from jit.ir.uop import Ops, UOp
from targets.cstyle.language import FLOAT_FN, INFIX, MAX_INLINE_DEPTH, CStyleLanguage, paren_depth

# ops a language's vector types compute directly on 32-bit lanes (vector op vector, or vector op scalar); more are
# whole-vector expressions where the language spells them (``VectorExprs.whole_vector_text``), the rest are
# computed lane by lane with their scalar spelling. Bool lanes are int32 lanes holding 0 or 1, as the scalar
# expressions compute them.
_VECTOR_NATIVE_FLOAT = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG})
_VECTOR_NATIVE_INT = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})
_SAME_WIDTH_INTS = {1: (dtypes.int8, dtypes.uint8), 2: (dtypes.int16, dtypes.uint16),
                    4: (dtypes.int32, dtypes.uint32), 8: (dtypes.int64, dtypes.uint64)}
# lane types whole-vector conversions take (bool lanes are int32 0/1: converting them gives 0/1 too)
_VECTOR_LANE_TYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16,
                                dtypes.uint32, dtypes.float32})


def _not_nan_const(u: UOp) -> bool:
    return u.op is Ops.CONST and isinstance(u.arg, (int, float)) and u.arg == u.arg


def _minmax_operands(u: UOp) -> tuple[str, UOp, UOp] | None:
    """``(op, a, b)`` where float32 ``u`` is exactly ``a > b ? a : b`` (op max) or ``a < b ? a : b`` (min) lane
    by lane, NaN and zeros included (targets/minmax.py): a where of a comparison of the two values it picks, or a
    MAX/MIN with a constant bound other than NaN and zero (``x <= c ? c : x`` is ``c > x ? c : x`` unless both
    are zeros); else None."""
    if u.dtype is not dtypes.float32:
        return None
    if u.op is Ops.WHERE and u.src[0].op is Ops.CMPLT:
        p, q = u.src[0].src
        if (u.src[1], u.src[2]) == (q, p):
            return "max", q, p
        if (u.src[1], u.src[2]) == (p, q):
            return "min", p, q
    if u.op in (Ops.MAX, Ops.MIN):
        bound, x = u.src if u.src[0].op is Ops.CONST else u.src[::-1]
        if _not_nan_const(bound) and bound.arg != 0:
            return ("max" if u.op is Ops.MAX else "min"), bound, x
    return None


def lane32(d: object) -> bool:
    """Whether ``d`` is a 32-bit lane type the vector compare and select take (float32, 32-bit ints; not bool)."""
    return d is dtypes.float32 or (isinstance(d, DType) and d.is_int and not d.is_bool and d.itemsize == 4)


class VectorExprs(ABC):
    """The vector spellings of a kernel's lane-dependent values (module docstring)."""

    lang: CStyleLanguage
    lane: UOp | None  # the RANGE of kind "vector", if the kernel has one
    lanes: int  # its size
    helpers: dict[str, str]  # definitions emitted once before the kernel (vector typedefs among them)
    no_overflow: set[UOp]  # integer values C may assume do not overflow

    @abstractmethod
    def expr(self, u: UOp, force_var: bool = False) -> str: ...

    @abstractmethod
    def deps(self, u: UOp) -> frozenset[UOp]: ...

    @abstractmethod
    def line(self, text: str) -> None: ...

    @abstractmethod
    def new_var(self, prefix: str) -> str: ...

    @abstractmethod
    def name_here(self, u: UOp, var: str) -> None: ...

    @abstractmethod
    def tname(self, d: DType | PtrDType) -> str: ...

    @abstractmethod
    def alu_text(self, u: UOp, s: list[str]) -> str: ...

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
        if self.lang.vector_splat and len(lanes) > 1 and lanes.count(lanes[0]) == len(lanes):
            return self.lang.vector_splat.format(vt=self.vtname(d), x=lanes[0])
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

    def word_count(self, index: UOp, d: DType) -> int:
        """How many 32-bit words the contiguous lanes of ``d`` at ``index`` (an INDEX) are loaded or stored as
        (``vector_word_load``): 2, 4, 8 or 16 where the lanes are 8 or 16 bits wide, fill whole words and start at
        a multiple of 4 bytes of a global buffer (the gcd of their offset's linear terms says so); else 0."""
        buf, idx = index.src
        words, rest = divmod(self.lanes * d.itemsize, 4)
        if not self.lang.vector_word_load or d.itemsize > 2 or rest or words not in (2, 4, 8, 16) or \
                buf.op is not Ops.DEFINE_GLOBAL or isinstance(buf.dtype, ImageDType):
            return 0
        base = self.lane_offset(idx)[1]
        if base is None:
            return words
        terms, const = linear_terms(base)
        return words if math.gcd(const, *terms.values()) * d.itemsize % 4 == 0 else 0

    def strided_ptr(self, index: UOp, d: DType) -> tuple[int, str] | None:
        """``(stride, "buf+base")`` when ``index`` (an INDEX) addresses elements ``base + lane * stride`` stored as
        ``d`` and lanes of ``d`` are stored as ``d`` (not bool, not an image); None otherwise."""
        buf, idx = index.src
        stride, base = self.lane_offset(idx)
        if not stride or d.is_bool or isinstance(buf.dtype, ImageDType):
            return None
        return stride, self.expr(buf) if base is None else f"{self.expr(buf)}+{self.expr(base)}"

    def strided_load(self, stride: int, ptr: str, d: DType, words: int = 0) -> str | None:
        """Lanes ``ptr[0], ptr[stride], ...`` from contiguous vector loads: one load (stride 1; of ``words`` 32-bit
        words where ``word_count`` gave some), or two overlapping loads and a shuffle of their even elements (stride
        2; the loads stay within the elements the lanes span). None for other strides (the caller gathers lane by
        lane)."""
        n, vt = self.lanes, self.vtname(d)
        if stride == 1 and words:
            return self.lang.vector_word_load.format(ptr=ptr, w=words, vt=vt)
        if stride == 1:
            return self.lang.vector_load.format(ptr=ptr, n=n, vt=vt)
        if stride != 2 or not (self.lang.vector_shuffle or self.lang.lane_shuffle):
            return None
        lo, hi = self.new_var("lo"), self.new_var("hi")
        self.line(f"{vt} {lo} = {self.lang.vector_load.format(ptr=ptr, n=n, vt=vt)};")
        self.line(f"{vt} {hi} = {self.lang.vector_load.format(ptr=f'{ptr}+{n - 1}', n=n, vt=vt)};")
        # lanes 0..n/2-1 are the even elements of lo; the rest are elements n, n+2, .. = hi's odd ones
        mask = [2 * i for i in range(n // 2)] + [n + 2 * i + 1 for i in range(n // 2)]
        if not self.lang.vector_shuffle:
            return self.ctor(d, [self.lane_text(lo, m) if m < n else self.lane_text(hi, m - n) for m in mask])
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

    def vector_min_max(self, op: Ops, d: DType, a: str, b: str, a_not_nan: bool = False,
                       b_not_nan: bool = False) -> str:
        """MAX/MIN of vectors ``a``, ``b`` (variables: each is spelled more than once) as the scalar spelling
        computes it: ``a`` where it is the larger (smaller) or, for floats, NaN (NaN propagates), else ``b``.
        Where ``b`` has no NaN lane (a clip's constant bound) one compare gives the same lanes, -0.0 and NaN
        included: MAX is ``a <= b ? b : a`` and MIN ``b <= a ? b : a``."""
        cmp, select = self.lang.vector_compare, self.lang.vector_select
        types = {"vt": self.vtname(d), "it": self.vtname(dtypes.int32)}
        if d.is_float and b_not_nan:
            cond = cmp.format(a=a, b=b, op="<=") if op is Ops.MAX else cmp.format(a=b, b=a, op="<=")
            return select.format(c=cond, a=b, b=a, **types)
        cond = cmp.format(a=b, b=a, op="<") if op is Ops.MAX else cmp.format(a=a, b=b, op="<")
        if d.is_float and not a_not_nan:
            cond = f"({cond}|{cmp.format(a=a, b=a, op='!=')})"
        return select.format(c=cond, a=a, b=b, **types)

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
        0/1); conversions between lane types; a select whose condition is one scalar for every lane; float32 math
        functions where they take vectors (``vector_math``)."""
        lang, op, d = self.lang, u.op, u.dtype
        assert isinstance(d, DType)
        if op is Ops.CAST and lang.vector_convert and not d.is_bool and d in _VECTOR_LANE_TYPES and \
                u.src[0].dtype in _VECTOR_LANE_TYPES:
            return self.vector_convert_text(u.src[0], d)
        if op in (Ops.ADD, Ops.SUB, Ops.MUL) and lang.vector_reinterpret and lane32(d) and d.is_int and \
                not d.is_unsigned and u not in self.no_overflow:
            ut = dtypes.uint32
            a, b = (self.vector_operand(s, ut) if self.lane not in self.deps(s) else
                    lang.vector_reinterpret.format(x=self.expr(s), vt=self.vtname(ut)) for s in u.src)
            return lang.vector_reinterpret.format(x=f"({a}{INFIX[op]}{b})", vt=self.vtname(d))
        if op is Ops.BITCAST and lang.vector_reinterpret and lane32(d) and lane32(u.src[0].dtype):
            return lang.vector_reinterpret.format(x=self.expr(u.src[0]), vt=self.vtname(d))
        if op in FLOAT_FN and d is dtypes.float32 and lang.vector_math:
            return f"{FLOAT_FN[op]}{lang.f32_math_suffix}({self.expr(u.src[0])})"
        if op is Ops.RECIPROCAL and d is dtypes.float32:  # a scalar 1 divides every lane (sigmoid's 1 / (1 + e))
            return f"(1.0f/{self.expr(u.src[0])})"
        if self.lanes == lang.vector_minmax_lanes and (picked := _minmax_operands(u)) is not None and \
                (helper := lang.vector_minmax.get(picked[0])) is not None:
            self.vtname(d)  # the typedef first: the helper names it
            fn = f"dp_{picked[0]}_float32x{self.lanes}"
            a, b = (self.as_vector(s, d) for s in picked[1:])
            self.helpers.setdefault(fn, helper)
            return f"{fn}({a}, {b})"
        if op in (Ops.MAX, Ops.MIN) and lang.vector_select and lane32(d):
            return self.vector_min_max(op, d, self.as_vector(u.src[0], d), self.as_vector(u.src[1], d),
                                       _not_nan_const(u.src[0]), _not_nan_const(u.src[1]))
        if d.is_bool and op in (Ops.AND, Ops.OR, Ops.XOR) and all(s.dtype == dtypes.bool for s in u.src):
            a, b = (self.vector_operand(s, dtypes.int32) for s in u.src)
            return f"({a}{INFIX[op]}{b})"
        if d.is_bool and op is Ops.NOT:
            return f"({self.expr(u.src[0])}^1)"
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) and lang.vector_compare and all(lane32(s.dtype) for s in u.src):
            return lang.vector_compare.format(a=self.expr(u.src[0]), b=self.expr(u.src[1]), op=INFIX[op])
        if op is Ops.WHERE and lang.vector_select and lane32(d) and self.lane in self.deps(u.src[0]):
            return lang.vector_select.format(c=self.expr(u.src[0]), a=self.as_vector(u.src[1], d),
                                             b=self.as_vector(u.src[2], d), vt=self.vtname(d),
                                             it=self.vtname(dtypes.int32))
        if op is Ops.WHERE and self.lane not in self.deps(u.src[0]) and not d.is_bool:
            # one condition for every lane (a pad's row mask around a peeled row): C's ?: picks a whole vector
            return f"({self.expr(u.src[0])}?{self.as_vector(u.src[1], d)}:{self.as_vector(u.src[2], d)})"
        return None

    def scatter_helper(self, index: UOp, val: UOp) -> str | None:
        """The language's scatter helper for a store of ``val`` at ``index`` whose lanes are not contiguous, if it
        has one for this lane count and dtype and the address is a buffer's (not an image's) plus int32 lanes."""
        helper = self.lang.vector_scatter.get(val.dtype.name) if self.lanes == self.lang.vector_scatter_lanes else None
        buf, idx = index.src[0], index.src[1]
        if helper is None or isinstance(buf.dtype, ImageDType) or idx.dtype != dtypes.int32 or \
                buf.op is not Ops.DEFINE_GLOBAL:
            return None
        return helper

    def vector_expr(self, u: UOp, force_var: bool) -> str:
        """``u`` as a vector of ``self.lanes`` lanes (``u`` depends on the lane range)."""
        op = u.op
        if op is Ops.STORE:
            index, val = u.src
            at = self.strided_ptr(index, val.dtype)
            if at is not None and at[0] == 1:
                # a value every lane shares (a pad's border zero) is stored as its broadcast: one vector store
                spelling = self.lang.vector_word_store if (words := self.word_count(index, val.dtype)) else \
                    self.lang.vector_store
                self.line(spelling.format(ptr=at[1], val=self.as_vector(val, val.dtype), n=self.lanes, w=words,
                                          vt=self.vtname(val.dtype)))
                return ""
            if (helper := self.scatter_helper(index, val)) is not None:
                fn = f"dp_scatter_{val.dtype.name}x{self.lanes}"
                idx_vec, v_vec = self.as_vector(index.src[1], dtypes.int32), self.as_vector(val, val.dtype)
                self.helpers.setdefault(fn, helper)  # after the vector typedefs its parameters name
                self.line(f"{fn}({self.expr(index.src[0])}, {idx_vec}, {v_vec});")
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
            text = self.strided_load(*at, d, self.word_count(u.src[0], d)) if at is not None else None
            if text is None:
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
            if self.uses.get(u, 0) <= 1 and not force_var and paren_depth(text) <= MAX_INLINE_DEPTH:
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

