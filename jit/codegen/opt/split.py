"""Splitting the innermost output range that a reduce kernel reads through ``// d`` and ``% d`` into two.

Before: a kernel graph with an output RANGE ``r`` of size n whose index arithmetic divides ``r`` (or a sum
containing it) by a constant d that divides n: a reshape of (A, d) into one axis, read at ``r // d`` and
``r % d``. Winograd's output transform is the case this is for: it writes row x = 4 * tw + q and reads its
partial sums at tw = x // 4 and its table at q = x % 4, so as one range of 56 the tile row gathers every load
(eight scalar loads per vector) and re-reads each partial sum once per q.

After: ``r`` is ``a * d + b``, ``a`` a RANGE of size n / d in r's place in the loop order and ``b`` a RANGE of
size d right inside it, and the index pass has simplified every ``// d`` and ``% d`` away, so the tiler sees
``b`` as the contiguous axis (whole-vector stores, contiguous table loads) and ``a`` as the axis a load does not
depend on (one broadcast per partial sum). Every output is stored once with the same value. A split that leaves
any division or remainder of ``a`` or ``b`` is not made, nor one with d below ``MIN_SPLIT`` (a row of fewer
lanes than a vector would lose the vectors the gathers still had) or above ``MAX_SPLIT``.
"""

from __future__ import annotations

from jit.codegen.passes.index_simplify import pm_index_simplify
from jit.codegen.stats import range_deps
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, toposort

MIN_SPLIT = 4
MAX_SPLIT = 16  # a wider column (a matrix-vector product's 64-column weight blocks) already fills a tile row


def _size(r: UOp) -> int:
    return int(r.src[0].arg)


def _divisors(nodes: list[UOp], rng: UOp, deps: dict[UOp, frozenset[UOp]]) -> list[int]:
    """Constant divisors d (MIN_SPLIT <= d <= MAX_SPLIT, below the size and dividing it) of the // and % nodes
    whose dividend uses ``rng``."""
    n = _size(rng)
    found = {int(u.src[1].arg) for u in nodes if u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is Ops.CONST
             and rng in deps[u.src[0]]}
    return sorted(d for d in found if MIN_SPLIT <= d <= MAX_SPLIT and d < n and n % d == 0)


def split_range(sink: UOp, rng: UOp, d: int) -> UOp | None:
    """``sink`` with ``rng`` = a * d + b (every range renumbered so that b sorts right after a), simplified; None
    when a division or remainder of a or b is left."""
    ranges = sorted((u for u in toposort([sink]) if u.op is Ops.RANGE), key=lambda u: u.arg[0])
    mapping: dict[UOp, UOp] = {}
    outer = inner = None
    for r in ranges:
        ident = 2 * r.arg[0]
        if r is rng:
            outer = UOp(Ops.RANGE, r.dtype, (r.src[0].const_like(_size(r) // d),), (ident, r.arg[1]))
            inner = UOp(Ops.RANGE, r.dtype, (r.src[0].const_like(d),), (ident + 1, r.arg[1]))
            mapping[r] = outer * d + inner
        else:
            mapping[r] = UOp(Ops.RANGE, r.dtype, r.src, (ident, *r.arg[1:]))
    split = graph_rewrite(sink.substitute(mapping), pm_index_simplify, name="split range")
    deps = range_deps(split)
    left = any(u.op in (Ops.IDIV, Ops.MOD) and (outer in deps[u] or inner in deps[u]) for u in toposort([split]))
    return None if left else split


def split_divmod_ranges(sink: UOp) -> UOp:
    """``sink`` with its innermost output range split in two when the kernel reads it only through ``// d`` and
    ``% d`` (module docstring); the same graph when it does not split or the kernel has no reduce. Outer ranges
    are left alone: a conv's output channels, read as ``(c // 8) * K + c % 8`` from channels-last weights, are
    what the tiler's channel vectors run across."""
    nodes = toposort([sink])
    outs = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"]
    if not outs or not any(u.op is Ops.REDUCE for u in nodes):
        return sink
    inner = max(outs, key=lambda u: u.arg[0])
    deps = range_deps(sink)
    for d in _divisors(nodes, inner, deps):
        if (split := split_range(sink, inner, d)) is not None:
            return split
    return sink
