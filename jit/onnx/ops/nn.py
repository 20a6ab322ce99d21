"""ONNX neural-net ops: convolution, pooling and unpooling, normalization, softmax, resize, losses."""

from __future__ import annotations

import itertools
import math

import numpy as np

from jit.common.dtype import DType, dtypes
from jit.common.errors import ShapeError
from jit.frontend.movement import window
from jit.frontend.shapes import pool_geometry
from jit.frontend.tensor import Tensor
from jit.onnx.ops.conv_attrs import Pairs, auto_pads, kernel_shape, spatial_attrs
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.ops.indexing import scatter_elements
from jit.onnx.ops.nn_helpers import (
    compute_dtype,
    first_argmax_onehot,
    host_const,
    linear_coeffs,
    nearest_coeffs,
    resize_axis,
    resize_taps,
    saturate_to,
    source_coords,
)
from jit.onnx.registry import OpContext, onnx_op, unsupported_attribute


# --- convolution -------------------------------------------------------------------------------------
@onnx_op("Conv")
def conv(ctx: OpContext) -> Tensor:
    """N-d convolution; kernel_shape defaults to the weight's spatial dims."""
    x, w, b = ctx.t(0), ctx.t(1), ctx.opt(2)
    kernel, st, dl = spatial_attrs(ctx, kernel_shape(ctx, w))
    pads = auto_pads(ctx, x.shape[2:], kernel, st, dl)
    return x.conv2d(w.cast(x.dtype), b.cast(x.dtype) if b is not None else None, groups=int(ctx.attr("group", 1)),
                    stride=st, dilation=dl, padding=pads)


@onnx_op("ConvTranspose")
def conv_transpose(ctx: OpContext) -> Tensor:
    """Transposed convolution; output_shape or SAME auto_pad derive the pads as the spec says."""
    x, w, b = ctx.t(0), ctx.t(1), ctx.opt(2)
    kernel, st, dl = spatial_attrs(ctx, kernel_shape(ctx, w))
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


@onnx_op("Col2Im")
def col2im(ctx: OpContext) -> Tensor:
    """Fold column blocks back into an image, summing overlaps: each output pixel gathers its (at most
    prod(block)) contributing column entries through a load-time index table."""
    x = ctx.t(0)
    image = [int(v) for v in ctx.static(1, "image_shape")]
    block = [int(v) for v in ctx.static(2, "block_shape")]
    k = len(image)
    dil = [int(v) for v in (ctx.attr("dilations", None) or [1] * k)]
    st = [int(v) for v in (ctx.attr("strides", None) or [1] * k)]
    pads = [int(v) for v in (ctx.attr("pads", None) or [0] * (2 * k))]
    n, ck, length = x.shape
    kk = math.prod(block)
    c = ck // kk
    padded = [image[i] + pads[i] + pads[i + k] for i in range(k)]
    outs = [(padded[i] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(k)]
    if math.prod(outs) != length:
        raise ShapeError(f"{ctx.where()}: input expected {math.prod(outs)} blocks, got {length}")
    # table[p, j]: the column entry (block offset * L + block index) landing on padded pixel p, or -1
    table = np.full((math.prod(padded), kk), -1, dtype=np.int64)
    for j, off in enumerate(itertools.product(*[range(b) for b in block])):
        for li, pos in enumerate(itertools.product(*[range(o) for o in outs])):
            p = 0
            for i in range(k):
                p = p * padded[i] + pos[i] * st[i] + off[i] * dil[i]
            table[p, j] = j * length + li
    valid = table >= 0
    idx = np.where(valid, table, 0).astype(np.int32).reshape(-1)
    src = x.reshape(n, c, kk * length)
    g = src.take(host_const(idx, x), 2).reshape(n, c, math.prod(padded), kk)
    mask = host_const(valid.astype(np.float32), x, compute_dtype(x.dtype)).reshape(1, 1, math.prod(padded), kk)
    out = (g.cast(compute_dtype(x.dtype)) * mask).sum(-1).reshape(n, c, *padded).cast(x.dtype)
    return out.shrink([(0, n), (0, c)] + [(pads[i], pads[i] + image[i]) for i in range(k)])


# --- pooling -----------------------------------------------------------------------------------------
def _pool_setup(ctx: OpContext, x: Tensor) -> tuple[list[int], list[int], list[int], Pairs, bool]:
    kernel, st, dl = spatial_attrs(ctx, kernel_shape(ctx))
    pads = auto_pads(ctx, x.shape[2:], kernel, st, dl)
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
    extra = pool_geometry(x.shape, tuple(kernel), tuple(st), tuple(dl), tuple(pads), ceil_mode)
    full = [(0, 0)] * (x.ndim - nk) + [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]
    numel = x.numel()
    low = -math.inf if x.dtype.is_float else x.dtype.min
    xw = window(x.pad(full, value=low), tuple(kernel), tuple(st), tuple(dl))
    labels = Tensor.arange(numel, device=x.device, dtype=dtypes.int64).reshape(x.shape)
    lw = window(labels.pad(full, value=numel), tuple(kernel), tuple(st), tuple(dl))
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


@onnx_op("MaxUnpool")
def max_unpool(ctx: OpContext) -> Tensor:
    """Scatter each value to its MaxPool index (flat over the inferred output), zero elsewhere."""
    x, ind = ctx.t(0), ctx.t(1)
    kernel = [int(v) for v in ctx.attr("kernel_shape")]
    k = len(kernel)
    st = [int(v) for v in (ctx.attr("strides", None) or [1] * k)]
    pads = [int(v) for v in (ctx.attr("pads", None) or [0] * (2 * k))]
    n, c, *sp = x.shape
    inferred = [(sp[i] - 1) * st[i] - (pads[i] + pads[i + k]) + kernel[i] for i in range(k)]
    plane = math.prod(inferred)
    rel = ind.cast(dtypes.int32).reshape(n * c, -1)
    offs = Tensor.arange(n * c, dtype=dtypes.int32, device=x.device).reshape(n * c, 1) * plane
    rel = rel - offs
    base = Tensor.zeros(n * c, plane, dtype=x.dtype, device=x.device)
    y = scatter_elements(base, rel, x.reshape(n * c, -1), 1).reshape(n, c, *inferred)
    if ctx.has(2):
        target = [int(v) for v in ctx.static(2, "output_shape")]
        y = y.pad([(0, t - s) for t, s in zip(target, y.shape, strict=True)])
    return y


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
    win = window(sq.pad(((0, 0),) * (sq.ndim - 1) + ((lo, hi),)), (size,), (1,), (1,))
    ssum = win.sum(-1).transpose(1, -1)
    return (xf / (ssum * (alpha / size) + bias).pow(beta)).cast(x.dtype)


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
