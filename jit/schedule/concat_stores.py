"""Concats written in place: each piece's kernel stores straight into its slice of the concat's buffer, and the
concat's own kernel (a pass over memory copying every piece) is gone.

A concat the fusion cost model stores (jit/schedule/fusion_cost.py ``concat_tops``: squeezenet's fire modules,
shufflenet's channel splits) is a kernel of its own whose pieces are mostly reduce epilogues (a conv's bias and
activation). Here each such piece becomes a kernel output and its STORE goes through its slice of the concat's
buffer (jit/schedule/lower.py ``lower_kernel``'s ``store_view``); a piece no kernel computes (an input, a view of a
buffer) is copied into its slice by a kernel of its own. Taken only where at most one piece needs such a copy, so
the schedule has no more kernels than before.

What holds for a ``Concat`` (``find_concats``): ``top`` is ``Tensor.cat``'s select chain (jit/frontend/movement.py
``cat``), each select's mask an all-true PAD with its piece's pads, each piece a PAD along one axis; the pieces'
slices tile that axis exactly. So the concat's value at every element is exactly one piece's, and storing each
piece into its slice gives every element once.
"""

from __future__ import annotations

from dataclasses import dataclass

from jit.ir.uop import GroupOp, Ops, UOp


@dataclass(frozen=True)
class Piece:
    """``value`` fills ``[offset, offset + value.shape[axis])`` of the concat along ``axis``."""

    value: UOp
    axis: int
    offset: int

    def slice_view(self, concat: UOp) -> UOp:
        """This piece's part of the concat's buffer, ``concat`` (that buffer viewed at the concat's shape)."""
        assert self.value.shape is not None
        bounds = tuple((self.offset, self.offset + n) if i == self.axis else (0, n)
                       for i, n in enumerate(self.value.shape))
        return UOp(Ops.SHRINK, concat.dtype, (concat,), bounds)


def _is_all_true(mask: UOp) -> bool:
    node = mask
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.CONST and node.arg is True


def _piece(pad: UOp) -> Piece | None:
    """The piece a concat's PAD places, or None where it is no PAD of exactly one axis."""
    if pad.op is not Ops.PAD:
        return None
    padded = [i for i, p in enumerate(pad.arg) if p != (0, 0)]
    return Piece(pad.src[0], padded[0], pad.arg[padded[0]][0]) if len(padded) == 1 else None


def concat_pieces(top: UOp) -> list[Piece] | None:
    """The pieces of ``Tensor.cat``'s select chain ``top`` in order, or None where ``top`` is no such chain."""
    pieces: list[Piece] = []
    node = top
    while node.op is Ops.WHERE and node.src[0].op is Ops.PAD and node.src[1].op is Ops.PAD:
        mask, pad, node = node.src
        piece = _piece(pad)
        if piece is None or mask.arg != pad.arg or not _is_all_true(mask.src[0]):
            return None
        pieces.append(piece)
    first = _piece(node) if pieces else None
    if first is None or top.shape is None:
        return None
    pieces = [first, *reversed(pieces)]
    offset = 0
    for p in pieces:
        assert p.value.shape is not None
        if p.axis != first.axis or p.offset != offset or p.value.dtype != top.dtype:
            return None
        offset += p.value.shape[p.axis]
    return pieces if offset == top.shape[first.axis] else None


def computes_a_reduce(node: UOp, boundaries: set[UOp]) -> bool:
    """Whether ``node`` is a reduce or a reduce's elementwise epilogue not yet a kernel output of its own: a kernel
    computing it into its slice replaces a kernel storing the reduce elsewhere."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.REDUCE_AXIS:
            return True
        if n is node or (n not in boundaries and (n.op in GroupOp.Elementwise or n.op is Ops.RESHAPE)):
            stack.extend(n.src)
    return False


@dataclass(frozen=True)
class Concat:
    """A concat whose ``stored`` pieces' kernels write their slices; the others are copied in by kernels of their
    own."""

    top: UOp
    pieces: tuple[Piece, ...]
    stored: frozenset[UOp]


def find_concats(boundaries: list[UOp], keep: set[UOp]) -> dict[UOp, Concat]:
    """The concats among the kernel outputs ``boundaries`` written in place (module docstring), by top: a piece is
    stored by its own kernel where it is a kernel output no realize asked for (``keep``) and no other piece
    claims."""
    computed, claimed = set(boundaries), set()
    found: dict[UOp, Concat] = {}
    for top in boundaries:
        pieces = concat_pieces(top) if top.op is Ops.WHERE else None
        if pieces is None:
            continue
        stored: set[UOp] = set()
        for p in pieces:  # a piece that is a concat itself (densenet's growing features) writes its own buffer
            if p.value in computed and p.value not in keep and p.value not in claimed and p.value not in stored \
                    and concat_pieces(p.value) is None:
                stored.add(p.value)
        if len(pieces) - len(stored) <= 1:
            claimed |= stored
            found[top] = Concat(top, tuple(pieces), frozenset(stored))
    return found


def pieces_to_compute(boundaries: set[UOp]) -> set[UOp]:
    """The pieces of the concats among ``boundaries`` that compute a reduce (``computes_a_reduce``), where at most
    one piece would then be left to copy: made kernel outputs, each stores into its slice from the reduce's
    kernel."""
    out: set[UOp] = set()
    for top in boundaries:
        pieces = concat_pieces(top) if top.op is Ops.WHERE else None
        if pieces is None:
            continue
        new = {p.value for p in pieces if p.value not in boundaries and computes_a_reduce(p.value, boundaries)}
        if sum(p.value not in boundaries and p.value not in new for p in pieces) <= 1:
            out |= new
    return out
