"""The warp's frame index needs no clamp of its own: the rendered kernels read the frame without the GATHER
normalisation (its n - 1 and + n constants), and transforms with NaN, +1e30 and -1e30 entries read the pixels
packager/modeld/warp.py documents (a NaN coordinate reads coordinate 0; a huge one clamps to the edge), on the
CPU and on OpenCL."""

from __future__ import annotations

import re

import numpy as np
import pytest

from abi.frames import Nv12Geometry, nv12_geometry, nv12_planes
from jit import capture
from jit.trace import Captured
from packager.modeld.warp import model_frame
from tests.modeld import reference

GEOM = nv12_geometry(1928, 1208)  # the road camera: a 4,804,608-byte buffer

# integer-valued entries (no rounding ties), each with one special entry
TRANSFORMS = {
    "NaN column": [[1.0, 0.0, np.nan], [0.0, 1.0, 40.0], [0.0, 0.0, 1.0]],
    "NaN line": [[1.0, 0.0, 30.0], [0.0, np.nan, 40.0], [0.0, 0.0, 1.0]],
    "NaN scale": [[1.0, 0.0, 30.0], [0.0, 1.0, 40.0], [0.0, 0.0, np.nan]],
    "+1e30": [[1.0, 0.0, 1e30], [0.0, 1.0, 1e30], [0.0, 0.0, 1.0]],
    "-1e30": [[1.0, 0.0, -1e30], [0.0, 1.0, -1e30], [0.0, 0.0, 1.0]],
    "+1e30 column, -1e30 line": [[1.0, 0.0, 1e30], [0.0, 1.0, -1e30], [0.0, 0.0, 1.0]],
    "finite": [[2.0, 0.0, 100.0], [0.0, 3.0, 50.0], [0.0, 0.0, 1.0]],
}


def documented_coordinate(v: np.ndarray, size: int) -> np.ndarray:
    """packager/modeld/warp.py's coordinate: round half to even, clamp to 0 .. size-1; NaN reads 0."""
    safe = np.where(np.isnan(v), np.float32(0.0), v)
    return np.clip(np.rint(safe), 0, size - 1).astype(np.int64)


def documented_plane(plane: np.ndarray, tfm: np.ndarray, out_width: int, out_height: int) -> np.ndarray:
    m = tfm.astype(np.float32)
    xs = np.arange(out_width, dtype=np.float32)[None, :]
    ys = np.arange(out_height, dtype=np.float32)[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        sx = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
        sy = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
        sw = m[2, 0] * xs + m[2, 1] * ys + m[2, 2]
        col, line = sx / sw, sy / sw
    h, w = plane.shape
    return plane[documented_coordinate(line, h), documented_coordinate(col, w)]


def documented_frame(buf: np.ndarray, tfm: np.ndarray, geom: Nv12Geometry) -> np.ndarray:
    y_plane, u_plane, v_plane = nv12_planes(buf, geom)
    y = documented_plane(y_plane, tfm, 512, 256)
    with np.errstate(invalid="ignore"):
        half = reference.half_resolution(tfm)
    u = documented_plane(u_plane, half, 256, 128)
    v = documented_plane(v_plane, half, 256, 128)
    return np.stack([y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2], u, v])


@pytest.fixture(scope="module", params=["CPU", "OPENCL"])
def warp(request: pytest.FixtureRequest) -> Captured:
    example = {"frame": np.zeros(GEOM.size, np.uint8), "tfm": np.eye(3, dtype=np.float32)}
    return capture(lambda frame, tfm: {"img": model_frame(frame, tfm, GEOM)}, example, target=request.param)


def test_the_warp_kernels_hold_no_gather_normalisation(warp: Captured) -> None:
    """The take's ``(v < 0) ? v + n : v`` and ``clamp(v, 0, n - 1)`` folded away: the index is in the buffer by
    the coordinates' own clamps (jit/ir/uop.py float ranges)."""
    n = GEOM.size
    sources = [k.source for k in warp.cmdbuf.kernels if k.source]
    assert sources
    # rint, or on a CPU OpenCL device its lowering by 2**23 (jit/codegen/passes/vector_rint.py)
    reads_frame = [s for s in sources if "rint" in s or "8388608.0f" in s]
    assert reads_frame, "expected the warp kernel (it rounds coordinates)"
    for source in sources:
        assert not re.search(rf"\b{n - 1}\b", source), "the take's upper clamp to n - 1 is still there"
        assert not re.search(rf"\+\s*{n}\b", source), "the take's negative-index wrap (+ n) is still there"


def test_finite_transforms_equal_the_reference(warp: Captured) -> None:
    buf = np.random.default_rng(3).integers(0, 256, GEOM.size, dtype=np.uint8)
    tfm = np.array(TRANSFORMS["finite"], np.float32)
    got = warp(frame=buf, tfm=tfm)["img"]
    assert np.array_equal(got, reference.model_frame(buf, tfm, GEOM))


@pytest.mark.parametrize("name", [n for n in TRANSFORMS if n != "finite"])
def test_special_transform_entries_read_the_documented_pixels(warp: Captured, name: str) -> None:
    buf = np.random.default_rng(abs(hash(name)) % 2**32).integers(0, 256, GEOM.size, dtype=np.uint8)
    tfm = np.array(TRANSFORMS[name], np.float32)
    got = warp(frame=buf, tfm=tfm)["img"]
    want = documented_frame(buf, tfm, GEOM)
    assert got.shape == want.shape == (6, 128, 256) and got.dtype == np.uint8
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} pixels differ"


def test_an_all_nan_transform_reads_each_planes_first_pixel(warp: Captured) -> None:
    """NaN in every coordinate: Y reads buffer byte 0, U the UV plane's first byte, V its second."""
    buf = np.random.default_rng(5).integers(0, 256, GEOM.size, dtype=np.uint8)
    got = warp(frame=buf, tfm=np.full((3, 3), np.nan, np.float32))["img"]
    assert [np.unique(c).tolist() for c in got] == [[buf[0]]] * 4 + [[buf[GEOM.uv_offset]], [buf[GEOM.uv_offset + 1]]]
