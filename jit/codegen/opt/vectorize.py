"""Which tiles become vectors: the lane count for a tile row, or 0 to keep plain scalar copies.

A tile row of ``u`` contiguous outputs is rendered as ``u // lanes`` values of a ``lanes``-wide vector type when
the target's language declares vector types (``CStyleLanguage.vector_width``): contiguous loads and stores become
single vector loads/stores and the arithmetic one vector instruction per op, instead of relying on the C
compiler to discover the vectors in ``u`` unrolled scalar copies (it does not when loads are masked or strided).

What holds: the choice never changes results. Every value depending on the tile row is one of the dtypes below,
which every C-style language here has a vector type of; the renderer computes ops it has no vector spelling for
lane by lane with the scalar expression.
"""

from __future__ import annotations

from jit.codegen.opt.options import OptOptions
from jit.codegen.opt.tiling import TilePlan
from jit.codegen.stats import range_deps
from jit.common.dtype import DType, dtypes
from jit.ir.uop import UOp

VECTOR_DTYPES: frozenset[DType] = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8,
                                             dtypes.uint16, dtypes.uint32, dtypes.float32})
MIN_LANES = 4


def choose_lanes(sink: UOp, plan: TilePlan, opts: OptOptions, width: int) -> int:
    """The widest power-of-two lane count <= ``width`` (and <= the plan's ``max_lanes``) dividing the plan's tile
    row, if every value that depends on the row has a ``VECTOR_DTYPES`` dtype (void STOREs and pointers aside); 0
    when vectors are off or unfit."""
    if not opts.vectorize or width < MIN_LANES:
        return 0
    inner, u = plan.upcasts[0]
    lanes = 1 << (min(width, u, plan.max_lanes or width).bit_length() - 1)
    while lanes >= MIN_LANES and u % lanes:
        lanes //= 2
    if lanes < MIN_LANES:
        return 0
    for node, deps in range_deps(sink).items():
        if inner in deps and isinstance(node.dtype, DType) and node.dtype != dtypes.void \
                and node.dtype not in VECTOR_DTYPES:
            return 0
    return lanes
