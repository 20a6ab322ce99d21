"""Kernel outputs stored channels-last where the kernel's vectors run across channels.

Before: a kernel's output buffer holds its value in the value's own (N, C, H, W) order. A conv whose output rows
do not split into vectors (the 14-, 7- and 13-wide rows of a 224 input's late stages) is tiled across output
channels instead (jit/codegen/opt/tiling.py): each vector holds one pixel of 8 or 16 channels, which lie a whole
plane apart in that order, so every vector is stored lane by lane (an AVX-512 scatter, a store per lane on
OpenCL).

After ``channels_last_view``: such a kernel's buffer is laid out (N, H, W, C) and its value read back through a
permute, so the same vectors store whole and contiguous; every reader indexes it through that view (a 1x1 conv tiled
across its own output channels loads one input value per pixel and channel either way). The kernel is planned as the
optimizer will plan it (``plan_tiles`` after the same dtype and symbolic passes, its rows merged as
``merge_output_dims`` merges them), and only one tiled across channels stores channels-last: a kernel tiled along
its rows (56-, 111-wide) stores its row vectors whole in the plain order, where channels-last they would scatter.

After ``follows_channels_last``: an elementwise value over such outputs (a squeeze-and-excitation scale, a norm
after a depthwise conv) is stored channels-last too, where it reads more of them than of plain values of its shape;
in the plain order it read them a plane apart per channel, one lane at a time. Its loop over channels then opens
innermost (jit/codegen/opt/order.py ``contiguous_store_innermost``), so it loads and stores whole vectors.

After ``channels_last_concat``: a concat along channels of such rows whose every piece is a kernel output stored
into its slice (jit/schedule/concat_stores.py: squeezenet's expand convs) is laid out (N, H, W, C) too, so those
kernels' channel vectors store whole into it.

What holds: the buffer holds the same values at permuted positions and every kernel reads them through the view,
so each value is computed as before; a kernel reading another layout may tile otherwise (its sums in another order),
so results agree within float rounding, not always bit for bit.
"""

from __future__ import annotations

from jit.codegen.opt import target_default_opts, target_vector_width
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.tiling import plan_tiles, vector_registers
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.pipeline import commit_dtypes
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import GroupOp, Ops, UOp, toposort
from jit.render_cache import cached_answer
from jit.schedule.concat_stores import Concat
from targets.registry import Device


def tiles_across_channels(ast: UOp, device: str) -> bool:
    """Whether the optimizer will tile the lowered kernel ``ast`` on ``device`` (its default options: a tuning
    file's choice for the kernel is not known yet) across its third-last output range, the channels of an
    (N, C, H, W) output. Planning is most of a warm capture's scheduling: the answer is kept in the render cache."""
    target = Device[device]
    return cached_answer("tiles_across_channels", ast, target, lambda: _plans_channel_tiles(ast, target))


def _plans_channel_tiles(ast: UOp, target: object) -> bool:
    sink = graph_rewrite(commit_dtypes(ast), pm_symbolic, name="symbolic")
    outs = sorted(u.arg[0] for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global")
    opts, registers = target_default_opts(target), vector_registers(target_vector_width(target))
    plan = plan_tiles(sink, opts, registers)
    if plan is not None and (merged := merge_output_dims(sink)) is not sink:
        plan = plan_tiles(merged, opts, registers)
    # only a channel tile caps its lanes (at the weights' block); its first upcast is the axis its vectors run along
    return plan is not None and plan.max_lanes > 0 and len(outs) >= 3 and plan.upcasts[0][0].arg[0] == outs[-3]


def channels_last_layout(node: UOp, buf: UOp, device: str) -> UOp | None:
    """The (N, H, W, C) view of ``buf`` that ``node``, an (N, C, H, W) value, is stored through, for a value whose
    rows do not split into vectors; None for a value of another shape (dims of 1 aside: a conv's reduce has the
    window's), of one pixel (the same bytes either way) or with rows that split into vectors."""
    shape = node.shape
    dims = tuple(d for d in shape or () if d != 1)
    if shape is None or len(dims) not in (3, 4):
        return None
    *batch, c, h, w = dims
    opts = target_default_opts(Device[device])
    if w % opts.channel_vector == 0 and w >= opts.wide_channel_vector:
        return None  # rows that split into vectors: tiled along them (planning is the slow part of a warm capture)
    stored = UOp(Ops.RESHAPE, buf.dtype, (buf,), (*batch, h, w, c))
    plain = UOp(Ops.PERMUTE, node.dtype, (stored,), (*range(len(batch)), len(batch) + 2, len(batch), len(batch) + 1))
    return UOp(Ops.RESHAPE, node.dtype, (plain,), shape)


def channels_last_view(node: UOp, buf: UOp, ast: UOp, device: str) -> UOp | None:
    """The view of ``buf`` laid out (N, H, W, C) that ``node``, a (N, C, H, W) value computed by the lowered kernel
    ``ast`` into the plain layout, is stored through instead, when that kernel tiles across channels; None where
    ``channels_last_layout`` has no view or the kernel is tiled otherwise."""
    view = channels_last_layout(node, buf, device)
    return view if view is not None and tiles_across_channels(ast, device) else None


def channels_last_concat(concat: Concat, buf: UOp, device: str) -> UOp | None:
    """The (N, H, W, C) view of ``buf`` that ``concat``, pieces joined along the channels of an (N, C, H, W) value,
    is stored through, where every piece is a kernel output stored into its slice (squeezenet's fire modules: its
    convs): over rows that do not split into vectors those kernels tile across channels
    (jit/codegen/opt/tiling.py takes the channel tile for a row whose stores scatter), so each piece's channel
    vectors store whole. None where ``channels_last_layout`` has none, along another axis, with a piece copied in
    (shufflenet's channel split passes half its input through, which would then be copied lane by lane) or of
    channels the device's widest channel vector does not divide (shufflenet's 24: its 28-wide rows are cheaper
    along them than in 8-lane channel vectors)."""
    shape = concat.top.shape
    if shape is None or len(shape) != 4 or any(p.axis != 1 for p in concat.pieces):
        return None
    opts = target_default_opts(Device[device])
    lanes = opts.wide_channel_vector or opts.channel_vector
    if any(p.value not in concat.stored or (p.value.shape or (0, 0))[1] % lanes for p in concat.pieces):
        return None
    return channels_last_layout(concat.top, buf, device)


def _non_unit_axes(shape: tuple[int, ...]) -> list[int]:
    return [i for i, d in enumerate(shape) if d != 1]


def follows_channels_last(node: UOp, stored_channels_last: set[UOp], boundaries: set[UOp]) -> bool:
    """Whether the elementwise value ``node`` reads more values of its own shape (dims of 1 aside) stored
    channels-last (in ``stored_channels_last``) than in the plain layout (other kernels' outputs and buffers given
    to the capture), each element for element: through elementwise ops, reshapes that only add or drop dims of 1 and
    permutes that cancel out (a norm over channels computed channels-last between two permutes), not through a
    broadcast or window (module docstring)."""
    if node.shape is None:
        return False
    dims = [node.shape[i] for i in _non_unit_axes(node.shape)]
    counts = {True: 0, False: 0}
    seen: set[tuple[UOp, tuple[int, ...]]] = set()
    # each node with, for each of its dims other than 1, the dim of ``node`` it is
    stack = [(src, tuple(range(len(dims)))) for src in node.src]
    while stack:
        u, axes = stack.pop()
        if (u, axes) in seen or u.shape is None:
            continue
        seen.add((u, axes))
        if u in boundaries or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER):  # a kernel's or the caller's
            if [u.shape[i] for i in _non_unit_axes(u.shape)] == dims and axes == tuple(range(len(dims))):
                counts[u in stored_channels_last] += 1
        elif u.op in GroupOp.Elementwise or u.op is Ops.CONTIGUOUS:
            stack.extend((src, axes) for src in u.src)
        elif u.op is Ops.RESHAPE and u.src[0].shape is not None and \
                [d for d in u.src[0].shape if d != 1] == [d for d in u.shape if d != 1]:
            stack.append((u.src[0], axes))
        elif u.op is Ops.PERMUTE and u.src[0].shape is not None:
            rank = {axis: r for r, axis in enumerate(_non_unit_axes(u.src[0].shape))}
            below = [0] * len(axes)
            for out_rank, src_axis in enumerate(a for a in u.arg if u.src[0].shape[a] != 1):
                below[rank[src_axis]] = axes[out_rank]
            stack.append((u.src[0], tuple(below)))
    return counts[True] > counts[False]
