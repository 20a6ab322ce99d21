"""Base pointers: a reduce loop's scalar loads address memory from a pointer set before the loop.

Before: an INDEX(buf, i) of a plain buffer inside the body of a REDUCE, whose address ``i`` is a sum of terms of
which some depend on no range reduced within that REDUCE (the fixed part: output indices, the loops enclosing
it) and the others do (the moving part, constants included).

After: INDEX(buf, i, INDEX(buf, f1 + f2 + ...)): the same element, with a third source, the base pointer to the
fixed part. The renderer declares the base pointer as a variable before the loop (where the first access through
it is hoisted) and spells the access as the pointer plus the moving terms, one by one (``ptr+(m1)+(m2)``),
instead of the whole sum.

Which loop: the outermost REDUCE around the INDEX outside whose loop part of the address is fixed; an INDEX that
depends on the vector lane (a vector load), on an image, or on no range reduced around it is left alone.

Why: LLVM (PoCL) otherwise packs the four adds of a tile's four broadcast addresses into one vector add plus
extracts per iteration: the Winograd GEMM ran at 28 GFLOP/s, at 56 with the pointers. GCC strength-reduces
either form, so the C target's defaults leave this off.
"""

from __future__ import annotations

from jit.codegen.stats import range_deps
from jit.common.dtype import ImageDType
from jit.ir.uop import Ops, UOp, add_terms, toposort


def _fixed_terms(index: UOp, levels: list[frozenset[UOp]], deps: dict[UOp, frozenset[UOp]]) -> list[UOp] | None:
    """The fixed terms of ``index``'s address for the outermost of ``levels`` (the ranges reduced within each
    REDUCE around it, outermost first) at which it has fixed and moving ones; None if there is none."""
    for within in levels:
        if not deps[index] & within:
            return None  # fixed as a whole: the renderer computes it outside the loop anyway
        terms = add_terms(index.src[1])
        fixed = [t for t in terms if not deps[t] & within and t.op is not Ops.CONST]
        if fixed and len(fixed) < len(terms):
            return fixed
    return None


def hoist_base_pointers(sink: UOp) -> UOp:
    """``sink`` with the scalar loads of its reduce loops addressed from base pointers (module docstring); the
    same node when no address qualifies."""
    nodes = toposort([sink])
    reduces = {r for r in nodes if r.op is Ops.REDUCE and [g.arg[1] for g in r.src[1:]] != ["group"]}
    if not reduces:  # every REDUCE but a work-group's combine (jit/codegen/opt/group.py)
        return sink
    deps = range_deps(sink)
    lane = next((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "vector"), None)
    # the ranges reduced within each node (by the REDUCEs in it), then, users first, the sets of them of the REDUCEs
    # each node is in the body of
    within: dict[UOp, frozenset[UOp]] = {}
    for node in nodes:
        inner = frozenset().union(*(within[s] for s in node.src))
        within[node] = inner | frozenset(node.src[1:]) if node in reduces else inner
    around: dict[UOp, set[frozenset[UOp]]] = {}
    for node in reversed(nodes):
        levels = around.get(node, set())
        for i, s in enumerate(node.src):
            if add := levels | {within[node]} if node in reduces and i == 0 else levels:
                around.setdefault(s, set()).update(add)
    candidates = [x for x in nodes if x.op is Ops.INDEX and x in around and x.src[0].op is Ops.DEFINE_GLOBAL
                  and not isinstance(x.src[0].dtype, ImageDType) and (lane is None or lane not in deps[x])]
    hoisted = {x: f for x in candidates
               if (f := _fixed_terms(x, sorted(around[x], key=len, reverse=True), deps)) is not None}
    if not hoisted:
        return sink
    done: dict[UOp, UOp] = {}
    for node in nodes:
        new_src = tuple(done[s] for s in node.src)
        if (fixed := hoisted.get(node)) is not None:
            offset = done[fixed[0]]
            for t in fixed[1:]:
                offset = offset + done[t]
            new_src = (*new_src, UOp(Ops.INDEX, node.dtype, (new_src[0], offset)))
        done[node] = node if new_src == node.src else node.replace(src=new_src)
    return done[sink]
