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
from jit.ir.uop import Ops, UOp, toposort

VECTOR_DTYPES: frozenset[DType] = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8,
                                             dtypes.uint16, dtypes.uint32, dtypes.float32})
MIN_LANES = 4
# lanes of a row whose loads are addressed by data (a warp's sampled pixels, a lookup): each lane's index is moved
# out of the index vector on its own, which past one 256-bit register of int32 indices goes through an extra
# cross-lane extract per lane, so wider vectors cost more than they save
MAX_DATA_GATHER_LANES = 8


def addressed_by_data(idx: UOp) -> bool:
    """Whether address ``idx`` is computed from loaded values: a LOAD or a float-to-int conversion feeds it."""
    return any(u.op is Ops.LOAD or (u.op is Ops.CAST and isinstance(d := u.src[0].dtype, DType) and d.is_float)
               for u in toposort([idx]))


def choose_lanes(sink: UOp, plan: TilePlan, opts: OptOptions, width: int) -> int:
    """The widest power-of-two lane count <= ``width`` (and <= the plan's ``max_lanes``, and <=
    ``MAX_DATA_GATHER_LANES`` where a load the row depends on is addressed by data) dividing the plan's tile row,
    if every value that depends on the row has a ``VECTOR_DTYPES`` dtype (void STOREs and pointers aside); 0 when
    vectors are off or unfit."""
    if not opts.vectorize or width < MIN_LANES:
        return 0
    inner, u = plan.upcasts[0]
    deps = range_deps(sink)
    if width > MAX_DATA_GATHER_LANES and any(n.op is Ops.LOAD and inner in d and addressed_by_data(n.src[0].src[1])
                                             for n, d in deps.items()):
        width = MAX_DATA_GATHER_LANES
    lanes = 1 << (min(width, u, plan.max_lanes or width).bit_length() - 1)
    while lanes >= MIN_LANES and u % lanes:
        lanes //= 2
    if lanes < MIN_LANES:
        return 0
    for node, node_deps in deps.items():
        if inner in node_deps and isinstance(node.dtype, DType) and node.dtype != dtypes.void \
                and node.dtype not in VECTOR_DTYPES:
            return 0
    return lanes
