"""Peeling the masked ends off the innermost loop of an elementwise kernel.

Before: an elementwise kernel (no REDUCE) whose innermost output RANGE r of size n runs as a loop on the target
(the target launches fewer dimensions than the kernel has), and whose index arithmetic compares r against
bounds: a pad's mask ``0 <= x < n`` and the clamp ``min(max(x, 0), n - 1)`` that keeps its masked-off loads in
bounds. Every iteration evaluates both, and the clamped addresses make the C compiler gather element by element
instead of vectorizing the row.

After: r's values are split into [0, lo), [lo, hi) and [hi, n). The interior [lo, hi) is a RANGE of kind "peel"
(one loop, opened by the renderer around the one STORE that uses it) over which every such comparison is decided
by value ranges, so the symbolic pass that follows folds the masks and clamps away and the row is a plain strided
copy. Each border value (at most ``MAX_BORDER`` per side, plus the rest of an interior rounded down to whole
vectors) is a straight-line copy of the STOREs with r constant.
Each output is stored once with the same value. A kernel is left alone when a comparison of r stays undecided
over every interior of at least ``MIN_INTERIOR`` values, or when it has no comparison of r at all; comparisons of
loaded data are not index masks and are neither required nor expected to fold.
"""

from __future__ import annotations

from jit.codegen.opt.tiling import tile_sink
from jit.codegen.stats import range_deps
from jit.common.dtype import DType
from jit.ir.uop import Ops, UOp, toposort

MAX_BORDER = 4  # pads of up to 4 (a 9x9 window's), times the stride
MIN_INTERIOR = 8  # a shorter interior is not worth a loop of its own


def index_masks(nodes: list[UOp], rng: UOp, deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
    """The integer comparisons of index arithmetic (no loaded value in them) that depend on ``rng``."""
    loaded = {u for u in nodes if u.op is Ops.LOAD}
    for node in nodes:
        if node not in loaded and any(s in loaded for s in node.src):
            loaded.add(node)
    return [u for u in nodes if u.op is Ops.CMPLT and rng in deps[u] and u not in loaded
            and isinstance(u.src[0].dtype, DType) and u.src[0].dtype.is_int]


def _decided(cmp: UOp) -> bool:
    a, b = cmp.src
    return bool(a.vmax < b.vmin or a.vmin >= b.vmax)


def _interior(masks: list[UOp], rng: UOp, multiple: int) -> tuple[int, int] | None:
    """(lo, hi) with the fewest border values such that every mask is decided for r in [lo, hi) and hi - lo is a
    multiple of ``multiple``; None if there is none."""
    n = int(rng.src[0].arg)
    candidates = sorted(((lo, hi) for lo in range(MAX_BORDER + 1) for hi in range(n - MAX_BORDER, n + 1)
                         if hi - lo >= MIN_INTERIOR), key=lambda b: (b[0] + n - b[1], b))
    for lo, hi in candidates:
        inner = UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(hi - lo),), (rng.arg[0], "peel"))
        if all(_decided(c) for c in tile_sink(UOp(Ops.SINK, src=tuple(masks)), (rng,), [{rng: inner + lo}]).src):
            hi = lo + (hi - lo) // multiple * multiple  # a sub-interval of a decided one is decided too
            return (lo, hi) if hi - lo >= MIN_INTERIOR else None
    return None


def peel_masked_row(sink: UOp, launch_dims: int, multiple: int = 1) -> tuple[UOp, UOp | None]:
    """``sink`` with the masked ends of its innermost output loop peeled off (module docstring) and its interior
    RANGE, whose size is a multiple of ``multiple`` (the vector lanes that will run it); ``(sink, None)`` when
    the kernel does not qualify. ``launch_dims``: how many output ranges the target launches as work-item
    dimensions instead of loops (0 on the CPU): a launched range is not a loop to peel."""
    nodes = toposort([sink])
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    # a row with no output range outside it stays: its peeled loop would be the whole kernel, run on one thread
    if len(outs) <= max(launch_dims, 1) or any(u.op is Ops.REDUCE for u in nodes):
        return sink, None
    rng = outs[-1]
    masks = index_masks(nodes, rng, range_deps(sink))
    if not masks or (bounds := _interior(masks, rng, max(multiple, 1))) is None:
        return sink, None
    lo, hi = bounds
    inner = UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(hi - lo),), (rng.arg[0], "peel"))
    maps = [{rng: rng.const_like(i)} for i in range(lo)] + [{rng: inner + lo if lo else inner}] + \
        [{rng: rng.const_like(i)} for i in range(hi, int(rng.src[0].arg))]
    return tile_sink(sink, (rng,), maps), inner
