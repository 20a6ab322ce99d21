"""Tile rows that no vector width divides, run as whole vectors with the last one shifted back (an overlapped tail).

Before: a reduce kernel's tile plan (``jit.codegen.opt.tiling.plan_tiles``) whose tile row, the contiguous output
axis of ``n`` values, takes no vector lanes: ``n`` has no divisor that is a multiple of ``MIN_LANES`` (squeezenet's
max pools over 55-, 27- and 13-wide rows), so the row is ``n / u`` scalar copies of ``u`` accumulators; or only lanes
narrower than the target's wide ones (``wide_channel_vector``: a 14 x 14 = 196 row splits into 4-lane vectors
only); or it is one wide (a prime row past the tile widths: a ViT's 197 tokens); or it is whole vectors, a number
of them that neither two nor three divides, run one vector a tile (squeezenet's classifier over its planes padded
to 11 vectors, jit/frontend/row_align.py: each vector loaded fed only 8 multiply-adds). (A long
row whose output channels would take narrower vectors than the target's wide ones, or whose reduce is too short to
pay for a channel tile's scattered stores, comes here instead of across channels: ``tiling._overlap_row_first``.)

After: a plan whose row is ``u`` wide, ``u`` a multiple of the vector lanes, with ``overlap`` set: ``tile_kernel``
runs the row axis over ``ceil(n / u)`` tiles starting at ``min(t * u, n - u)``, so every tile is ``u`` whole
outputs inside the row and the last one ends at the row's end. The outputs where the last tile overlaps the one
before it are computed and stored twice, by the same expression at the same index: the same value each time.
That holds only where no store of the kernel is read back by it (a state updated in place): such a kernel keeps
its plan. Every other output is stored once, as before. A row whose loads cannot be vectors (each output reads its
own contiguous run: softmax's max and sum over 197 tokens, where ``reduce_lanes`` did not take them) and that has
fewer than ``SCALAR_OVERLAP_WIDTH`` outputs a tile and no reuse axis gets that many scalar outputs a tile,
overlapped alike (``plan_scalar_overlap``).

The same for an elementwise kernel (``plan_overlapped_row``) whose row no vector width divides (softmax's exp over
a ViT's 197 tokens, a transformer's 25) and whose row computes float32 ``EXP`` or ``ERF``: as scalars these are one
library call per element, which the C compiler cannot vectorize; as vectors the pipeline lowers them to
polynomials on whole vectors (jit/codegen/passes/vector_exp.py). Before: a plain loop over the row. After: the row
as ``ceil(n / w)`` vectors of ``w`` lanes, the last shifted back. Rows without such ops keep their loop, which the C
compiler vectorizes itself; targets that launch rows as work-items keep their launch (a GPU's exp is a few
instructions a work-item), except a CPU device that runs a work-item's loops as cheaply (``peel_launched_rows``):
PoCL's exp is a library call per work-item, so the row is vectors there too.
"""

from __future__ import annotations

import math
from dataclasses import replace

from jit.codegen.opt.options import OptOptions
from jit.codegen.opt.tiling import VECTOR_LOAD_STRIDES, TilePlan, row_stride, stores_read_back, vector_registers
from jit.codegen.opt.vectorize import MIN_LANES
from jit.codegen.stats import range_deps
from jit.common.dtype import dtypes
from jit.ir.uop import Ops, UOp, toposort

# registers an overlapped tile leaves free of accumulators: its row's vector loads and a broadcast live across a
# reduce step (half of AVX2's 16; on AVX-512's 32, room for 24 accumulators: squeezenet's 512 -> 1000 classifier,
# 169 outputs a channel by 8 channels, as three vectors a row instead of two)
OVERLAP_SPARE_REGISTERS = 8
# whole vectors a tile row of several rows may take beyond ``inner_upcasts``: three 16-lane vectors by 8 rows are
# the 24 accumulators AVX-512's registers hold
OVERLAP_MAX_VECTORS = 3
# a row of whole vectors runs overlapped only where its tiles compute at most this fraction of it twice
OVERLAP_WASTE_MAX_FRACTION = 8


def _tile_cost(n: int, width: int, height: int, vector_width: int) -> int:
    """Cycles, up to a constant, of a row of ``n`` in tiles ``width`` wide and ``height`` high: per tile and reduce
    step ``v = width / vector_width`` vector loads of the row and ``height`` broadcasts of what the rows share, and
    ``v * height`` multiply-adds, whichever takes longer (two of each per cycle)."""
    vectors = max(1, width // vector_width)
    return math.ceil(n / width) * max(vectors * height, vectors + height)


def _single_vectors_of_prime_row(n: int, u: int, height: int, vector_width: int, registers: int) -> bool:
    """Whether a plan's row of ``n`` (whole vectors of ``vector_width`` lanes, a number of them that neither two nor
    three divides: 11 of a 1x1 conv's planes padded to 176, jit/frontend/row_align.py) runs one vector a tile
    (``u``) under ``height`` rows, where tiles of ``OVERLAP_MAX_VECTORS`` vectors fit the ``registers`` and,
    overlapped, compute at most an eighth of the row twice (11 vectors as 4 x 3, not 5 as 2 x 3): each vector
    loaded a reduce step then feeds only ``height`` multiply-adds."""
    vectors, rest = divmod(n, vector_width)
    twice = -(-vectors // OVERLAP_MAX_VECTORS) * OVERLAP_MAX_VECTORS - vectors
    return not rest and u == vector_width and vectors % 2 != 0 and vectors % 3 != 0 and \
        twice * OVERLAP_WASTE_MAX_FRACTION <= vectors and OVERLAP_MAX_VECTORS * height <= registers


def plan_overlap(sink: UOp, plan: TilePlan, opts: OptOptions, vector_width: int) -> TilePlan | None:
    """``plan`` with its tile row widened to whole vectors and overlapped (module docstring), or None where that
    does not apply: the row already has a width that is a multiple of ``MIN_LANES`` (but for one vector a tile of
    a row that ``_single_vectors_of_prime_row`` takes), the plan runs its row
    across channels (``max_lanes``), a load reads the row at a stride vectors would gather, the kernel reads what it
    stores, or the row is shorter than two vectors. The width: the one of ``opts.inner_upcasts`` (multiples of
    ``MIN_LANES`` only), or for a tile of several rows up to ``OVERLAP_MAX_VECTORS`` whole vectors, whose tiles cost
    the least (``_tile_cost``), the widest of those, with its accumulators in the target's vector registers
    (``vector_width`` lanes each) but ``OVERLAP_SPARE_REGISTERS``."""
    (row, u), *others = plan.upcasts
    n = int(row.src[0].arg)
    height = math.prod(f for _, f in others)
    registers = vector_registers(vector_width) - OVERLAP_SPARE_REGISTERS
    if not opts.overlap_rows or plan.overlap or plan.max_lanes or n < 2 * MIN_LANES or \
            (u % max(MIN_LANES, opts.wide_channel_vector) == 0 and
             not _single_vectors_of_prime_row(n, u, height, vector_width, registers)):
        return None
    nodes = toposort([sink])
    outs = [x for x in nodes if x.op is Ops.RANGE and x.arg[1] == "global"]
    if row is not max(outs, key=lambda x: x.arg[0]) or stores_read_back(nodes):
        return None
    deps = range_deps(sink)
    loads = [x for x in nodes if x.op is Ops.LOAD]
    if any(row_stride(ld.src[0].src[1], row, deps) not in VECTOR_LOAD_STRIDES for ld in loads):
        return None
    whole_vectors = range(vector_width, OVERLAP_MAX_VECTORS * vector_width + 1, vector_width) if height > 1 else ()
    widths = [w for w in sorted({*opts.inner_upcasts, *whole_vectors}, reverse=True)
              if w % MIN_LANES == 0 and w <= n and max(1, w // vector_width) * height <= registers]
    if not widths:
        return None
    width = min(widths, key=lambda w: (_tile_cost(n, w, height, vector_width), -w))
    return replace(plan, upcasts=((row, width), *others), overlap=True)


# scalar accumulators of an overlapped row whose loads cannot be vectors: enough independent sums or maxima to hide
# an add's or a compare-and-select's latency
SCALAR_OVERLAP_WIDTH = 8


def plan_scalar_overlap(sink: UOp, plan: TilePlan, opts: OptOptions) -> TilePlan | None:
    """``plan`` with its row (narrower than ``SCALAR_OVERLAP_WIDTH``: a prime row, ``plan_tiles``, or 3 x 197) as
    ``SCALAR_OVERLAP_WIDTH`` scalar outputs a tile, overlapped (module docstring), for a row whose loads are not
    vectors (softmax's max over a ViT's 197 tokens reads each row's 197 values contiguously, so consecutive outputs
    are 197 apart): each output's reduce is one chain that waits on its last compare every step, and a tile runs
    that many chains side by side. None where the plan has a reuse axis (its rows are chains already), the row is
    that wide already, shorter than two tiles or divided by it (then a plain tile), overlap is off, or the kernel
    reads what it stores."""
    (row, u), *others = plan.upcasts
    n = int(row.src[0].arg)
    if not opts.overlap_rows or plan.overlap or others or u >= SCALAR_OVERLAP_WIDTH or \
            n < 2 * SCALAR_OVERLAP_WIDTH or n % SCALAR_OVERLAP_WIDTH == 0 or stores_read_back(toposort([sink])):
        return None
    return replace(plan, upcasts=((row, SCALAR_OVERLAP_WIDTH), *others), overlap=True)


def plan_overlapped_row(sink: UOp, opts: OptOptions, vector_width: int) -> TilePlan | None:
    """An elementwise kernel's innermost output row as overlapped vectors (module docstring), or None: a reduce
    kernel, vectors or overlap off, fewer than ``opts.min_outputs`` outputs, a row that a whole vector width divides
    (``plan_vector_row``'s) or that is shorter than ``MIN_LANES``, no float32 ``EXP`` or ``ERF`` on the row, a load
    or store the row does not walk contiguously (or at one address), or a kernel reading what it stores. The width:
    the widest power of two up to ``vector_width`` that the row holds."""
    nodes = toposort([sink])
    if not (opts.overlap_rows and opts.vectorize) or vector_width < MIN_LANES or \
            any(u.op is Ops.REDUCE for u in nodes) or stores_read_back(nodes):
        return None
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if not outs or math.prod(int(r.src[0].arg) for r in outs) < opts.min_outputs:
        return None
    row, n = outs[-1], int(outs[-1].src[0].arg)
    width = 1 << (min(n, vector_width).bit_length() - 1)
    if width < MIN_LANES or n % width == 0:
        return None
    deps = range_deps(sink)
    if not any(u.op in (Ops.EXP, Ops.ERF) and u.dtype == dtypes.float32 and row in deps[u] for u in nodes):
        return None
    if any(row_stride(u.src[0].src[1], row, deps) not in (0, 1) for u in nodes if u.op in (Ops.LOAD, Ops.STORE)):
        return None
    return TilePlan(((row, width),), overlap=True)
