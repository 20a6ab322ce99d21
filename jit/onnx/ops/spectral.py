"""ONNX signal-processing ops: DFT, STFT, the Hann / Hamming / Blackman windows and MelWeightMatrix.

Transforms are matmuls with cos/sin tables built at load from the sizes; MelWeightMatrix is a host op
(jit/onnx/host_ops.py): its output's shape is the value of its inputs.
"""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import dtypes, to_numpy
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.host_ops import host_op
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.ops.nn_helpers import host_const
from jit.onnx.registry import OpContext, onnx_op


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


@host_op("MelWeightMatrix", reason="the output's shape is the value of its inputs", inputs=(0, 1, 2, 3, 4))
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
