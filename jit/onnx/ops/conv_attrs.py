"""The kernel-window attributes that conv, pooling and quantized conv handlers share.

``kernel_shape``, ``strides``, ``dilations`` and ``auto_pad`` / ``pads`` with their ONNX defaults, read from a
node into per-dimension lists.
"""

from __future__ import annotations

from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.registry import OpContext

Pairs = list[tuple[int, int]]


def spatial_attrs(ctx: OpContext, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(kernel, strides, dilations) with ONNX defaults for ``len(kernel)`` spatial dims."""
    n = len(kernel)
    strides = list(ctx.attr("strides", None) or [1] * n)
    dilations = list(ctx.attr("dilations", None) or [1] * n)
    return [int(k) for k in kernel], [int(s) for s in strides], [int(d) for d in dilations]


def auto_pads(ctx: OpContext, in_sp: tuple[int, ...], kernel: list[int], strides: list[int],
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


def kernel_shape(ctx: OpContext, w: Tensor | None = None) -> list[int]:
    ks = ctx.attr("kernel_shape", None)
    if ks is None:
        if w is None:
            raise ShapeError(f"{ctx.where()}: kernel_shape expected, got none")
        ks = w.shape[2:]
    return [int(k) for k in ks]
