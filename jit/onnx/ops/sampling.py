"""ONNX sampling ops: GridSample, AffineGrid and DeformConv (bilinear samples at learned positions).

Host (numpy) work here is limited to tables built from shapes and attributes (the affine base grid, the
kernel taps' base coordinates); every sampled value computes through Tensor ops.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from jit.common.dtype import DType, dtypes
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.nn_helpers import compute_dtype, host_const
from jit.onnx.registry import OpContext, onnx_op


def _float_for(*ts: Tensor) -> DType:
    """float64 when any operand is double, else float32 (the precision sampling coordinates compute in)."""
    return dtypes.float64 if any(t.dtype == dtypes.float64 for t in ts) else dtypes.float32


# --- GridSample / AffineGrid ---------------------------------------------------------------------------
def _reflect(v: Tensor, lo: float, hi: float) -> Tensor:
    """Reflect coordinates outside [lo, hi] back in by the near border, repeatedly (onnx/pytorch)."""
    rng = hi - lo
    if rng <= 0:
        return v.zeros_like() + lo
    below, above = v < lo, v > hi
    dx = below.where(lo - v, v - hi)
    n = (dx / rng).floor()
    r = dx - n * rng
    even = (n - (n * 0.5).floor() * 2.0) == 0.0
    from_lo, from_hi = r + lo, (r * -1.0) + hi
    return below.where(even.where(from_lo, from_hi), above.where(even.where(from_hi, from_lo), v))


def _cubic_coeffs(t: Tensor) -> list[Tensor]:
    """Keys cubic convolution weights (A = -0.75) for the taps at -1, 0, 1, 2 around fraction ``t``."""
    a = -0.75
    x0, x1, x2, x3 = t + 1.0, t, (t * -1.0) + 1.0, (t * -1.0) + 2.0
    far = [((x * a - 5 * a) * x + 8 * a) * x - 4 * a for x in (x0, x3)]
    near = [((x * (a + 2)) - (a + 3)) * x * x + 1.0 for x in (x1, x2)]
    return [far[0], near[0], near[1], far[1]]


def _sample(x: Tensor, coords: list[Tensor], mode: str, padding: str, align: bool) -> Tensor:
    """Sample ``x`` (N, C, *D) at unnormalized coordinates (one (N, *O) tensor per spatial dim)."""
    n, c, *dims = x.shape
    out_sp = coords[0].shape[1:]
    p = math.prod(out_sp)
    per_dim: list[list[tuple[Tensor, Tensor | None, Tensor | None]]] = []
    for v, d in zip(coords, dims, strict=True):
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            v = v.round()
        outside = (v < lo).logical_or(v > hi)
        if padding == "border":
            v = outside.where(v.clip(0.0, d - 1.0), v)
        elif padding == "reflection":
            v = _reflect(v, lo, hi)
        if mode == "nearest":
            taps = [(v.trunc(), None)]
        else:
            base = v.floor()
            t = v - base
            if mode == "linear":
                taps = [(base, (t * -1.0) + 1.0), (base + 1.0, t)]
            else:
                taps = [(base + float(k - 1), w) for k, w in enumerate(_cubic_coeffs(t))]
        pts = []
        for idx, w in taps:
            valid = None
            if padding == "zeros":
                valid = (idx >= 0.0).logical_and(idx < float(d))
            elif padding == "reflection":
                idx = _reflect(idx, lo, hi).trunc()
            pts.append((idx.clip(0.0, d - 1.0).cast(dtypes.int32), w, valid))
        per_dim.append(pts)
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    flats, weights = [], []
    cd = compute_dtype(x.dtype)
    for combo in itertools.product(*per_dim):
        flat = combo[0][0] * strides[0]
        for (idx, _, _), stride in zip(combo[1:], strides[1:], strict=True):
            flat = flat + (idx * stride if stride != 1 else idx)
        ws = [wi for _, wi, _ in combo if wi is not None]
        wt = functools.reduce(lambda a, b: a * b, ws).cast(cd) if ws else \
            Tensor.ones(*flat.shape, dtype=cd, device=x.device)
        vs = [vi for _, _, vi in combo if vi is not None]
        if vs:
            wt = functools.reduce(lambda a, b: a.logical_and(b), vs).where(wt, 0.0).cast(cd)
        flats.append(flat.reshape(n, p, 1))
        weights.append(wt.reshape(n, p, 1))
    k = len(flats)
    idx_all = Tensor.cat(*flats, dim=2) if k > 1 else flats[0]  # (N, P, T)
    w_all = Tensor.cat(*weights, dim=2) if k > 1 else weights[0]
    src = x.cast(cd).reshape(n, c, math.prod(dims))
    got = src.gather(2, idx_all.reshape(n, 1, p * k).expand(n, c, p * k)).reshape(n, c, p, k)
    out = (got * w_all.reshape(n, 1, p, k)).sum(-1)
    return out.reshape(n, c, *out_sp).cast(x.dtype)


@onnx_op("GridSample")
def grid_sample(ctx: OpContext) -> Tensor:
    """GridSample-16/20/22: nearest/linear/cubic, zeros/border/reflection padding, any spatial rank."""
    x, grid = ctx.t(0), ctx.t(1)
    raw = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(raw, raw)  # GridSample-16 names
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise ctx.unsupported(mode=mode, padding_mode=padding)
    dims = x.shape[2:]
    k = len(dims)
    if grid.shape[-1] != k or grid.ndim != x.ndim:
        raise ShapeError(f"{ctx.where()}: grid expected shape (N, *out, {k}), got {grid.shape}")
    fd = _float_for(x, grid)
    g = grid.cast(fd)
    coords = []
    for i, d in enumerate(dims):
        nv = g[..., k - 1 - i]  # the grid's last entry indexes the innermost (width) dimension
        coords.append((nv + 1.0) * ((d - 1) / 2) if align else ((nv + 1.0) * float(d) - 1.0) * 0.5)
    return _sample(x, coords, mode, padding, align)


@onnx_op("AffineGrid")
def affine_grid(ctx: OpContext) -> Tensor:
    """(N, *size, k) sampling grid: theta (N, k, k+1) applied to the normalized base grid (built at load)."""
    theta = ctx.t(0)
    size = [int(s) for s in ctx.static(1, "size")]
    align = bool(ctx.attr("align_corners", 0))
    sp = size[2:]
    axes = []
    for n in sp:
        a = np.linspace(-1.0, 1.0, n) if align else (np.arange(n) * 2.0 + 1.0) / n - 1.0
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(sp))], axis=1)  # (P, k+1)
    cd = compute_dtype(theta.dtype)
    b = host_const(base, theta, cd)
    out = b.matmul(theta.cast(cd).transpose(-1, -2))  # (N, P, k)
    return out.reshape(theta.shape[0], *sp, len(sp)).cast(theta.dtype)


# --- DeformConv ----------------------------------------------------------------------------------------
@onnx_op("DeformConv")
def deform_conv(ctx: OpContext) -> Tensor:
    """Deformable convolution: bilinear samples at offset kernel taps (zero outside), masked, then a grouped
    matmul with the weights."""
    x, w, offset, bias, mask = ctx.t(0), ctx.t(1), ctx.t(2), ctx.opt(3), ctx.opt(4)
    n, c, *sp = x.shape
    oc = w.shape[0]
    kernel = [int(k) for k in (ctx.attr("kernel_shape", None) or w.shape[2:])]
    k = len(kernel)
    st = [int(v) for v in (ctx.attr("strides", None) or [1] * k)]
    dl = [int(v) for v in (ctx.attr("dilations", None) or [1] * k)]
    pads = [int(v) for v in (ctx.attr("pads", None) or [0] * (2 * k))]
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    out_sp = list(offset.shape[2:])
    kk, p = math.prod(kernel), math.prod(out_sp)
    cd = compute_dtype(x.dtype)
    off = offset.cast(cd).reshape(n, og, kk, k, p)
    coords = []
    for d in range(k):
        # base[tap, out position] = out_pos * stride - pad_begin + tap_pos * dilation along spatial dim d
        taps = np.array([t[d] for t in itertools.product(*[range(kd) for kd in kernel])], dtype=np.float64)
        outs = np.array([q[d] for q in itertools.product(*[range(o) for o in out_sp])], dtype=np.float64)
        base = outs.reshape(1, -1) * st[d] - pads[d] + taps.reshape(-1, 1) * dl[d]
        coords.append((off[:, :, :, d] + host_const(base, x, cd)).reshape(n * og, kk * p))
    xs = x.cast(cd).reshape(n * og, c // og, *sp)
    s = _sample(xs, coords, "linear", "zeros", True)  # (n*og, c/og, kk*p)
    s = s.reshape(n, og, c // og, kk, p)
    if mask is not None:
        s = s * mask.cast(cd).reshape(n, og, 1, kk, p)
    cols = s.reshape(n, group, (c // group) * kk, p)
    wg = w.cast(cd).reshape(group, oc // group, (c // group) * kk)
    out = wg.reshape(1, group, oc // group, (c // group) * kk).matmul(cols).reshape(n, oc, *out_sp)
    if bias is not None:
        out = out + bias.cast(cd).reshape(1, oc, *([1] * k))
    return out.cast(x.dtype)
