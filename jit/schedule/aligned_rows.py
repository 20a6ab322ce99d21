"""Reduce kernels' outputs stored with rows padded to whole cache lines.

Before: a reduce kernel's output (..., W) stored plainly, rows of W values back to back. Where a row is not a whole
number of cache lines, most rows start inside a line, and where the target's widest vector is a whole line
(AVX-512's 16 float32 lanes), each vector the kernel stores along such a row splits across two lines, which costs
about two stores and, for an output larger than the caches, two lines fetched for ownership: squeezenet's stem
writes 64 x 111 x 111 floats in 111-wide rows.

After: the value is stored into a buffer of rows padded to ``aligned_row_width`` values, through a view of each
row's first W (a reshape to the padded rows, then a shrink), and every reader reads it through the same view, so
the values read are exactly the ones stored. The pad after each row is never written nor read. Taken only where
that pads each row by at most 1 / ``ROW_PAD_MAX_FRACTION`` of it (squeezenet's 111-wide rows by 1, not its 55-wide
ones by 9), for a kernel output no realize asked for by itself (a capture's outputs keep their own layout) and
stored in the plain layout (not channels-last, jit/schedule/channels_last.py: those rows are channels).
"""

from __future__ import annotations

import math

from jit.codegen.opt import target_vector_width
from jit.common.dtype import DType
from jit.ir.uop import Ops, UOp
from targets.registry import Device

# a row is padded only where its pad is at most this fraction of it (memory and the bytes a reader walks)
ROW_PAD_MAX_FRACTION = 8


def _row_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` up to its last dim longer than one, the row (a reduce's own node keeps its reduced dims as ones)."""
    last = max((i for i, d in enumerate(shape) if d != 1), default=-1)
    return shape[:last + 1]


def aligned_row_width(shape: tuple[int, ...], dtype: DType, device: str) -> int | None:
    """The padded width of the rows of a value of ``shape`` stored on ``device`` (module docstring), or None: the
    target's widest vector is not a whole cache line, there is one row, the rows are a whole number of lines
    already, or the pad would be more than 1 / ``ROW_PAD_MAX_FRACTION`` of the row."""
    dims = _row_dims(shape)
    if len(dims) < 2 or math.prod(dims[:-1]) < 2:
        return None
    target = Device[device]
    line, width = target.limits.l1.line, dims[-1]
    if line % dtype.itemsize or target_vector_width(target) * dtype.itemsize != line:
        return None
    per_line = line // dtype.itemsize
    padded = -(-width // per_line) * per_line
    return padded if padded != width and (padded - width) * ROW_PAD_MAX_FRACTION <= width else None


def aligned_rows_size(shape: tuple[int, ...], padded: int) -> int:
    """Elements of the buffer holding a value of ``shape`` in rows of ``padded``."""
    dims = _row_dims(shape)
    return math.prod(dims[:-1]) * padded


def aligned_rows_view(buf: UOp, shape: tuple[int, ...], padded: int) -> UOp:
    """``buf`` (rows of ``padded`` values) as the value of ``shape`` its rows' first values hold."""
    dims = _row_dims(shape)
    rows = UOp(Ops.RESHAPE, buf.dtype, (buf,), (*dims[:-1], padded))
    view = UOp(Ops.SHRINK, buf.dtype, (rows,), tuple((0, d) for d in dims))
    return view if dims == shape else UOp(Ops.RESHAPE, buf.dtype, (view,), shape)
