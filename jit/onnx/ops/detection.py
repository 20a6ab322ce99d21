"""ONNX detection ops: RoiAlign and NonMaxSuppression.

NonMaxSuppression, and RoiAlign with an adaptive sampling grid, are host ops (jit/onnx/host_ops.py): their
output (the kept boxes; the grid per box) depends on the boxes' values, which must be known at load.
"""

from __future__ import annotations

import numpy as np

from jit.common.dtype import dtypes
from jit.frontend.tensor import Tensor
from jit.onnx.host_ops import host_op
from jit.onnx.ops.nn_helpers import compute_dtype, host_const
from jit.onnx.registry import OpContext


# --- RoiAlign ------------------------------------------------------------------------------------------
def _adaptive(ctx: OpContext) -> bool:
    """Whether the sampling grid is sized per box (``ceil(roi size / bins)``), from the boxes' values."""
    return int(ctx.attr("sampling_ratio", 0)) <= 0


@host_op("RoiAlign", reason="an adaptive sampling grid (sampling_ratio 0) is sized by each box", inputs=(1,),
         when=_adaptive)
def roi_align(ctx: OpContext) -> Tensor:
    """RoiAlign (avg / max) with bilinear samples on a regular grid per output bin (onnxruntime semantics)."""
    x, rois, bidx = ctx.t(0), ctx.t(1), ctx.t(2)
    mode = str(ctx.attr("mode", "avg")).lower()
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    scale = float(ctx.attr("spatial_scale", 1.0))
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    half = str(ctm).lower() == "half_pixel"
    if not _adaptive(ctx):
        ratio = int(ctx.attr("sampling_ratio", 0))
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


# --- NonMaxSuppression ---------------------------------------------------------------------------------
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


@host_op("NonMaxSuppression", reason="the output's length is the number of boxes kept",
         inputs=(0, 1, 2, 3, 4))
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
