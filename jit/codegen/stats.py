"""FLOPs and bytes of a lowered kernel, counted from its graph (not estimated from the model), and which ranges its
values and its largest input depend on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from jit.common.dtype import PtrDType
from jit.ir.uop import GroupOp, Ops, UOp, toposort


@dataclass(frozen=True)
class KernelStats:
    flops: int
    bytes: int
    global_size: tuple[int, ...]


def range_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the RANGEs it is evaluated under (a REDUCE is evaluated outside its own ranges)."""
    deps: dict[UOp, frozenset[UOp]] = {}
    for node in toposort([sink]):
        if node.op is Ops.RANGE:
            deps[node] = frozenset((node,))
        elif node.op is Ops.REDUCE:
            deps[node] = deps[node.src[0]] - frozenset(node.src[1:])
        else:
            deps[node] = frozenset().union(*(deps[s] for s in node.src))
    return deps


def _trips(ranges: frozenset[UOp]) -> int:
    return math.prod(int(r.src[0].arg) for r in ranges)


def kernel_stats(sink: UOp) -> KernelStats:
    """Operations and bytes as the rendered kernel executes them: a value is evaluated once per iteration of
    every output loop (the renderer places values inside all of them) and of the reduce loops it depends on."""
    deps = range_deps(sink)
    outer = frozenset(u for u in deps if u.op is Ops.RANGE and u.arg[1] == "global")
    deps = {n: r | outer for n, r in deps.items()}
    flops = nbytes = 0
    for node in deps:
        if node.op in GroupOp.ALU and node.op not in GroupOp.Comparison and node.op is not Ops.WHERE:
            # index arithmetic is not work the model asked for
            if node.dtype.is_float:  # type: ignore[union-attr]
                flops += _trips(deps[node]) * (2 if node.op is Ops.MULACC else 1)
        elif node.op is Ops.REDUCE:
            flops += _trips(deps[node.src[0]])
        elif node.op is Ops.LOAD:
            nbytes += _trips(deps[node]) * node.dtype.itemsize  # type: ignore[union-attr]
        elif node.op is Ops.STORE:
            nbytes += _trips(deps[node]) * node.src[1].dtype.itemsize  # type: ignore[union-attr]
    glob = tuple(int(r.src[0].arg) for r in sorted((u for u in deps if u.op is Ops.RANGE and u.arg[1] == "global"),
                                                    key=lambda r: r.arg[0]))
    return KernelStats(flops, nbytes, glob or (1,))


@dataclass(frozen=True)
class SharedInput:
    """The input each point of a launch's ranges reads most of: the loaded buffer of most bytes per point of the
    ranges its loads depend on (a conv's activation row over its weights; a matmul's weight columns over 25 tokens)."""

    along: tuple[bool, ...]  # per range: the input is read the same along it (a conv's output channels)
    reuse: float  # bytes one point loads from it per byte that point stores
    nbytes: int  # the input's whole size
    stored_nbytes: int  # the whole size of the buffers the kernel stores to


def shared_input(sink: UOp, ranges: Sequence[UOp]) -> SharedInput:
    """The ``SharedInput`` of ``sink`` over ``ranges`` (a launch's); nothing shared where nothing is loaded."""
    deps = range_deps(sink)
    launch = frozenset(ranges)
    loads: dict[UOp, list[UOp]] = {}
    for ld in (u for u in deps if u.op is Ops.LOAD and isinstance(u.src[0].src[0].dtype, PtrDType)):
        loads.setdefault(ld.src[0].src[0], []).append(ld)
    stores = [u for u in deps if u.op is Ops.STORE]
    stored_nbytes = sum(_size(p) for p in {u.src[0].src[0] for u in stores} if isinstance(p.dtype, PtrDType))
    if not loads:
        return SharedInput(tuple(False for _ in ranges), 0.0, 0, stored_nbytes)
    along = {buf: frozenset().union(*(deps[ld] & launch for ld in lds)) for buf, lds in loads.items()}
    buf = max(loads, key=lambda b: _size(b) / math.prod(int(r.src[0].arg) for r in along[b]))
    loaded = sum(_trips(deps[ld] - launch) * ld.dtype.itemsize for ld in loads[buf])
    stored = sum(_trips(deps[u] - launch) * u.src[1].dtype.itemsize for u in stores)
    return SharedInput(tuple(r not in along[buf] for r in ranges), loaded / max(stored, 1), _size(buf), stored_nbytes)


def _size(buf: UOp) -> int:
    ptr = buf.dtype
    assert isinstance(ptr, PtrDType)
    return ptr.size * ptr.itemsize
