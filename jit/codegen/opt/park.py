"""Parking: finished vector accumulators wait in a volatile private array while a later reduce loop runs.

Before: a node with a vector REDUCE A among its sources and, after A, a REDUCE B over other ranges (a stride-2
conv sums its two phase reduces): the renderer computes A's loop, then B's, then the node, so A's accumulators
are live through all of B's loop.

After: that node reads PARK(A) instead of A. The renderer stores A once to a slot of the park array of its
vector type before the next reduce loop opens (B's), and the node reads the slot back. The values are unchanged,
bit for bit. In a kernel compiled with this step on (its SINK records its options), the renderer also computes
every node's reduce operands before its other operands, so that no accumulator is read before the loop after
which it is parked.

Why: PoCL's LLVM otherwise spills and reloads the waiting accumulators inside B's loop, every iteration (conv2 of
the vision model: 0.94 -> 0.75 ms). GCC spills outside the loop itself, and a GPU keeps them in registers, so
only OpenCL on a CPU device turns this on.
"""

from __future__ import annotations

from jit.codegen.stats import range_deps
from jit.ir.uop import Ops, UOp, toposort


def park_accumulators(sink: UOp) -> UOp:
    """``sink`` with the waiting vector accumulators parked (module docstring); the same node when none waits."""
    nodes = toposort([sink])
    lane = next((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "vector"), None)
    if lane is None:
        return sink
    deps = range_deps(sink)
    parked: dict[UOp, list[int]] = {}  # node -> positions of its sources to read through PARK
    for u in nodes:
        reduces = [(i, s) for i, s in enumerate(u.src) if s.op is Ops.REDUCE]
        at = [i for k, (i, a) in enumerate(reduces)
              if lane in deps[a] and any(b.src[1:] != a.src[1:] for _, b in reduces[k + 1:])]
        if at:
            parked[u] = at
    if not parked:
        return sink
    done: dict[UOp, UOp] = {}
    for node in nodes:
        src = [done[s] for s in node.src]
        for i in parked.get(node, ()):
            src[i] = UOp(Ops.PARK, src[i].dtype, (src[i],))
        done[node] = node if tuple(src) == node.src else node.replace(src=tuple(src))
    return done[sink]
