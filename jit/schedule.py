"""The scheduler: a tensor-level UOp graph becomes an ordered list of kernels over named buffers.

Kernel boundaries: every realize target, every CONTIGUOUS, and every reduce whose result is needed at an
index other than the consuming kernel's own output index (read through a movement op, a gather, another
reduce) or by more than one consumer. Elementwise chains fuse into one kernel, and a reduce whose only
consumer is the elementwise epilogue of a kernel fuses into that kernel.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass

from jit.dtype import DType, commit_weak
from jit.lower import LoweringContext, kernel_name, lower_kernel
from jit.uop import GroupOp, Ops, UOp, toposort

_uids = itertools.count(1)

# node already computed -> the buffer view holding its value (weak: a dropped graph frees its entry)
realized: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def new_buffer(device: str, dtype: DType, size: int) -> UOp:
    """A fresh BUFFER node (memory is allocated when a kernel first writes it)."""
    return UOp(Ops.BUFFER, commit_weak(dtype), (), (next(_uids), device, size))


def buffer_view(buf: UOp, shape: tuple[int, ...]) -> UOp:
    return buf if shape == buf.shape else UOp(Ops.RESHAPE, buf.dtype, (buf,), tuple(shape))


def is_view_of_buffer(u: UOp) -> bool:
    """True when ``u`` is a buffer already laid out contiguously in its own shape (nothing to compute)."""
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)


@dataclass
class ScheduledKernel:
    name: str
    ast: UOp  # SINK of the lowered kernel, before the codegen passes
    out_buffer: UOp  # BUFFER written (parameter 0)
    buffers: list[UOp]  # every BUFFER in parameter order, the output first
    device: str


def _substitute_stopping(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """``root`` with mapped nodes replaced, without walking below a replaced node."""
    done: dict[UOp, UOp] = {}
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in done:
            continue
        if node in mapping and node is not root:
            done[node] = mapping[node]
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((s, False) for s in node.src if s not in done)
            continue
        new_src = tuple(done[s] for s in node.src)
        done[node] = node if new_src == node.src else node.replace(src=new_src)
    return done[root]


# ops under which each source element is read at most once per output element: a reduce below them can be
# computed inside the consuming kernel without recomputation (EXPAND and WINDOW re-read, so they break)
_KEEPS_DIRECT = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD,
                                       Ops.STRIDE}


def _kernel_region(root: UOp, boundaries: set[UOp]) -> list[tuple[UOp, bool]]:
    """(node, read at the kernel's own output index) for every node the kernel computing ``root`` reads."""
    out: list[tuple[UOp, bool]] = []
    seen: set[tuple[UOp, bool]] = set()
    stack = [(s, root.op in _KEEPS_DIRECT) for s in root.src]
    while stack:
        node, direct = stack.pop()
        if (node, direct) in seen:
            continue
        seen.add((node, direct))
        out.append((node, direct))
        if node in boundaries or node.op is Ops.BUFFER:
            continue
        if node.op is Ops.GATHER:
            stack.extend(((node.src[0], False), (node.src[1], direct)))
        elif node.op in _KEEPS_DIRECT:
            stack.extend((s, direct) for s in node.src)
        else:
            stack.extend((s, False) for s in node.src)
    return out


def find_boundaries(targets: list[UOp]) -> list[UOp]:
    """Every node that becomes a kernel output, in execution order."""
    order = toposort(targets)
    users: dict[UOp, int] = {}
    for node in order:
        for s in node.src:
            users[s] = users.get(s, 0) + 1
    boundaries = {t for t in targets if not is_view_of_buffer(t)}
    boundaries |= {n for n in order if n.op is Ops.CONTIGUOUS}
    boundaries |= {n for n in order if n.op is Ops.REDUCE_AXIS and users.get(n, 0) > 1}
    work = list(boundaries)
    while work:
        k = work.pop()
        for node, direct in _kernel_region(k, boundaries):
            if node.op is Ops.REDUCE_AXIS and not direct and node not in boundaries:
                boundaries.add(node)
                work.append(node)
    return [n for n in order if n in boundaries]


def create_schedule(targets: list[UOp], device: str) -> tuple[list[ScheduledKernel], dict[UOp, UOp]]:
    """Kernels computing ``targets`` in order, and the map from every computed node to its buffer view."""
    # reuse what earlier realizes computed
    known = {n: realized[n] for n in toposort(targets) if n in realized}
    graph = [_substitute_stopping(t, known) if known else t for t in targets]
    kernels: list[ScheduledKernel] = []
    views: dict[UOp, UOp] = {}
    for node in find_boundaries(graph):
        assert node.shape is not None and isinstance(node.dtype, DType)
        size = 1
        for n in node.shape:
            size *= n
        buf = new_buffer(device, node.dtype, size)
        views[node] = buffer_view(buf, node.shape)
        if size == 0:
            continue
        body = _substitute_stopping(node, views)
        ast, ctx = lower_kernel(body, buf)
        kernels.append(ScheduledKernel(kernel_name(node.shape, ctx.reduce_dims), ast, buf, _params(ctx), device))
    becomes: dict[UOp, UOp] = dict(known)
    for original, rebuilt in zip(targets, graph, strict=True):
        becomes[original] = views.get(rebuilt, rebuilt)
    becomes.update(views)
    return kernels, becomes


def _params(ctx: LoweringContext) -> list[UOp]:
    return [buf for buf, _ in sorted(ctx.params.items(), key=lambda kv: kv[1])]
