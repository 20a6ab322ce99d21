"""The captured warp equals openpilot's documented math (tests/modeld/reference.py) on both camera sizes."""

from __future__ import annotations

import numpy as np
import pytest

from abi.frames import nv12_geometry
from jit import capture
from packager.modeld.warp import model_frame
from tests.modeld import reference

# model pixel -> camera pixel, roughly as openpilot's calibrated transforms are (a 2x zoom-out of the centre)
TRANSFORMS = {
    "identity": np.eye(3, dtype=np.float32),
    "shifted": np.array([[1.0, 0.0, 300.5], [0.0, 1.0, 250.5], [0.0, 0.0, 1.0]], np.float32),
    "rotated": np.array([[1.7, -0.12, 560.0], [0.12, 1.7, 300.0], [0.0, 0.0, 1.0]], np.float32),
    "perspective": np.array([[1.1, 0.05, 300.0], [-0.03, 1.05, 250.0], [1e-5, 2e-4, 1.0]], np.float32),
    "out of frame": np.array([[4.0, 0.0, -500.0], [0.0, 6.0, -300.0], [0.0, 0.0, 1.0]], np.float32),
}
# a source coordinate within a few ulps of a rounding tie may round the other way under FMA contraction
MAX_TIE_FRACTION = 0.0005


@pytest.fixture(scope="module", params=["CPU", "OPENCL"])
def warps(request: pytest.FixtureRequest) -> dict:
    out = {}
    for size in ((1928, 1208), (1344, 760)):
        geom = nv12_geometry(*size)
        example = {"frame": np.zeros(geom.size, np.uint8), "tfm": np.eye(3, dtype=np.float32)}
        out[size] = geom, capture(lambda frame, tfm, g=geom: {"img": model_frame(frame, tfm, g)}, example,
                                  target=request.param)
    return out


@pytest.mark.parametrize("size", [(1928, 1208), (1344, 760)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_warped_frame_equals_the_reference(warps: dict, size: tuple[int, int], name: str) -> None:
    geom, cap = warps[size]
    buf = np.random.default_rng(hash(name) % 2**32).integers(0, 256, geom.size, dtype=np.uint8)
    tfm = TRANSFORMS[name]
    got = cap(frame=buf, tfm=tfm)["img"]
    want = reference.model_frame(buf, tfm, geom)
    assert got.shape == want.shape == (6, 128, 256) and got.dtype == np.uint8
    differ = int((got != want).sum())
    assert differ <= MAX_TIE_FRACTION * want.size, f"{differ} of {want.size} pixels differ"


def test_the_warp_reads_the_planes_where_nv12_puts_them() -> None:
    """Y, U and V planes with distinct constant values land in the channels the model expects."""
    geom = nv12_geometry(1344, 760)
    buf = np.zeros(geom.size, np.uint8)
    rows = buf[:geom.stride * geom.y_height].reshape(geom.y_height, geom.stride)
    rows[:geom.height, :geom.width] = 10
    uv = buf[geom.uv_offset:geom.uv_offset + geom.stride * geom.uv_height].reshape(geom.uv_height, geom.stride)
    uv[:geom.height // 2, 0:geom.width:2] = 20
    uv[:geom.height // 2, 1:geom.width:2] = 30
    cap = capture(lambda frame, tfm: {"img": model_frame(frame, tfm, geom)},
                  {"frame": buf, "tfm": np.eye(3, dtype=np.float32)}, target="CPU")
    got = cap(frame=buf, tfm=TRANSFORMS["rotated"])["img"]
    assert [int(c.min()) for c in got] == [10, 10, 10, 10, 20, 30]
    assert [int(c.max()) for c in got] == [10, 10, 10, 10, 20, 30]
