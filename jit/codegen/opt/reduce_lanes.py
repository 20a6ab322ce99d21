"""Lane reduces: a reduce whose input is contiguous along its own innermost range runs as vectors along that range.

A global average pool over NCHW (efficientnet's squeeze-and-excitation: 144 channels of 32 x 64 pixels), a mean or
variance over a row's last axis: the reduce reads its input contiguously along the reduce, and a whole channel (or
row) apart along the contiguous output axis. Register tiling (jit/codegen/opt/tiling.py) vectorizes output axes, so
every lane of such a tile is a separate load from a separate stream, each a plane apart: the streams alias in the
L1's sets and the prefetchers lose them.

Here the innermost reduce range ``r`` of size n becomes ``r = q * lanes + v``: ``v`` is the kernel's RANGE of kind
"vector" and ``q`` a reduce range of n / lanes steps. The kernel computes ``REDUCE(REDUCE(x[q * lanes + v], ..., q),
v)``: a vector accumulator whose lanes sum interleaved parts of the reduce, read as whole vectors, then the reduce
over the lanes, which the renderer spells as a tree of lane combines (targets/cstyle/walk.py). The contiguous output
axis is then tiled ``LANE_REDUCE_TILE`` outputs a step (plain copies, one vector accumulator each), so several
independent accumulators hide the add latency.

A reduce of n values no vector width divides (softmax's max and sum over a ViT's 197 tokens, which ran as one
scalar per value) takes ``ceil(n / lanes)`` steps, the last one's vector shifted back to end at the row's end (as
overlapped rows do: jit/codegen/opt/overlap.py), so every load is a whole vector inside the row. A max or min sees
the values the last vector shares with the one before twice, which changes nothing; a sum adds 0 in those lanes
instead (a compare and a select a step).

Before: a lowered kernel (global, reduce ranges), not vectorized yet. After: the same outputs; the reduce's
additions grouped differently (``lanes`` interleaved partial sums, then their pairwise sum), so float sums agree
within rounding; max, min and integer sums are exact.
"""

from __future__ import annotations

import math

from jit.codegen.opt.options import OptOptions
from jit.codegen.opt.tiling import VECTOR_LOAD_STRIDES, TilePlan, lane_range, row_stride, tile_kernel
from jit.codegen.opt.vectorize import MIN_LANES, VECTOR_DTYPES
from jit.codegen.stats import range_deps
from jit.common.dtype import DType
from jit.ir.uop import Ops, UOp, toposort

# outputs of the contiguous output axis computed together, tried in order: each is one more vector accumulator in
# flight, and one more input stream read at once
LANE_REDUCE_TILE = (4, 2)
# fewer vector steps than this in the whole reduce leave nothing to gain over the output-vector tile
LANE_REDUCE_MIN_STEPS = 4
_COMBINES = frozenset({Ops.ADD, Ops.MAX, Ops.MIN})


def _contiguous_output_axis(nodes: list[UOp]) -> UOp | None:
    """The last output range (the contiguous one), None for a kernel of one output."""
    return max((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0], default=None)


def plan_reduce_lanes(sink: UOp, opts: OptOptions, vector_width: int) -> tuple[UOp, int] | None:
    """``(r, lanes)`` for ``split_reduce_lanes``, or None. It applies to a kernel of one STORE and one ADD/MAX/MIN
    REDUCE of a vector dtype, where every load that depends on the reduce's innermost range ``r`` reads it
    contiguously and reads the contiguous output axis (if any) at a stride no vector load takes (so no tile of that
    axis shares it): ``lanes`` is the widest power of two up to ``vector_width`` dividing ``r``, else (none of at
    least ``MIN_LANES``) the widest up to ``r``'s size, the last step shifted back (module docstring)."""
    if not (opts.reduce_lanes and opts.vectorize) or vector_width < MIN_LANES or len(sink.src) != 1:
        return None
    nodes = toposort([sink])
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg not in _COMBINES or reduces[0].dtype not in VECTOR_DTYPES or \
            len(reduces[0].src) < 2:
        return None
    red = reduces[0]
    rng = red.src[-1]
    n = int(rng.src[0].arg)
    if n < MIN_LANES:  # an empty reduce among them
        return None
    widest = lanes = 1 << (min(vector_width, n).bit_length() - 1)
    while lanes >= MIN_LANES and n % lanes:
        lanes //= 2
    if lanes < MIN_LANES:  # no width divides the row: the widest, its last vector shifted back
        lanes = widest
    trips = math.prod(int(r.src[0].arg) for r in red.src[1:])
    if lanes < MIN_LANES or trips // lanes < LANE_REDUCE_MIN_STEPS:
        return None
    deps = range_deps(sink)
    inner = _contiguous_output_axis(nodes)
    along = [u for u in toposort([red.src[0]]) if rng in deps[u]]  # what the split makes vectors
    loads = [u for u in along if u.op is Ops.LOAD]
    if not loads or any(isinstance(u.dtype, DType) and u.dtype not in VECTOR_DTYPES for u in along):
        return None
    for ld in loads:
        idx = ld.src[0].src[1]
        if row_stride(idx, rng, deps) != 1 or \
                (inner is not None and row_stride(idx, inner, deps) in VECTOR_LOAD_STRIDES):
            return None
    return rng, lanes


def split_reduce_lanes(sink: UOp, rng: UOp, lanes: int) -> UOp:
    """``sink`` with its reduce over ``rng`` split into ``lanes`` vector lanes and its contiguous output axis tiled
    (module docstring)."""
    nodes = toposort([sink])
    red = next(u for u in nodes if u.op is Ops.REDUCE)
    n = int(rng.src[0].arg)
    steps = UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(-(-n // lanes)),), rng.arg)
    lane = lane_range(sink, lanes)
    if n % lanes == 0:
        value = red.src[0].substitute({rng: steps * lanes + lane})
    else:  # the last step shifted back to end at n; a sum adds 0 where it repeats the step before
        start = (steps * lanes).minimum(n - lanes)
        value = red.src[0].substitute({rng: start + lane})
        if red.arg is Ops.ADD:
            value = (start + lane < steps * lanes).where(value.const_like(0), value)
    partial = UOp(Ops.REDUCE, red.dtype, (value, *red.src[1:-1], steps), red.arg)
    split = sink.substitute({red: UOp(Ops.REDUCE, red.dtype, (partial, lane), red.arg)})
    if (inner := _contiguous_output_axis(nodes)) is None:
        return split
    size = int(inner.src[0].arg)
    tile = next((u for u in LANE_REDUCE_TILE if size % u == 0 and size // u >= 2), None)
    return tile_kernel(split, TilePlan(((inner, tile),))) if tile else split
