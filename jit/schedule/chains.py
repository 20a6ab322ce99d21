"""Chains: consecutive small kernels of a schedule run as one kernel, on a target whose dispatch costs more than
their work (``Target.chain_limits``: an OpenCL CPU device, whose driver spends longer between two commands than a
squeeze-and-excitation block's pool, two small matmuls and scale take to compute).

Before: a capture's kept kernels in launch order. After: every run of at least two consecutive kernels that are each
small (``ChainLimits``), write no zeros of a padded copy, read no image and are not kept apart by the caller (a
state's producer, which jit/trace.py may rewrite in place) is one ``ScheduledKernel`` whose ``members`` are those
kernels in order. Its buffers are the members' outputs (``writes`` of them, first) and then what they only read; its
``ast`` is a SINK of the members' SINKs, whose ``ChainInfo`` says which of the chain's buffers each member's
parameters are. The target renders the members one after another in one work-item (``Target.render_chain``), so
each member sees every earlier member's stores, as it would after the earlier dispatches.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.codegen.stats import kernel_stats
from jit.common.dtype import ImageDType, PtrDType, dtypes
from jit.ir.uop import Ops, UOp
from jit.schedule.kernels import ScheduledKernel
from targets.base import ChainLimits


@dataclass(frozen=True)
class ChainInfo:
    """A chain's SINK arg: the chain's buffer parameters' pointer types, and per member, the chain parameter each of
    its own parameters is."""

    params: tuple[PtrDType, ...]
    wiring: tuple[tuple[int, ...], ...]


def chain_sink(sinks: list[UOp], wiring: tuple[tuple[int, ...], ...]) -> UOp:
    """The SINK of a chain of kernel graphs ``sinks`` wired to the chain's parameters by ``wiring``, its parameters'
    types those of the graphs' (after the codegen passes: the storage types they chose)."""
    types: dict[int, PtrDType] = {}
    for sink, wires in zip(sinks, wiring, strict=True):
        for ptr, i in zip(sink.arg.params, wires, strict=True):
            types.setdefault(i, ptr)
    return UOp(Ops.SINK, dtypes.void, tuple(sinks), ChainInfo(tuple(types[i] for i in range(len(types))), wiring))


def _small(k: ScheduledKernel, limits: ChainLimits, keep_apart: set[UOp]) -> int | None:
    """The flops of ``k`` where it may join a chain (``ChainLimits``: few flops, small buffers), else None."""
    if k.members or k.zero_layout is not None or k.out_buffer in keep_apart or \
            any(isinstance(p, ImageDType) for p in k.ast.arg.params):
        return None
    if sum(b.arg[2] * b.dtype.itemsize for b in k.buffers) > limits.kernel_bytes:
        return None  # before the flops, which walk the kernel's graph
    flops = kernel_stats(k.ast).flops
    return flops if flops <= limits.kernel_flops else None


def chained(run: list[ScheduledKernel]) -> ScheduledKernel:
    """The kernels of ``run`` as one chain (the module docstring)."""
    written = list(dict.fromkeys(k.out_buffer for k in run))
    buffers = written + [b for b in dict.fromkeys(b for k in run for b in k.buffers[1:]) if b not in written]
    place = {b: i for i, b in enumerate(buffers)}
    ast = chain_sink([k.ast for k in run], tuple(tuple(place[b] for b in k.buffers) for k in run))
    nodes = tuple(dict.fromkeys(n for k in run for n in k.onnx_nodes))
    return ScheduledKernel(f"c{len(run)}_{run[0].name}", ast, written[0], buffers, run[0].device, nodes,
                           members=tuple(run), writes=len(written))


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
