"""Commit weak dtypes to the width their consumers fix.

Before: a lowered kernel graph in which Python scalars and expressions built only from them carry
``weakint`` / ``weakfloat`` (CONSTs, ALU nodes, REDUCEs, and CASTs *to* a weak dtype such as the
``float -> weakint`` conversion). After: every weak node that some consumer gives a width has that width:

- a weak source takes the least upper bound of what its consumers need: a consumer computing in a concrete
  dtype needs that dtype; a STORE needs its buffer's dtype; an explicit CAST to ``T`` of a weak expression
  needs at least the default width of the expression's kind, widened to ``T`` when ``T`` is wider and of
  the same kind (``(x_int8 * 0.5).cast(float16)`` computes in float32 and rounds once; ``.cast(float64)``
  computes in float64); a CAST across kinds fixes nothing (``float -> weakint`` stays a real conversion);
- the condition of a WHERE takes no part in unifying the branch widths;
- the two operands of a comparison between weak expressions get one common width;
- weak CONSTs are re-made per consumer at the width that consumer needs (no shared constant forces a cast);
- a node whose consumers are all still weak is left weak (no device width is guessed here: see
  ``lower_weak``); a consumer that needs a narrower width than the shared one gets an explicit CAST.

The commit needs every consumer of a node, so its one rule sits on the SINK and re-plans the whole kernel
each time it fires; run together with symbolic it reaches a fixed point (it declines once nothing weak has
a consumer-fixed width).
"""

from __future__ import annotations

from collections.abc import Callable

from jit.codegen.passes.guards import is_weak
from jit.common.dtype import AnyDType, DType, PtrDType, dtypes, least_upper_dtype
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import GroupOp, Ops, UOp, toposort

DTypeOf = Callable[[UOp], AnyDType]


def _concrete(d: AnyDType | None) -> DType | None:
    return d if isinstance(d, DType) and not d.weak and d is not dtypes.void else None


def operand_dtype(user: UOp, i: int, user_dtype: AnyDType | None, dtype_of: DTypeOf) -> DType | None:
    """The dtype source ``i`` of ``user`` must have when ``user`` computes in ``user_dtype`` (None: not fixed).

    ``dtype_of`` gives the (possibly planned) dtype of another node, for the partner of a comparison.
    """
    op = user.op
    if op is Ops.STORE:
        ptr = user.src[0].dtype
        return ptr.base if i == 1 and isinstance(ptr, PtrDType) else None
    if op in GroupOp.Comparison:
        return _concrete(dtype_of(user.src[1 - i]))
    if op is Ops.WHERE:
        return None if i == 0 else _concrete(user_dtype)  # the condition is not a branch
    if op is Ops.REDUCE:
        return _concrete(user_dtype) if i == 0 else None
    if op in GroupOp.ALU:
        return _concrete(user_dtype)
    return None  # CAST, BITCAST, INDEX, LOAD, SINK, NOOP: the source keeps its own dtype


def cast_floor(src: DType, target: AnyDType | None) -> DType | None:
    """The least width an explicit CAST to ``target`` asks of a weak source of dtype ``src`` (None: nothing)."""
    t = _concrete(target)
    if t is None or t.is_bool or src.is_float != t.is_float:
        return None
    if src.is_float:
        return dtypes.float64 if t == dtypes.float64 else dtypes.float32
    return dtypes.int64 if t.bits == 64 else dtypes.int32


def join(a: DType | None, b: DType | None) -> DType | None:
    """Least upper bound of two demands; a join that would leave the kind or become weak takes the wider."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    lub = least_upper_dtype(a, b)
    if not lub.weak and lub.is_float == a.is_float == b.is_float:
        return lub
    return a if a.bits >= b.bits else b


def _demand(user: UOp, i: int, user_dtype: AnyDType | None, dtype_of: DTypeOf) -> DType | None:
    if user.op is Ops.CAST:
        src = user.src[0].dtype
        return cast_floor(src, user_dtype) if isinstance(src, DType) else None
    return operand_dtype(user, i, user_dtype, dtype_of)


class _Groups:
    """Union-find over weak nodes that must share a width (the operands of a weak comparison)."""

    def __init__(self) -> None:
        self.parent: dict[UOp, UOp] = {}

    def find(self, u: UOp) -> UOp:
        root = u
        while self.parent.get(root, root) is not root:
            root = self.parent[root]
        while u is not root:
            nxt = self.parent.get(u, u)
            self.parent[u] = root
            u = nxt
        return root

    def union(self, a: UOp, b: UOp) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def plan_weak(sink: UOp) -> dict[UOp, DType]:
    """Every weak non-CONST node whose consumers fix a width, mapped to that width."""
    order = toposort([sink])
    groups = _Groups()
    for u in order:
        if u.op in GroupOp.Comparison and all(is_weak(s.dtype) and s.op is not Ops.CONST for s in u.src):
            groups.union(u.src[0], u.src[1])
    width: dict[UOp, DType] = {}

    def planned(u: UOp) -> AnyDType | None:
        return width.get(groups.find(u)) if is_weak(u.dtype) else u.dtype

    changed = True
    while changed:  # a group's width can rise after one member's sources were visited: repeat until stable
        changed = False
        for user in reversed(order):
            user_dtype = planned(user)
            for i, s in enumerate(user.src):
                if not is_weak(s.dtype) or s.op is Ops.CONST:
                    continue
                d = _demand(user, i, user_dtype, lambda u: planned(u) or u.dtype)
                if d is None:
                    continue
                root = groups.find(s)
                new = join(width.get(root), d)
                if new is not None and new != width.get(root):
                    width[root] = new
                    changed = True
    return {u: width[groups.find(u)] for u in order
            if is_weak(u.dtype) and u.op is not Ops.CONST and groups.find(u) in width}


def apply_plan(sink: UOp, plan: dict[UOp, DType]) -> UOp:
    """Rebuild ``sink`` with planned widths, per-consumer CONSTs and CASTs where a consumer needs less."""
    new: dict[UOp, UOp] = {}

    def dtype_of(u: UOp) -> AnyDType:
        return plan.get(u, u.dtype)

    for node in toposort([sink]):
        node_dtype = dtype_of(node)
        srcs: list[UOp] = []
        for i, s in enumerate(node.src):
            s2 = new[s]
            if is_weak(s.dtype):
                want = operand_dtype(node, i, node_dtype, dtype_of)
                if s.op is Ops.CONST:
                    s2 = UOp.const(want, s.arg) if want is not None else s2
                elif want is not None and s2.dtype != want:
                    s2 = UOp(Ops.CAST, want, (s2,))
            srcs.append(s2)
        src_t = tuple(srcs)
        new[node] = node if src_t == node.src and node_dtype == node.dtype else \
            UOp(node.op, node_dtype, src_t, node.arg)
    return new[sink]


def commit_weak_sink(sink: UOp) -> UOp | None:
    """The SINK with every consumer-fixed weak node committed, or None when there is nothing to commit."""
    out = apply_plan(sink, plan_weak(sink))
    return None if out is sink else out  # hash-consing: an unchanged rebuild is the same SINK


pm_commit_weak = PatternMatcher([
    (UPat(Ops.SINK, name="sink"), commit_weak_sink),
])
