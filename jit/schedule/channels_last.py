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

What holds: the buffer holds the same values at permuted positions and every kernel reads them through the view,
so each value is computed and read exactly as before; results are unchanged bit for bit.
"""

from __future__ import annotations

from jit.codegen.opt import target_default_opts, target_vector_width
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.tiling import plan_tiles, vector_registers
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.pipeline import commit_dtypes
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, toposort
from targets.registry import Device


def tiles_across_channels(ast: UOp, device: str) -> bool:
    """Whether the optimizer will tile the lowered kernel ``ast`` on ``device`` (its default options: a tuning
    file's choice for the kernel is not known yet) across its third-last output range, the channels of an
    (N, C, H, W) output."""
    target = Device[device]
    sink = graph_rewrite(commit_dtypes(ast), pm_symbolic, name="symbolic")
    outs = sorted(u.arg[0] for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global")
    opts, registers = target_default_opts(target), vector_registers(target_vector_width(target))
    plan = plan_tiles(sink, opts, registers)
    if plan is not None and (merged := merge_output_dims(sink)) is not sink:
        plan = plan_tiles(merged, opts, registers)
    # only a channel tile caps its lanes (at the weights' block); its first upcast is the axis its vectors run along
    return plan is not None and plan.max_lanes > 0 and len(outs) >= 3 and plan.upcasts[0][0].arg[0] == outs[-3]


def channels_last_view(node: UOp, buf: UOp, ast: UOp, device: str) -> UOp | None:
    """The view of ``buf`` laid out (N, H, W, C) that ``node``, a (N, C, H, W) value computed by the lowered kernel
    ``ast`` into the plain layout, is stored through instead, when that kernel tiles across channels; None for a
    value of another shape (dims of 1 aside: a conv's reduce has the window's), of one pixel (the same bytes either
    way) or tiled otherwise."""
    shape = node.shape
    dims = tuple(d for d in shape or () if d != 1)
    if shape is None or len(dims) not in (3, 4):
        return None
    *batch, c, h, w = dims
    opts = target_default_opts(Device[device])
    if w % opts.channel_vector == 0 and w >= opts.wide_channel_vector:
        return None  # rows that split into vectors: tiled along them (planning is the slow part of a warm capture)
    if not tiles_across_channels(ast, device):
        return None
    stored = UOp(Ops.RESHAPE, buf.dtype, (buf,), (*batch, h, w, c))
    plain = UOp(Ops.PERMUTE, node.dtype, (stored,), (*range(len(batch)), len(batch) + 2, len(batch), len(batch) + 1))
    return UOp(Ops.RESHAPE, node.dtype, (plain,), shape)
