"""The scheduler: a tensor-level UOp graph becomes an ordered list of kernels over named buffers.

Kernel boundaries: every realize target, every CONTIGUOUS, and every reduce whose result is needed at an
index other than the consuming kernel's own output index (read through a movement op, a gather, another
reduce) or by more than one consumer. Elementwise chains fuse into one kernel, and a reduce whose only
consumer is the elementwise epilogue of a kernel fuses into that kernel. A reduce's elementwise epilogue that
reads more than constants (bias, BN, residual add) and that a reduce kernel reads at other indices (the next conv
or matmul) is a kernel output of its own: it runs once after the producing reduce instead of once per read. So is
any elementwise producer a reduce kernel would recompute per output block at more than it costs to store and
reload, or holding a transcendental (the fusion cost model, jit/schedule/fusion_cost.py; ``FUSION_COST=0``: off).
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass

from jit.common.dtype import DType, commit_weak
from jit.common.helpers import STORE_VIEWS
from jit.ir.provenance import inherit, names_in
from jit.ir.uop import GroupOp, Ops, UOp, toposort
from jit.schedule.aligned_rows import aligned_row_width, aligned_rows_size, aligned_rows_view
from jit.schedule.channels_last import (
    channels_last_concat,
    channels_last_layout,
    channels_last_view,
    follows_channels_last,
)
from jit.schedule.concat_stores import find_concats, pieces_to_compute
from jit.schedule.fusion_cost import dear_producers, is_concat
from jit.schedule.lower import LoweringContext, kernel_name, lower_border, lower_kernel, lower_zero_fill
from jit.schedule.padded_stores import PaddedCopy, find_padded_copies, merges_last_dims
from targets.registry import Device

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
    ast: UOp  # SINK of the lowered kernel, before the codegen passes (a chain's: of its members' SINKs)
    out_buffer: UOp  # BUFFER written (parameter 0)
    buffers: list[UOp]  # every BUFFER in parameter order, the output first
    device: str
    onnx_nodes: tuple[str, ...] = ()  # the ONNX nodes whose ops it computes (jit/ir/provenance.py)
    # for a kernel writing only a padded copy's zeros (its border, or the whole copy before the producer writes the
    # interior: the same bytes on every run, which no other kernel writes), the copy's ``PaddedCopy.layout``
    zero_layout: tuple[object, ...] | None = None
    # a chain of small kernels run as one (jit/schedule/chains.py): its kernels in order, and how many of
    # ``buffers`` (the first ones) they write
    members: tuple[ScheduledKernel, ...] = ()
    writes: int = 1

    @property
    def written(self) -> list[UOp]:
        return self.buffers[:self.writes]


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
        inherit(done[node], node)
    return done[root]


# ops under which each source element is read at most once per output element: a reduce below them can be
# computed inside the consuming kernel without recomputation (EXPAND and WINDOW re-read, so they break). PAD
# breaks too: a reduce under it would run at clamped indices for every border element and be thrown away, and a
# realized pad (conv2d's padded input, jit/frontend/nn_ops.py) must stay a cheap copy of the reduce's buffer
_KEEPS_DIRECT = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP,
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


def _reads_input(u: UOp, boundaries: set[UOp]) -> bool:
    """Whether ``u`` is more than a constant, possibly viewed through movement ops (a buffer, another kernel's
    output, or values computed from them)."""
    while u.op in GroupOp.Movement and u not in boundaries:
        u = u.src[0]
    return u.op is not Ops.CONST


def _extends_epilogue(s: UOp, boundaries: set[UOp]) -> bool:
    """Whether source ``s`` belongs to the epilogue above it: elementwise (or a reshape, a shrink) and no kernel
    output. A shrink keeps an epilogue one: a Winograd conv's overhanging tiles are shrunk off before its bias."""
    return (s.op in GroupOp.Elementwise or s.op in (Ops.RESHAPE, Ops.SHRINK)) and s not in boundaries


def _epilogue_walk(node: UOp, boundaries: set[UOp]) -> tuple[set[UOp], list[UOp]]:
    """The nodes under ``node`` that extend its epilogue (``_extends_epilogue``; ``node`` included), and the sources
    they read that do not (reduces, buffers, other movement ops, kernel outputs)."""
    seen, stack, leaves = set(), [node], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for s in n.src:
            if _extends_epilogue(s, boundaries):
                stack.append(s)
            else:
                leaves.append(s)
    return seen, leaves


class _EpilogueReads:
    """For one set of kernel outputs: what each node's epilogue (``_epilogue_walk``) reads, found once per node,
    bottom up, and kept (a walk per node cost time quadratic in a chain's length, once per kernel reading it)."""

    def __init__(self, boundaries: set[UOp]) -> None:
        self.boundaries = boundaries
        self._reads: dict[UOp, tuple[bool, bool]] = {}  # node -> (reads a reduce kernel, reads another input)
        self._stats: dict[UOp, list[UOp]] = {}

    def costs_loads(self, node: UOp) -> bool:
        """Whether a REDUCE_AXIS output is among the epilogue's sources and so is another input (a bias, BN
        parameters, a residual): ``node`` is an epilogue that costs loads to recompute. Else it is not one (a bare
        activation or a NaN-safe max is cheaper to recompute per read than to store in a kernel of its own)."""
        b, reads = self.boundaries, self._reads
        stack = [node]
        while stack:
            n = stack[-1]
            if n in reads:
                stack.pop()
                continue
            pending = [s for s in n.src if s not in reads and _extends_epilogue(s, b)]
            if pending:
                stack += pending
                continue
            stack.pop()
            reduced = other = False
            for s in n.src:
                if _extends_epilogue(s, b):
                    r, o = reads[s]
                else:
                    r = s.op is Ops.REDUCE_AXIS and s in b
                    o = not r and _reads_input(s, b)
                reduced, other = reduced or r, other or o
            reads[n] = (reduced, other)
        return all(reads[node])

    def row_statistics(self, node: UOp) -> list[UOp]:
        """The reduce outputs whose results the epilogue broadcasts over its rows (through an EXPAND)."""
        if node not in self._stats:
            stats: list[UOp] = []
            for leaf in _epilogue_walk(node, self.boundaries)[1]:
                if leaf.op is Ops.EXPAND:  # a statistic broadcast over the row: the reduces it is computed from
                    src = leaf.src[0]
                    under = [src] if src in self.boundaries else _epilogue_walk(src, self.boundaries)[1]
                    stats += [u for u in under if u.op is Ops.REDUCE_AXIS and u in self.boundaries]
            self._stats[node] = stats
        return self._stats[node]

    def under_others(self, tops: set[UOp]) -> set[UOp]:
        """The nodes that extend the epilogue of some node of ``tops`` below it (one walk for all of them)."""
        seen: set[UOp] = set()
        stack = [s for n in tops for s in n.src if _extends_epilogue(s, self.boundaries)]
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack += [s for s in n.src if _extends_epilogue(s, self.boundaries)]
        return seen


def _row_normalization(node: UOp, reads: list[UOp], stats: list[UOp]) -> bool:
    """Whether epilogue ``node`` shifts or scales rows by a statistic (``stats``: ``_EpilogueReads.row_statistics``)
    of the very rows the kernel's reduces (``reads``, each over an input of ``node``'s shape) walk: softmax's
    ``exp(x - max)`` under its sum, a layer norm's ``x - mean`` under its variance. Each element is then evaluated
    once there, not once per read: fused, it costs no recomputation, where a kernel of its own costs a store, a
    reload and a dispatch."""
    return bool(stats and reads) and all(r.src[0].shape == node.shape and r.arg[1] == s.arg[1]
                                         and r.src[0].shape == s.src[0].shape for r in reads for s in stats)


def _recomputed_epilogues(boundaries: set[UOp]) -> set[UOp]:
    """Elementwise epilogues of reduces (bias, BN, activation, residual add) that a reduce kernel reads at
    other indices than its own: left fused there, each is recomputed on every read (a 3x3 conv reads each input
    element 9 x output-channels times). Each becomes a kernel output instead, so it runs once as the epilogue of
    the producing reduce; only the topmost node of each such chain in each kernel. A row normalization under a
    reduce over the same rows (``_row_normalization``) stays fused: that reduce evaluates it once per element."""
    out: set[UOp] = set()
    epilogues = _EpilogueReads(boundaries)
    for k in boundaries:
        region = _kernel_region(k, boundaries)
        if k.op is not Ops.REDUCE_AXIS and not any(n.op is Ops.REDUCE_AXIS and n not in boundaries
                                                   for n, _ in region):
            continue
        reads = [k] * (k.op is Ops.REDUCE_AXIS) + [n for n, _ in region if n.op is Ops.REDUCE_AXIS
                                                   and n not in boundaries]
        chains = {n for n, direct in region if not direct and n.op in GroupOp.Elementwise and n not in boundaries
                  and epilogues.costs_loads(n) and not _row_normalization(n, reads, epilogues.row_statistics(n))}
        out |= chains - epilogues.under_others(chains)
    return out


def find_boundaries(targets: list[UOp]) -> list[UOp]:
    """Every node that becomes a kernel output, in execution order: the realize targets, CONTIGUOUS nodes and
    shared reduces, closed (``_close_boundaries``) and grown by the epilogues (``_recomputed_epilogues``) and
    producers (jit/schedule/fusion_cost.py) a reduce kernel would recompute per read, until stable."""
    order = toposort(targets)
    rank = {n: i for i, n in enumerate(order)}
    users: dict[UOp, int] = {}
    for node in order:
        for s in node.src:
            users[s] = users.get(s, 0) + 1
    base = {t for t in targets if not is_view_of_buffer(t)}
    base |= {n for n in order if n.op is Ops.CONTIGUOUS}
    base |= {n for n in order if n.op is Ops.REDUCE_AXIS and users.get(n, 0) > 1}
    forced: set[UOp] = set()
    known: dict[tuple[UOp, ...], set[UOp]] = {}  # dear_producers' answers by kernel, kept between rounds
    while True:  # epilogues made outputs change which reduces are read indirectly: close again until stable
        boundaries = _close_boundaries(base | forced, rank)
        extra = _recomputed_epilogues(boundaries) | dear_producers(boundaries, known)
        extra = (extra | pieces_to_compute(boundaries) if STORE_VIEWS else extra) - forced
        if not extra:
            return [n for n in order if n in boundaries]
        forced |= extra


def _epilogue_of_reduce(node: UOp, boundaries: set[UOp]) -> bool:
    """Whether elementwise ``node`` computes from a reduce not yet a kernel of its own, through elementwise (and
    reshape) nodes only: the epilogue of that reduce (and of any other reduce it adds in)."""
    return any(s.op is Ops.REDUCE_AXIS and s not in boundaries for s in _epilogue_walk(node, boundaries)[1])


def _close_boundaries(start: set[UOp], rank: dict[UOp, int]) -> set[UOp]:
    """``start`` plus every reduce some kernel reads at another index than its own output's. A padded reduce
    epilogue (a conv's bias + activation, padded for the next conv) becomes a kernel as a whole, its reduces
    fused into it, instead of each reduce alone with the epilogue recomputed by the pad's reader; so does a
    concat whose merged planes a copy pads (``_below_merged_planes``), which its pieces then store into. Kernels are
    walked in graph order (``rank``: a node's place in the toposort): which one claims a shared epilogue first
    decides the result, and a set's order differs between processes (UOps hash by identity)."""
    boundaries = set(start)
    work = sorted(boundaries, key=rank.__getitem__)
    while work:
        k = work.pop()
        for node, direct in _kernel_region(k, boundaries):
            if node.op is Ops.PAD and (epi := _below_merged_planes(node.src[0])) not in boundaries and \
                    epi.op in GroupOp.Elementwise and (_epilogue_of_reduce(epi, boundaries) or
                                                       epi is not node.src[0] and is_concat(epi)):
                boundaries.add(epi)
                work += [epi, k]  # k's region changed: walk it again
                break
            if node.op is Ops.REDUCE_AXIS and not direct and node not in boundaries:
                boundaries.add(node)
                work.append(node)
    return boundaries


def _below_merged_planes(node: UOp) -> UOp:
    """The source of ``node`` where it is a RESHAPE merging its source's last dims into one, else ``node``: a
    plane-aligned copy (jit/frontend/row_align.py) pads its input's merged planes, and that input (a conv's
    epilogue, or a concat of them: squeezenet's fire modules) is then a kernel output whose producers store into
    the copy (jit/schedule/padded_stores.py)."""
    src = node.src[0] if node.op is Ops.RESHAPE else node
    return src if node.shape is not None and src.shape is not None and merges_last_dims(src.shape, node.shape) \
        else node


def _computes_a_reduce(node: UOp, boundaries: set[UOp]) -> bool:
    """Whether ``node``'s kernel computes a reduce: ``node`` is one, or its epilogue (elementwise and reshapes)."""
    return node.op is Ops.REDUCE_AXIS or ((node.op in GroupOp.Elementwise or node.op is Ops.RESHAPE) and
                                         _epilogue_of_reduce(node, boundaries))


def create_schedule(targets: list[UOp], device: str) -> tuple[list[ScheduledKernel], dict[UOp, UOp]]:
    """Kernels computing ``targets`` in order, and the map from every computed node to its buffer view."""
    # reuse what earlier realizes computed
    known = {n: realized[n] for n in toposort(targets) if n in realized}
    graph = [_substitute_stopping(t, known) if known else t for t in targets]
    roots = set(graph)  # the values asked for: their buffers keep the values' own layout
    kernels: list[ScheduledKernel] = []
    views: dict[UOp, UOp] = {}
    boundaries = find_boundaries(graph)
    concats = find_concats(boundaries, set(graph)) if STORE_VIEWS else {}
    slices = {p.value: (c, p) for c in concats.values() for p in c.pieces if p.value in c.stored}
    padded = find_padded_copies(boundaries, set(graph) | set(slices)) if STORE_VIEWS else {}
    padded = {a: p for a, p in padded.items() if p.copy not in slices}  # a buffer is one concat's or one copy's
    borders = {p.copy: p for p in padded.values()}
    filled: set[UOp] = set()  # padded copies zeroed whole before their producer (no border kernel after it)
    line = Device[device].limits.l1.line if padded else 0
    boundary_set = set(boundaries)
    stored_channels_last: set[UOp] = set()

    def add(node: UOp, body: UOp, buf: UOp, lowered: tuple[UOp, LoweringContext],
            zero_layout: tuple[object, ...] | None = None) -> None:
        assert node.shape is not None
        ast, ctx = lowered
        kernels.append(ScheduledKernel(kernel_name(node.shape, ctx.reduce_dims), ast, buf, _params(ctx), device,
                                       names_in(toposort([body])), zero_layout))

    def concat_buffer(top: UOp) -> UOp:
        if top not in views:
            assert top.shape is not None and isinstance(top.dtype, DType)
            if (copy := padded.get(top)) is not None:  # the concat is the interior of a padded copy
                views[top] = copy.interior_view(copy_buffer(copy, top.dtype))
            else:
                buf = new_buffer(device, top.dtype, math.prod(top.shape))
                view = channels_last_concat(concats[top], buf, device) if top not in roots else None
                views[top] = view if view is not None else buffer_view(buf, top.shape)
                if view is not None:
                    stored_channels_last.add(top)
        return views[top].base

    def copy_buffer(copy: PaddedCopy, dtype: DType) -> UOp:
        """The buffer of padded copy ``copy``, at its shape, zeroed whole before its producer where that pays."""
        assert copy.copy.shape is not None
        buf = new_buffer(device, dtype, math.prod(copy.copy.shape))
        views[copy.copy] = buffer_view(buf, copy.copy.shape)
        if copy.zero_fill_pays(dtype.itemsize, line):
            add(copy.copy, copy.copy, buf, lower_zero_fill(buf, dtype, math.prod(copy.copy.shape)), copy.layout)
            filled.add(copy.copy)
        return views[copy.copy]

    for node in boundaries:
        assert node.shape is not None and isinstance(node.dtype, DType)
        if (border := borders.get(node)) is not None:  # its producer wrote the interior into its buffer
            if node in filled:  # zeroed whole before the producer ran
                continue
            buf = views[node].base
            add(node, node, buf, lower_border(border.padded_view(views[node]), border.pads, buf, border.inner_dims()),
                border.layout)
            continue
        if (concat := concats.get(node)) is not None:  # its pieces' kernels wrote their slices
            buf = concat_buffer(node)
            for piece in concat.pieces:
                if piece.value not in concat.stored and math.prod(piece.value.shape or ()):
                    body = _substitute_stopping(piece.value, views)
                    add(piece.value, body, buf, lower_kernel(body, buf, piece.slice_view(views[node])))
            continue
        size = math.prod(node.shape)
        copy, piece_of = padded.get(node), slices.get(node)
        if piece_of is not None:
            buf = concat_buffer(piece_of[0].top)
            views[node] = piece_of[1].slice_view(views[piece_of[0].top])
        elif copy is not None:
            views[node] = copy.interior_view(copy_buffer(copy, node.dtype))
            buf = views[node].base
        else:
            buf = new_buffer(device, node.dtype, size)
            views[node] = buffer_view(buf, node.shape)
        if size:
            body = _substitute_stopping(node, views)
            lowered = lower_kernel(body, buf, None if is_view_of_buffer(views[node]) else views[node])
            # a conv's output tiled across channels: stored channels-last, read through the view (channels_last.py),
            # and an elementwise value over such outputs with them (channels_last.py ``follows_channels_last``)
            if STORE_VIEWS and piece_of is None and copy is None and node not in roots:
                reduces = _computes_a_reduce(node, boundary_set)
                if reduces:
                    view = channels_last_view(node, buf, lowered[0], device)
                elif follows_channels_last(node, stored_channels_last, boundary_set):
                    view = channels_last_layout(node, buf, device)
                else:
                    view = None
                if view is not None:
                    views[node] = view
                    stored_channels_last.add(node)
                    lowered = lower_kernel(body, buf, view)
                elif reduces and (row_width := aligned_row_width(node.shape, node.dtype, device)) is not None:
                    buf = new_buffer(device, node.dtype, aligned_rows_size(node.shape, row_width))
                    views[node] = aligned_rows_view(buf, node.shape, row_width)
                    lowered = lower_kernel(body, buf, views[node])
            add(node, body, buf, lowered)
    becomes: dict[UOp, UOp] = dict(known)
    for original, rebuilt in zip(targets, graph, strict=True):
        becomes[original] = views.get(rebuilt, rebuilt)
    becomes.update(views)
    return kernels, becomes


def _params(ctx: LoweringContext) -> list[UOp]:
    return [buf for buf, _ in sorted(ctx.params.items(), key=lambda kv: kv[1])]
