"""Group reduces: one output's reduce shared by the work-items of a work-group, combined through local memory.

A kernel with few outputs and a long reduce (a matrix-vector product, a softmax's sum) gives a GPU too few
work-items: 512 outputs are 512 items, each walking thousands of reduce steps alone. Here the innermost reduce
range ``r`` of size n becomes ``r = q * g + l``: ``l`` is a RANGE of kind "group" (the renderer's local id, a
launch dimension whose work-group holds all g of its values) and ``q`` a reduce range of n / g steps. The kernel
computes ``REDUCE(REDUCE(x[q * g + l], q), l)``: each work-item's partial reduce, then the reduce over the group,
which the renderer spells as a local-memory array, a barrier and one combine loop (targets/cstyle/walk.py). Adjacent
work-items read adjacent elements (``l`` is innermost), the access a GPU coalesces.

Before: a lowered kernel (global, reduce ranges). After: the same outputs; the reduce's additions grouped
differently (g interleaved partial sums, then their sum), so float results agree within rounding; max, min and
integer sums are exact. Only for targets whose language declares local memory (``local_index_fn``).
"""

from __future__ import annotations

import math

from jit.codegen.opt.options import OptOptions
from jit.common.dtype import dtypes
from jit.ir.uop import Ops, UOp, toposort

# kernels with this many outputs have work-items enough without sharing their reduces
GROUP_MAX_OUTPUTS = 4096
# each work-item's share of the reduce is at least this many steps (fewer: the barrier costs more than it saves)
GROUP_MIN_TRIPS = 16
_IDENTITY = {Ops.ADD: lambda d: 0, Ops.MAX: lambda d: d.min, Ops.MIN: lambda d: d.max}


def plan_group(sink: UOp, opts: OptOptions) -> UOp | None:
    """The reduce range ``group_kernel`` should split ``opts.group_reduce`` ways, or None: the kernel has one
    ADD/MAX/MIN reduce, fewer than ``GROUP_MAX_OUTPUTS`` outputs and an innermost reduce range long enough for
    shares of at least ``GROUP_MIN_TRIPS``."""
    g = opts.group_reduce
    if g < 2:
        return None
    nodes = toposort([sink])
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg not in _IDENTITY or len(reduces[0].src) < 2:
        return None
    outputs = math.prod(int(u.src[0].arg) for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global")
    rng = reduces[0].src[-1]
    size = int(rng.src[0].arg)
    if outputs >= GROUP_MAX_OUTPUTS or size // g < GROUP_MIN_TRIPS:
        return None
    return rng


def group_kernel(sink: UOp, rng: UOp, size: int) -> UOp:
    """``sink`` with its reduce over ``rng`` shared by ``size`` work-items (see the module docstring). When
    ``size`` does not divide the range, the last steps read a clamped index and contribute the reduce's identity."""
    red = next(u for u in toposort([sink]) if u.op is Ops.REDUCE)
    n = int(rng.src[0].arg)
    next_id = max(u.arg[0] for u in toposort([sink]) if u.op is Ops.RANGE) + 1
    steps = UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(-(-n // size)),), (next_id, "reduce"))
    lane = UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(size),), (next_id + 1, "group"))
    index = steps * size + lane
    if n % size == 0:
        body = red.src[0].substitute({rng: index})
    else:
        last = rng.src[0].const_like(n - 1)
        clamped = red.src[0].substitute({rng: UOp(Ops.MIN, rng.dtype, (index, last))})
        identity = clamped.const_like(_IDENTITY[red.arg](clamped.dtype))
        body = UOp(Ops.WHERE, clamped.dtype, (UOp(Ops.CMPLT, dtypes.bool, (index, rng.src[0])), clamped, identity))
    partial = UOp(Ops.REDUCE, red.dtype, (body, *red.src[1:-1], steps), red.arg)
    return sink.substitute({red: UOp(Ops.REDUCE, red.dtype, (partial, lane), red.arg)})
