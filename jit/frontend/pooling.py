"""Pooling ops (max, average, Lp, global): Tensor methods built from windows and reductions, as in nn_ops.py.

A strided max pool that pays for a phase copy reads it as conv2d's strided convs do (nn_ops ``phase_inputs``); a
large global average pool sums in two steps (``global_avg_pool``). jit/frontend/__init__.py attaches
``TENSOR_METHODS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jit.codegen.opt.tiling import VECTOR_LOAD_STRIDES
from jit.common.dtype import dtypes
from jit.common.errors import ShapeError
from jit.frontend.movement import window
from jit.frontend.nn_ops import PAD_MATERIALIZE_MIN_MACS, phase_inputs
from jit.frontend.shapes import IntOrTuple, int_tuple, pool_geometry, spatial_pads
from jit.frontend.tensor import Tensor


def _pool_args(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, dilation: IntOrTuple,
               padding: Any, nd: int, what: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                                            tuple[tuple[int, int], ...]]:
    kernel = int_tuple(kernel_size, nd, f"{what} kernel_size") if isinstance(kernel_size, int) else \
        tuple(int(k) for k in kernel_size)
    n = len(kernel)
    if n > x.ndim:
        raise ShapeError(f"{what}: kernel {kernel} has more dims than the input {x.shape}")
    st = kernel if stride is None else int_tuple(stride, n, f"{what} stride")
    return kernel, st, int_tuple(dilation, n, f"{what} dilation"), spatial_pads(padding, n, f"{what} padding")


def _pad_trailing(x: Tensor, pads: Sequence[tuple[int, int]], value: float | int = 0) -> Tensor:
    return x.pad(((0, 0),) * (x.ndim - len(pads)) + tuple(pads), value=value)


def _phase_split_max(x: Tensor, kernel: tuple[int, ...], st: tuple[int, ...], dl: tuple[int, ...],
                     fill: float | int) -> Tensor:
    """A max pool whose last dim has stride s > 1, over its already padded input ``x``, as the max of s pools of
    stride 1 in that dim, one per phase (``_phase_split_conv``'s reasoning: read directly, a row's outputs gather
    inputs s apart; over one phase copy every phase's window rows are contiguous). The phase pools' reduces fuse
    into one kernel (realized: left lazy, the max of the two would be recomputed inside every consumer's loads);
    max is exact in any order, so the result is the same."""
    s, kw = st[-1], kernel[-1]
    out_w = (x.shape[-1] - kw) // s + 1
    out: Tensor | None = None
    for _, taps, x_p in phase_inputs(x, s, kw, out_w, fill):
        win = window(x_p, (*kernel[:-1], taps), (*st[:-1], 1), dl)
        pooled = win.max(tuple(range(win.ndim - len(kernel), win.ndim)))
        out = pooled if out is None else out.maximum(pooled)
    assert out is not None
    return out.contiguous()


def max_pool2d(self: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, dilation: IntOrTuple = 1,
               padding: Any = 0, ceil_mode: bool = False) -> Tensor:
    """Max over sliding windows of the trailing len(kernel) dims (2 for an int kernel); pads never win."""
    kernel, st, dl, pads = _pool_args(self, kernel_size, stride, dilation, padding, 2, "max_pool")
    extra = pool_geometry(self.shape, kernel, st, dl, pads, ceil_mode)
    low = -math.inf if self.dtype.is_float else self.dtype.min
    all_pads = [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]
    x = _pad_trailing(self, all_pads, low)
    win = window(x, kernel, st, dl)
    # the phase copy costs a pass over the input, which pays where a padded copy is made anyway or where vector
    # loads would gather the row (a stride past VECTOR_LOAD_STRIDES); an unpadded stride-2 pool (squeezenet's)
    # reads its input directly, two loads and a shuffle a vector
    if st[-1] > 1 and dl[-1] == 1 and kernel[-1] > 1 and win.numel() >= PAD_MATERIALIZE_MIN_MACS and \
            (any(b or e for b, e in all_pads) or st[-1] not in VECTOR_LOAD_STRIDES):
        return _phase_split_max(x, kernel, st, dl, low)
    return win.max(tuple(range(win.ndim - len(kernel), win.ndim)))


def avg_pool2d(self: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, dilation: IntOrTuple = 1) -> Tensor:
    """Mean over sliding windows of the trailing len(kernel) dims (2 for an int kernel).

    The divisor counts the explicit padding when ``count_include_pad``, and never counts ceil_mode's extra
    end padding (PyTorch/ONNX semantics).
    """
    kernel, st, dl, pads = _pool_args(self, kernel_size, stride, dilation, padding, 2, "avg_pool")
    extra = pool_geometry(self.shape, kernel, st, dl, pads, ceil_mode)
    nk = len(kernel)
    x = self._float_operand()
    red = tuple(range(x.ndim, x.ndim + nk))  # window dims of the (*lead, *out, *k) result
    total = window(_pad_trailing(x, [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]), kernel, st, dl)
    total = total.sum(red)
    has_pad = any(b or e for b, e in pads)
    if not any(extra) and (count_include_pad or not has_pad):
        return total / math.prod(kernel)
    # the divisor varies by window: pool a mask of the counted cells the same way; it is built at the full
    # input shape so the count reduce fuses into the sum's kernel instead of becoming a broadcast kernel
    counted = Tensor.ones(x.shape, dtype=x.dtype, device=x.device)
    if count_include_pad:
        counted = _pad_trailing(counted, pads, 1.0)
        cpads = [(0, e) for e in extra]
    else:
        cpads = [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]
    count = window(_pad_trailing(counted, cpads), kernel, st, dl).sum(red)
    return total / count


def lp_pool2d(self: Tensor, p: float, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: Any = 0,
              ceil_mode: bool = False, dilation: IntOrTuple = 1) -> Tensor:
    """``(sum |x|^p)^(1/p)`` over sliding windows (ONNX LpPool; padding contributes zeros)."""
    kernel, st, dl, pads = _pool_args(self, kernel_size, stride, dilation, padding, 2, "lp_pool")
    extra = pool_geometry(self.shape, kernel, st, dl, pads, ceil_mode)
    x = self._float_operand().abs()
    x = x * x if p == 2 else x.pow(p)
    win = window(_pad_trailing(x, [(b, e + ex) for (b, e), ex in zip(pads, extra, strict=True)]), kernel, st, dl)
    s = win.sum(tuple(range(win.ndim - len(kernel), win.ndim)))
    return s.sqrt() if p == 2 else s.pow(1.0 / p)


def _pool_nd(fn: Any, nd: int) -> Any:
    """A pooling op whose int ``kernel_size`` means ``nd`` dims (max_pool1d, avg_pool3d, ...)."""
    def pool(self: Tensor, kernel_size: IntOrTuple, *args: Any, **kwargs: Any) -> Tensor:
        k = (kernel_size,) * nd if isinstance(kernel_size, int) else kernel_size
        return fn(self, k, *args, **kwargs)
    pool.__name__ = fn.__name__.replace("2d", f"{nd}d")
    pool.__doc__ = fn.__doc__
    return pool


def _lp_pool_nd(nd: int) -> Any:
    def pool(self: Tensor, p: float, kernel_size: IntOrTuple, *args: Any, **kwargs: Any) -> Tensor:
        k = (kernel_size,) * nd if isinstance(kernel_size, int) else kernel_size
        return lp_pool2d(self, p, k, *args, **kwargs)
    pool.__name__ = f"lp_pool{nd}d"
    pool.__doc__ = lp_pool2d.__doc__
    return pool


# A global pool over this many pixels or more, a multiple of POOL_LANES, sums in two steps (``global_avg_pool``)
POOL_SPLIT_MIN = 1024
POOL_LANES = 64


def global_avg_pool(self: Tensor) -> Tensor:
    """Mean over every axis after (N, C), keeping them as size 1.

    Summed in one step, each channel's plane is one long sum, and the optimizer tiles its few outputs across
    channels (independent accumulators, jit/codegen/opt/tiling.py ``LONG_REDUCE_TRIPS``): every vector a gather of
    16 channels a plane apart, 144 streams no prefetcher follows (efficientnet_b0's squeeze over 56x56: 241 us).
    A large float32 plane is summed first as ``POOL_LANES`` contiguous partial sums per channel (a tile row of
    whole vectors down the plane, split over threads by channel), then those. Different rounding than one long
    sum, as any vectorized sum (onnxruntime's) has."""
    spatial = math.prod(self.shape[2:])
    if self.dtype != dtypes.float32 or spatial < POOL_SPLIT_MIN or spatial % POOL_LANES:
        return self.mean(tuple(range(2, self.ndim)), keepdim=True)
    lanes = self.reshape(*self.shape[:2], spatial // POOL_LANES, POOL_LANES).sum(2).contiguous()
    return (lanes.sum(-1) / spatial).reshape(*self.shape[:2], *[1] * (self.ndim - 2))


def global_max_pool(self: Tensor) -> Tensor:
    """Max over every axis after (N, C), keeping them as size 1."""
    return self.max(tuple(range(2, self.ndim)), keepdim=True)


TENSOR_METHODS: dict[str, Any] = {
    "max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d, "lp_pool2d": lp_pool2d,
    "max_pool": max_pool2d, "avg_pool": avg_pool2d, "lp_pool": lp_pool2d,
    "global_avg_pool": global_avg_pool, "global_max_pool": global_max_pool,
    **{f"max_pool{nd}d": _pool_nd(max_pool2d, nd) for nd in (1, 3)},
    **{f"avg_pool{nd}d": _pool_nd(avg_pool2d, nd) for nd in (1, 3)},
    **{f"lp_pool{nd}d": _lp_pool_nd(nd) for nd in (1, 3)},
}
