"""Loop order of a tiled reduce kernel: its reuse axis innermost when, outermost, it re-reads a big operand (and a
kernel over a big value stored channels-last its channel blocks innermost: ``channel_blocks_inner``).

Before: a register-tiled kernel (jit/codegen/opt/tiling.py) whose output loops open in the output's axis order, with the
reuse axis (a conv's blocks of output channels) outermost: every block sweeps the whole operand it does not read
through that axis (the conv's input), so an operand larger than the L2 cache comes from L3 or memory once per
block (vision's first conv: its 1.6 MB input six times, its second 0.8 MB twelve times).

After: the reuse axis's RANGE is renumbered to open innermost of the output loops, so each input window serves
every block of output channels while it is in L1, and the blocks' weights (small) stay there too. Not where the
output is more than twice what is re-read: innermost, the blocks scatter every pixel block's stores over all the
output planes, which cost more than the re-reads (resnet50's 64 -> 256 channel 1x1 convs). Only the loop
order changes: every output is stored once with the same value, and the outermost output loop is still what the
CPU renderer shares over threads. Targets that launch output ranges as work-item dimensions keep their order
(the order picks which range is which launch dimension there).
"""

from __future__ import annotations

from jit.codegen.opt.tiling import row_stride
from jit.codegen.stats import range_deps
from jit.common.dtype import PtrDType
from jit.ir.uop import Ops, UOp, toposort

# the re-read volume measured to pay for the reorder on AMD EPYC Zen 2, whose L2 it is. It does not grow with a
# bigger L2: on a Zen 4 core (1 MB L2) vision's second conv (0.8 MB re-read 12 times) was still 4-9% faster
# reordered (single thread, the vision-pc-cpu replay); a smaller L2 lowers it (the operand leaves L2 sooner)
MEASURED_REREAD_BYTES = 512 * 1024


# the bytes of the buffers a kernel walks a channel block at a time below which that order was as fast or faster on
# a 2-core Intel Ice Lake VM (the data stay in L2): small depthwise convs (mobilenet_v3_small's, convnext_atto's) ran
# slower with their channel blocks innermost, squeezenet1_1's max pools and efficientnet_b0's bigger depthwise convs
# faster
MEASURED_SCATTERED_BYTES = 512 * 1024


def scattered_threshold(l2_bytes: int) -> int:
    """Bytes of the buffers a kernel must walk a channel block at a time before its channel blocks open innermost
    (``channel_blocks_inner``), on a target whose L2 holds ``l2_bytes``."""
    return min(l2_bytes, MEASURED_SCATTERED_BYTES)


def reread_threshold(l2_bytes: int) -> int:
    """Bytes a tiled kernel must re-read per block of its reuse axis before that axis opens innermost, on a target
    whose L2 holds ``l2_bytes``."""
    return min(l2_bytes, MEASURED_REREAD_BYTES)


def _nbytes(bufs: set[UOp]) -> int:
    return sum(b.dtype.size * b.dtype.base.itemsize for b in bufs if isinstance(b.dtype, PtrDType) and b.dtype.size > 0)


def _reread_bytes(sink: UOp, reuse: UOp) -> int:
    """Bytes of the buffers that the reduce loads without the reuse axis (read again by every block of it)."""
    deps = range_deps(sink)
    return _nbytes({ld.src[0].src[0] for ld in toposort([sink]) if ld.op is Ops.LOAD and reuse not in deps[ld]
                    and any(r.arg[1] == "reduce" for r in deps[ld])})


def reuse_axis_inner(sink: UOp, reuse_arg: tuple, launch_dims: int, l2_bytes: int) -> UOp:
    """``sink`` (tiled) with the output range whose arg is ``reuse_arg`` opened innermost, when it is the outermost
    output loop and re-reads at least ``reread_threshold(l2_bytes)`` (``l2_bytes``: the target's L2,
    ``TargetLimits.l2``) and at least half the bytes it writes; the same graph otherwise."""
    if launch_dims:
        return sink
    nodes = toposort([sink])
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if len(outs) < 2 or outs[0].arg != reuse_arg:
        return sink
    reread = _reread_bytes(sink, outs[0])
    # innermost, the blocks scatter each pixel block's stores over every output plane: where the output is more
    # than twice what is re-read, that cost more than the re-reads did (resnet50's 64 -> 256 channel 1x1 convs)
    written = _nbytes({st.src[0].src[0] for st in sink.src if st.op is Ops.STORE})
    if reread < reread_threshold(l2_bytes) or 2 * reread < written:
        return sink
    return open_innermost(sink, outs[0].arg)


def open_innermost(sink: UOp, rng_arg: tuple) -> UOp:
    """``sink`` with the output RANGE whose arg is ``rng_arg`` renumbered after every other range (opened
    innermost); the same graph when no RANGE has that arg (a tile upcast it away)."""
    nodes = toposort([sink])
    rng = next((u for u in nodes if u.op is Ops.RANGE and u.arg == rng_arg), None)
    if rng is None:
        return sink
    last = max(u.arg[0] for u in nodes if u.op is Ops.RANGE)
    return sink.substitute({rng: rng.replace(arg=(last + 1, *rng.arg[1:]))})


def contiguous_store_innermost(sink: UOp) -> UOp:
    """Loop order of an elementwise kernel whose stores run contiguously along an outer output axis.

    Before: the output ranges open in the output's axis order; a value stored channels-last
    (jit/schedule/channels_last.py) has its channels, the axis its stores (and its loads of values stored the same
    way) walk contiguously, outside its pixels, which its stores walk a pixel's channels apart.

    After: the innermost output axis every STORE walks with stride 1 opens innermost (``open_innermost``), so the
    vector row (jit/codegen/opt/tiling.py ``plan_vector_row``) and, launched as work-items, a work-group's first
    dimension run along it. The same graph for reduce kernels and where a STORE walks the innermost axis
    contiguously already or no axis so. Only the loop order changes: every output is stored once with the same
    value."""
    nodes = toposort([sink])
    stores = [u for u in nodes if u.op is Ops.STORE]
    if not stores or any(u.op is Ops.REDUCE for u in nodes):
        return sink
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    deps = range_deps(sink)
    strides = {rng: [row_stride(u.src[0].src[1], rng, deps) for u in stores] for rng in outs}
    if len(outs) < 2 or 1 in strides[outs[-1]]:
        return sink
    inner = next((r for r in reversed(outs[:-1]) if all(s == 1 for s in strides[r])), None)
    return sink if inner is None else open_innermost(sink, inner.arg)


def channel_blocks_inner(sink: UOp, launch_dims: int, line_bytes: int, l2_bytes: int) -> UOp:
    """Loop order of a tiled reduce kernel over values stored channels-last whose outermost output loop walks blocks
    of channels.

    Before: the output ranges open in the output's axis order, so a pool or depthwise conv over a value stored
    channels-last (jit/schedule/channels_last.py) has its blocks of channels outermost: each step of that loop, the
    one the CPU renderer shares over threads, touches a few lines of every pixel of the whole map, a pixel's
    channels apart, and the next step the lines beside them, once they have left the cache.

    After: the channel-block range opens innermost of the output loops (``open_innermost``), so the next output
    ranges (rows) are shared and each step walks its pixels whole, one channel block after the other. Only where
    every access that moves with an output range moves with the channel blocks, by less than with any other output
    range (the blocks step within a pixel), and the buffers some access walks more than a line (``line_bytes``) per
    step of another output range hold at least ``scattered_threshold(l2_bytes)``: a conv's input, which its blocks of
    output channels re-read, keeps the order ``reuse_axis_inner`` chose, and a value in L2 the order that keeps a
    block's weights in registers. Only the loop order changes: every output is stored once with the same value.
    Targets that launch output ranges as work-item dimensions keep their order."""
    if launch_dims:
        return sink
    nodes = toposort([sink])
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if len(outs) < 2 or not any(u.op is Ops.REDUCE for u in nodes):
        return sink
    blocks, deps, out_ranges = outs[0], range_deps(sink), frozenset(outs)
    accesses = [u.src[0] for u in nodes if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX]
    scattered: set[UOp] = set()
    for index in accesses:
        moving = deps[index.src[1]] & out_ranges
        if not moving:
            continue
        if blocks not in moving:
            return sink
        step = row_stride(index.src[1], blocks, deps)
        others = [row_stride(index.src[1], r, deps) for r in moving - {blocks}]
        if step is None or step <= 0 or any(s is None or s <= step for s in others):
            return sink
        if any(s * index.dtype.base.itemsize > line_bytes for s in others):
            scattered.add(index.src[0])
    return open_innermost(sink, blocks.arg) if _nbytes(scattered) >= scattered_threshold(l2_bytes) else sink
