"""Opening an outer output axis innermost where it walks a load's cache lines (CPU loops only).

Before: a reduce kernel with an output RANGE ``c`` outside other output loops, read through ``c // d`` and
``c % d`` by a reduce load that is contiguous in ``c % d``, while every output loop inside ``c`` moves that load
by a cache line or more. Winograd's output transform is the case: M keeps blocks of 16 output channels
innermost, the transform writes (Cout, H, W), so channel c is its outermost loop and each line of M it loads
serves one of the line's 16 channels; by the time c moves on the line has left L1, and every line comes from L2
16 times (vision's 48-channel transform: 162 us on one core, 94 us with the channels innermost).

After: ``c = a * d + b`` (jit.codegen.opt.split's ``split_range``: both RANGEs in c's place, every ``// d`` and ``% d``
of c simplified away), and once the kernel is tiled, ``b``'s RANGE is renumbered to open innermost of the
output loops, so the d channels of one line are consecutive iterations. Only the loop order changes: every
output is stored once with the same value, and the outermost output loops (``a`` and the rows inside it) are
still what the CPU renderer shares over threads. Targets that launch output ranges as work-item dimensions keep
their order (the order picks which range is which launch dimension there).
"""

from __future__ import annotations

from jit.codegen.opt.split import split_range
from jit.codegen.passes.symbolic import pm_symbolic
from jit.common.dtype import PtrDType
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, toposort


def _size(r: UOp) -> int:
    return int(r.src[0].arg)


def _step(idx: UOp, rng: UOp) -> int | None:
    """How far ``idx`` moves from ``rng`` = 0 to ``rng`` = 1 with every other range at 0 (None: it does not fold
    to constants). A sample, not a derivative: for ``r // 4 * K + r % 4 * L`` it is L, the step of three in four
    iterations."""
    ranges = [u for u in toposort([idx]) if u.op is Ops.RANGE]
    values = []
    for at in (0, 1):
        point = graph_rewrite(idx.substitute({r: r.const_like(at if r is rng else 0) for r in ranges}), pm_symbolic,
                              name="index at a point")
        if point.op is not Ops.CONST:
            return None
        values.append(int(point.arg))
    return values[1] - values[0]


def _walks_lines(sink: UOp, inner: UOp, line_bytes: int) -> bool:
    """Whether some reduce load reads ``inner`` contiguously while every other output loop opened after ``inner``
    (loops of one trip aside) keeps its address or moves it by a cache line (``line_bytes``) or more, and one of
    them moves it."""
    reduces = [u for u in toposort([sink]) if u.op is Ops.REDUCE]
    loads = [u for u in toposort([red.src[0] for red in reduces]) if u.op is Ops.LOAD]
    later = [u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global" and u.arg[0] > inner.arg[0]
             and _size(u) > 1]
    for ld in loads:
        idx, buf = ld.src[0].src[1], ld.src[0].src[0]
        if not isinstance(buf.dtype, PtrDType) or _step(idx, inner) != 1:
            continue
        line = line_bytes // buf.dtype.base.itemsize
        steps = [_step(idx, r) for r in later]
        # a loop that stays on one address (step 0) re-reads it from L1; one stepping within a line is the
        # contiguous walk this split would add, already there
        if any(s is not None and abs(s) >= line for s in steps) and \
                all(s is None or s == 0 or abs(s) >= line for s in steps):
            return True
    return False


def split_for_line_reuse(sink: UOp, launch_dims: int, line_bytes: int) -> tuple[UOp, UOp] | None:
    """``(split sink, b)`` for the outermost output range ``c`` (not the innermost) that the module docstring's
    case holds for with cache lines of ``line_bytes`` (the target's L1 line, ``TargetLimits.l1``), ``b`` the
    RANGE to open innermost after tiling (``jit.codegen.opt.order.open_innermost``); None when no range
    qualifies, on targets that launch output ranges, and in kernels without a reduce."""
    nodes = toposort([sink])
    if launch_dims or not any(u.op is Ops.REDUCE for u in nodes):
        return None
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    for c in outs[:-1]:
        divisors = sorted({int(u.src[1].arg) for u in nodes if u.op in (Ops.IDIV, Ops.MOD) and u.src[0] is c
                           and u.src[1].op is Ops.CONST})
        # c's first step is its c % d part's, and the loops inside c are the same after the split: checked on the
        # kernel as it is, so kernels that do not qualify (a conv's channel-blocked weights) cost no split
        if not divisors or not _walks_lines(sink, c, line_bytes):
            continue
        for d in divisors:
            if 1 < d < _size(c) and _size(c) % d == 0 and (split := split_range(sink, c, d)) is not None:
                return split, next(u for u in toposort([split]) if u.op is Ops.RANGE
                                    and u.arg == (2 * c.arg[0] + 1, c.arg[1]))
    return None

