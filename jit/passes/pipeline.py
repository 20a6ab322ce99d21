"""The codegen pipeline: the fixed, documented order of passes from a lowered kernel to renderable code.

Order: symbolic simplification and constant folding, then (unless NOOPT) unrolling of small loops, then
symbolic again to fold what unrolling exposed.
"""

from __future__ import annotations

from jit.helpers import NOOPT
from jit.passes.symbolic import pm_symbolic
from jit.passes.unroll import unroll_small_ranges
from jit.rewrite import graph_rewrite
from jit.uop import UOp
from targets.base import Target


def full_rewrite_to_sink(sink: UOp, target: Target) -> UOp:
    """Every codegen pass in order; the result only holds ops the target's renderer accepts."""
    sink = graph_rewrite(sink, pm_symbolic, name="symbolic")
    if not NOOPT:
        sink = unroll_small_ranges(sink)
        sink = graph_rewrite(sink, pm_symbolic, name="symbolic after unroll")
    return sink
