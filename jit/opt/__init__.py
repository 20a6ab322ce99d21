"""The kernel optimizer: per-kernel rewrites of a lowered kernel's loop structure, run before rendering.

Entry point: ``optimize_kernel(sink)`` (called by jit/passes/pipeline.py unless ``NOOPT=1``). What it does:

* reduce kernels (matmul, conv): register tiling by ``jit.opt.tiling`` (upcast of the contiguous output axis
  and of one reuse axis, so one pass over the reduce loop updates a tile of accumulators);
* every other kernel: the small-loop unroll of ``jit.passes.unroll`` (as before the optimizer existed).

Threads on the CPU target are not decided here: the renderer splits the outermost output loops when the
target's language declares a parallel pragma (targets/cstyle.py).
"""

from __future__ import annotations

from jit.opt.options import DEFAULT_OPTS, OptOptions, OptOptionsError
from jit.opt.tiling import TilePlan, plan_tiles, tile_kernel
from jit.passes.unroll import unroll_small_ranges
from jit.uop import UOp

__all__ = ["DEFAULT_OPTS", "OptOptions", "OptOptionsError", "TilePlan", "optimize_kernel", "plan_tiles",
           "tile_kernel"]


def optimize_kernel(sink: UOp, opts: OptOptions | None = None) -> UOp:
    """``sink`` with its loops tiled (reduce kernels) or small loops unrolled (the rest); same results.
    ``opts`` None means the heuristic default ``OptOptions()``."""
    opts = DEFAULT_OPTS if opts is None else opts
    plan = plan_tiles(sink, opts) if opts.tile else None
    if plan is not None:
        return tile_kernel(sink, plan)
    return unroll_small_ranges(sink) if opts.unroll else sink
