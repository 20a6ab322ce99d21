"""Camera NV12 buffer -> one six-channel model frame, as Tensor ops (DESIGN.md, "The modeld step", 2-3).

Nearest-neighbour perspective warp, openpilot's math: for output pixel (x, y) the source is
``sx = m00*x + m01*y + m02``, ``sy = m10*x + m11*y + m12``, ``sw = m20*x + m21*y + m22`` in float32, then
``sx / sw`` and ``sy / sw`` rounded half to even and clamped to the plane. Y is read at the camera's row pitch;
U and V are de-interleaved from the NV12 UV plane (U even, V odd columns) with the transform scaled for half
resolution. The result is packed into the six (128, 256) channels of abi/frames.py.
"""

from __future__ import annotations

from abi.frames import CHANNEL_SHAPE, MODEL_FRAME_HEIGHT, MODEL_FRAME_WIDTH, Nv12Geometry
from jit import Tensor, dtypes


def half_resolution(tfm: Tensor) -> Tensor:
    """The (3, 3) transform for planes of half the width and height on both sides: entries (0,2) and (1,2)
    halved, (2,0) and (2,1) doubled, the rest unchanged."""
    scale = Tensor([[1.0, 1.0, 0.5], [1.0, 1.0, 0.5], [2.0, 2.0, 1.0]], dtype=dtypes.float32, device=tfm.device)
    return tfm * scale


def clamp_absorbing_nan(x: Tensor, lo: float, hi: float) -> Tensor:
    """``x`` clamped to ``[lo, hi]`` (``lo <= hi``, finite), with NaN mapped to ``lo``: ``lo < x ? x : lo``, then
    ``y < hi ? y : hi``. A NaN fails the first comparison, so the result is never NaN; for every other value
    (infinities included) it equals ``x.clip(lo, hi)`` bit for bit. Unlike ``Tensor.clip`` (MAX/MIN, which keep a
    NaN, as numpy does) the compiler can bound it (jit/ir/uop.py value ranges), so an index built from it needs
    no clamp of its own."""
    lo_t = Tensor(lo, dtype=x.dtype, device=x.device)
    hi_t = Tensor(hi, dtype=x.dtype, device=x.device)
    y = (lo_t < x).where(x, lo_t)
    return (y < hi_t).where(y, hi_t)


def warp_plane(buf: Tensor, tfm: Tensor, *, offset: int, pitch: int, width: int, height: int,
               out_width: int, out_height: int, column_step: int = 1) -> Tensor:
    """``(out_height, out_width)`` uint8 samples of the plane whose pixel (x, y) is ``buf[offset + y * pitch +
    x * column_step]`` (``buf``: the flat uint8 camera buffer), pixel ``(x, y)`` of the output reading the source
    pixel ``tfm`` maps it to (model pixel -> camera pixel), rounded half to even and clamped to the plane. A NaN
    source coordinate (a NaN in ``tfm``, or 0/0) reads coordinate 0 of that axis: column 0 for a NaN ``sx / sw``,
    line 0 for a NaN ``sy / sw``. The index lies in the plane by construction, which the compiler sees, so the
    read needs no index clamp (``take``'s normalisation folds away)."""
    dev = buf.device
    xs = Tensor.arange(out_width, dtype=dtypes.float32, device=dev).reshape(1, out_width)
    ys = Tensor.arange(out_height, dtype=dtypes.float32, device=dev).reshape(out_height, 1)

    def row(i: int) -> Tensor:
        m = [tfm[i:i + 1, j:j + 1] for j in range(3)]
        return m[0] * xs + m[1] * ys + m[2]

    sx, sy, sw = row(0), row(1), row(2)
    # clamped before rounding: the same pixel (rounding is monotone and keeps the integer bounds), and a rounding of
    # a value the compiler knows lies in [0, 2**23) is two adds on a target without a fast vector rint
    col = clamp_absorbing_nan(sx / sw, 0.0, float(width - 1)).round().cast(dtypes.int32)
    line = clamp_absorbing_nan(sy / sw, 0.0, float(height - 1)).round().cast(dtypes.int32)
    index = line * pitch + col * column_step + offset
    return buf.take(index.reshape(out_height * out_width)).reshape(out_height, out_width)


def model_frame(buf: Tensor, tfm: Tensor, geom: Nv12Geometry) -> Tensor:
    """The (6, 128, 256) uint8 model frame of one NV12 camera buffer (flat uint8 of ``geom.size`` bytes)."""
    flat = buf.reshape(geom.size)
    y = warp_plane(flat, tfm, offset=0, pitch=geom.stride, width=geom.width, height=geom.height,
                   out_width=MODEL_FRAME_WIDTH, out_height=MODEL_FRAME_HEIGHT)
    half = half_resolution(tfm)
    uv = {"width": geom.width // 2, "height": geom.height // 2, "pitch": geom.stride, "column_step": 2,
          "out_width": CHANNEL_SHAPE[1], "out_height": CHANNEL_SHAPE[0]}
    u = warp_plane(flat, half, offset=geom.uv_offset, **uv)
    v = warp_plane(flat, half, offset=geom.uv_offset + 1, **uv)
    channels = (y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2], u, v)
    return Tensor.cat(*(c.unsqueeze(0) for c in channels), dim=0)
