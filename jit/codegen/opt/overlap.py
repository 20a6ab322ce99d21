"""Tile rows that no vector width divides, run as whole vectors with the last one shifted back (an overlapped tail).

Before: a reduce kernel's tile plan (``jit.codegen.opt.tiling.plan_tiles``) whose tile row, the contiguous output
axis of ``n`` values, takes no vector lanes: ``n`` has no divisor that is a multiple of ``MIN_LANES`` (squeezenet's
max pools over 55-, 27- and 13-wide rows), so the row is ``n / u`` scalar copies of ``u`` accumulators. (A long
row whose output channels would take narrower vectors than the target's wide ones, or whose reduce is too short to
pay for a channel tile's scattered stores, comes here instead of across channels: ``tiling._overlap_row_first``.)

After: a plan whose row is ``u`` wide, ``u`` a multiple of the vector lanes, with ``overlap`` set: ``tile_kernel``
runs the row axis over ``ceil(n / u)`` tiles starting at ``min(t * u, n - u)``, so every tile is ``u`` whole
outputs inside the row and the last one ends at the row's end. The outputs where the last tile overlaps the one
before it are computed and stored twice, by the same expression at the same index: the same value each time.
That holds only where no store of the kernel is read back by it (a state updated in place): such a kernel keeps
its plan. Every other output is stored once, as before.
"""

from __future__ import annotations

import math
from dataclasses import replace

from jit.codegen.opt.options import OptOptions
from jit.codegen.opt.tiling import VECTOR_LOAD_STRIDES, TilePlan, row_stride, stores_read_back, vector_registers
from jit.codegen.opt.vectorize import MIN_LANES
from jit.codegen.stats import range_deps
from jit.ir.uop import Ops, UOp, toposort


def _tile_cost(n: int, width: int, height: int, vector_width: int) -> int:
    """Cycles, up to a constant, of a row of ``n`` in tiles ``width`` wide and ``height`` high: per tile and reduce
    step ``v = width / vector_width`` vector loads of the row and ``height`` broadcasts of what the rows share, and
    ``v * height`` multiply-adds, whichever takes longer (two of each per cycle)."""
    vectors = max(1, width // vector_width)
    return math.ceil(n / width) * max(vectors * height, vectors + height)


def plan_overlap(sink: UOp, plan: TilePlan, opts: OptOptions, vector_width: int) -> TilePlan | None:
    """``plan`` with its tile row widened to whole vectors and overlapped (module docstring), or None where that
    does not apply: the row already has a width that is a multiple of ``MIN_LANES``, the plan runs its row
    across channels (``max_lanes``), a load reads the row at a stride vectors would gather, the kernel reads what it
    stores, or the row is shorter than two vectors. The width: the one of ``opts.inner_upcasts`` (multiples of
    ``MIN_LANES`` only) whose tiles cost the least (``_tile_cost``), the widest of those, with its
    accumulators in at most half the target's vector registers (``vector_width`` lanes each)."""
    (row, u), *others = plan.upcasts
    n = int(row.src[0].arg)
    if not opts.overlap_rows or plan.overlap or plan.max_lanes or u % MIN_LANES == 0 or \
            n < 2 * MIN_LANES:
        return None
    nodes = toposort([sink])
    outs = [x for x in nodes if x.op is Ops.RANGE and x.arg[1] == "global"]
    if row is not max(outs, key=lambda x: x.arg[0]) or stores_read_back(nodes):
        return None
    deps = range_deps(sink)
    loads = [x for x in nodes if x.op is Ops.LOAD]
    if any(row_stride(ld.src[0].src[1], row, deps) not in VECTOR_LOAD_STRIDES for ld in loads):
        return None
    height = math.prod(f for _, f in others)
    registers = vector_registers(vector_width) // 2
    widths = [w for w in opts.inner_upcasts
              if w % MIN_LANES == 0 and w <= n and max(1, w // vector_width) * height <= registers]
    if not widths:
        return None
    width = min(widths, key=lambda w: (_tile_cost(n, w, height, vector_width), -w))
    return replace(plan, upcasts=((row, width), *others), overlap=True)
