"""ONNX attention and sequence-mixing ops: Attention, RotaryEmbedding, FlexAttention, LinearAttention and
CausalConvWithState (the state-carrying pieces of linear-attention models)."""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import dtypes, to_numpy
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.ops.nn_helpers import compute_dtype, masked_softmax, neg_inf_bias, offset_mask
from jit.onnx.ops.recurrent import run_body, step_slice
from jit.onnx.registry import OpContext, Value, onnx_op


# --- softmax attention ---------------------------------------------------------------------------------
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
        q, k, v = _heads(q, int(qh)), _heads(k, int(kvh)), _heads(v, int(kvh))
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


# --- linear attention and state-carrying ops -----------------------------------------------------------
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
