"""Padded copies written by their producer: a kernel stores its output straight into the interior of the zero-padded
copy a conv reads, and the copy's kernel writes only the zero border.

conv2d materializes a padded input (jit/frontend/nn_ops.py ``_materialize_pad``; channels-last for a depthwise
conv over short rows): a kernel of its own that reads the producer's whole output and writes it again with the
border, a pass over memory as large as the activation (efficientnet_b0's 96 x 112 x 112 one costs about what the
1x1 conv producing it does). Here the producer's STORE goes through the copy's view of the same buffer instead
(jit/schedule/lower.py ``lower_kernel``'s ``store_view``), and the copy's kernel becomes ``lower_border``'s.

What holds for a ``PaddedCopy`` (``find_padded_copies``): the copy is a CONTIGUOUS whose source is movement ops,
RESHAPE and PERMUTE around exactly one PAD of the last two dims, over a node the same schedule computes into a
kernel output (a boundary) that no realize asked for by itself and no other copy claims. The copy's elements are
then the producer's, each once, at the positions ``interior_view`` names, and zero everywhere else (the border of
``padded_view``): the producer's kernel writing the first and the border kernel the second give every element of
the copy, and any other reader of the producer's value reads it back through ``interior_view``. Taken only where
the producer's stores stay whole vectors (``rows_stay_rows``, ``channels_last_over_short_rows``): a phase-split
copy (``_phase_split_conv``) or a channels-last one of a producer tiled along its rows would make them scatters,
which cost more than the copy saves.

Where the copy's rows are a few cache lines long (efficientnet's 8 x 16 stages under a 5x5 conv: rows of 20 floats),
the border touches every line of the buffer anyway, element by element; there a kernel zeroes the whole buffer with
vector stores before the producer writes the interior instead (``zero_fill_pays``, jit/schedule/kernels.py), which
also leaves the producer's stores lines already held. Capture keeps that fill with its producer
(jit/trace.py): it reads nothing, but a kept kernel writes the same buffer after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jit.codegen.opt.options import DEFAULT_OPTS
from jit.ir.uop import Ops, UOp, toposort

# padded rows at most this many cache lines long are zeroed whole before their producer runs (``zero_fill_pays``)
FILL_MAX_ROW_LINES = 3


@dataclass(frozen=True)
class PaddedCopy:
    """``copy`` (the CONTIGUOUS) = ``chain`` (movement ops, from the copy's source down to the producer's value)
    applied to ``producer``; ``chain[pad_at]`` is the PAD."""

    copy: UOp
    producer: UOp
    chain: tuple[UOp, ...]
    pad_at: int

    @property
    def pads(self) -> tuple[tuple[int, int], ...]:
        return self.chain[self.pad_at].arg

    @property
    def layout(self) -> tuple[object, ...]:
        """Equal for copies whose buffers are the same size with the zero border at the same bytes: the producer's
        shape and the movement ops between it and the copy (their ops, arguments and shapes), and the dtype."""
        return (str(self.copy.dtype), self.producer.shape, tuple((c.op.name, c.arg, c.shape) for c in self.chain))

    def padded_view(self, copy: UOp) -> UOp:
        """The PAD's output, as movement ops over the copy's buffer (``copy``: that buffer at the copy's shape)."""
        return _undo(copy, self.chain[:self.pad_at])

    def interior_view(self, copy: UOp) -> UOp:
        """The producer's value, as movement ops over the copy's buffer (``copy``: that buffer at the copy's shape):
        the padded view's interior."""
        pad = self.chain[self.pad_at]
        view = UOp(Ops.SHRINK, copy.dtype, (self.padded_view(copy),),
                   tuple((b, b + n) for (b, _), n in zip(pad.arg, pad.src[0].shape, strict=True)))
        return _undo(view, self.chain[self.pad_at + 1:])

    def zero_fill_pays(self, itemsize: int, line: int) -> bool:
        """Whether zeroing the copy's whole buffer before its producer writes the interior costs less than the border
        kernel after it: the copy keeps its rows (no channels-last layout), pads their sides, and they are at most
        ``FILL_MAX_ROW_LINES`` cache lines of ``line`` bytes long, so the border touches (nearly) every line of the
        buffer anyway, element by element, where a fill writes whole vectors."""
        bw, aw = self.pads[-1]
        shape = self.copy.shape
        return bool(bw + aw) and not self.inner_dims() and self.rows_stay_rows() and shape is not None and \
            shape[-1] * itemsize <= FILL_MAX_ROW_LINES * line

    def rows_stay_rows(self) -> bool:
        """Whether the producer's rows stay rows of the copy: nothing but the PAD (and reshapes that keep the last
        dim, or below the PAD merge the last dims into one) between them, so a tile's row vectors store as whole
        vectors (a merged plane is one row of the copy: a 1x1 conv's merged rows, jit/codegen/opt/merge.py)."""
        return all(n.op is Ops.PAD or (n.op is Ops.RESHAPE and n.shape is not None and n.src[0].shape is not None
                                       and (n.shape[-1] == n.src[0].shape[-1] or i > self.pad_at and
                                            merges_last_dims(n.src[0].shape, n.shape)))
                   for i, n in enumerate(self.chain))

    def channels_last_over_short_rows(self) -> bool:
        """Whether the copy is channels-last (the padded dims' leading dims innermost) and the producer's rows are
        too short for vectors, merged or not, which the optimizer then runs across channels (its tiling.py): those
        lanes are side by side in the copy, so its stores become whole vectors (they scatter into a plain
        output). A producer tiled along longer rows would scatter into the copy instead: it keeps its copy."""
        shape = self.producer.shape
        assert shape is not None
        lanes = DEFAULT_OPTS.channel_vector  # a 1x1 conv's rows merge (jit/codegen/opt/merge.py): both must be short
        return bool(self.inner_dims()) and shape[-1] % lanes != 0 and (shape[-2] * shape[-1]) % lanes != 0

    def inner_dims(self) -> tuple[int, ...]:
        """Leading dims of the PAD's output that the copy lays out inside the padded ones (a channels-last copy's
        channels), for the border kernel to run innermost; none where a RESHAPE above the PAD regroups them."""
        above = self.chain[:self.pad_at]
        if len(above) != 1 or above[0].op is not Ops.PERMUTE:
            return ()
        order = above[0].arg  # copy dim i is padded dim order[i]
        n = len(order)
        last = max(order.index(n - 2), order.index(n - 1))
        return tuple(d for d in order[last + 1:] if d < n - 2)


def merges_last_dims(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Whether ``after`` is ``before`` with its last dims merged into one."""
    keep = len(after) - 1
    return 0 <= keep < len(before) and before[:keep] == after[:keep] and math.prod(before[keep:]) == after[-1]


def _undo(view: UOp, chain: tuple[UOp, ...]) -> UOp:
    """``view`` (the value of ``chain[0]``) read back as the source of ``chain[-1]``: each RESHAPE and PERMUTE
    undone, from the top down (both are one-to-one)."""
    for node in chain:
        if node.op is Ops.PERMUTE:
            inverse = tuple(sorted(range(len(node.arg)), key=node.arg.__getitem__))
            view = UOp(Ops.PERMUTE, view.dtype, (view,), inverse)
        elif view.shape != node.src[0].shape:
            assert node.src[0].shape is not None
            view = UOp(Ops.RESHAPE, view.dtype, (view,), tuple(node.src[0].shape))
    return view


def find_padded_copies(boundaries: list[UOp], keep: set[UOp]) -> dict[UOp, PaddedCopy]:
    """Each producer whose padded copy it may write itself (module docstring), by producer. ``keep``: nodes a
    realize asked for, which keep buffers of their own. Only a producer the copy alone reads: another reader
    would read it at the copy's strides (a 1x1 conv's rows then no longer merge into one long row,
    jit/codegen/opt/merge.py: squeezenet's expand convs ran 2x slower)."""
    computed = set(boundaries)
    readers: dict[UOp, int] = {}
    for node in toposort(boundaries):
        for s in set(node.src):
            readers[s] = readers.get(s, 0) + 1
    found: dict[UOp, PaddedCopy] = {}
    for copy in boundaries:
        if copy.op is not Ops.CONTIGUOUS:
            continue
        chain: list[UOp] = []
        node = copy.src[0]
        while node.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.PAD) and node not in computed:
            chain.append(node)
            node = node.src[0]
        pads = [i for i, c in enumerate(chain) if c.op is Ops.PAD]
        if len(pads) != 1 or node not in computed or node in keep or node in found or readers[node] != 1 or \
                any(readers[c] != 1 for c in chain[1:]):
            continue
        pad = chain[pads[0]]
        if pad.shape is None or len(pad.shape) < 2 or any(p != (0, 0) for p in pad.arg[:-2]) or \
                node.dtype != copy.dtype:
            continue
        padded = PaddedCopy(copy, node, tuple(chain), pads[0])
        if padded.rows_stay_rows() or padded.channels_last_over_short_rows():
            found[node] = padded
    return found
