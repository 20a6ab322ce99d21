"""Weight layouts for products with a weight-only matrix (jit/frontend/nn_ops.py ``matmul``): which matrices are
stored in column blocks or as plain rows instead of as the model holds them. Each is a weight-only copy read back
through a view, so a capture folds it into the stored weights and a replay pays nothing for it; an eager call (or a
matrix computed from inputs, which never takes one) would copy every time.
"""

from __future__ import annotations

from jit.codegen.opt.options import DEFAULT_OPTS
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops

# A tile of a product's output row is at most 64 wide (OptOptions.wide_upcasts) and its reduce reads a row of b
# per step. Read in place, that is 256 bytes from a row 4*m bytes long: the tile's weights are lines a whole row
# apart, which the L2 set-associativity cannot hold for a long k (a 2048 x 256 matrix: 2048 rows 1 KB apart map to
# a sixteenth of the sets) and every row-tile of the output streams them again from memory. Stored as
# (m/64, k, 64) blocks, a 64-wide tile streams one contiguous block and a narrower one part of each of its rows
# (a 32-wide tile's index splits at the block: jit/codegen/passes/symbolic.py ``_split_at_block``): the policy's
# 3204x512 matrix-vector product 0.42 -> 0.13 ms, a 25-token transformer's 2048 -> 256 feed-forward about 1.5x
# faster (benchmarks/bench_zoo.py).
WEIGHT_BLOCK = DEFAULT_OPTS.wide_upcasts[0]
WEIGHT_BLOCK_MIN = 1 << 16  # weights (elements) from which a product stores them blocked
WEIGHT_BLOCK_MAX_PAD = 1 / 8  # zero columns added to fill the last block, as a share of m


# a transposed weight-only matrix this large (elements) is copied to (k, m) rows; below, the conformance tests'
# small Gemms keep their single kernel
TRANSPOSED_COPY_MIN = 1 << 12


def weight_block_columns(b: Tensor, k: int, m: int) -> int:
    """The column count (m rounded up to whole blocks) a product with weight matrix ``b`` (k, m) stores its
    weights blocked at, or 0 to read ``b`` as it is: only a large 2-D weight-only ``b`` (a capture folds the copy
    into the stored weights; for an activation it would be a copy per call)."""
    padded = -(-m // WEIGHT_BLOCK) * WEIGHT_BLOCK
    if b.ndim != 2 or m < WEIGHT_BLOCK or k * m < WEIGHT_BLOCK_MIN:
        return 0
    return padded if padded - m <= m * WEIGHT_BLOCK_MAX_PAD and weight_only(b) else 0


def weight_only(t: Tensor) -> bool:
    """Whether every buffer ``t`` reads already holds data (weights), as opposed to a capture's input placeholders,
    which no kernel has written yet."""
    from jit.realize import holds_data
    return all(holds_data(u) for u in t.uop.toposort() if u.op is Ops.BUFFER)


def blocked_columns(b: Tensor, columns: int) -> Tensor:
    """``b`` (k, m) zero-padded to ``columns`` and stored as contiguous (columns/64, k, 64) blocks, read back as
    (k, columns)."""
    k, m = b.shape
    padded = b.pad(((0, 0), (0, columns - m))) if columns > m else b
    blocks = padded.reshape(k, columns // WEIGHT_BLOCK, WEIGHT_BLOCK).permute(1, 0, 2).contiguous()
    return blocks.permute(1, 0, 2).reshape(k, columns)
