"""NV12 camera buffer geometry and the YUV420 -> six-channel model frame packer (every channel's source pixels)."""

from __future__ import annotations

import numpy as np
import pytest

from abi.errors import AbiError
from abi.frames import CHANNEL_BYTES, MODEL_FRAME_BYTES, frame_channels, nv12_geometry, nv12_planes, pack_frames
from abi.infer import infer_abi
from abi.validate import validate
from packager.samples import vision_model


@pytest.mark.parametrize("w, h, stride, y_height, uv_height, uv_offset, size", [
    (1928, 1208, 2048, 1216, 608, 2_490_368, 4_804_608),   # AR0231 / OX03C10 (comma 3 / 3X)
    (1344, 760, 1408, 768, 384, 1_081_344, 2_428_928),     # OS04C10 (comma four)
])
def test_nv12_geometry(w: int, h: int, stride: int, y_height: int, uv_height: int, uv_offset: int,
                       size: int) -> None:
    g = nv12_geometry(w, h)
    assert (g.stride, g.y_height, g.uv_height, g.uv_offset, g.size) == (stride, y_height, uv_height, uv_offset, size)
    assert g.uv_offset + g.stride * g.uv_height <= g.size


@pytest.mark.parametrize("w, h", [(1927, 1208), (0, 10), (64, -2)])
def test_nv12_geometry_refuses_bad_sizes(w: int, h: int) -> None:
    with pytest.raises(AbiError):
        nv12_geometry(w, h)


def test_nv12_planes_read_past_the_padding() -> None:
    g = nv12_geometry(200, 100)   # stride 256, y_height 128: padding on both axes
    buf = np.full(g.size, 7, np.uint8)
    y = np.arange(100 * 200, dtype=np.uint32).reshape(100, 200) % 251
    plane = buf[:g.stride * g.y_height].reshape(g.y_height, g.stride)
    plane[:100, :200] = y
    uv = buf[g.uv_offset:g.uv_offset + g.stride * g.uv_height].reshape(g.uv_height, g.stride)
    uv[:50, 0:200:2] = 11
    uv[:50, 1:200:2] = 13
    gy, gu, gv = nv12_planes(buf, g)
    np.testing.assert_array_equal(gy, y)
    assert gu.shape == gv.shape == (50, 100)
    assert (gu == 11).all() and (gv == 13).all()
    with pytest.raises(AbiError):
        nv12_planes(buf[:-1], g)


def tagged_frame(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An I420 frame whose Y values encode row parity (bit 6), column parity (bit 7) and position (low bits)."""
    r, c = np.meshgrid(np.arange(256), np.arange(512), indexing="ij")
    y = ((r % 2) * 64 + (c % 2) * 128 + ((r // 2 + 3 * (c // 2) + seed) % 64)).astype(np.uint8)
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 256, (128, 256), dtype=np.uint8)
    v = rng.integers(0, 256, (128, 256), dtype=np.uint8)
    return np.concatenate([y.ravel(), u.ravel(), v.ravel()]), y, u, v


def test_every_channel_takes_the_documented_pixels() -> None:
    frame, y, u, v = tagged_frame(0)
    assert frame.size == MODEL_FRAME_BYTES == 196_608
    ch = frame_channels(frame)
    assert ch.shape == (6, 128, 256) and ch.dtype == np.uint8
    i, j = np.meshgrid(np.arange(128), np.arange(256), indexing="ij")
    position = (i + 3 * j) % 64
    for c, (row_par, col_par) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        assert ((ch[c] >> 6) & 1 == row_par).all(), f"ch{c} row parity"
        assert ((ch[c] >> 7) & 1 == col_par).all(), f"ch{c} column parity"
        np.testing.assert_array_equal(ch[c] & 63, position, err_msg=f"ch{c} position")
        np.testing.assert_array_equal(ch[c], y[row_par::2, col_par::2])
    np.testing.assert_array_equal(ch[4], u)
    np.testing.assert_array_equal(ch[5], v)
    flat = ch.reshape(-1)
    for c in range(6):  # channel c at byte offset c * 32768 within the frame
        assert CHANNEL_BYTES == 32768
        np.testing.assert_array_equal(flat[c * CHANNEL_BYTES:(c + 1) * CHANNEL_BYTES], ch[c].reshape(-1))


def test_two_frames_make_twelve_channels_oldest_first() -> None:
    old, new = tagged_frame(1)[0], tagged_frame(2)[0]
    packed = pack_frames([old, new])
    assert packed.shape == (1, 12, 128, 256)
    np.testing.assert_array_equal(packed[0, :6], frame_channels(old))
    np.testing.assert_array_equal(packed[0, 6:], frame_channels(new))
    abi = infer_abi(vision_model())
    validate({"input_imgs": packed, "big_input_imgs": pack_frames([new, old])}, abi)


@pytest.mark.parametrize("frame, field", [(np.zeros(MODEL_FRAME_BYTES, np.float32), "dtype"),
                                          (np.zeros(MODEL_FRAME_BYTES - 1, np.uint8), "byte_size")])
def test_packer_refuses_wrong_frames(frame: np.ndarray, field: str) -> None:
    with pytest.raises(AbiError) as e:
        frame_channels(frame)
    assert e.value.errors[0].field == field


def test_packer_wants_the_frame_count() -> None:
    with pytest.raises(AbiError) as e:
        pack_frames([tagged_frame(0)[0]])
    assert e.value.errors[0].field == "count"
