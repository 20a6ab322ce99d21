"""A per-input-channel scale in front of a 1x1 conv moved onto the conv's weights (jit/frontend/nn_ops.py ``conv2d``).

Squeeze-and-excitation (efficientnet, mobilenet_v3) multiplies an activation by one value per channel and feeds the
product to a 1x1 conv: ``conv(x * s, w)``. Fused into the conv, the multiply would be recomputed for every block of
output channels, so the scheduler stores the product (jit/schedule/fusion_cost.py): a pass over the whole
activation, written and read again. The same sum is ``conv(x, w * s)``: the scale moves onto the weights, a kernel
of ``Cout x Cin`` elements per call instead of ``Cin x H x W``, taken where the weights are at most
``1 / SCALED_WEIGHTS_MIN_RATIO`` of the activation (the late layers, 7x7 activations under 192 x 1152 weights, keep
the product). conv2d multiplies the weights in the layout it reads them in (channel-blocked for output rows that do
not split into vectors), whose copy of the stored weights a capture folds: the product is then one contiguous pass,
where scaling first and copying after gathered the weights a channel block at a time.

What holds: the result is the conv of the same values, each product's factors associated differently
(``x * (w * s)`` for ``(x * s) * w``), so float results agree within rounding.
"""

from __future__ import annotations

import math

from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops

# weights at most this fraction of the activation (in elements) take the scale (module docstring)
SCALED_WEIGHTS_MIN_RATIO = 1


def channel_scaled(x: Tensor, weight: Tensor, groups: int) -> tuple[Tensor, Tensor] | None:
    """``(activation, scale)`` when ``x`` is an activation times a per-channel scale of shape ``(1, Cin, 1, ...)``
    feeding a 1x1 conv of ``weight`` (no groups, batch 1: the scale is one per channel) whose weights are small next
    to the activation, the scale as ``(Cin,)`` in the weights' dtype; None otherwise."""
    node = x.uop
    if groups != 1 or x.shape[0] != 1 or math.prod(weight.shape[2:]) != 1 or node.op is not Ops.MUL or \
            weight.numel() * SCALED_WEIGHTS_MIN_RATIO > x.numel():
        return None
    per_channel = (1, x.shape[1], *(1,) * (x.ndim - 2))
    for i, src in enumerate(node.src):
        if src.op is Ops.EXPAND and src.src[0].shape == per_channel:
            scale = Tensor(src.src[0], device=x.device).reshape(x.shape[1])
            return Tensor(node.src[1 - i], device=x.device), scale.cast(weight.dtype)
    return None
