"""ONNX ops beyond the core families: sampling (GridSample, AffineGrid, RoiAlign, DeformConv, Col2Im, MaxUnpool,
CenterCropPad), signal processing (DFT, STFT, windows, MelWeightMatrix), detection (NonMaxSuppression),
quantized linear algebra (QLinearMatMul, QLinearConv), BitCast, Det, Optional*, training optimizers, the
ai.onnx.ml ops (Binarizer, ArrayFeatureExtractor, TreeEnsemble) and the newer fused ops (SwiGLU,
CausalConvWithState, LinearAttention, FlexAttention).

Host (numpy) work here is limited to index and weight tables built from shapes and load-time constants
(DFT matrices, window tables, sampling grids' base coordinates); every data value computes through Tensor ops.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from jit.common.dtype import DType, dtypes, to_numpy
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.loader import OpContext, Value, onnx_op
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.ops.indexing import scatter_elements
from jit.onnx.ops.nn import _auto_pads, _kernel_shape, _spatial
from jit.onnx.ops.nn_helpers import compute_dtype, host_const
from jit.onnx.ops.recurrent import run_body, step_slice


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


# --- fused activations and state-carrying ops ----------------------------------------------------------
@onnx_op("SwiGLU")
def swiglu(ctx: OpContext) -> Tensor:
    """``a * sigmoid(alpha * a) * b`` (the sigmoid rounded to the input dtype, as the reference)."""
    a, b = ctx.t(0), ctx.t(1)
    alpha = float(ctx.attr("alpha", 1.0) or 1.0)
    cd = compute_dtype(a.dtype)
    s = (a.cast(cd) * alpha).sigmoid().cast(a.dtype)
    return (a.cast(cd) * s.cast(cd) * b.cast(cd)).cast(a.dtype)


@onnx_op("CausalConvWithState")
def causal_conv_with_state(ctx: OpContext) -> tuple[Tensor, Tensor]:
    """Depthwise causal conv1d over [past_state, input] with optional SiLU; returns (output, present_state)."""
    x, w, b, past = ctx.t(0), ctx.t(1), ctx.opt(2), ctx.opt(3)
    act = ctx.attr("activation", "none") or "none"
    if act not in ("none", "silu", "swish"):
        raise ctx.unsupported(activation=act)
    bs, ch, _ = x.shape
    k = w.shape[2]
    if past is None:
        padded = x.pad(((0, 0), (0, 0), (k - 1, 0)))
    else:
        padded = Tensor.cat(past.cast(x.dtype), x, dim=2)
    cd = compute_dtype(x.dtype)
    out = padded.cast(cd).conv2d(w.cast(cd), b.cast(cd) if b is not None else None, groups=ch).cast(x.dtype)
    if act != "none":
        of = out.cast(cd)
        out = (of * of.sigmoid()).cast(x.dtype)
    total = padded.shape[2]
    state = padded[:, :, total - (k - 1):] if k > 1 else Tensor.zeros(bs, ch, 0, dtype=x.dtype, device=x.device)
    return out, state


def _heads(t: Tensor, heads: int) -> Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    b, s, hd = t.shape
    return t.reshape(b, s, heads, hd // heads).permute(0, 2, 1, 3)


@onnx_op("LinearAttention")
def linear_attention(ctx: OpContext) -> tuple[Tensor, Tensor]:
    """Recurrent linear attention (linear / gated / delta / gated_delta), unrolled over the static sequence."""
    q, k, v = ctx.t(0), ctx.t(1), ctx.t(2)
    past, decay, beta = ctx.opt(3), ctx.opt(4), ctx.opt(5)
    rule = ctx.attr("update_rule", "gated_delta") or "gated_delta"
    hq, hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.unsupported(update_rule=rule)
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ShapeError(f"{ctx.where()}: update_rule {rule!r} expected decay {'given' if gating else 'absent'} "
                         f"and beta {'given' if delta else 'absent'}")
    f32 = dtypes.float32
    bsz, steps, _ = q.shape
    dk, dv = q.shape[-1] // hq, v.shape[-1] // hkv
    group = hq // hkv
    q4, k4, v4 = _heads(q, hq).cast(f32), _heads(k, hkv).cast(f32), _heads(v, hkv).cast(f32)
    d4 = b4 = None
    if decay is not None:
        last = decay.shape[-1]
        d4 = (decay.reshape(bsz, steps, hkv, 1).permute(0, 2, 1, 3) if last == hkv else _heads(decay, hkv)).cast(f32)
    if beta is not None:
        last = beta.shape[-1]
        b4 = beta.reshape(bsz, steps, last, 1).permute(0, 2, 1, 3).cast(f32)
    state = past.cast(f32) if past is not None else Tensor.zeros(bsz, hkv, dk, dv, dtype=f32, device=q.device)
    state_dtype = past.dtype if past is not None else q.dtype
    scale = ctx.attr("scale", None)
    sc = 1.0 / math.sqrt(dk) if not scale else float(scale)
    outs = []
    for t in range(steps):
        q_t, k_t, v_t = step_slice(q4, 2, t), step_slice(k4, 2, t), step_slice(v4, 2, t)
        if d4 is not None:
            state = state * step_slice(d4, 2, t).exp().unsqueeze(-1)
        if b4 is not None:
            retrieved = (state * k_t.unsqueeze(-1)).sum(2)
            v_t = step_slice(b4, 2, t) * (v_t - retrieved)
        state = (state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)).contiguous()
        read = state
        if group > 1:
            read = state.unsqueeze(2).expand(bsz, hkv, group, dk, dv).reshape(bsz, hq, dk, dv)
        outs.append(((q_t.unsqueeze(-1) * read).sum(2) * sc).unsqueeze(2))  # (B, Hq, 1, dv)
    y = Tensor.cat(*outs, dim=2) if len(outs) > 1 else outs[0]
    y = y.permute(0, 2, 1, 3).reshape(bsz, steps, hq * dv).cast(q.dtype)
    return y, state.cast(state_dtype)


@onnx_op("ai.onnx.preview.FlexAttention")
def flex_attention(ctx: OpContext) -> Tensor:
    """Scaled dot-product attention with optional score_mod / prob_mod subgraphs and GQA."""
    q, k, v = ctx.t(0), ctx.t(1), ctx.t(2)
    scale = ctx.attr("scale", None)
    precision = ctx.attr("softmax_precision", None)
    _, hq, _, e = q.shape
    hkv, s_len = k.shape[1], k.shape[2]
    if hq != hkv:
        rep = hq // hkv
        k = k.unsqueeze(2).expand(k.shape[0], hkv, rep, s_len, k.shape[3]).reshape(k.shape[0], hq, s_len, k.shape[3])
        v = v.unsqueeze(2).expand(v.shape[0], hkv, rep, s_len, v.shape[3]).reshape(v.shape[0], hq, s_len, v.shape[3])
    sc = 1.0 / math.sqrt(e) if scale is None else float(scale)
    sq = float(np.asarray(np.sqrt(np.float32(sc))).astype(to_numpy(q.dtype)))
    cd = onnx_dtype(int(precision)) if precision is not None else compute_dtype(q.dtype)
    mm = compute_dtype(q.dtype)
    scores = (q.cast(mm) * sq).matmul((k.cast(mm) * sq).transpose(-1, -2)).cast(q.dtype).cast(cd)
    score_mod, prob_mod = ctx.attr("score_mod", None), ctx.attr("prob_mod", None)
    if score_mod is not None:
        scores = run_body(ctx, score_mod, [Value(tensor=scores)])[0].as_tensor(ctx.model.device).cast(cd)
    probs = scores.softmax(-1)
    if prob_mod is not None:
        probs = run_body(ctx, prob_mod, [Value(tensor=probs)])[0].as_tensor(ctx.model.device).cast(cd)
    return probs.matmul(v.cast(cd)).cast(v.dtype)


# --- BitCast -------------------------------------------------------------------------------------------
@onnx_op("BitCast")
def bitcast(ctx: OpContext) -> Tensor:
    """Reinterpret the bits of each element as another type of the same width."""
    return ctx.t(0).bitcast(onnx_dtype(int(ctx.attr("to"))))


# --- signal processing: DFT, STFT, windows, mel filter bank ---------------------------------------------
def _dft_matrices(n_in: int, n_fft: int, n_out: int, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sign*sin of 2*pi*t*k/n_fft, shape (n_in, n_out), built at load from the sizes."""
    t = np.arange(n_in, dtype=np.float64).reshape(-1, 1)
    k = np.arange(n_out, dtype=np.float64).reshape(1, -1)
    ang = 2.0 * np.pi * ((t * k) % n_fft) / n_fft
    return np.cos(ang), sign * np.sin(ang)


def dft_last(re: Tensor, im: Tensor | None, n_fft: int, inverse: bool, onesided: bool) -> tuple[Tensor, Tensor | None]:
    """DFT along the last axis of (re, im) as matmuls with cos/sin tables; returns (re, im) or (re, None).

    A signal shorter than ``n_fft`` is zero-padded implicitly (the tables have one row per input sample), a
    longer one is truncated. The tables are O(n_fft^2): this suits frame-sized transforms, not long signals."""
    n_in = re.shape[-1]
    cd = re.dtype
    if inverse and onesided:  # irfft: the one-sided spectrum is extended hermitian; the output is real
        m = n_fft // 2 + 1
        if n_in > m:
            re, im = re[..., :m], (im[..., :m] if im is not None else None)
        n_in = min(n_in, m)
        c, s = _dft_matrices(n_in, n_fft, n_fft, 1.0)  # (n_in, n_fft)
        w = np.full((n_in, 1), 2.0)
        w[0] = 1.0
        if n_fft % 2 == 0 and n_in == m:
            w[m - 1] = 1.0
        out = re.matmul(host_const(c * w / n_fft, re, cd))
        if im is not None:
            out = out - im.matmul(host_const(s * w / n_fft, re, cd))
        return out, None
    if n_in > n_fft:
        re, im = re[..., :n_fft], (im[..., :n_fft] if im is not None else None)
        n_in = n_fft
    n_out = n_fft // 2 + 1 if onesided else n_fft
    c, s = _dft_matrices(n_in, n_fft, n_out, 1.0 if inverse else -1.0)
    scale = 1.0 / n_fft if inverse else 1.0
    ct, st = host_const(c * scale, re, cd), host_const(s * scale, re, cd)
    # (re + i im)(cos + i s) = re cos - im s + i (re s + im cos)
    out_re, out_im = re.matmul(ct), re.matmul(st)
    if im is not None:
        out_re = out_re - im.matmul(st)
        out_im = out_im + im.matmul(ct)
    return out_re, out_im


@onnx_op("DFT")
def dft(ctx: OpContext) -> Tensor:
    """DFT-17/20: real or complex input (last dim 1 or 2), dft_length, axis, inverse, onesided (rfft/irfft)."""
    x = ctx.t(0)
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.opset >= 20:
        axis = int(np.asarray(ctx.static(2, "axis")).reshape(-1)[0]) if ctx.has(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis %= x.ndim
    if axis == x.ndim - 1:
        raise ShapeError(f"{ctx.where()}: axis expected a signal axis (not the last, complex axis), got {axis}")
    n_sig = x.shape[axis]
    if ctx.has(1):
        n_fft = int(np.asarray(ctx.static(1, "dft_length")).reshape(-1)[0])
    else:
        n_fft = 2 * (n_sig - 1) if inverse and onesided else n_sig
    cd = dtypes.float64  # as the reference (numpy's fft): a float32 sum leaves ~1e-6 where exact zeros belong
    xc = x.cast(cd)
    re = xc[..., 0].transpose(axis, -1) if axis != x.ndim - 2 else xc[..., 0]
    im = None
    if x.shape[-1] == 2:
        im = xc[..., 1].transpose(axis, -1) if axis != x.ndim - 2 else xc[..., 1]
    out_re, out_im = dft_last(re, im, n_fft, inverse, onesided)
    parts = [out_re.unsqueeze(-1)] + ([out_im.unsqueeze(-1)] if out_im is not None else [])
    y = Tensor.cat(*parts, dim=-1) if len(parts) > 1 else parts[0]
    if axis != x.ndim - 2:
        y = y.transpose(axis, -2)
    return y.cast(x.dtype)


@onnx_op("STFT")
def stft(ctx: OpContext) -> Tensor:
    """Short-time Fourier transform: frames gathered with a load-time index table, windowed, DFT as matmul."""
    x = ctx.t(0)
    step = int(np.asarray(ctx.static(1, "frame_step")).reshape(-1)[0])
    window = ctx.opt(2)
    if ctx.has(3):
        flen = int(np.asarray(ctx.static(3, "frame_length")).reshape(-1)[0])
    else:
        flen = window.shape[0] if window is not None else x.shape[-2]
    onesided = bool(ctx.attr("onesided", 1))
    length = x.shape[1]
    frames = 1 + (length - flen) // step
    idx = (np.arange(frames).reshape(-1, 1) * step + np.arange(flen).reshape(1, -1)).reshape(-1)
    cd = dtypes.float64
    xc = x.cast(cd)
    fr = xc.take(host_const(idx.astype(np.int32), xc), 1).reshape(x.shape[0], frames, flen, x.shape[-1])
    if window is not None:
        fr = fr * window.cast(cd).reshape(1, 1, flen, 1)
    re = fr[..., 0]
    im = fr[..., 1] if x.shape[-1] == 2 else None
    out_re, out_im = dft_last(re, im, flen, False, onesided)
    assert out_im is not None
    return Tensor.cat(out_re.unsqueeze(-1), out_im.unsqueeze(-1), dim=-1).cast(x.dtype)


def _window(ctx: OpContext, terms: list[tuple[float, float]]) -> Tensor:
    """sum_j a_j * cos(j_mult * 2*pi*n / N) over the window's terms [(a_j, multiple_j)], via Tensor ops."""
    size = int(np.asarray(ctx.static(0, "size")).reshape(-1)[0])
    periodic = int(ctx.attr("periodic", 1))
    out = onnx_dtype(int(ctx.attr("output_datatype", 1)))
    denom = size if periodic else size - 1
    n = Tensor.arange(size, dtype=dtypes.float64 if out == dtypes.float64 else dtypes.float32)
    acc: Tensor | None = None
    for a, mult in terms:
        term = (n * (2.0 * math.pi * mult / denom)).cos() * a if mult else n.zeros_like() + a
        acc = term if acc is None else acc + term
    assert acc is not None
    return acc.cast(out)


@onnx_op("HannWindow")
def hann_window(ctx: OpContext) -> Tensor:
    return _window(ctx, [(0.5, 0.0), (-0.5, 1.0)])


@onnx_op("HammingWindow")
def hamming_window(ctx: OpContext) -> Tensor:
    alpha = 25.0 / 46.0
    return _window(ctx, [(alpha, 0.0), (-(1.0 - alpha), 1.0)])


@onnx_op("BlackmanWindow")
def blackman_window(ctx: OpContext) -> Tensor:
    return _window(ctx, [(0.42, 0.0), (-0.5, 1.0), (0.08, 2.0)])


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx: OpContext) -> Tensor:
    """The (dft_length // 2 + 1, num_mel_bins) triangular filter bank: a table of load-time scalars."""
    num_mel, n_fft, rate = (int(np.asarray(ctx.static(i)).reshape(-1)[0]) for i in range(3))
    lo_hz, hi_hz = (float(np.asarray(ctx.static(i)).reshape(-1)[0]) for i in (3, 4))
    bins = n_fft // 2 + 1
    lo_mel = 2595 * np.log1p(lo_hz / 700) / np.log(10)
    hi_mel = 2595 * np.log1p(hi_hz / 700) / np.log(10)
    points = np.arange(num_mel + 2) * ((hi_mel - lo_mel) / (num_mel + 2)) + lo_mel
    hz = 700 * np.expm1(points / 2595 * np.log(10))
    edges = (((n_fft + 1) * hz) // rate).astype(int)
    table = np.zeros((bins, num_mel))
    for i in range(num_mel):
        lo, c, hi = edges[i], edges[i + 1], edges[i + 2]
        if c == lo:
            table[c, i] = 1
        else:
            for j in range(lo, c + 1):
                table[j, i] = (j - lo) / (c - lo)
        for j in range(c, hi):
            table[j, i] = (hi - j) / (hi - c)
    out = onnx_dtype(int(ctx.attr("output_datatype", 1)))
    return Tensor(table.astype(to_numpy(out)), device=ctx.model.device)


# --- detection -----------------------------------------------------------------------------------------
def _iou_suppress(a: np.ndarray, b: np.ndarray, center: bool, thr: float) -> bool:
    if center:
        ax0, ax1, ay0, ay1 = a[0] - a[2] / 2, a[0] + a[2] / 2, a[1] - a[3] / 2, a[1] + a[3] / 2
        bx0, bx1, by0, by1 = b[0] - b[2] / 2, b[0] + b[2] / 2, b[1] - b[3] / 2, b[1] + b[3] / 2
    else:
        ay0, ay1 = sorted((a[0], a[2]))
        ax0, ax1 = sorted((a[1], a[3]))
        by0, by1 = sorted((b[0], b[2]))
        bx0, bx1 = sorted((b[1], b[3]))
    ix = min(ax1, bx1) - max(ax0, bx0)
    iy = min(ay1, by1) - max(ay0, by0)
    if ix <= 0 or iy <= 0:
        return False
    inter = ix * iy
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > thr)


@onnx_op("NonMaxSuppression")
def non_max_suppression(ctx: OpContext) -> np.ndarray:
    """Greedy per-class NMS. The output's length depends on the boxes and scores, so they must be known at
    load; the result is an index table (batch, class, box) computed there."""
    boxes = ctx.static(0, "boxes").astype(np.float64)
    scores = ctx.static(1, "scores").astype(np.float64)
    scalars = [ctx.static(i).reshape(-1) if ctx.has(i) else np.zeros(0) for i in (2, 3, 4)]
    max_out = max(int(scalars[0][0]), 0) if scalars[0].size else 0
    iou = float(scalars[1][0]) if scalars[1].size else 0.0
    score_thr = float(scalars[2][0]) if scalars[2].size else None
    center = bool(ctx.attr("center_point_box", 0))
    out: list[tuple[int, int, int]] = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            sc = scores[b, c]
            cand = [i for i in range(boxes.shape[1]) if score_thr is None or sc[i] > score_thr]
            cand.sort(key=lambda i: (-sc[i], i))
            chosen: list[int] = []
            for i in cand:
                if len(chosen) >= max_out:
                    break
                if not any(_iou_suppress(boxes[b, i], boxes[b, j], center, iou) for j in chosen):
                    chosen.append(i)
                    out.append((b, c, i))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


# --- quantized linear algebra --------------------------------------------------------------------------
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
    kernel, st, dl = _spatial(ctx, _kernel_shape(ctx, w))
    pads = _auto_pads(ctx, x.shape[2:], kernel, st, dl)
    acc = xi.conv2d(wi, bias.cast(dtypes.int32) if bias is not None else None, groups=int(ctx.attr("group", 1)),
                    stride=st, dilation=dl, padding=pads)
    nd = w.ndim - 2
    w_sc = w_s.reshape(()) if w_s.numel() == 1 else w_s.reshape(1, -1, *([1] * nd))
    scale = x_s.reshape(()) * w_sc.cast(x_s.dtype) / y_s.reshape(()).cast(x_s.dtype)
    out = y_z.dtype if y_z is not None else x.dtype
    return _requantize(acc, scale, y_z.reshape(()) if y_z is not None else None, out)


# --- crops, folds, unpooling ---------------------------------------------------------------------------
@onnx_op("CenterCropPad")
def center_crop_pad(ctx: OpContext) -> Tensor:
    """Center-crop or zero-pad each listed axis to the target size."""
    x = ctx.t(0)
    shape = [int(s) for s in ctx.static(1, "shape")]
    axes = [int(a) % x.ndim for a in (ctx.attr("axes", None) or range(x.ndim))]
    pads = [(0, 0)] * x.ndim
    bounds = [(0, s) for s in x.shape]
    for a, target in zip(axes, shape, strict=True):
        n = x.shape[a]
        if target < n:
            start = (n - target) // 2
            bounds[a] = (start, start + target)
        elif target > n:
            left = (target - n) // 2
            pads[a] = (left, target - n - left)
    return x.shrink(bounds).pad(pads)


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


# --- sampling with learned offsets ---------------------------------------------------------------------
@onnx_op("RoiAlign")
def roi_align(ctx: OpContext) -> Tensor:
    """RoiAlign (avg / max) with bilinear samples on a regular grid per output bin (onnxruntime semantics)."""
    x, rois, bidx = ctx.t(0), ctx.t(1), ctx.t(2)
    mode = str(ctx.attr("mode", "avg")).lower()
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    half = str(ctm).lower() == "half_pixel"
    if ratio > 0:
        return _roi_align(x, rois, bidx, oh, ow, ratio, ratio, scale, half, mode)
    # an adaptive grid (ceil(roi size / bins)) depends on the boxes: they must be known at load
    boxes = ctx.static(1, "rois").astype(np.float64)
    outs = []
    for r in range(boxes.shape[0]):
        off = 0.5 if half else 0.0
        w = boxes[r, 2] * scale - off - (boxes[r, 0] * scale - off)
        h = boxes[r, 3] * scale - off - (boxes[r, 1] * scale - off)
        if not half:
            w, h = max(w, 1.0), max(h, 1.0)
        gh, gw = int(np.ceil(h / oh)), int(np.ceil(w / ow))
        outs.append(_roi_align(x, rois[r:r + 1], bidx[r:r + 1], oh, ow, max(gh, 1), max(gw, 1), scale, half, mode,
                               count=max(gh * gw, 1)))
    return Tensor.cat(*outs, dim=0) if len(outs) > 1 else outs[0]


def _roi_axis(start: Tensor, size: Tensor, bins: int, grid: int, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor,
                                                                                 Tensor]:
    """Per roi and sample along one axis: (low index, high index, low weight, high weight, in range)."""
    frac = np.array([[b + (i + 0.5) / grid for i in range(grid)] for b in range(bins)], dtype=np.float32).reshape(-1)
    c = start.reshape(-1, 1) + host_const(frac, start, start.dtype).reshape(1, -1) * (size / bins).reshape(-1, 1)
    valid = (c >= -1.0).logical_and(c <= float(n))
    c = c.maximum(0.0)
    low = c.floor()
    edge = low >= float(n - 1)
    low = edge.where(float(n - 1), low)
    c = edge.where(low, c)
    high = edge.where(low, low + 1.0)
    lw = c - low
    return low.cast(dtypes.int32), high.cast(dtypes.int32), (lw * -1.0) + 1.0, lw, valid


def _roi_align(x: Tensor, rois: Tensor, bidx: Tensor, oh: int, ow: int, gh: int, gw: int, scale: float, half: bool,
               mode: str, count: int | None = None) -> Tensor:
    n, c, h, w = x.shape
    cd = compute_dtype(x.dtype)
    r = rois.cast(cd)
    off = 0.5 if half else 0.0
    x0, y0 = r[:, 0] * scale - off, r[:, 1] * scale - off
    rw, rh = r[:, 2] * scale - off - x0, r[:, 3] * scale - off - y0
    if not half:
        rw, rh = rw.maximum(1.0), rh.maximum(1.0)
    ylo, yhi, yhw, ylw, yv = _roi_axis(y0, rh, oh, gh, h)  # (R, oh*gh)
    xlo, xhi, xhw, xlw, xv = _roi_axis(x0, rw, ow, gw, w)  # (R, ow*gw)
    nr = rois.shape[0]
    sy, sx = oh * gh, ow * gw
    ys = [(ylo, yhw), (ylo, yhw), (yhi, ylw), (yhi, ylw)]
    xs = [(xlo, xhw), (xhi, xlw), (xlo, xhw), (xhi, xlw)]
    valid = yv.reshape(nr, sy, 1).logical_and(xv.reshape(nr, 1, sx))
    base = bidx.cast(dtypes.int32).reshape(nr, 1, 1) * (h * w)
    idxs, wts = [], []
    for (yi, yw), (xi, xw) in zip(ys, xs, strict=True):
        idxs.append((base + yi.reshape(nr, sy, 1) * w + xi.reshape(nr, 1, sx)).unsqueeze(-1))
        wts.append(valid.where(yw.reshape(nr, sy, 1) * xw.reshape(nr, 1, sx), 0.0).cast(cd).unsqueeze(-1))
    idx = Tensor.cat(*idxs, dim=-1)  # (R, sy, sx, 4)
    wt = Tensor.cat(*wts, dim=-1)
    # out-of-range samples read position 0 with weight 0 (as the reference)
    idx = valid.unsqueeze(-1).where(idx, base.unsqueeze(-1).expand(nr, sy, sx, 4))
    flat = x.cast(cd).permute(0, 2, 3, 1).reshape(n * h * w, c)
    vals = flat.take(idx.reshape(-1), 0).reshape(nr, oh, gh, ow, gw, 4, c)
    prod = vals * wt.reshape(nr, oh, gh, ow, gw, 4, 1)
    if mode == "avg":
        out = prod.sum((2, 4, 5)) / float(count if count is not None else max(gh * gw, 1))
    else:
        out = prod.max(5).max((2, 4))
    return out.permute(0, 3, 1, 2).cast(x.dtype)


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


# --- linear algebra ------------------------------------------------------------------------------------
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


# --- optionals (tensor-typed only) ---------------------------------------------------------------------
@onnx_op("OptionalHasElement")
def optional_has_element(ctx: OpContext) -> np.ndarray:
    return np.asarray(ctx.has(0))


def _optional_payload(ctx: OpContext) -> Value:
    v = ctx.inputs[0] if ctx.inputs else None
    if v is None:
        raise ctx.unsupported(input="an empty optional (only tensor-typed optionals holding a value are supported)")
    return v


@onnx_op("OptionalGetElement")
def optional_get_element(ctx: OpContext) -> Value:
    return _optional_payload(ctx)


@onnx_op("Optional")
def optional(ctx: OpContext) -> Value:
    return _optional_payload(ctx)


# --- training optimizers (ai.onnx.preview.training) ----------------------------------------------------
def _per_tensor(ctx: OpContext, groups: int) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
    """(R, T, [[X, G, ...] per optimized tensor]) from the inputs laid out R, T, X..., G..., V..., H...."""
    r, t = ctx.t(0), ctx.t(1)
    rest = [ctx.t(i) for i in range(2, len(ctx.inputs))]
    k = len(rest) // groups
    return r, t, [[rest[g * k + i] for g in range(groups)] for i in range(k)]


@onnx_op("ai.onnx.preview.training.Adagrad")
def adagrad(ctx: OpContext) -> list[Tensor]:
    r, t, items = _per_tensor(ctx, 3)
    decay, eps = float(ctx.attr("decay_factor", 0.0)), float(ctx.attr("epsilon", 0.0))
    norm = float(ctx.attr("norm_coefficient", 0.0))
    xs, hs = [], []
    for x, g, h in items:
        cd = x.dtype
        rate = r.cast(cd) / (t.cast(cd) * decay + 1.0)
        greg = x * norm + g.cast(cd)
        h_new = h.cast(cd) + greg * greg
        xs.append((x - rate * greg / (h_new.sqrt() + eps)).cast(x.dtype))
        hs.append(h_new.cast(h.dtype))
    return xs + hs


@onnx_op("ai.onnx.preview.training.Momentum")
def momentum(ctx: OpContext) -> list[Tensor]:
    r, t, items = _per_tensor(ctx, 3)
    alpha, beta = float(ctx.attr("alpha")), float(ctx.attr("beta"))
    norm, mode = float(ctx.attr("norm_coefficient")), ctx.attr("mode")
    xs, vs = [], []
    for x, g, v in items:
        cd = x.dtype
        greg = x * norm + g.cast(cd)
        b = (t > 0).where(beta, 1.0).cast(cd)
        v_new = v.cast(cd) * alpha + greg * b
        step = v_new if mode == "standard" else greg + v_new * alpha
        xs.append((x - r.cast(cd) * step).cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
    return xs + vs


@onnx_op("ai.onnx.preview.training.Adam")
def adam(ctx: OpContext) -> list[Tensor]:
    r, t, items = _per_tensor(ctx, 4)
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps, norm = float(ctx.attr("epsilon", 0.0)), float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    xs, vs, hs = [], [], []
    for x, g, v, h in items:
        cd = x.dtype
        greg = x * norm + g.cast(cd)
        v_new = v.cast(cd) * alpha + greg * (1.0 - alpha)
        h_new = h.cast(cd) * beta + greg * greg * (1.0 - beta)
        tf = t.cast(dtypes.float64)
        corr = ((tf * math.log(beta)).exp() * -1.0 + 1.0).sqrt() / ((tf * math.log(alpha)).exp() * -1.0 + 1.0)
        rate = (t > 0).where(r.cast(dtypes.float64) * corr, r.cast(dtypes.float64)).cast(cd)
        x_new = (x - rate * (v_new / (h_new.sqrt() + eps))) * (1.0 - post)
        xs.append(x_new.cast(x.dtype))
        vs.append(v_new.cast(v.dtype))
        hs.append(h_new.cast(h.dtype))
    return xs + vs + hs


# --- ai.onnx.ml ----------------------------------------------------------------------------------------
@onnx_op("ai.onnx.ml.Binarizer")
def binarizer(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return (x > float(ctx.attr("threshold", 0.0))).where(1.0, 0.0).cast(x.dtype)


@onnx_op("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(ctx: OpContext) -> Tensor:
    """``x[..., indices]`` with the indices flattened; a 1-D input gives one row (onnxruntime)."""
    x, idx = ctx.t(0), ctx.t(1)
    flat = idx.reshape(-1).cast(dtypes.int32)
    out = x.take(flat, x.ndim - 1)
    return out.reshape(1, flat.shape[0]) if x.ndim == 1 else out


_TREE_MODES = ("leq", "lt", "gte", "gt", "eq", "neq", "member")


@onnx_op("ai.onnx.ml.TreeEnsemble")
def tree_ensemble(ctx: OpContext) -> Tensor:
    """Every node's comparison for every sample at once; each leaf is reached when all decisions on its path
    agree (a product of the path's decisions, gathered through load-time tables); leaves aggregate per target."""
    x = ctx.t(0)
    a = ctx.attrs
    splits = np.asarray(a["nodes_splits"]).reshape(-1)
    feats = list(a["nodes_featureids"])
    modes = [int(m) for m in np.asarray(a["nodes_modes"]).reshape(-1)]
    t_ids, f_ids = list(a["nodes_truenodeids"]), list(a["nodes_falsenodeids"])
    t_leaf, f_leaf = list(a["nodes_trueleafs"]), list(a["nodes_falseleafs"])
    leaf_t, leaf_w = list(a["leaf_targetids"]), np.asarray(a["leaf_weights"]).reshape(-1)
    roots = list(a["tree_roots"])
    n_targets = int(a.get("n_targets", max(leaf_t) + 1))
    agg = int(a.get("aggregate_function", 1))
    post = int(a.get("post_transform", 0))
    tracks = list(a.get("nodes_missing_value_tracks_true", []) or [])
    members = iter(np.asarray(a["membership_values"]).reshape(-1).tolist()) if "membership_values" in a else None
    # walk the trees as the reference builds them: membership lists are consumed in that (DFS) order
    visits: list[tuple[int, list[float]]] = []  # (node, members) per visited decision
    paths: list[tuple[list[tuple[int, bool]], int]] = []  # ([(visit, branch)], leaf)

    def walk(node: int, is_leaf: bool, path: list[tuple[int, bool]]) -> None:
        if is_leaf:
            paths.append((path, node))
            return
        mem: list[float] = []
        if modes[node] == 6:
            assert members is not None
            while not math.isnan(v := next(members)):
                mem.append(v)
        visits.append((node, mem))
        vi = len(visits) - 1
        walk(t_ids[node], bool(t_leaf[node]), [*path, (vi, True)])
        walk(f_ids[node], bool(f_leaf[node]), [*path, (vi, False)])

    for root in roots:
        degenerate = t_leaf[root] and f_leaf[root] and t_ids[root] == f_ids[root]
        walk(t_ids[root] if degenerate else root, bool(degenerate), [])
    if any(m > 6 for m in modes):
        raise ctx.unsupported(nodes_modes=sorted(set(modes)))
    cd = compute_dtype(x.dtype)
    n = x.shape[0]
    nv, nl = len(visits), len(paths)
    if nv:
        vf = np.array([feats[v] for v, _ in visits], dtype=np.int32)
        xs = x.take(host_const(vf, x), 1)  # (N, V)
        thr = host_const(np.array([splits[v] for v, _ in visits]), x, x.dtype).reshape(1, nv)
        cmp = {0: xs <= thr, 1: xs < thr, 2: xs >= thr, 3: xs > thr, 4: xs == thr, 5: xs != thr}
        cond: Tensor | None = None
        for mode, c in cmp.items():
            sel = np.array([modes[v] == mode for v, _ in visits])
            if sel.any():
                part = c.logical_and(host_const(sel, x).reshape(1, nv))
                cond = part if cond is None else cond.logical_or(part)
        mem_vals = [(vi, m) for vi, (_, ms) in enumerate(visits) for m in ms]
        if mem_vals:
            owner = np.zeros((len(mem_vals), nv), dtype=np.float32)
            for j, (vi, _) in enumerate(mem_vals):
                owner[j, vi] = 1.0
            mv = host_const(np.array([m for _, m in mem_vals]), x, x.dtype)
            xm = x.take(host_const(np.array([feats[visits[vi][0]] for vi, _ in mem_vals], dtype=np.int32), x), 1)
            hit = (xm == mv.reshape(1, -1)).cast(dtypes.float32).matmul(host_const(owner, x)) > 0.0
            cond = hit if cond is None else cond.logical_or(hit)
        assert cond is not None
        if tracks:
            tr = host_const(np.array([bool(tracks[v]) for v, _ in visits]), x).reshape(1, nv)
            cond = cond.logical_or(xs.isnan().logical_and(tr))
        dec = Tensor.cat(cond.cast(cd), (cond.logical_not()).cast(cd), Tensor.ones(n, 1, dtype=cd,
                                                                                     device=x.device), dim=1)
        depth = max(len(p) for p, _ in paths) or 1
        steps = np.full((nl, depth), 2 * nv, dtype=np.int32)  # the ones column pads short paths
        for li, (path, _) in enumerate(paths):
            for j, (vi, br) in enumerate(path):
                steps[li, j] = vi if br else nv + vi
        reached = dec.take(host_const(steps.reshape(-1), x), 1).reshape(n, nl, depth).prod(2)  # (N, L)
    else:
        reached = Tensor.ones(n, nl, dtype=cd, device=x.device)
    weights = np.array([leaf_w[leaf] for _, leaf in paths], dtype=np.float64)
    targets = np.array([leaf_t[leaf] for _, leaf in paths])
    onehot = (targets.reshape(-1, 1) == np.arange(n_targets).reshape(1, -1))
    if agg in (0, 1):
        wmat = onehot * weights.reshape(-1, 1) / (len(roots) if agg == 0 else 1)
        out = reached.matmul(host_const(wmat, x, cd))
    elif agg in (2, 3):
        big = float(np.finfo(np.float32 if cd == dtypes.float32 else np.float64).max)
        fill = big if agg == 2 else -big
        hitm = (reached.unsqueeze(-1) > 0.0).logical_and(host_const(onehot, x).reshape(1, nl, n_targets))
        vals = hitm.where(host_const(weights, x, cd).reshape(1, nl, 1), fill)
        out = vals.min(1) if agg == 2 else vals.max(1)
    else:
        raise ctx.unsupported(aggregate_function=agg)
    if post == 1:
        out = out.softmax(-1)
    elif post == 2:
        out = out.sigmoid()
    elif post != 0:
        raise ctx.unsupported(post_transform=post)
    return out.cast(x.dtype)
