"""ONNX training optimizers (ai.onnx.preview.training): Adagrad, Momentum and Adam, one update step each."""

from __future__ import annotations

import math

from jit.common.dtype import dtypes
from jit.frontend.tensor import Tensor
from jit.onnx.registry import OpContext, onnx_op


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
