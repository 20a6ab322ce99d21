"""Weight folding for a capture (jit/trace.py): the weight-only values the input-dependent graph reads, computed
once during the capture by kernels of their own, whose outputs become weights.

Before: a traced graph whose input-dependent nodes read weight-only subexpressions (BN folding, casts, transposes
computed with ALU ops). After ``weight_frontier`` and ``folded``: those values count as realized buffers inside the
block, so the capture's schedule reads them; the caller computes their kernels (``run_or_defer``), on the host,
while the kept kernels are rendered.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from jit.common.dtype import DType
from jit.frontend.weight_layout import WEIGHT_BLOCK_MAX_PAD
from jit.ir.uop import GroupOp, Ops, UOp, toposort
from jit.realize import compile_soon, run_schedule
from jit.schedule.kernels import ScheduledKernel, create_schedule, is_view_of_buffer, realized

FOLD_DEVICE = "CPU"


def _reaches(order: list[UOp], sources: set[UOp]) -> set[UOp]:
    """Nodes of ``order`` (a toposort) with a path to one of ``sources``."""
    hit: set[UOp] = set()
    for n in order:
        if n in sources or any(s in hit for s in n.src):
            hit.add(n)
    return hit


def _foldable(core: UOp) -> bool:
    """A weight-only value worth computing once: real work (not a buffer, constant or index), a committed
    dtype, and no larger than the weights it reads (a broadcast is cheaper recomputed than stored) but for the zero
    padding a blocked layout may add (``WEIGHT_BLOCK_MAX_PAD``), or of any size where the graph stores it anyway
    (CONTIGUOUS: a Winograd conv's transformed filters, four to nine times its weights), so that the host, not the
    capture's device, computes it."""
    if core.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA) or is_view_of_buffer(core) or core in realized:
        return False
    if not isinstance(core.dtype, DType) or core.dtype.weak or core.shape is None or core.size == 0:
        return False
    if core.op is Ops.CONTIGUOUS:
        return True
    weight_elems = sum(n.arg[2] for n in toposort([core]) if n.op is Ops.BUFFER)
    return 0 < core.size <= weight_elems * (1 + WEIGHT_BLOCK_MAX_PAD)


def weight_frontier(roots: list[UOp], sources: set[UOp]) -> list[UOp]:
    """The weight-only values read by input-dependent nodes, below their movement ops, that ``_foldable`` takes."""
    order = toposort(roots)
    dependent = _reaches(order, sources)
    frontier: dict[UOp, None] = {}
    for n in order:
        if n not in dependent:
            continue
        for s in n.src:
            if s in dependent:
                continue
            core = s
            while core.op in GroupOp.Movement:
                core = core.src[0]
            if core not in frontier and _foldable(core):
                frontier[core] = None
    return list(frontier)


@contextmanager
def folded(nodes: list[UOp]) -> Iterator[list[ScheduledKernel]]:
    """The kernels computing ``nodes``, which count as realized inside the block (schedules made there read their
    buffers) and are computed by the caller there: they can compile while the compiler builds the other kernels.
    Forgotten again if the block fails, so no later schedule reads a buffer that was never written."""
    if not nodes:
        yield []
        return
    # on the host whatever the capture's target: kernels that run once cost a device compiler far more than the C
    # compiler (PoCL: a program build and a compile at the first launch each); they read a device's weights from
    # copies on the host (``device_buffer_on``), and their results are bound as weights, or copied to the device for
    # a kernel that runs there during the capture
    kernels, becomes = create_schedule(nodes, FOLD_DEVICE)
    recorded = [node for node, view in becomes.items() if node.op is not Ops.BUFFER and node is not view]
    realized.update((node, becomes[node]) for node in recorded)
    try:
        yield kernels
    except BaseException:
        for node in recorded:
            realized.pop(node, None)
        raise


def run_or_defer(kernels: list[ScheduledKernel], deferred: list[list[ScheduledKernel]]) -> None:
    """Run weight-only ``kernels`` (their outputs become weights) now, or append them to ``deferred`` when their
    compile runs in the background (``compile_soon``; the CPU target's compiler) or an earlier group waits there:
    the caller runs the deferred groups, in order, once it has rendered the kept kernels. Run now, a target that
    queues launches (OpenCL) computes them while the kept kernels are rendered."""
    if compile_soon(kernels) or deferred:
        deferred.append(kernels)
    else:
        run_schedule(kernels)
