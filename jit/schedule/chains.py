"""Chains and teams: consecutive kernels of a schedule run as one kernel, on a target whose dispatch costs more than
their work (an OpenCL CPU device, whose driver spends longer between two commands than a squeeze-and-excitation
block's pool, two small matmuls and scale take to compute).

Chains (``Target.chain_limits``). Before: a capture's kept kernels in launch order. After: every run of at least two
consecutive kernels that are each small (``ChainLimits``), write no zeros of a padded copy, read no image and are
not kept apart by the caller (a state's producer, which jit/trace.py may rewrite in place) is one
``ScheduledKernel`` whose ``members`` are those kernels in order. Its buffers are the members' outputs (``writes``
of them, first) and then what they only read; its ``ast`` is a SINK of the members' SINKs, whose ``ChainInfo`` says
which of the chain's buffers each member's parameters are. The target renders the members one after another in one
work-item (``Target.render_chain``), so each member sees every earlier member's stores, as it would after the
earlier dispatches.

Teams (``Target.team_limits``, in place of chains where set). The same, for runs of kernels of any size up to
``TeamLimits``, with one more written buffer: the team's int32 counters (``ChainInfo.counters``), which the replay
zeroes once and each launch leaves at zero. The target renders a launch of several work-groups that share each
member's work by claiming chunks of it and wait for each member's work to be done before the next
(``Target.render_team``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jit.codegen.stats import kernel_stats
from jit.common.dtype import ImageDType, PtrDType, dtypes
from jit.ir.uop import Ops, UOp
from jit.schedule.kernels import ScheduledKernel, new_buffer
from targets.base import ChainLimits, TeamLimits


@dataclass(frozen=True)
class ChainInfo:
    """A chain's SINK arg: the chain's buffer parameters' pointer types, and per member, the chain parameter each of
    its own parameters is."""

    params: tuple[PtrDType, ...]
    wiring: tuple[tuple[int, ...], ...]
    counters: int | None = None  # a team's (``team_kernels``): the parameter of its int32 counters


def chain_sink(sinks: list[UOp], wiring: tuple[tuple[int, ...], ...], counters: int | None = None) -> UOp:
    """The SINK of a chain of kernel graphs ``sinks`` wired to the chain's parameters by ``wiring``, its parameters'
    types those of the graphs' (after the codegen passes: the storage types they chose); a team's ``counters``
    parameter is int32."""
    types: dict[int, PtrDType] = {} if counters is None else {counters: dtypes.int32.ptr()}
    for sink, wires in zip(sinks, wiring, strict=True):
        for ptr, i in zip(sink.arg.params, wires, strict=True):
            types.setdefault(i, ptr)
    info = ChainInfo(tuple(types[i] for i in range(len(types))), wiring, counters)
    return UOp(Ops.SINK, dtypes.void, tuple(sinks), info)


def _small(k: ScheduledKernel, limits: ChainLimits, keep_apart: set[UOp]) -> int | None:
    """The flops of ``k`` where it may join a chain (``ChainLimits``: few flops, small buffers), else None."""
    if k.members or k.zero_layout is not None or k.out_buffer in keep_apart or \
            any(isinstance(p, ImageDType) for p in k.ast.arg.params):
        return None
    if sum(b.arg[2] * b.dtype.itemsize for b in k.buffers) > limits.kernel_bytes:
        return None  # before the flops, which walk the kernel's graph
    flops = kernel_stats(k.ast).flops
    return flops if flops <= limits.kernel_flops else None


def chained(run: list[ScheduledKernel], team: bool = False) -> ScheduledKernel:
    """The kernels of ``run`` as one chain (the module docstring), or as one team (``team_kernels``): its counters
    a buffer of its own, written after the members' outputs."""
    written = list(dict.fromkeys(k.out_buffer for k in run))
    if team:
        written.append(new_buffer(run[0].device, dtypes.int32, team_counter_count(len(run))))
    buffers = written + [b for b in dict.fromkeys(b for k in run for b in k.buffers[1:]) if b not in written]
    place = {b: i for i, b in enumerate(buffers)}
    ast = chain_sink([k.ast for k in run], tuple(tuple(place[b] for b in k.buffers) for k in run),
                     len(written) - 1 if team else None)
    nodes = tuple(dict.fromkeys(n for k in run for n in k.onnx_nodes))
    return ScheduledKernel(f"{'t' if team else 'c'}{len(run)}_{run[0].name}", ast, written[0], buffers,
                           run[0].device, nodes, members=tuple(run), writes=len(written))


def team_counter_count(members: int) -> int:
    """The int32 counters of a team of ``members`` kernels: a claim and a done count per member, and the count of
    work-groups that left (targets/cstyle/chains.py ``render_team``)."""
    return 2 * members + 1


def team_counters(kernels: list[ScheduledKernel]) -> list[UOp]:
    """The counters buffer of each team among ``kernels``."""
    return [k.buffers[k.ast.arg.counters] for k in kernels
            if isinstance(k.ast.arg, ChainInfo) and k.ast.arg.counters is not None]


def _team_member(k: ScheduledKernel, limits: TeamLimits, keep_apart: set[UOp]) -> bool:
    return not k.members and k.zero_layout is None and k.out_buffer not in keep_apart and \
        not any(isinstance(p, ImageDType) for p in k.ast.arg.params) and \
        kernel_stats(k.ast).flops <= limits.kernel_flops


def team_kernels(kernels: list[ScheduledKernel], limits: TeamLimits | None,
                 keep_apart: set[UOp] = frozenset()) -> list[ScheduledKernel]:
    """``kernels`` with each run of consecutive kernels that may share a launch (no image read, not kept apart)
    cut into teams of at most ``limits.members``; runs shorter than ``limits.min_members`` stay dispatches of their
    own. Unchanged where ``limits`` is None. A kernel writing a padded copy's zeros inside a run moves before the
    run's team: it writes only bytes no other kernel writes (the border, or the whole copy before its producer
    stores the interior), which nothing before its place reads, so it does not cut the run."""
    if limits is None:
        return kernels
    out: list[ScheduledKernel] = []
    run: list[ScheduledKernel] = []
    zeros: list[ScheduledKernel] = []

    def close() -> None:
        out.extend(zeros)
        out.extend([chained(run, team=True)] if len(run) >= limits.min_members else run)
        run.clear()
        zeros.clear()

    for k in kernels:
        if k.zero_layout is not None and run and _team_member(replace(k, zero_layout=None), limits, keep_apart):
            zeros.append(k)
        elif not _team_member(k, limits, keep_apart):
            close()
            out.append(k)
        else:
            run.append(k)
            if len(run) == limits.members:
                close()
    close()
    return out


def chain_kernels(kernels: list[ScheduledKernel], limits: ChainLimits | None,
                  keep_apart: set[UOp] = frozenset()) -> list[ScheduledKernel]:
    """``kernels`` with each run of consecutive small kernels as one chain (the module docstring); unchanged where
    ``limits`` is None. A run is cut where adding the next kernel would pass ``limits.chain_flops``.
    ``keep_apart``: output buffers whose kernels stay dispatches of their own."""
    if limits is None:
        return kernels
    out: list[ScheduledKernel] = []
    run: list[ScheduledKernel] = []
    run_flops = 0

    def close() -> None:
        out.extend([chained(run)] if len(run) > 1 else run)

    for k in kernels:
        flops = _small(k, limits, keep_apart)
        if flops is not None and run and run_flops + flops <= limits.chain_flops:
            run.append(k)
            run_flops += flops
            continue
        close()
        run, run_flops = ([k], flops) if flops is not None else ([], 0)
        if flops is None:
            out.append(k)
    close()
    return out
