"""The UOp: drivepack's one IR, from tensor ops down to rendered kernels.

A UOp is an immutable node (op, dtype, src, arg). Nodes are hash-consed: building a node equal to a live
one returns that same object, so equality is identity and shared subgraphs are stored once. Derived
facts (shape, value range) are computed on first use and cached on the node.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from enum import Enum, auto
from typing import Any, Final

from jit.common.dtype import AnyDType, DType, PtrDType, dtypes, least_upper_dtype, truncate_const
from jit.common.errors import DrivepackError


class Ops(Enum):
    # every member is a singleton compared by identity: hashed by it too, in C (Enum hashes its name in Python, and
    # every node built hashes its op)
    __hash__ = object.__hash__

    # tensor-level leaves
    BUFFER = auto()  # arg: (uid, device, size); a realized 1-D buffer
    CONST = auto()  # arg: scalar value; shape ()
    IOTA = auto()  # arg: n; int32 0..n-1, shape (n,)
    # movement (tensor-level, index arithmetic only)
    RESHAPE = auto()  # arg: new shape
    PERMUTE = auto()  # arg: axis order
    EXPAND = auto()  # arg: new shape (size-1 dims broadcast)
    PAD = auto()  # arg: ((before, after), ...)
    SHRINK = auto()  # arg: ((start, stop), ...)
    FLIP = auto()  # arg: axes flipped
    STRIDE = auto()  # arg: positive step per axis
    WINDOW = auto()  # arg: (kernel, stride, dilation) sliding windows over the trailing dims
    # tensor-level compute
    REDUCE_AXIS = auto()  # arg: (Ops.ADD | Ops.MAX | Ops.MUL, axes); reduced axes keep size 1
    GATHER = auto()  # arg: axis; src (x, idx): out[i] = x[i with axis replaced by idx[i]]
    CONTIGUOUS = auto()  # forces a kernel boundary (realize)
    # dtype
    CAST = auto()
    BITCAST = auto()
    # unary ALU
    NEG = auto()
    EXP = auto()
    LOG = auto()
    SQRT = auto()
    SIN = auto()
    COS = auto()
    TAN = auto()
    TANH = auto()
    ERF = auto()
    RECIPROCAL = auto()
    TRUNC = auto()
    FLOOR = auto()
    CEIL = auto()
    RINT = auto()  # round half to even
    ABS = auto()
    NOT = auto()  # bitwise/logical not
    # binary ALU
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()  # float division
    IDIV = auto()  # integer division, truncating toward zero
    MOD = auto()  # remainder with the sign of the dividend (C % / fmod)
    POW = auto()
    MAX = auto()  # on floats a NaN operand gives NaN, whichever side (jit/ir/alu.py folds it so; renderers spell it so)
    MIN = auto()  # likewise: not C's fmaxf/fminf, which drop a NaN
    CMPLT = auto()
    CMPEQ = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    # ternary ALU
    WHERE = auto()
    MULACC = auto()
    # kernel-level
    DEFINE_GLOBAL = auto()  # arg: parameter index; dtype PtrDType
    # arg: (axis id, kind) or (axis id, kind, "unroll"): the renderer asks the C compiler to unroll that loop
    # (jit/codegen/opt/hints.py); src (end,)
    RANGE = auto()
    SPECIAL = auto()  # arg: (name, size); a GPU work-item index
    # src (buffer, index) or (buffer, index, base); dtype PtrDType. ``base``: INDEX(buffer, f), f a sum of some of
    # index's terms, a pointer set before a loop that the renderer adds index's other terms to (opt/hoist.py)
    INDEX = auto()
    LOAD = auto()  # src (index,)
    STORE = auto()  # src (index, value)
    REDUCE = auto()  # arg: reduce op; src (value, *ranges)
    # src (value,): the value stored once to a slot of the kernel's volatile park array and read back where it
    # is used (jit/codegen/opt/park.py)
    PARK = auto()
    # src (value, index, gate): ``value`` (a LOAD) as it is; where ``gate`` holds, the renderer first asks the memory
    # system for the line at ``index`` (an INDEX) that a later iteration reads (jit/codegen/opt/prefetch.py)
    PREFETCH = auto()
    SINK = auto()  # arg: KernelInfo; src stores
    NOOP = auto()


class GroupOp:
    Unary: Final = frozenset({Ops.NEG, Ops.EXP, Ops.LOG, Ops.SQRT, Ops.SIN, Ops.COS, Ops.TAN, Ops.TANH, Ops.ERF,
                              Ops.RECIPROCAL, Ops.TRUNC, Ops.FLOOR, Ops.CEIL, Ops.RINT, Ops.ABS, Ops.NOT})
    Binary: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.POW, Ops.MAX, Ops.MIN,
                               Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
    Ternary: Final = frozenset({Ops.WHERE, Ops.MULACC})
    ALU: Final = Unary | Binary | Ternary
    Comparison: Final = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
    Commutative: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPEQ, Ops.CMPNE, Ops.AND, Ops.OR,
                                    Ops.XOR})
    Movement: Final = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.STRIDE,
                                 Ops.WINDOW})
    Buffer: Final = frozenset({Ops.BUFFER, Ops.DEFINE_GLOBAL, Ops.INDEX, Ops.LOAD, Ops.STORE})
    Elementwise: Final = ALU | {Ops.CAST, Ops.BITCAST}
    Float: Final = frozenset({Ops.EXP, Ops.LOG, Ops.SQRT, Ops.SIN, Ops.COS, Ops.TAN, Ops.TANH, Ops.ERF,
                              Ops.RECIPROCAL, Ops.FDIV, Ops.POW})

# What ``arg`` holds for each op (checked when a node is first built); ops not listed take None.
ARG_TYPES: Final[dict[Ops, type | tuple[type, ...]]] = {
    Ops.BUFFER: tuple, Ops.CONST: (int, float, bool), Ops.IOTA: int, Ops.RESHAPE: tuple, Ops.PERMUTE: tuple,
    Ops.EXPAND: tuple, Ops.PAD: tuple, Ops.SHRINK: tuple, Ops.FLIP: tuple, Ops.STRIDE: tuple, Ops.WINDOW: tuple,
    Ops.REDUCE_AXIS: tuple, Ops.GATHER: int, Ops.DEFINE_GLOBAL: int, Ops.RANGE: tuple, Ops.SPECIAL: tuple,
    Ops.REDUCE: Ops, Ops.SINK: object, Ops.CONTIGUOUS: object,
}


class UOpArgError(DrivepackError, TypeError):
    """A UOp built with an ``arg`` of the wrong type for its op."""


def _arg_key(arg: Any) -> Any:
    """A hashable key that tells apart values Python calls equal (0.0 / -0.0, 1 / 1.0 / True, NaN)."""
    if arg is None or type(arg) is int:
        return arg
    if isinstance(arg, float):
        return ("f", arg.hex())
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, tuple):
        return tuple(_arg_key(a) for a in arg)
    return arg


class UOp:
    """An immutable, hash-consed IR node. Build with ``UOp(op, dtype, src, arg)``."""

    __slots__ = ("op", "dtype", "src", "arg", "_cache", "__weakref__")
    _interned: Final[weakref.WeakValueDictionary[tuple, UOp]] = weakref.WeakValueDictionary()

    op: Ops
    dtype: AnyDType
    src: tuple[UOp, ...]
    arg: Any

    def __new__(cls, op: Ops, dtype: AnyDType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        key = (op, dtype, src, _arg_key(arg))
        try:
            # the table's own dict, read without its Python-level ``get`` (it only defers removals while iterated)
            ref = cls._interned.data.get(key)
        except TypeError:
            raise UOpArgError(f"UOp({op.name}).arg: expected a hashable value, got {arg!r}") from None
        if ref is not None and (node := ref()) is not None:
            return node
        expected = ARG_TYPES.get(op)
        if expected is None and arg is not None:
            raise UOpArgError(f"UOp({op.name}).arg: expected None, got {arg!r}")
        if expected is not None and expected is not object and not isinstance(arg, expected):
            raise UOpArgError(f"UOp({op.name}).arg: expected {expected}, got {type(arg).__name__} {arg!r}")
        node = object.__new__(cls)
        object.__setattr__(node, "op", op)
        object.__setattr__(node, "dtype", dtype)
        object.__setattr__(node, "src", tuple(src))
        object.__setattr__(node, "arg", arg)
        object.__setattr__(node, "_cache", {})
        cls._interned[key] = node
        return node

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: cannot set {name}")

    def __reduce__(self) -> Any:  # pickling a graph is never how drivepack stores anything
        raise TypeError("UOp cannot be pickled: drivepack stores graphs as plain data")

    # --- construction helpers ---------------------------------------------------------------------
    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        return UOp(Ops.CONST, dtype, (), truncate_const(dtype, value))

    def const_like(self, value: Any) -> UOp:
        return UOp.const(self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype, value)

    def replace(self, **kwargs: Any) -> UOp:
        if len(kwargs) == 1 and "src" in kwargs:  # what rewrites and copies mostly change
            return UOp(self.op, self.dtype, tuple(kwargs["src"]), self.arg)
        fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg} | kwargs
        return UOp(fields["op"], fields["dtype"], tuple(fields["src"]), fields["arg"])

    def alu(self, op: Ops, *others: UOp | int | float | bool) -> UOp:
        srcs = (self, *(o if isinstance(o, UOp) else self.const_like(o) for o in others))
        if op in GroupOp.Comparison:
            out_dtype: AnyDType = dtypes.bool
        elif op is Ops.WHERE:
            out_dtype = srcs[1].dtype
        else:
            out_dtype = self.dtype
        return UOp(op, out_dtype, srcs)

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
        ref = a if isinstance(a, UOp) else b
        if not isinstance(ref, UOp):
            raise DrivepackError("where: expected at least one UOp branch")
        a = a if isinstance(a, UOp) else ref.const_like(a)
        b = b if isinstance(b, UOp) else ref.const_like(b)
        return UOp(Ops.WHERE, a.dtype, (self, a, b))

    def __add__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.ADD, x)
    def __radd__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.ADD, self)
    def __sub__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.SUB, x)
    def __rsub__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.SUB, self)
    def __mul__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MUL, x)
    def __rmul__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.MUL, self)
    def __floordiv__(self, x: UOp | int) -> UOp: return self.alu(Ops.IDIV, x)
    def __truediv__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.FDIV, x)
    def __mod__(self, x: UOp | int) -> UOp: return self.alu(Ops.MOD, x)
    def __neg__(self) -> UOp: return self.alu(Ops.NEG)
    def __and__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.AND, x)
    def __or__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.OR, x)
    def __xor__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.XOR, x)
    def __lt__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPLT, x)
    def __gt__(self, x: UOp | int | float) -> UOp:
        return (x if isinstance(x, UOp) else self.const_like(x)).alu(Ops.CMPLT, self)
    def __ge__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPLT, x).alu(Ops.NOT)
    def __le__(self, x: UOp | int | float) -> UOp:
        return (x if isinstance(x, UOp) else self.const_like(x)).alu(Ops.CMPLT, self).alu(Ops.NOT)
    def ne(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPNE, x)
    def eq(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPEQ, x)
    def maximum(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MAX, x)
    def minimum(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MIN, x)

    __hash__ = object.__hash__  # identity: equal specs are the same object

    # --- graph walking ----------------------------------------------------------------------------
    def toposort(self) -> list[UOp]:
        """Every node reachable from self, sources before users (iterative: graphs can be deep)."""
        return toposort([self])

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """Rebuild the graph with each key node replaced by its value."""
        done: dict[UOp, UOp] = dict(mapping)
        for node in self.toposort():
            if node in done:
                continue
            new_src = tuple(done.get(s, s) for s in node.src)
            done[node] = node if new_src == node.src else node.replace(src=new_src)
        return done[self]

    # --- cached properties ------------------------------------------------------------------------
    def cached(self, name: str, fn: Callable[[UOp], Any]) -> Any:
        """``fn(self)``, computed once per node and ``name``: ``fn`` must depend on the node's graph alone (a node
        is immutable and interned, so the value holds for as long as the node lives)."""
        cache = self._cache
        if name not in cache:
            cache[name] = fn(self)
        return cache[name]

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Tensor-level shape; None for kernel-level nodes."""
        return self.cached("shape", _compute_shape)

    @property
    def size(self) -> int:
        shape = self.shape
        return math.prod(shape) if shape is not None else 1

    @property
    def vmin(self) -> int | float | bool:
        return self.cached("vrange", _compute_vrange)[0]

    @property
    def vmax(self) -> int | float | bool:
        return self.cached("vrange", _compute_vrange)[1]

    @property
    def is_alu(self) -> bool:
        return self.op in GroupOp.ALU

    @property
    def is_movement(self) -> bool:
        return self.op in GroupOp.Movement

    @property
    def is_buffer(self) -> bool:
        return self.op in GroupOp.Buffer

    @property
    def base(self) -> UOp:
        """The node under any movement ops."""
        node = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    def __repr__(self) -> str:
        return render_tree(self)


def toposort(roots: list[UOp], sources: Callable[[UOp], tuple[UOp, ...]] | None = None) -> list[UOp]:
    """Every node reachable from ``roots``, sources before users, in first-visit order; ``sources(node)`` (default:
    ``node.src``) says which edges to follow. Iterative: driving models give graphs thousands of nodes deep.

    One root's order along ``node.src`` is kept on the root (nodes never change; the passes of a kernel's codegen
    walked the same roots again for two thirds of the nodes they visited), less the root itself, which comes last:
    a node holding itself would be freed only by the cycle collector, and the interning table would hand it out
    again meanwhile. Each call returns a list of its own."""
    if sources is None and len(roots) == 1:
        root = roots[0]
        below = root._cache.get("toposort")
        if below is None:
            below = root._cache["toposort"] = _walk([root], None)[:-1]
        return [*below, root]
    return _walk(roots, sources)


def _walk(roots: list[UOp], sources: Callable[[UOp], tuple[UOp, ...]] | None) -> list[UOp]:
    """Depth-first, sources left to right, each node after its sources: a stack of (node, iterator over its
    sources) instead of recursion."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(root.src if sources is None else sources(root)))]
        while stack:
            node, pending = stack[-1]
            for s in pending:
                if s not in seen:
                    seen.add(s)
                    stack.append((s, iter(s.src if sources is None else sources(s))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def add_terms(u: UOp) -> list[UOp]:
    """The terms of sum ``u``: the leaves of its ADD tree, the last source of each ADD first (``u`` itself when it
    is no ADD). Base pointers split an address by them (jit/codegen/opt/hoist.py; the renderer spells the rest)."""
    terms, stack = [], [u]
    while stack:
        t = stack.pop()
        if t.op is Ops.ADD:
            stack += t.src
        else:
            terms.append(t)
    return terms


def render_tree(root: UOp) -> str:
    """``UOp(...)`` text in which a subtree used more than once is printed once as ``xN:=`` and then named."""
    uses: dict[UOp, int] = {}
    for node in root.toposort():
        for s in node.src:
            uses[s] = uses.get(s, 0) + 1
    names: dict[UOp, str] = {}
    lines: list[str] = []

    def emit(node: UOp, depth: int, prefix: str, suffix: str) -> None:
        pad = " " * (depth * 2)
        if node in names:
            lines.append(f"{pad} {names[node]}{suffix}")
            return
        label = ""
        if uses.get(node, 0) > 1:
            names[node] = f"x{len(names)}"
            label = f"{names[node]}:="
        head = f"{pad}{prefix}{label}UOp({node.op}, {node.dtype!r}, arg={node.arg!r}, src=("
        if not node.src:
            lines.append(f"{head})){suffix}")
            return
        lines.append(head)
        for s in node.src:
            emit(s, depth + 1, "", ",")
        lines[-1] += f")){suffix}"

    emit(root, 0, "", "")
    return "\n".join(lines)


# --- shape inference ---------------------------------------------------------------------------------
def window_out(n: int, k: int, s: int, d: int) -> int:
    return (n - d * (k - 1) - 1) // s + 1


def _compute_shape(u: UOp) -> tuple[int, ...] | None:
    op = u.op
    if op is Ops.BUFFER:
        return (u.arg[2],)
    if op is Ops.CONST:
        return () if not u.src else u.src[0].shape
    if op is Ops.IOTA:
        return (u.arg,)
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return tuple(u.arg)
    if not u.src:
        return None
    src_shape = u.src[0].shape
    if src_shape is None:
        return None
    if op is Ops.PERMUTE:
        return tuple(src_shape[i] for i in u.arg)
    if op is Ops.PAD:
        return tuple(s + b + a for s, (b, a) in zip(src_shape, u.arg, strict=True))
    if op is Ops.SHRINK:
        return tuple(e - b for b, e in u.arg)
    if op is Ops.STRIDE:
        return tuple((s + st - 1) // st for s, st in zip(src_shape, u.arg, strict=True))
    if op is Ops.WINDOW:
        kernel, stride, dilation = u.arg
        n = len(kernel)
        outs = tuple(window_out(s, k, st, d) for s, k, st, d in zip(src_shape[-n:], kernel, stride, dilation,
                                                                       strict=True))
        return (*src_shape[:-n], *outs, *kernel)
    if op is Ops.REDUCE_AXIS:
        axes = u.arg[1]
        return tuple(1 if i in axes else s for i, s in enumerate(src_shape))
    if op is Ops.GATHER:
        return u.src[1].shape
    if op is Ops.WHERE:
        return u.src[1].shape
    return src_shape


# --- value ranges ------------------------------------------------------------------------------------
def _bounds(d: AnyDType) -> tuple[Any, Any]:
    if isinstance(d, PtrDType) or d is dtypes.void:
        return (-math.inf, math.inf)
    return (d.min, d.max)


def _is_float(d: AnyDType) -> bool:
    return isinstance(d, DType) and d.is_float


def nan_free(u: UOp) -> bool:
    """Whether float node ``u`` provably never holds NaN: its value range is not the dtype's default (module
    rule below). False for every non-float node."""
    return _is_float(u.dtype) and (u.vmin, u.vmax) != _bounds(u.dtype)


_ROUNDINGS: dict[Ops, Callable[[float], float]] = {Ops.RINT: lambda v: float(round(v)),
                                                  Ops.FLOOR: lambda v: float(math.floor(v)),
                                                  Ops.CEIL: lambda v: float(math.ceil(v)),
                                                  Ops.TRUNC: lambda v: float(math.trunc(v))}


def _float_vrange(u: UOp, default: tuple[Any, Any]) -> tuple[Any, Any]:
    """The value range of float node ``u``. A range other than ``default`` (the dtype's -inf..inf) means: never
    NaN and always within [lo, hi]. Only two select shapes have one (besides finite constants and roundings), the
    NaN-absorbing clamp bounds: ``WHERE(CMPLT(p, q), q, p)`` is ``q`` only where ``p < q`` held, which a NaN
    fails, so it is at least ``p`` and NaN-free when ``p`` is; ``WHERE(CMPLT(q, p), q, p)`` is at most ``p``
    likewise. A rounding (RINT, FLOOR, CEIL, TRUNC) of a NaN-free bounded value is monotone, so it keeps its
    source's range rounded. Everything else (arithmetic, MAX/MIN, which propagate NaN, casts) stays ``default``."""
    if u.op in _ROUNDINGS and nan_free(u.src[0]):
        lo, hi = (_ROUNDINGS[u.op](b) if math.isfinite(b) else b for b in (u.src[0].vmin, u.src[0].vmax))
        return (lo, hi)
    if u.op is not Ops.WHERE or u.src[0].op is not Ops.CMPLT:
        return default
    (a, b), t, f = u.src[0].src, u.src[1], u.src[2]
    if f is a and t is b:  # max-like: p < q ? q : p, with p = f
        max_like = True
    elif f is b and t is a:  # min-like: q < p ? q : p, with p = f
        max_like = False
    else:
        return default
    if not nan_free(f):
        return default
    # the taken ``q`` passed a comparison with a NaN-free ``p``, so it is not NaN; it is bounded by ``p`` on one
    # side and by its own range (or nothing: it may be +-inf) on the other
    q_lo, q_hi = (t.vmin, t.vmax) if nan_free(t) else (-math.inf, math.inf)
    if max_like:
        out = (f.vmin, max(f.vmax, q_hi))
    else:
        out = (min(f.vmin, q_lo), f.vmax)
    return default if out == default else out


def _float_to_int(u: UOp, default: tuple[Any, Any]) -> tuple[Any, Any] | None:
    """``CAST`` of a NaN-free bounded float to int type ``u.dtype``: C (and Python's ``int``) truncate toward
    zero, which is monotone, so the range is the truncated bounds; None where a bound is infinite or a
    truncated value would not fit (C leaves that conversion undefined)."""
    src = u.src[0]
    if not nan_free(src) or not (math.isfinite(src.vmin) and math.isfinite(src.vmax)):
        return None
    lo, hi = math.trunc(src.vmin), math.trunc(src.vmax)
    return (lo, hi) if default[0] <= lo and hi <= default[1] else None


def _compute_vrange(u: UOp) -> tuple[Any, Any]:
    op, d = u.op, u.dtype
    default = _bounds(d)
    if op is Ops.CONST:
        if _is_float(d) and (d.weak or math.isnan(u.arg)):  # type: ignore[union-attr]
            return default  # NaN has no range; a weak float's value is rounded only when it gets a width
        return (u.arg, u.arg)
    if _is_float(d):
        return _float_vrange(u, default)
    if op is Ops.RANGE:
        return (0, u.src[0].vmax - 1)
    if op is Ops.SPECIAL:
        return (0, u.arg[1] - 1)
    if op is Ops.IOTA:
        return (0, u.arg - 1)
    if not isinstance(d, DType) or not (d.is_int or d.is_bool):
        return default
    if op in GroupOp.Comparison:
        return (False, True)
    if not u.src:
        return default
    lo_hi = [(s.vmin, s.vmax) for s in u.src]
    cand: tuple[Any, Any] | None = None
    if op is Ops.ADD:
        cand = (lo_hi[0][0] + lo_hi[1][0], lo_hi[0][1] + lo_hi[1][1])
    elif op is Ops.SUB:
        cand = (lo_hi[0][0] - lo_hi[1][1], lo_hi[0][1] - lo_hi[1][0])
    elif op is Ops.MUL:
        prods = [a * b for a in lo_hi[0] for b in lo_hi[1]]
        cand = (min(prods), max(prods))
    elif op is Ops.NEG:
        cand = (-lo_hi[0][1], -lo_hi[0][0])
    elif op is Ops.MAX:
        cand = (max(lo_hi[0][0], lo_hi[1][0]), max(lo_hi[0][1], lo_hi[1][1]))
    elif op is Ops.MIN:
        cand = (min(lo_hi[0][0], lo_hi[1][0]), min(lo_hi[0][1], lo_hi[1][1]))
    elif op is Ops.IDIV and lo_hi[1][0] > 0 and lo_hi[0][0] >= 0:
        cand = (lo_hi[0][0] // lo_hi[1][1], lo_hi[0][1] // lo_hi[1][0])
    elif op is Ops.MOD and lo_hi[1][0] > 0 and lo_hi[0][0] >= 0:
        cand = (0, min(lo_hi[0][1], lo_hi[1][1] - 1))
    elif op is Ops.WHERE:
        cand = (min(lo_hi[1][0], lo_hi[2][0]), max(lo_hi[1][1], lo_hi[2][1]))
    elif op is Ops.CAST and isinstance(u.src[0].dtype, DType) and (u.src[0].dtype.is_int or u.src[0].dtype.is_bool):
        cand = (int(lo_hi[0][0]), int(lo_hi[0][1]))
    elif op is Ops.CAST and d.is_int and _is_float(u.src[0].dtype):
        cand = _float_to_int(u, default)
    if cand is None or cand[0] < default[0] or cand[1] > default[1]:
        return default  # the op may wrap: say nothing better than the dtype's range
    return cand


def iter_alu_dtypes(srcs: tuple[UOp, ...]) -> Iterator[DType]:
    for s in srcs:
        if isinstance(s.dtype, DType):
            yield s.dtype


def promoted(*srcs: UOp) -> DType:
    return least_upper_dtype(*iter_alu_dtypes(srcs))
