"""ONNX quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer linear
algebra on quantized operands (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from jit.common.dtype import DType, dtypes, least_upper_dtype
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.conv_attrs import auto_pads, kernel_shape, spatial_attrs
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.registry import OpContext, onnx_op

# --- quantize / dequantize -----------------------------------------------------------------------------
_QUANT_RANGE = {dtypes.uint8: (0, 255), dtypes.int8: (-128, 127), dtypes.uint16: (0, 65535),
                dtypes.int16: (-32768, 32767), dtypes.int32: (-(2 ** 31), 2 ** 31 - 1)}


def _quant_param(p: Tensor, x_shape: tuple[int, ...], axis: int, block_size: int) -> Tensor:
    """Reshape or replicate a scale / zero point so it broadcasts against ``x`` (per tensor, axis or block)."""
    if p.numel() == 1 or not x_shape:
        return p.reshape(())
    ax = axis % len(x_shape)
    if not block_size:
        return p.reshape(*[p.numel() if i == ax else 1 for i in range(len(x_shape))])
    s = p.shape[ax]
    rep = p.unsqueeze(ax + 1).expand(*p.shape[:ax + 1], block_size, *p.shape[ax + 1:])
    rep = rep.reshape(*p.shape[:ax], s * block_size, *p.shape[ax + 1:])
    return rep._slice_axis(ax, 0, x_shape[ax])


def quantize(x: Tensor, scale: Tensor, zero_point: Tensor | None, out: DType, precision: DType | None = None,
             saturate: bool = True) -> Tensor:
    """``saturate(round_half_even(x / scale) + zero_point)`` in ``out`` (scale / zero point pre-broadcast)."""
    p = precision or least_upper_dtype(x.dtype, scale.dtype)
    q = x.cast(p) / scale.cast(p)
    if out.is_float:  # float8 outputs: no rounding, a (saturating) conversion
        if zero_point is not None:
            q = q + zero_point.cast(p)
        if saturate:
            hi = float(ml_dtypes.finfo(_np(out)).max)
            q = q.isinf().logical_not().where(q.clip(-hi, hi), q) if out.name == "fp8e5m2" else q.clip(-hi, hi)
        return q.cast(out)
    if out not in _QUANT_RANGE:
        raise ShapeError(f"QuantizeLinear: output dtype {out.name} is not a quantized type")
    lo, hi = _QUANT_RANGE[out]
    wide = dtypes.float64 if out.itemsize >= 4 else p if p.itemsize >= 4 else dtypes.float32
    r = q.cast(wide).round()
    if zero_point is not None:
        r = r + zero_point.cast(wide)
    return r.clip(float(lo), float(hi)).cast(out)


def _np(d: DType) -> np.dtype:
    from jit.common.dtype import to_numpy
    return to_numpy(d)


@onnx_op("QuantizeLinear")
def quantize_linear(ctx: OpContext) -> Tensor:
    x, scale, zp = ctx.t(0), ctx.t(1), ctx.opt(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0) or 0
    out_code = ctx.attr("output_dtype", 0) or 0
    out = zp.dtype if zp is not None else onnx_dtype(out_code) if out_code else dtypes.uint8
    prec_code = ctx.attr("precision", 0) or 0
    precision = onnx_dtype(prec_code) if prec_code else None
    s = _quant_param(scale, x.shape, axis, block)
    z = _quant_param(zp, x.shape, axis, block) if zp is not None else None
    return quantize(x, s, z, out, precision, bool(ctx.attr("saturate", 1)))


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx: OpContext) -> Tensor:
    x, scale, zp = ctx.t(0), ctx.t(1), ctx.opt(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0) or 0
    out_code = ctx.attr("output_dtype", 0) or 0
    out = onnx_dtype(out_code) if out_code else scale.dtype
    s = _quant_param(scale, x.shape, axis, block)
    wide = dtypes.float64 if x.dtype.is_int and x.dtype.itemsize >= 4 else dtypes.float32
    dx = x.cast(wide)
    if zp is not None and not x.dtype.is_float:
        z = _quant_param(zp, x.shape, axis, block)
        dx = dx - z.cast(wide)
    return (dx * s.cast(least_upper_dtype(wide, s.dtype))).cast(out)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: OpContext) -> tuple[Tensor, Tensor, Tensor]:
    x = ctx.t(0).cast(dtypes.float32)
    lo = x.min().minimum(0.0) if x.numel() else Tensor.full((), 0.0, dtypes.float32)
    hi = x.max().maximum(0.0) if x.numel() else Tensor.full((), 0.0, dtypes.float32)
    scale = (hi == lo).where(1.0, hi - lo) / 255.0  # an all-zero input keeps a usable scale, as the reference
    zp = (-lo / scale).clip(0.0, 255.0).round().cast(dtypes.uint8)
    y = quantize(x, scale, zp, dtypes.uint8, dtypes.float32)
    return y, scale.cast(dtypes.float32), zp


# --- integer matmul and conv ---------------------------------------------------------------------------
@onnx_op("MatMulInteger")
def matmul_integer(ctx: OpContext) -> Tensor:
    """(A - a_zero_point) @ (B - b_zero_point) in int32; a per-row a_zero_point is allowed."""
    a, b = ctx.t(0).cast(dtypes.int32), ctx.t(1).cast(dtypes.int32)
    if ctx.has(2):
        az = ctx.t(2).cast(dtypes.int32)
        a = a - (az.reshape(()) if az.numel() == 1 else az.reshape(-1, 1))
    if ctx.has(3):
        bz = ctx.t(3).cast(dtypes.int32)
        b = b - (bz.reshape(()) if bz.numel() == 1 else bz)
    return a.matmul(b)


@onnx_op("ConvInteger")
def conv_integer(ctx: OpContext) -> Tensor:
    """Integer convolution of zero-point-shifted operands, accumulated in int32."""
    x, w = ctx.t(0).cast(dtypes.int32), ctx.t(1).cast(dtypes.int32)
    if ctx.has(2):
        x = x - ctx.t(2).cast(dtypes.int32).reshape(())
    if ctx.has(3):
        wz = ctx.t(3).cast(dtypes.int32)
        w = w - (wz.reshape(()) if wz.numel() == 1 else wz.reshape(-1, *([1] * (w.ndim - 1))))
    kernel, st, dl = spatial_attrs(ctx, kernel_shape(ctx, w))
    pads = auto_pads(ctx, x.shape[2:], kernel, st, dl)
    return x.conv2d(w, None, groups=int(ctx.attr("group", 1)), stride=st, dilation=dl, padding=pads)


# --- QLinear ops ---------------------------------------------------------------------------------------
def _requantize(acc: Tensor, scale: Tensor, zp: Tensor | None, out: DType) -> Tensor:
    """``saturate(rint(acc * scale) + zero_point)`` in the quantized type ``out``."""
    wide = dtypes.float64 if scale.dtype == dtypes.float64 else dtypes.float32
    y = acc.cast(wide) * scale.cast(wide)
    if zp is not None:
        y = y + zp.cast(wide)
    lo, hi = (-128.0, 127.0) if out == dtypes.int8 else (0.0, 255.0)
    return y.round().clip(lo, hi).cast(out)


def _zero_shift(x: Tensor, zp: Tensor | None) -> Tensor:
    xi = x.cast(dtypes.int32)
    if zp is None:
        return xi
    z = zp.cast(dtypes.int32)
    return xi - (z.reshape(()) if z.numel() == 1 else z)


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx: OpContext) -> Tensor:
    a, a_s, a_z, b, b_s, b_z, y_s, y_z = (ctx.opt(i) for i in range(8))
    assert a is not None and b is not None and a_s is not None and b_s is not None and y_s is not None
    ai = a.cast(dtypes.int32)
    if a_z is not None:
        ai = ai - (a_z.cast(dtypes.int32).reshape(()) if a_z.numel() == 1 else a_z.cast(dtypes.int32).reshape(-1, 1))
    bi = _zero_shift(b, b_z)
    acc = ai.matmul(bi)
    a_sc = a_s.reshape(()) if a_s.numel() == 1 else a_s.reshape(-1, 1)
    b_sc = b_s.reshape(()) if b_s.numel() == 1 else b_s
    scale = a_sc * b_sc.cast(a_sc.dtype) / y_s.reshape(()).cast(a_sc.dtype)
    out = y_z.dtype if y_z is not None else a.dtype
    return _requantize(acc, scale, y_z.reshape(()) if y_z is not None and y_z.numel() == 1 else y_z, out)


@onnx_op("QLinearConv")
def qlinear_conv(ctx: OpContext) -> Tensor:
    x, x_s, x_z, w, w_s, w_z, y_s, y_z, bias = (ctx.opt(i) for i in range(9))
    assert x is not None and w is not None and x_s is not None and w_s is not None and y_s is not None
    xi = _zero_shift(x, x_z)
    wi = w.cast(dtypes.int32)
    if w_z is not None:
        z = w_z.cast(dtypes.int32)
        wi = wi - (z.reshape(()) if z.numel() == 1 else z.reshape(-1, *([1] * (w.ndim - 1))))
    kernel, st, dl = spatial_attrs(ctx, kernel_shape(ctx, w))
    pads = auto_pads(ctx, x.shape[2:], kernel, st, dl)
    acc = xi.conv2d(wi, bias.cast(dtypes.int32) if bias is not None else None, groups=int(ctx.attr("group", 1)),
                    stride=st, dilation=dl, padding=pads)
    nd = w.ndim - 2
    w_sc = w_s.reshape(()) if w_s.numel() == 1 else w_s.reshape(1, -1, *([1] * nd))
    scale = x_s.reshape(()) * w_sc.cast(x_s.dtype) / y_s.reshape(()).cast(x_s.dtype)
    out = y_z.dtype if y_z is not None else x.dtype
    return _requantize(acc, scale, y_z.reshape(()) if y_z is not None else None, out)
