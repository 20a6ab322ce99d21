"""ONNX neural-net ops: convolution, pooling, normalization, matmul/einsum, softmax, resize, attention, losses."""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import DType, dtypes, to_numpy
from jit.common.errors import ShapeError
from jit.frontend.nn_ops import _pool_geometry, _window
from jit.frontend.tensor import Tensor
from jit.onnx.loader import OpContext, onnx_op, unsupported_attribute
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.ops.nn_helpers import (
    compute_dtype,
    einsum,
    first_argmax_onehot,
    linear_coeffs,
    masked_softmax,
    nearest_coeffs,
    neg_inf_bias,
    offset_mask,
    resize_axis,
    resize_taps,
    saturate_to,
    source_coords,
)

Pairs = list[tuple[int, int]]


# --- shared attribute logic ----------------------------------------------------------------------------
def _spatial(ctx: OpContext, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(kernel, strides, dilations) with ONNX defaults for ``len(kernel)`` spatial dims."""
    n = len(kernel)
    strides = list(ctx.attr("strides", None) or [1] * n)
    dilations = list(ctx.attr("dilations", None) or [1] * n)
    return [int(k) for k in kernel], [int(s) for s in strides], [int(d) for d in dilations]


def _auto_pads(ctx: OpContext, in_sp: tuple[int, ...], kernel: list[int], strides: list[int],
               dilations: list[int]) -> Pairs:
    """Per-dim (begin, end) padding from ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID) or ``pads``."""
    n = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i, k, s, d in zip(in_sp, kernel, strides, dilations, strict=True):
            total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * n
    if auto_pad != "NOTSET":
        raise ctx.unsupported(auto_pad=auto_pad)
    pads = list(ctx.attr("pads", None) or [0] * (2 * n))
    return [(int(pads[i]), int(pads[i + n])) for i in range(n)]


def _kernel_shape(ctx: OpContext, w: Tensor | None = None) -> list[int]:
    ks = ctx.attr("kernel_shape", None)
    if ks is None:
        if w is None:
            raise ShapeError(f"{ctx.where()}: kernel_shape expected, got none")
        ks = w.shape[2:]
    return [int(k) for k in ks]


# --- convolution -------------------------------------------------------------------------------------
@onnx_op("Conv")
def conv(ctx: OpContext) -> Tensor:
    """N-d convolution; kernel_shape defaults to the weight's spatial dims."""
    x, w, b = ctx.t(0), ctx.t(1), ctx.opt(2)
    kernel, st, dl = _spatial(ctx, _kernel_shape(ctx, w))
    pads = _auto_pads(ctx, x.shape[2:], kernel, st, dl)
    return x.conv2d(w.cast(x.dtype), b.cast(x.dtype) if b is not None else None, groups=int(ctx.attr("group", 1)),
                    stride=st, dilation=dl, padding=pads)


@onnx_op("ConvInteger")
def conv_integer(ctx: OpContext) -> Tensor:
    """Integer convolution of zero-point-shifted operands, accumulated in int32."""
    x, w = ctx.t(0).cast(dtypes.int32), ctx.t(1).cast(dtypes.int32)
    if ctx.has(2):
        x = x - ctx.t(2).cast(dtypes.int32).reshape(())
    if ctx.has(3):
        wz = ctx.t(3).cast(dtypes.int32)
        w = w - (wz.reshape(()) if wz.numel() == 1 else wz.reshape(-1, *([1] * (w.ndim - 1))))
    kernel, st, dl = _spatial(ctx, _kernel_shape(ctx, w))
    pads = _auto_pads(ctx, x.shape[2:], kernel, st, dl)
    return x.conv2d(w, None, groups=int(ctx.attr("group", 1)), stride=st, dilation=dl, padding=pads)


@onnx_op("ConvTranspose")
def conv_transpose(ctx: OpContext) -> Tensor:
    """Transposed convolution; output_shape or SAME auto_pad derive the pads as the spec says."""
    x, w, b = ctx.t(0), ctx.t(1), ctx.opt(2)
    kernel, st, dl = _spatial(ctx, _kernel_shape(ctx, w))
    n = len(kernel)
    in_sp = x.shape[2:]
    opad = [int(v) for v in (ctx.attr("output_padding", None) or [0] * n)]
    out_shape = ctx.attr("output_shape", None)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [int(v) for v in out_shape][-n:] if out_shape is not None else \
            [i * s for i, s in zip(in_sp, st, strict=True)]
        pads = []
        for i in range(n):
            total = st[i] * (in_sp[i] - 1) + opad[i] + (kernel[i] - 1) * dl[i] + 1 - target[i]
            half = total // 2
            pads.append((half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half))
    elif auto_pad == "VALID":
        pads = [(0, 0)] * n
    else:
        p = list(ctx.attr("pads", None) or [0] * (2 * n))
        pads = [(int(p[i]), int(p[i + n])) for i in range(n)]
    # a negative pad (output_shape larger than the natural size) grows the output with zeros
    return x.conv_transpose2d(w.cast(x.dtype), b.cast(x.dtype) if b is not None else None,
                              groups=int(ctx.attr("group", 1)), stride=st, dilation=dl, padding=pads,
                              output_padding=opad)


# --- pooling -----------------------------------------------------------------------------------------
def _pool_setup(ctx: OpContext, x: Tensor) -> tuple[list[int], list[int], list[int], Pairs, bool]:
    kernel, st, dl = _spatial(ctx, _kernel_shape(ctx))
    pads = _auto_pads(ctx, x.shape[2:], kernel, st, dl)
    return kernel, st, dl, pads, bool(ctx.attr("ceil_mode", 0))


@onnx_op("AveragePool")
def average_pool(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    kernel, st, dl, pads, ceil_mode = _pool_setup(ctx, x)
    out = x.avg_pool(kernel, st, pads, ceil_mode=ceil_mode, count_include_pad=bool(ctx.attr("count_include_pad", 0)),
                     dilation=dl)
    return out.cast(x.dtype)


@onnx_op("LpPool")
def lp_pool(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    kernel, st, dl, pads, ceil_mode = _pool_setup(ctx, x)
    return x.lp_pool(float(ctx.attr("p", 2)), kernel, st, pads, ceil_mode=ceil_mode, dilation=dl).cast(x.dtype)


@onnx_op("MaxPool")
def max_pool(ctx: OpContext) -> Tensor | tuple[Tensor, Tensor]:
    """Max pooling, with the optional Indices output (flat input positions)."""
    x = ctx.t(0)
    kernel, st, dl, pads, ceil_mode = _pool_setup(ctx, x)
    out = x.max_pool(kernel, st, dl, pads, ceil_mode=ceil_mode)
    if len(ctx.node.output) < 2 or not ctx.node.output[1]:
        return out
    return out, _max_pool_indices(x, out, kernel, st, dl, pads, ceil_mode, int(ctx.attr("storage_order", 0)))


def _max_pool_indices(x: Tensor, out: Tensor, kernel: list[int], st: list[int], dl: list[int], pads: Pairs,
                      ceil_mode: bool, storage_order: int) -> Tensor:
    """Flat input index (padding not counted) of each window's first maximum (row-major window order)."""
    nk = len(kernel)
    extra = _pool_geometry(x.shape, tuple(kernel), tuple(st), tuple(dl), tuple(pads), ceil_mode)
    full = [(0, 0)] * (x.ndim - nk) + [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]
    numel = x.numel()
    low = -math.inf if x.dtype.is_float else x.dtype.min
    xw = _window(x.pad(full, value=low), tuple(kernel), tuple(st), tuple(dl))
    labels = Tensor.arange(numel, device=x.device, dtype=dtypes.int64).reshape(x.shape)
    lw = _window(labels.pad(full, value=numel), tuple(kernel), tuple(st), tuple(dl))
    kaxes = tuple(range(xw.ndim - nk, xw.ndim))
    hit = xw == out.reshape(*out.shape, *([1] * nk))
    idx = hit.where(lw, numel).min(kaxes)
    if storage_order == 1:  # report the winner's column-major position in the spatial dims
        sp = x.shape[-nk:]
        plane = math.prod(sp)
        rem = idx % plane
        col = (idx // plane) * plane
        row_stride, col_stride = plane, 1
        for s in sp:
            row_stride //= s
            col = col + ((rem // row_stride) % s) * col_stride
            col_stride *= s
        idx = col
    return idx.cast(dtypes.int64)


@onnx_op("GlobalAveragePool")
def global_average_pool(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return x.global_avg_pool().cast(x.dtype)


@onnx_op("GlobalMaxPool")
def global_max_pool(ctx: OpContext) -> Tensor:
    return ctx.t(0).global_max_pool()


@onnx_op("GlobalLpPool")
def global_lp_pool(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    p = float(ctx.attr("p", 2))
    axes = tuple(range(2, x.ndim))
    a = x._float_operand().abs()
    s = (a * a if p == 2 else a.pow(p)).sum(axes, keepdim=True)
    return (s.sqrt() if p == 2 else s.pow(1.0 / p)).cast(x.dtype)


# --- normalization -----------------------------------------------------------------------------------
def _stash(ctx: OpContext, x: Tensor) -> DType:
    st = ctx.attr("stash_type", 1)
    return onnx_dtype(int(st)) if st is not None else compute_dtype(x.dtype)


def _moments(x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """(mean, biased variance) over ``axes``, kept as size 1."""
    mean = x.mean(axes, keepdim=True)
    c = x - mean
    return mean, (c * c).mean(axes, keepdim=True)


@onnx_op("BatchNormalization")
def batch_normalization(ctx: OpContext) -> Tensor | tuple[Tensor, ...]:
    """Inference batch norm, or training mode: batch statistics plus updated running mean/var."""
    x, scale, bias, mean, var = (ctx.t(i) for i in range(5))
    eps = float(ctx.attr("epsilon", 1e-5))
    d = x.dtype
    scale, bias, mean, var = (t.cast(d) for t in (scale, bias, mean, var))
    training = bool(ctx.attr("training_mode", 0)) if ctx.opset >= 14 else len(ctx.node.output) > 1
    if not training:
        return x.batch_norm(scale, bias, mean, var, eps).cast(d)
    momentum = float(ctx.attr("momentum", 0.9))
    axes = tuple(i for i in range(x.ndim) if i != 1)
    xf = x.cast(compute_dtype(d))
    bm, bv = _moments(xf, axes)
    bm, bv = bm.reshape(-1), bv.reshape(-1)
    y = xf.batch_norm(scale, bias, bm, bv, eps).cast(d)
    run_mean = (mean * momentum + bm * (1 - momentum)).cast(d)
    run_var = (var * momentum + bv * (1 - momentum)).cast(d)
    if ctx.opset >= 14:
        return y, run_mean, run_var
    return y, run_mean, run_var, bm.cast(d), bv.cast(d)


@onnx_op("InstanceNormalization")
def instance_normalization(ctx: OpContext) -> Tensor:
    x, scale, bias = ctx.t(0), ctx.t(1), ctx.t(2)
    eps = float(ctx.attr("epsilon", 1e-5))
    xf = x.cast(compute_dtype(x.dtype))
    mean, var = _moments(xf, tuple(range(2, x.ndim)))
    ch = (1, -1, *([1] * (x.ndim - 2)))
    y = (xf - mean) * (var + eps).rsqrt() * scale.cast(xf.dtype).reshape(ch) + bias.cast(xf.dtype).reshape(ch)
    return y.cast(x.dtype)


@onnx_op("LayerNormalization")
def layer_normalization(ctx: OpContext) -> Tensor | tuple[Tensor, ...]:
    """Normalize over axes >= axis in stash_type; Mean and InvStdDev outputs when requested."""
    x, scale, bias = ctx.t(0), ctx.t(1), ctx.opt(2)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    eps = float(ctx.attr("epsilon", 1e-5))
    sd = _stash(ctx, x)
    axes = tuple(range(axis, x.ndim))
    xf = x.cast(sd)
    mean, var = _moments(xf, axes)
    inv = (var + eps).sqrt().reciprocal()
    y = ((xf - mean) * inv).cast(x.dtype) * scale.cast(x.dtype)
    if bias is not None:
        y = y + bias.cast(x.dtype)
    outs = [y, mean, inv]
    n_out = len(ctx.node.output)
    return tuple(outs[:n_out]) if n_out > 1 else y


@onnx_op("GroupNormalization")
def group_normalization(ctx: OpContext) -> Tensor:
    """Per-group statistics; scale/bias per channel (opset 21) or per group (opset 18)."""
    x, scale, bias = ctx.t(0), ctx.t(1), ctx.t(2)
    g = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    n, c = x.shape[:2]
    sd = _stash(ctx, x) if ctx.opset >= 21 else compute_dtype(x.dtype)
    xg = x.cast(sd).reshape(n, g, -1)
    mean, var = _moments(xg, (2,))
    y = ((xg - mean) * (var + eps).rsqrt()).reshape(x.shape).cast(x.dtype)
    ch = (1, c, *([1] * (x.ndim - 2)))
    if scale.numel() == g and c != g:  # opset 18: one scale/bias per group
        scale = scale.reshape(g, 1).expand(g, c // g).reshape(c)
        bias = bias.reshape(g, 1).expand(g, c // g).reshape(c)
    return y * scale.cast(x.dtype).reshape(ch) + bias.cast(x.dtype).reshape(ch)


@onnx_op("RMSNormalization")
def rms_normalization(ctx: OpContext) -> Tensor:
    x, scale = ctx.t(0), ctx.t(1)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    eps = float(ctx.attr("epsilon", 1e-5))
    xf = x.cast(_stash(ctx, x))
    ms = (xf * xf).mean(tuple(range(axis, x.ndim)), keepdim=True)
    y = (xf * (ms + eps).sqrt().reciprocal()).cast(x.dtype)
    return y * scale.cast(x.dtype)


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    axes = tuple(int(a) % x.ndim for a in (ctx.attr("axes", None) or [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    var = (x * x).mean(axes, keepdim=True) - mean * mean
    return ((x - mean) / (var.sqrt() + 1e-9)).cast(x.dtype)


@onnx_op("LpNormalization")
def lp_normalization(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    axis = int(ctx.attr("axis", -1))
    p = int(ctx.attr("p", 2))
    a = x.abs()
    norm = (a * a).sum(axis, keepdim=True).sqrt() if p == 2 else a.sum(axis, keepdim=True) if p == 1 else \
        a.pow(p).sum(axis, keepdim=True).pow(1.0 / p)
    return (norm == 0).where(0, x / norm).cast(x.dtype)


@onnx_op("LRN")
def lrn(ctx: OpContext) -> Tensor:
    """Local response normalization across channels (a window over the channel axis)."""
    x = ctx.t(0)
    size = int(ctx.attr("size"))
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    xf = x.cast(compute_dtype(x.dtype))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = (xf * xf).transpose(1, -1)  # channels last for the window
    win = _window(sq.pad(((0, 0),) * (sq.ndim - 1) + ((lo, hi),)), (size,), (1,), (1,))
    ssum = win.sum(-1).transpose(1, -1)
    return (xf / (ssum * (alpha / size) + bias).pow(beta)).cast(x.dtype)


# --- matmul family -----------------------------------------------------------------------------------
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


@onnx_op("Einsum")
def einsum_(ctx: OpContext) -> Tensor:
    ops = [ctx.t(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    return einsum(str(ctx.attr("equation")), ops)


# --- softmax family ----------------------------------------------------------------------------------
def _along_axis(ctx: OpContext, fn_name: str) -> Tensor:
    x = ctx.t(0)
    if ctx.opset < 13:
        axis = int(ctx.attr("axis", 1)) % max(x.ndim, 1)
        flat = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return _apply_axis(flat, 1, fn_name).reshape(x.shape)
    return _apply_axis(x, int(ctx.attr("axis", -1)), fn_name)


def _apply_axis(x: Tensor, axis: int, fn_name: str) -> Tensor:
    if fn_name == "hardmax":
        return first_argmax_onehot(x, axis)
    return getattr(x, fn_name)(axis).cast(x.dtype)


@onnx_op("Softmax")
def softmax(ctx: OpContext) -> Tensor:
    return _along_axis(ctx, "softmax")


@onnx_op("LogSoftmax")
def log_softmax(ctx: OpContext) -> Tensor:
    return _along_axis(ctx, "log_softmax")


@onnx_op("Hardmax")
def hardmax(ctx: OpContext) -> Tensor:
    return _along_axis(ctx, "hardmax")


# --- resize ------------------------------------------------------------------------------------------
def _nonempty(a: np.ndarray | None) -> np.ndarray | None:
    return a if a is not None and a.size else None


@onnx_op("Resize")
def resize(ctx: OpContext) -> Tensor:
    """Resize with nearest/linear modes; cubic raises UnsupportedOp."""
    x = ctx.t(0)
    mode = ctx.attr("mode", "nearest")
    if ctx.opset < 11:
        scales = _nonempty(ctx.static(1, "scales").astype(np.float64))
        return _resize(ctx, x, mode, "asymmetric", "legacy", scales, None, None, None)
    roi = _nonempty(ctx.static_opt(1)) if ctx.has(1) else None
    scales = _nonempty(ctx.static(2, "scales")) if ctx.has(2) else None
    sizes = _nonempty(ctx.static(3, "sizes")) if ctx.has(3) else None
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest = ctx.attr("nearest_mode", "round_prefer_floor")
    axes = ctx.attr("axes", None) if ctx.opset >= 18 else None
    return _resize(ctx, x, mode, coord, nearest, scales, sizes, roi, axes)


@onnx_op("Upsample")
def upsample(ctx: OpContext) -> Tensor:
    """Upsample-7/9: Resize-10 semantics (asymmetric coordinates, floor for nearest)."""
    x = ctx.t(0)
    scales = np.asarray(ctx.attr("scales") if ctx.opset < 9 else ctx.static(1, "scales"), dtype=np.float64)
    mode = ctx.attr("mode", "nearest")
    return _resize(ctx, x, "linear" if mode == "bilinear" else mode, "asymmetric", "legacy", scales, None, None, None)


unsupported_attribute("Resize", "mode", "cubic")
unsupported_attribute("Upsample", "mode", "cubic")


def _resize(ctx: OpContext, x: Tensor, mode: str, coord: str, nearest: str, scales: np.ndarray | None,
            sizes: np.ndarray | None, roi: np.ndarray | None, axes: list[int] | None) -> Tensor:
    """Separable resize, one axis at a time (outer first), with host-computed index/weight tables."""
    if mode == "cubic":
        raise ctx.unsupported(mode="cubic")
    if mode not in ("nearest", "linear"):
        raise ctx.unsupported(mode=mode)
    antialias = bool(ctx.attr("antialias", 0)) if ctx.opset >= 18 else False
    if antialias and mode == "nearest":
        raise ctx.unsupported(mode=mode, antialias=1)
    r = x.ndim
    ax = [int(a) % r for a in axes] if axes is not None else list(range(r))
    full_roi = [0.0] * r + [1.0] * r
    if roi is not None:
        rv = [float(v) for v in roi.reshape(-1)]
        k = len(rv) // 2
        for i, a in enumerate(ax if k == len(ax) else range(r)):
            full_roi[a], full_roi[r + a] = rv[i], rv[k + i]
    if sizes is not None:
        sz = [int(v) for v in sizes.reshape(-1)]
        scale = [1.0] * r
        out = list(x.shape)
        for i, a in enumerate(ax):
            scale[a], out[a] = sz[i] / x.shape[a], sz[i]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if ctx.opset >= 18 else "stretch"
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(scale[a] for a in ax)
            for a in ax:
                scale[a], out[a] = s, int(s * x.shape[a] + 0.5)
    elif scales is not None:
        sv = [float(v) for v in scales.reshape(-1)]
        scale = [1.0] * r
        for i, a in enumerate(ax if len(sv) == len(ax) else range(r)):
            scale[a] = sv[i]
        out = [int(s * n) for s, n in zip(scale, x.shape, strict=True)]
    else:
        raise ShapeError(f"{ctx.where()}: scales or sizes expected, got neither")
    if nearest == "legacy":  # Resize-10 / Upsample: asymmetric coordinates rounded down
        nearest = "floor"
    coeff_fn = nearest_coeffs(nearest) if mode == "nearest" else linear_coeffs(antialias)
    extrap_value = float(ctx.attr("extrapolation_value", 0.0)) if ctx.opset >= 11 else 0.0
    exclude = bool(ctx.attr("exclude_outside", 0)) if ctx.opset >= 11 else False
    y = x if mode == "nearest" else x.cast(compute_dtype(x.dtype))
    for a in range(r):
        identity = math.isclose(scale[a], 1.0) and out[a] == x.shape[a] and \
            math.isclose(full_roi[a], 0.0) and math.isclose(full_roi[r + a], 1.0)
        if identity:
            continue
        coords, extrap = source_coords(coord, out[a], x.shape[a], scale[a], (full_roi[a], full_roi[r + a]))
        idx, coeffs = resize_taps(coords, x.shape[a], scale[a], coeff_fn, exclude)
        y = resize_axis(y, a, idx, coeffs, extrap, extrap_value, selector=mode == "nearest")
    return saturate_to(y, x.dtype) if y.dtype != x.dtype else y


# --- attention ---------------------------------------------------------------------------------------
def _heads_4d(t: Tensor, heads: int) -> Tensor:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hid = t.shape
    return t.reshape(b, s, heads, hid // heads).permute(0, 2, 1, 3)


@onnx_op("Attention")
def attention(ctx: OpContext) -> tuple[Tensor | None, ...]:
    """ONNX Attention (23-25): heads, GQA, masks, causal/window, KV cache, softcap, qk output modes."""
    q, k, v = ctx.t(0), ctx.t(1), ctx.t(2)
    mask, past_k, past_v, nonpad = ctx.opt(3), ctx.opt(4), ctx.opt(5), ctx.opt(6)
    is_causal = bool(ctx.attr("is_causal", 0))
    qh, kvh = ctx.attr("q_num_heads", None), ctx.attr("kv_num_heads", None)
    scale = ctx.attr("scale", None)
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    precision = ctx.attr("softmax_precision", None)
    left = int(ctx.attr("left_window_size", -1)) if ctx.opset >= 25 else -1
    right = int(ctx.attr("right_window_size", -1)) if ctx.opset >= 25 else -1
    d = q.dtype
    cd = compute_dtype(d)  # narrow floats compute in float32 (closer to the reference than float16 steps)
    q, k, v = q.cast(cd), k.cast(cd), v.cast(cd)
    rank3 = q.ndim == 3
    if rank3:
        if qh is None or kvh is None:
            raise ShapeError(f"{ctx.where()}: 3-D inputs expected q_num_heads and kv_num_heads")
        q, k, v = _heads_4d(q, int(qh)), _heads_4d(k, int(kvh)), _heads_4d(v, int(kvh))
    batch = q.shape[0]
    sc = float(scale) if scale is not None else 1 / math.sqrt(q.shape[3])
    sc_t = float(np.asarray(np.sqrt(sc), dtype=np.float64).astype(to_numpy(d)))
    if past_k is not None:
        k = Tensor.cat(past_k.cast(cd), k, dim=2)
    if past_v is not None:
        v = Tensor.cat(past_v.cast(cd), v, dim=2)
    present_k, present_v = k.cast(d), v.cast(d)
    q_len, kv_len = q.shape[2], k.shape[2]
    past_len = past_k.shape[2] if past_k is not None else 0
    offset: int | Tensor = (nonpad.cast(dtypes.int32) - q_len) if nonpad is not None and past_k is None else past_len
    bias: Tensor | None = None
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            padding = ((0, 0),) * (mask.ndim - 1) + ((0, pad),)
            mask = mask.pad(padding, value=False) if mask.dtype.is_bool else mask.pad(padding, value=-math.inf)
        bias = neg_inf_bias(mask, cd) if mask.dtype.is_bool else mask.cast(cd)
    if is_causal:
        bias = _add_bias(bias, neg_inf_bias(offset_mask(q_len, kv_len, offset, q, causal=True), cd))
    if left >= 0 or right >= 0:
        bias = _add_bias(bias, neg_inf_bias(offset_mask(q_len, kv_len, offset, q, left, right), cd))
    if nonpad is not None:
        keep = Tensor.arange(kv_len, device=q.device).reshape(1, kv_len) < nonpad.cast(dtypes.int32).reshape(-1, 1)
        bias = _add_bias(bias, neg_inf_bias(keep.reshape(batch, 1, 1, kv_len), cd))
    h_q, h_k = q.shape[1], k.shape[1]
    if h_q != h_k and h_q % h_k == 0:
        rep = h_q // h_k
        k = k.reshape(batch, h_k, 1, kv_len, k.shape[3]).expand(batch, h_k, rep, kv_len, k.shape[3]) \
            .reshape(batch, h_q, kv_len, k.shape[3])
        v = v.reshape(batch, h_k, 1, kv_len, v.shape[3]).expand(batch, h_k, rep, kv_len, v.shape[3]) \
            .reshape(batch, h_q, kv_len, v.shape[3])
    qk = (q * sc_t).matmul((k * sc_t).transpose(-1, -2))
    if softcap > 0:
        qk = ((qk / softcap).tanh() * softcap).cast(cd)
    qk_out: Tensor = qk
    biased = qk + bias if bias is not None else qk
    if mode == 2:
        qk_out = biased
    if precision is not None:
        biased = biased.cast(onnx_dtype(int(precision)))
    probs = masked_softmax(biased)
    if bias is not None:
        m = bias.max(-1, keepdim=True)
        probs = (m.isinf() & (m < 0)).where(0.0, probs).cast(probs.dtype)
    if mode == 3:
        qk_out = probs
    y = probs.cast(cd).matmul(v).cast(d)
    if rank3:
        y = y.permute(0, 2, 1, 3).reshape(batch, q_len, -1)
    outs = (y, present_k, present_v, qk_out.cast(d))
    return outs[:max(1, len(ctx.node.output))]


def _add_bias(bias: Tensor | None, extra: Tensor) -> Tensor:
    return extra if bias is None else bias + extra


@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx: OpContext) -> Tensor:
    """Rotate the first rotary_embedding_dim features by cos/sin (half split or interleaved)."""
    x, cos, sin, pos = ctx.t(0), ctx.t(1), ctx.t(2), ctx.opt(3)
    interleaved = bool(ctx.attr("interleaved", 0))
    rot = int(ctx.attr("rotary_embedding_dim", 0) or 0)
    orig = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)  # (B, S, H, D)
    else:
        heads = int(ctx.attr("num_heads", 0) or 0)
        if not heads:
            raise ShapeError(f"{ctx.where()}: 3-D input expected num_heads, got none")
        x = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    head = x.shape[3]
    rot = rot or head
    if pos is not None:
        idx = pos.cast(dtypes.int32)
        cos, sin = cos.take(idx, 0), sin.take(idx, 0)
    cos, sin = cos.cast(x.dtype).unsqueeze(2), sin.cast(x.dtype).unsqueeze(2)
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        xr = Tensor.cat(real.unsqueeze(-1), imag.unsqueeze(-1), dim=-1).reshape(xr.shape)
    else:
        xr = Tensor.cat(real, imag, dim=-1)
    y = Tensor.cat(xr, x[..., rot:], dim=-1) if rot < head else xr
    return y.reshape(orig) if len(orig) == 3 else y.permute(0, 2, 1, 3)


# --- losses ------------------------------------------------------------------------------------------
def _nll(ctx: OpContext, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss on log-probabilities (N, C, d...) and int targets (N, d...)."""
    reduction = ctx.attr("reduction", "mean")
    ignore = ctx.attr("ignore_index", None)
    d = logp.dtype
    tgt = target.cast(dtypes.int32)
    c = logp.shape[1]
    safe = tgt.clip(0, c - 1)
    loss = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    keep = (tgt != int(ignore)) if ignore is not None else None
    w: Tensor | None = None
    if weight is not None:
        w = weight.cast(d).take(safe, 0)
        if keep is not None:
            w = keep.where(w, 0.0).cast(d)
    elif keep is not None:
        w = keep.cast(d)
    if keep is not None:
        loss = keep.where(loss, 0.0).cast(d)
    if w is not None:
        loss = loss * w
    if reduction == "none":
        return loss.cast(d)
    if reduction == "sum":
        return loss.sum().cast(d)
    if reduction != "mean":
        raise ctx.unsupported(reduction=reduction)
    if w is not None:
        return (loss.sum() / w.sum()).cast(d)
    return loss.mean().cast(d)


@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(ctx: OpContext) -> Tensor:
    return _nll(ctx, ctx.t(0), ctx.t(1), ctx.opt(2))


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: OpContext) -> Tensor | tuple[Tensor, Tensor]:
    x = ctx.t(0)
    logp = x.log_softmax(1).cast(x.dtype)
    loss = _nll(ctx, logp, ctx.t(1), ctx.opt(2))
    return (loss, logp) if len(ctx.node.output) > 1 and ctx.node.output[1] else loss
