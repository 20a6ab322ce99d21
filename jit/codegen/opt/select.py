"""Unrolling the small output axes an elementwise kernel selects between (a ``cat`` / ``stack`` axis).

Before: an elementwise kernel (no REDUCE) with an output RANGE r of at most ``MAX_SELECT`` values that some index
comparison depends on alone (``Tensor.cat`` pads each piece and selects it by ``r``'s position: a WHERE per
piece). Run as a loop, every output evaluates every piece and selects one: a stack of p pieces costs p times the
work. After: each such axis is replaced by its constant values, one copy of the STOREs per value (all of them
together at most ``MAX_COPIES``), so the symbolic pass that follows decides every selecting comparison, folds
each WHERE to its one live piece, and each copy computes only its own piece (Winograd's transforms: a stack of
sums with constant coefficients, zero terms never built). Each output is stored once with the same value.
"""

from __future__ import annotations

import itertools
import math

from jit.codegen.opt.peel import index_masks
from jit.codegen.opt.tiling import tile_sink
from jit.codegen.stats import range_deps
from jit.ir.uop import Ops, UOp, toposort

MAX_SELECT = 9  # a stack of more pieces than this is not unrolled (a stride-2 Winograd tile has 9)
MAX_COPIES = 81  # the product of the unrolled axes' sizes: 9 x 9 (a stride-2 Winograd tile) fits


def selector_axes(sink: UOp) -> list[UOp]:
    """The output ranges of an elementwise kernel that some index comparison depends on alone, small enough to
    unroll (module docstring), outermost first; [] for reduce kernels or when none qualifies."""
    nodes = toposort([sink])
    if any(u.op is Ops.REDUCE for u in nodes):
        return []
    deps = range_deps(sink)
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    axes = [r for r in outs if int(r.src[0].arg) <= MAX_SELECT
            and any(deps[m] == frozenset({r}) for m in index_masks(nodes, r, deps))]
    while axes and math.prod(int(r.src[0].arg) for r in axes) > MAX_COPIES:
        axes.pop(0)  # keep the innermost: their pieces are the nearest in memory
    return axes


def unroll_selector_axes(sink: UOp) -> UOp:
    """``sink`` with every ``selector_axes`` range replaced by its values, one copy of the STOREs each (innermost
    axis fastest, so adjacent copies store near each other); the same node when there is none."""
    axes = selector_axes(sink)
    if not axes:
        return sink
    maps = [{r: r.const_like(v) for r, v in zip(axes, values, strict=True)}
            for values in itertools.product(*(range(int(r.src[0].arg)) for r in axes))]
    return tile_sink(sink, tuple(axes), maps)
