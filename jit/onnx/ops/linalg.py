"""ONNX linear algebra ops: Gemm, MatMul, Einsum and Det."""

from __future__ import annotations

import math

from jit.common.dtype import dtypes
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.nn_helpers import einsum
from jit.onnx.registry import OpContext, onnx_op


@onnx_op("Gemm")
def gemm(ctx: OpContext) -> Tensor:
    a, b, c = ctx.t(0), ctx.t(1), ctx.opt(2)
    out = a.gemm(b.cast(a.dtype), c.cast(a.dtype) if c is not None else None, float(ctx.attr("alpha", 1.0)),
                 float(ctx.attr("beta", 1.0)), bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0)))
    return out.cast(a.dtype)


@onnx_op("MatMul")
def matmul(ctx: OpContext) -> Tensor:
    a, b = ctx.t(0), ctx.t(1)
    return a.matmul(b.cast(a.dtype))


@onnx_op("Einsum")
def einsum_(ctx: OpContext) -> Tensor:
    ops = [ctx.t(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    return einsum(str(ctx.attr("equation")), ops)


@onnx_op("Det")
def det(ctx: OpContext) -> Tensor:
    """Determinant of (..., n, n) by Gaussian elimination with partial pivoting, unrolled over n."""
    x = ctx.t(0)
    *batch, n, m = x.shape
    if n != m:
        raise ShapeError(f"{ctx.where()}: input expected square matrices, got shape {x.shape}")
    cd = dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32
    b = math.prod(batch)
    a = x.cast(cd).reshape(b, n, n)
    result = Tensor.ones(b, dtype=cd, device=x.device)
    for k in range(n):
        size = n - k
        col = a[:, :, 0].abs()  # (b, size)
        piv = col.argmax(1, keepdim=True).cast(dtypes.int32)  # first maximum
        sel = (Tensor.arange(size, dtype=dtypes.int32, device=x.device).reshape(1, size) == piv)  # (b, size)
        sel_f = sel.cast(cd).unsqueeze(-1)
        prow = (sel_f * a).sum(1)  # (b, size): the pivot row
        first = a[:, 0]
        swapped = a + sel_f * (first - prow).unsqueeze(1)  # the pivot's old slot takes row 0
        pivot = prow[:, 0]
        sign = sel[:, 0].where(1.0, -1.0).cast(cd)
        result = (result * pivot * sign).contiguous()
        if size == 1:
            break
        rest = swapped[:, 1:]  # (b, size-1, size)
        safe = (pivot == 0.0).where(1.0, pivot).cast(cd)
        factor = rest[:, :, 0] / safe.unsqueeze(-1)
        a = (rest[:, :, 1:] - factor.unsqueeze(-1) * prow[:, 1:].unsqueeze(1)).contiguous()
    return result.reshape(tuple(batch)).cast(x.dtype)
