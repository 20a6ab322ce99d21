"""Camera frames: NV12 buffer geometry (VisionIPC) and the reference packer from a YUV420 frame to model channels.

A model frame is one warped 256x512 (height x width) YUV420 image, stored planar (I420) the way openpilot's
warp writes it: the 256x512 Y plane, then the 128x256 U plane, then the 128x256 V plane (196,608 bytes).
The vision model sees it as six 128x256 channels (DESIGN.md):

    ch0 = Y[0::2, 0::2]   ch1 = Y[1::2, 0::2]   ch2 = Y[0::2, 1::2]   ch3 = Y[1::2, 1::2]   ch4 = U   ch5 = V

channel c at byte offset c * 32768 within its frame; two frames (oldest first) make the 12-channel input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abi.errors import AbiError, issue

MODEL_FRAME_HEIGHT = 256
MODEL_FRAME_WIDTH = 512
CHANNELS_PER_FRAME = 6
CHANNEL_SHAPE = (MODEL_FRAME_HEIGHT // 2, MODEL_FRAME_WIDTH // 2)            # (128, 256)
CHANNEL_BYTES = CHANNEL_SHAPE[0] * CHANNEL_SHAPE[1]                           # 32768
MODEL_FRAME_BYTES = MODEL_FRAME_HEIGHT * MODEL_FRAME_WIDTH * 3 // 2           # 196608


def align(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Nv12Geometry:
    """Where the planes of one camera NV12 buffer live (all sizes in bytes / rows)."""

    width: int
    height: int
    stride: int       # bytes per row of both planes
    y_height: int     # rows reserved for Y
    uv_height: int    # rows reserved for interleaved UV
    uv_offset: int    # byte offset of the UV plane
    size: int         # whole buffer, VisionIPC allocation size


def nv12_geometry(width: int, height: int) -> Nv12Geometry:
    """Buffer geometry of a ``width`` x ``height`` NV12 camera frame as VisionIPC allocates it.

    stride = align(w, 128), y_height = align(h, 32), uv_height = align(h/2, 16), uv_offset = stride * y_height;
    size = the Venus NV12 size (Y plane + UV plane + 4096 + max(16 KiB, 8 * stride), page aligned) plus
    align(w, 512) * 512 bytes of padding for non-aligned frames, page aligned again.
    """
    for name, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v % 2:
            raise AbiError([issue("nv12", name, "a positive even int", repr(v))])
    stride = align(width, 128)
    y_height = align(height, 32)
    uv_height = align(height // 2, 16)
    size = stride * y_height + stride * uv_height + 4096 + max(16 * 1024, 8 * stride)
    size = align(align(size, 4096) + align(width, 512) * 512, 4096)
    return Nv12Geometry(width, height, stride, y_height, uv_height, stride * y_height, size)


def nv12_planes(buf: np.ndarray | bytes, geom: Nv12Geometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The visible Y (h, w), U and V (h/2, w/2) planes of an NV12 camera buffer (views where possible)."""
    data = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1)
    if data.dtype != np.uint8 or data.size != geom.size:
        raise AbiError([issue("nv12", "buffer", f"uint8 x {geom.size} bytes", f"{data.dtype} x {data.nbytes} bytes")])
    y = data[:geom.stride * geom.y_height].reshape(geom.y_height, geom.stride)[:geom.height, :geom.width]
    uv_end = geom.uv_offset + geom.stride * geom.uv_height
    uv = data[geom.uv_offset:uv_end].reshape(geom.uv_height, geom.stride)[:geom.height // 2, :geom.width]
    return y, uv[:, 0::2], uv[:, 1::2]


def frame_channels(frame: np.ndarray) -> np.ndarray:
    """Six (128, 256) model channels from one I420 model frame (196,608 uint8 values, or Y, U, V stacked)."""
    data = np.asarray(frame)
    if data.dtype != np.uint8:
        raise AbiError([issue("frame", "dtype", "uint8", str(data.dtype))])
    if data.size != MODEL_FRAME_BYTES:
        raise AbiError([issue("frame", "byte_size", MODEL_FRAME_BYTES, data.size)])
    flat = data.reshape(-1)
    y_bytes = MODEL_FRAME_HEIGHT * MODEL_FRAME_WIDTH
    y = flat[:y_bytes].reshape(MODEL_FRAME_HEIGHT, MODEL_FRAME_WIDTH)
    u = flat[y_bytes:y_bytes + CHANNEL_BYTES].reshape(CHANNEL_SHAPE)
    v = flat[y_bytes + CHANNEL_BYTES:].reshape(CHANNEL_SHAPE)
    return np.stack([y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2], u, v])


def pack_frames(frames: Sequence[np.ndarray], expected: int = 2) -> np.ndarray:
    """The (1, 6 * n, 128, 256) model input from ``n`` I420 frames given oldest first (n = ``expected``)."""
    if len(frames) != expected:
        raise AbiError([issue("frames", "count", expected, len(frames))])
    return np.concatenate([frame_channels(f) for f in frames])[None]
