"""The kernel optimizer: per-kernel rewrites of a lowered kernel's loop structure, run before rendering.

Entry point: ``optimize_kernel(sink, opts=None)`` (called by jit/codegen/pipeline.py unless ``NOOPT=1``; ``opts``
is an ``OptOptions``, None = the heuristic default). What it does:

* reduce kernels (matmul, conv): output rows read only through ``// d`` and ``% d`` split in two
  (``jit.codegen.opt.split``), short output rows merged with the axis outside them where the layout allows
  (``merge``), an outer axis split where a load walks its cache lines (``locality``), then
  register tiling by ``jit.codegen.opt.tiling`` (upcast of the contiguous output axis
  and of one reuse axis, so one pass over the reduce loop updates a tile of accumulators), with the tile row
  as vectors where the target's language has vector types (``jit.codegen.opt.vectorize``; a row no vector width
  divides as whole vectors with an overlapped last one, or where its loads cannot be vectors as 8 overlapped
  scalar outputs: ``jit.codegen.opt.overlap``); on the CPU, a tile's reuse
  axis opens innermost where, outermost, it would re-read an input larger than L2 (``jit.codegen.opt.order``), and
  otherwise the split axis that walks a load's cache lines does (``jit.codegen.opt.locality``);
* on targets with work-group local memory, a kernel with few outputs and a long reduce shares each output's
  reduce across a work-group instead (``jit.codegen.opt.group``);
* a reduce that reads its input contiguously along its innermost range and a plane apart along the output row (a
  global pool over NCHW) runs as vectors along that range instead (``jit.codegen.opt.reduce_lanes``);
* elementwise kernels that select between a few pieces by a small output axis (``Tensor.cat``, Winograd's
  input transform): that axis replaced by its values, so each copy computes only its own piece
  (``jit.codegen.opt.select``);
* elementwise kernels (copies, padding, casts), on loop targets with short rows merged first (``merge``), whose
  innermost output axis splits into whole vectors: that axis as vectors (``plan_vector_row``); on loop targets,
  one that does not split but computes exp or erf (softmax over 197 tokens): as whole vectors, the last one
  shifted back (``jit.codegen.opt.overlap``); the others, where that axis is a padded loop: its masked ends peeled
  off (``jit.codegen.opt.peel``), so the interior is a plain loop the C compiler vectorizes;
* every other kernel: the small-loop unroll of ``jit.codegen.passes.unroll`` (as before the optimizer existed).

``finish_kernel(sink, opts)`` runs after that (and after the symbolic pass that follows it, which would undo
them), also under NOOPT: the steps that shape how the renderer spells a kernel without changing its loops, each
where ``opts`` turns it on: unroll hints on short reduce loops (``jit.codegen.opt.hints``), base pointers for a
reduce loop's scalar loads (``jit.codegen.opt.hoist``), parked accumulators (``jit.codegen.opt.park``) and
prefetches of the next output iteration's slice of a re-read buffer (``jit.codegen.opt.prefetch``).

Compile time is part of the design (packaging and CI run it for every kernel): small kernels are not tiled
(``min_outputs``, ``min_reduce_trips``), copies are built in one walk that rebuilds only the nodes depending on
the upcast ranges, the index arithmetic is simplified once by the pipeline's symbolic pass afterwards, and a
kernel with nothing to do comes back as the same node (the pipeline then skips that symbolic pass).

Threads on the CPU target are not decided here: the renderer splits the outermost output loops when the
target's language declares a parallel pragma (targets/cstyle/walk.py).
"""

from __future__ import annotations

from jit.codegen.opt.group import group_kernel, plan_group
from jit.codegen.opt.hints import hint_unrolls
from jit.codegen.opt.hoist import hoist_base_pointers
from jit.codegen.opt.locality import split_for_line_reuse
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.options import DEFAULT_OPTS, OptOptions, OptOptionsError
from jit.codegen.opt.order import channel_blocks_inner, contiguous_store_innermost, open_innermost, reuse_axis_inner
from jit.codegen.opt.overlap import plan_overlap, plan_overlapped_row, plan_scalar_overlap
from jit.codegen.opt.park import park_accumulators
from jit.codegen.opt.peel import peel_masked_row
from jit.codegen.opt.prefetch import prefetch_next_slices
from jit.codegen.opt.reduce_lanes import plan_reduce_lanes, split_reduce_lanes
from jit.codegen.opt.select import unroll_selector_axes
from jit.codegen.opt.split import split_divmod_ranges
from jit.codegen.opt.tiling import (
    TilePlan,
    plan_chains,
    plan_tiles,
    plan_vector_row,
    tile_kernel,
    tile_sink,
    vector_registers,
)
from jit.codegen.opt.vectorize import MIN_LANES, choose_lanes
from jit.codegen.passes.unroll import UPCAST_MAX, pm_unroll_reduce
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, toposort
from targets.base import DEFAULT_L1, DEFAULT_L2, CacheLevel

__all__ = ["DEFAULT_OPTS", "OptOptions", "OptOptionsError", "TilePlan", "finish_kernel", "optimize_for_target",
           "optimize_kernel", "plan_tiles", "target_caches", "target_default_opts", "target_launch_dims",
           "target_local_memory", "target_peel_dims", "target_vector_width", "tile_kernel", "unroll_small_loops"]


def optimize_kernel(sink: UOp, opts: OptOptions | None = None, vector_width: int = 0,
                    local_memory: bool = False, launch_dims: int = 0, peel_dims: int | None = None,
                    l1: CacheLevel = DEFAULT_L1, l2: CacheLevel = DEFAULT_L2) -> UOp:
    """``sink`` with its loops tiled (reduce kernels) or small loops unrolled (the rest); same results.
    ``opts`` None means the heuristic default ``OptOptions()``; ``vector_width`` is the float32 lane count of the
    target language's widest vector type (0: it has none), for tile rows rendered as vectors; ``local_memory``:
    the target's language can share a reduce across a work-group (``jit.codegen.opt.group``); ``launch_dims``: how many
    output ranges the target launches as work-item dimensions rather than loops; ``peel_dims``: as many, for
    deciding whether a row is a loop to peel (``jit.codegen.opt.peel``; None: ``launch_dims``); ``l1``, ``l2``: the
    target's caches (``TargetLimits``), whose line the line-reuse split and whose L2 size the loop order go by.
    The vector registers a tile may fill follow from ``vector_width`` (``jit.codegen.opt.tiling.vector_registers``)."""
    opts = DEFAULT_OPTS if opts is None else opts
    if opts.tile:
        sink = split_divmod_ranges(sink)
    if local_memory and (rng := plan_group(sink, opts)) is not None:
        return group_kernel(sink, rng, opts.group_reduce)
    if (lane_split := plan_reduce_lanes(sink, opts, vector_width)) is not None:
        return split_reduce_lanes(sink, *lane_split)
    if opts.unroll:
        sink = unroll_selector_axes(sink)
    registers = vector_registers(vector_width)
    plan = plan_tiles(sink, opts, registers) if opts.tile else None
    line_axis = None
    if plan is not None and opts.line_reuse and (found := split_for_line_reuse(sink, launch_dims, l1.line)) is not None:
        sink, line_axis = found
        plan = plan_tiles(sink, opts, registers)
    if plan is not None and (merged := merge_output_dims(sink)) is not sink:
        sink, plan = merged, plan_tiles(merged, opts, registers)
    if plan is not None:
        lanes = choose_lanes(sink, plan, opts, vector_width)
        overlapped = plan_overlap(sink, plan, opts, vector_width) if vector_width >= MIN_LANES else None
        if overlapped is not None and (overlap_lanes := choose_lanes(sink, overlapped, opts, vector_width)):
            plan, lanes = overlapped, overlap_lanes
        elif not lanes and (scalars := plan_scalar_overlap(sink, plan, opts)) is not None:
            plan = scalars
        if not launch_dims:  # a work-item per output is a chain of its own already
            plan = plan_chains(sink, plan, lanes, opts)
        tiled = tile_kernel(sink, plan, lanes)
        if len(plan.upcasts) > 1 and \
                (ordered := reuse_axis_inner(tiled, plan.upcasts[1][0].arg, launch_dims, l2.size)) is not tiled:
            return ordered
        return open_innermost(tiled, line_axis.arg) if line_axis is not None else \
            channel_blocks_inner(tiled, launch_dims, l1.line, l2.size)
    if opts.vectorize and not any(u.op is Ops.REDUCE for u in toposort([sink])):
        # an elementwise (h, w) of 7 x 7 as one row of 49 the vectors can fill (stored channels-last: its channels
        # innermost); launched as work-items, one row a CPU device's work-group vectorizes whole (PoCL vectorizes
        # along a work-group's first dim: a 14-wide one left most lanes of its vectors idle)
        sink = contiguous_store_innermost(merge_output_dims(sink))
    if (row := plan_vector_row(sink, opts, vector_width)) is not None and \
            (lanes := choose_lanes(sink, row, opts, vector_width)):
        return tile_kernel(sink, row, lanes)
    if not (launch_dims if peel_dims is None else peel_dims) and \
            (row := plan_overlapped_row(sink, opts, vector_width)) is not None and \
            (lanes := choose_lanes(sink, row, opts, vector_width)):
        return tile_kernel(sink, row, lanes)
    if opts.peel:
        lanes = vector_width if opts.vectorize and vector_width >= MIN_LANES else 1
        peeled, interior = peel_masked_row(sink, launch_dims if peel_dims is None else peel_dims, lanes)
        if interior is not None:
            row = TilePlan(((interior, lanes),))
            return tile_kernel(peeled, row, lanes) if lanes > 1 and choose_lanes(peeled, row, opts, lanes) else peeled
    return unroll_small_loops(sink) if opts.unroll else sink


def finish_kernel(sink: UOp, opts: OptOptions, l1: CacheLevel = DEFAULT_L1) -> UOp:
    """``sink`` with the spelling steps ``opts`` turns on (module docstring), in this order: prefetches of the next
    slices (sized by the target's ``l1``), unroll hints, base pointers, parked accumulators. The same node when none
    applies."""
    if opts.prefetch_next_slices:
        sink = prefetch_next_slices(sink, l1.size, l1.line)
    if opts.unroll_hints or opts.unroll_shared_loads:
        sink = hint_unrolls(sink, shared_only=not opts.unroll_hints)
    if opts.hoist_base_pointers:
        sink = hoist_base_pointers(sink)
    if opts.park_accumulators:
        sink = park_accumulators(sink)
    return sink


def optimize_for_target(sink: UOp, opts: OptOptions, target: object) -> UOp:
    """``optimize_kernel`` with what ``target`` declares: its vector width, local memory, launch dimensions and
    caches."""
    return optimize_kernel(sink, opts, target_vector_width(target), target_local_memory(target),
                           target_launch_dims(target), target_peel_dims(target), *target_caches(target))


def target_caches(target: object) -> tuple[CacheLevel, CacheLevel]:
    """``target``'s L1 and L2 (``TargetLimits.l1``, ``.l2``); the defaults for an object without limits."""
    limits = getattr(target, "limits", None)
    return getattr(limits, "l1", DEFAULT_L1), getattr(limits, "l2", DEFAULT_L2)


def target_vector_width(target: object) -> int:
    """Float32 lanes of the widest vector type ``target``'s C-style language declares (0: none or no language)."""
    language = getattr(target, "language", None)
    return int(getattr(language, "vector_width", 0))


def target_default_opts(target: object) -> OptOptions:
    """The options ``target`` asks for when no tuning file or search chose any (``default_opts``; DEFAULT_OPTS)."""
    opts = getattr(target, "default_opts", DEFAULT_OPTS)
    return opts if isinstance(opts, OptOptions) else DEFAULT_OPTS


def target_launch_dims(target: object) -> int:
    """How many output ranges ``target``'s C-style language launches as work-item dimensions (0: all are loops)."""
    return int(getattr(getattr(target, "language", None), "global_dims", 0))


def target_peel_dims(target: object) -> int:
    """Output ranges of ``target`` that are never peeled into a loop: its launched dimensions, or none where its
    language runs a work-item's loops as cheaply as launched dimensions (``peel_launched_rows``: a CPU device)."""
    language = getattr(target, "language", None)
    return 0 if getattr(language, "peel_launched_rows", False) else target_launch_dims(target)


def target_local_memory(target: object) -> bool:
    """Whether ``target``'s C-style language declares work-group local memory (group reduces)."""
    return bool(getattr(getattr(target, "language", None), "local_index_fn", ""))


def unroll_small_loops(sink: UOp) -> UOp:
    """jit.codegen.passes.unroll's small-loop unroll (the innermost output loop and single-range reduces of at most
    ``UPCAST_MAX`` trips become straight-line code), with the copies built in one walk and the reduce rewrite
    skipped when no reduce qualifies (it would walk the whole kernel to change nothing)."""
    nodes = toposort([sink])
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if outs and int(outs[-1].src[0].arg) <= UPCAST_MAX:
        rng = outs[-1]
        maps = [{rng: rng.const_like(i)} for i in range(int(rng.src[0].arg))]
        sink = tile_sink(sink, (rng,), maps)
    if any(u.op is Ops.REDUCE and len(u.src) == 2 and int(u.src[1].src[0].arg) <= UPCAST_MAX for u in nodes):
        sink = graph_rewrite(sink, pm_unroll_reduce, name="unroll")
    return sink
