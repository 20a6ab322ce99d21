"""Winograd convs (frontend/winograd.py), F(2,3) / F(4,3) for stride 1 and their F(m,2)-based stride-2 form: numerics
against a float64 numpy conv, capture-time folding of the weight transform, the WINO setting (dispatch from conv2d,
parsing, the kernel cache key)."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from jit import Context, Device, capture
from jit.common.errors import ShapeError
from jit.common.helpers import WINO
from jit.frontend.tensor import Tensor
from jit.frontend.winograd import (
    WinogradSettingError,
    auto_tile,
    conv_matrices,
    cout_block,
    matrices,
    pick_tile,
    plane_sets,
    setting_tile,
    spare_tiles,
    winograd_conv2d,
)
from jit.realize import kernel_settings_key
from jit.schedule.kernels import create_schedule
from targets.base import DEFAULT_L1, CacheLevel

# Tolerance, relative to the largest output magnitude. A float32 direct 3x3 conv over C channels is off from the
# exact result by a few eps * sqrt(9 C) of the output scale (~1e-6 here). Winograd adds the rounding of its
# transforms, whose coefficients reach 5 (B), 8 (A) and 1/24 (G) for F(4,3): products of up to ~25 x 64 partial
# terms of both signs that cancel, so its error is known to be 10-100x the direct conv's (Lavin & Gray; Barabasz
# et al., "Error analysis and improving the accuracy of Winograd convolution", 2020). Measured on these shapes:
# <= 1.6e-7 for F(2,3) (the direct conv: <= 2.1e-7) and <= 2.3e-6 for F(4,3); the bounds leave ~10x margin and
# still catch any wrong coefficient or index (those give errors of order 1).
TOL = {2: 2e-6, 4: 3e-5}


def rand(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: tuple[int, int, int, int],
             stride: int = 1) -> np.ndarray:
    """float64 cross-correlation, pads (top, left, bottom, right) as ONNX orders them."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    out = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
    return out + b.astype(np.float64)[None, :, None, None] if b is not None else out


def assert_close(got: np.ndarray, want: np.ndarray, tile: int) -> None:
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err <= TOL[tile], f"F({tile},3): max error {err:.2e} of the output range, expected <= {TOL[tile]:.0e}"


# (batch, Cin, Cout, H, W, padding as conv2d takes it, the same as ONNX pads)
SHAPES = [
    (1, 3, 5, 7, 9, 1, (1, 1, 1, 1)),  # odd sizes, channels not multiples of 4
    (2, 5, 6, 11, 8, 0, (0, 0, 0, 0)),  # batch 2, no padding
    (1, 4, 7, 6, 6, 2, (2, 2, 2, 2)),  # padding 2: output larger than the input
    (2, 6, 3, 10, 13, (1, 0, 2, 1), (1, 0, 2, 1)),  # asymmetric ONNX pads (top, left, bottom, right)
    (1, 9, 17, 5, 3, 1, (1, 1, 1, 1)),  # fewer columns than one F(4,3) tile
    (1, 16, 32, 14, 14, 1, (1, 1, 1, 1)),  # two blocks of 16 output channels; F(4,3) tiles overhang 14
    (1, 8, 24, 9, 7, 1, (1, 1, 1, 1)),  # blocks of 8 output channels; tile rows padded to a multiple of 4
    (1, 3, 4, 8, 6, 0, (0, 0, 0, 0)),  # stride 2, F(2,3)-sized tiles: the last input column is never read
]


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}x{s[1]}x{s[3]}x{s[4]}-{s[2]}-p{s[5]}" for s in SHAPES])
def test_matches_numpy(shape: tuple, tile: int, stride: int) -> None:
    # stride 2 over these shapes: odd and even sizes, last padded rows read or never read (an input cut short)
    n, cin, cout, h, w, padding, pads = shape
    x, wt, b = rand(n, cin, h, w, seed=1), rand(cout, cin, 3, 3, seed=2), rand(cout, seed=3)
    got = winograd_conv2d(Tensor(x), Tensor(wt), Tensor(b), padding=padding, tile=tile, stride=stride).numpy()
    assert_close(got, conv_ref(x, wt, b, pads, stride), tile)


@pytest.mark.parametrize("tile", [2, 4])
def test_matches_numpy_on_opencl(tile: int) -> None:
    x, wt, b = rand(1, 16, 14, 14, seed=6), rand(32, 16, 3, 3, seed=7), rand(32, seed=8)
    got = winograd_conv2d(Tensor(x, device="OPENCL"), Tensor(wt, device="OPENCL"), Tensor(b, device="OPENCL"),
                          padding=1, tile=tile).numpy()
    assert_close(got, conv_ref(x, wt, b, (1, 1, 1, 1)), tile)


@pytest.mark.parametrize("tile", [2, 4])
def test_without_bias_and_agrees_with_direct_conv(tile: int) -> None:
    x, wt = rand(1, 8, 12, 12, seed=4), rand(8, 8, 3, 3, seed=5)
    direct = Tensor(x).conv2d(Tensor(wt), padding=1).numpy()
    got = winograd_conv2d(Tensor(x), Tensor(wt), padding=1, tile=tile).numpy()
    assert_close(got, direct.astype(np.float64), tile)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("tile", [2, 4])
def test_matrices_compute_the_conv_of_one_tile(tile: int, stride: int) -> None:
    rng = np.random.default_rng(0)
    bt, g, at = conv_matrices(tile, stride)
    r = (tile - 1) * stride + 3
    assert bt.shape == (r, r) and g.shape == (r, 3) and at.shape == (tile, r)
    d, k = rng.standard_normal((r, r)), rng.standard_normal((3, 3))
    want = np.array([[(d[stride * i:stride * i + 3, stride * j:stride * j + 3] * k).sum() for j in range(tile)]
                     for i in range(tile)])
    np.testing.assert_allclose(at @ ((g @ k @ g.T) * (bt @ d @ bt.T)) @ at.T, want, atol=1e-12)
    if stride == 1:
        assert all(np.array_equal(a, b) for a, b in zip(matrices(tile), (bt, g, at), strict=True))


def test_stride_2_points_and_refusals() -> None:
    assert conv_matrices(4, 2)[0].shape == (9, 9)  # 81 points per 4x4 output tile: 1.78x fewer than 9 x 16
    with pytest.raises(ShapeError, match="winograd stride: expected one of"):
        conv_matrices(4, 3)
    with pytest.raises(ShapeError, match="winograd tile: expected one of"):
        conv_matrices(3, 2)


# --- dispatch from conv2d ----------------------------------------------------------------------------------
def kernel_names(t: Tensor) -> list[str]:
    return [k.name for k in create_schedule([t.uop], t.device)[0]]


def test_conv2d_dispatches_only_when_enabled() -> None:
    x, wt, b = rand(1, 4, 8, 8, seed=6), rand(4, 4, 3, 3, seed=7), rand(4, seed=8)
    with Context(WINO="0"):
        direct = Tensor(x).conv2d(Tensor(wt), Tensor(b), padding=1)
    with Context(WINO="4"):
        wino = Tensor(x).conv2d(Tensor(wt), Tensor(b), padding=1)
    assert len(kernel_names(direct)) < len(kernel_names(wino))  # the transforms are kernels of their own
    assert_close(wino.numpy(), conv_ref(x, wt, b, (1, 1, 1, 1)), 4)


@pytest.mark.parametrize("kw", [{"stride": 3}, {"stride": (1, 2)}, {"dilation": 2}, {"groups": 2}])
def test_conv2d_keeps_direct_conv_where_winograd_does_not_apply(kw: dict) -> None:
    x, wt = rand(1, 4, 9, 9, seed=9), rand(4, 4 // kw.get("groups", 1), 3, 3, seed=10)
    with Context(WINO="0"):
        direct = kernel_names(Tensor(x).conv2d(Tensor(wt), padding=1, **kw))
    with Context(WINO="4"):
        assert kernel_names(Tensor(x).conv2d(Tensor(wt), padding=1, **kw)) == direct


def test_conv2d_dispatches_stride_2() -> None:
    x, wt, b = rand(1, 4, 9, 10, seed=9), rand(6, 4, 3, 3, seed=10), rand(6, seed=11)
    with Context(WINO="0"):
        direct = kernel_names(Tensor(x).conv2d(Tensor(wt), Tensor(b), padding=1, stride=2))
    with Context(WINO="4"):
        wino = Tensor(x).conv2d(Tensor(wt), Tensor(b), padding=1, stride=2)
        assert any(n.startswith("E_9_9_") for n in kernel_names(wino))  # the 9x9-point input transform
    assert not any(n.startswith("E_9_9_") for n in direct)
    assert_close(wino.numpy(), conv_ref(x, wt, b, (1, 1, 1, 1), 2), 4)


def test_auto_is_the_default() -> None:
    assert WINO.value == "auto" or os.environ.get("WINO") is not None


def test_setting_values() -> None:
    assert [setting_tile(v) for v in ("0", 0, "", "2", 4, "auto", " AUTO ")] == [0, 0, 0, 2, 4, "auto", "auto"]
    with pytest.raises(WinogradSettingError, match="WINO: expected one of 0, 2, 4, auto, got '3'"):
        setting_tile("3")


def test_auto_heuristic() -> None:
    assert auto_tile(48, 48, 32, 64) == 4  # the vision model's residual convs
    assert auto_tile(96, 96, 16, 32) == 4
    assert auto_tile(64, 64, 6, 6) == 0  # too few F(4,3) tiles
    assert auto_tile(512, 512, 7, 7) == 4  # resnet50's smallest
    assert auto_tile(512, 512, 7, 7, wide=True) == 2  # F(4,3) does not pay for 16-lane direct tiles; F(2,3) does
    assert auto_tile(256, 256, 8, 16, wide=True) == 2
    assert auto_tile(512, 512, 4, 8, wide=True) == 0  # too few tiles even for F(2,3)
    assert auto_tile(256, 256, 14, 14, wide=True) == 4
    assert auto_tile(12, 24, 64, 128) == 0  # too few channels to pay for the transforms
    assert auto_tile(64, 64, 56, 56) == auto_tile(256, 256, 14, 14) == 4  # resnet50's
    assert auto_tile(48, 96, 16, 32, stride=2) == 4  # vision's stride-2 conv with 32 tiles
    # squeezenet's 16 -> 64 expands: direct on full-width units, Winograd where 16-lane FMAs run on halved ones
    assert auto_tile(16, 64, 55, 55, wide=True) == 0
    assert auto_tile(16, 64, 55, 55, wide=True, halved=True) == 4
    assert auto_tile(12, 24, 64, 128, wide=True, halved=True) == 0
    assert auto_tile(24, 48, 32, 64, stride=2, wide=True, halved=True) == 0  # stride 2 keeps 32 channels
    # below 14x14 on halved units: F(2,3) (resnet18's 7x7 convs, squeezenet's 13x13), never below 7x7 or at stride 2
    assert auto_tile(512, 512, 7, 7, wide=True, halved=True) == 2
    assert auto_tile(48, 192, 13, 13, wide=True, halved=True) == 2
    assert auto_tile(512, 512, 6, 6, wide=True, halved=True) == 0
    assert auto_tile(96, 128, 16, 32, stride=2, wide=True, halved=True) == 4
    assert auto_tile(96, 128, 8, 12, stride=2, wide=True, halved=True) == 0
    assert auto_tile(96, 128, 8, 16, stride=2) == 0  # 8 tiles: too few to re-read U (9x the filters)
    assert auto_tile(24, 48, 32, 64, stride=2) == 0  # too few channels
    x, wt = Tensor(rand(1, 48, 32, 64, seed=0)), Tensor(rand(48, 48, 3, 3, seed=0))
    with Context(WINO="auto"):
        assert pick_tile(x, wt, 1, 1, 1, 1) == 4
        assert pick_tile(x, wt, 1, 2, 1, 1) == 4  # stride 2: 16x32 outputs
        assert pick_tile(x, wt, 1, 2, 1, 0) == 0  # unpadded: 15x31 = 465 outputs, under 32 tiles
        assert pick_tile(Tensor(rand(1, 48, 16, 32, seed=0)), wt, 1, 2, 1, 1) == 0  # 8x16 outputs
        on_cl = Tensor(rand(1, 48, 32, 64, seed=0), device="OPENCL")
        assert pick_tile(on_cl, Tensor(rand(48, 48, 3, 3, seed=0), device="OPENCL"), 1, 1, 1, 1) == 4


@pytest.mark.parametrize(("lanes", "tile"), [("eight_lane_channels", 4), ("wide_vectors", 2)])
def test_a_7x7_conv_takes_the_smaller_winograd_tile_where_the_direct_conv_tiles_16_lanes(
        lanes: str, tile: int, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(lanes)
    x, wt = Tensor(rand(1, 64, 7, 7, seed=0)), Tensor(rand(64, 64, 3, 3, seed=1))
    with Context(WINO="auto"):
        assert pick_tile(x, wt, 1, 1, 1, 1) == tile


@pytest.mark.parametrize("halved", [False, True])
def test_16_channels_are_winograds_where_the_device_runs_16_lanes_on_halved_units(
        halved: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"], "halved_wide_fma", halved)
    x, wt = Tensor(rand(1, 16, 28, 28, seed=0)), Tensor(rand(64, 16, 3, 3, seed=1))
    with Context(WINO="auto"):
        assert pick_tile(x, wt, 1, 1, 1, 1) == (4 if halved else 0)


def test_setting_changes_the_kernel_cache_key() -> None:
    keys = set()
    for value in ("0", "2", "4", "auto"):
        with Context(WINO=value):
            keys.add(kernel_settings_key())
    assert len(keys) == 4


# --- capture: the weight transform is weight-only work --------------------------------------------------------
@pytest.mark.parametrize("tile", [2, 4])
def test_capture_folds_the_weight_transform(tile: int) -> None:
    x, wt, b = rand(1, 5, 9, 11, seed=11), rand(32, 5, 3, 3, seed=12), rand(32, seed=13)
    weight, bias = Tensor(wt), Tensor(b)
    with Context(WINO=str(tile)):
        cap = capture(lambda x: {"y": x.conv2d(weight, bias, padding=1)}, {"x": x})
    assert_close(cap({"x": x})["y"], conv_ref(x, wt, b, (1, 1, 1, 1)), tile)
    # the replay binds U = G g G^T (r*r, Cout blocks, Cin, block) as a weight and never the raw 3x3 filters
    _, g, _ = matrices(tile)
    r = tile + 2
    want_u = np.einsum("pk,ockl,ql->pqco", g, wt.astype(np.float64), g).reshape(r * r, 5, 2, 16)
    want_u = want_u.transpose(0, 2, 1, 3)  # blocks of 16 output channels, each (Cin, 16)
    stored = [w.view(np.float32) for w in cap.weights.values()]
    assert not any(s.size == wt.size and np.array_equal(s, wt.reshape(-1)) for s in stored)
    transformed = [s for s in stored if s.size == want_u.size]
    assert len(transformed) == 1
    np.testing.assert_allclose(transformed[0].reshape(want_u.shape), want_u, rtol=1e-5, atol=1e-6)
    # its kernels (one per axis) ran at capture; no replay kernel could compute it without the raw filters
    assert cap.report is not None and cap.report.kernels_pruned >= 2


def test_weight_blocks_of_16_output_channels() -> None:
    assert [cout_block(c) for c in (512, 48, 24, 6)] == [16, 16, 8, 6]


def test_planes_4kb_apart_are_padded_before_going_channels_last() -> None:
    """Planes a multiple of 4 KB apart (the vision model's 32x64) put a pixel's channels in one L1 set, 2 KB apart
    (its 16x32) in two: when the channels outnumber what those sets hold (8 ways each), the channels-last copy
    reads a padded copy (planes 34x66, 18x34) instead of the input."""
    assert [plane_sets(b, DEFAULT_L1) for b in (8192, 4096, 2048, 1024, 12544, 784)] == [1, 1, 2, 4, 16, 64]
    copies = {}
    for cin, h, w in ((16, 32, 64), (8, 32, 64), (32, 16, 32), (16, 16, 32), (16, 30, 60)):
        x, wt = Tensor(rand(1, cin, h, w, seed=9)), Tensor(rand(8, cin, 3, 3, seed=10))
        # the elementwise kernels but the input transform (E_6_6_...: its two 6-point axes first)
        copies[(cin, h, w)] = [n for n in kernel_names(winograd_conv2d(x, wt, padding=1))
                               if n.startswith("E_") and not n.startswith("E_6_6_")]
    assert copies[(16, 32, 64)] == ["E_16_34_66", "E_34_66_16"]
    assert copies[(8, 32, 64)] == ["E_34_66_8"]  # 8 channels fit the set's 8 ways
    assert copies[(32, 16, 32)] == ["E_32_18_34", "E_18_34_32"]
    assert copies[(16, 16, 32)] == ["E_18_34_16"]
    assert copies[(16, 30, 60)] == ["E_34_62_16"]


def test_planes_a_multiple_of_4kb_get_spare_tiles() -> None:
    """V's planes (one per transform point) 24 KB apart put a tile's 36 stores in one L1 set: one spare tile per
    plane spreads them; planes that already spread, or that no spare tile spreads (256 channels), get none."""
    assert spare_tiles(1, 128, 48, 36, DEFAULT_L1) == 1  # vision's 48 channels of 8 x 16 tiles
    assert spare_tiles(1, 32, 48, 81, DEFAULT_L1) == 1  # its stride-2 conv's 81 points
    assert spare_tiles(2, 128, 48, 36, DEFAULT_L1) == 1
    assert spare_tiles(1, 17, 16, 36, DEFAULT_L1) == 0
    assert spare_tiles(1, 16, 256, 36, DEFAULT_L1) == 0
    x, wt = rand(1, 48, 32, 64, seed=11), rand(16, 48, 3, 3, seed=12)
    y = winograd_conv2d(Tensor(x), Tensor(wt), padding=1)
    assert "E_6_6_129_48" in kernel_names(y)  # the transform writes 128 tiles and one spare per plane
    assert_close(y.numpy(), conv_ref(x, wt, np.zeros(16, np.float32), (1, 1, 1, 1)), 4)


def test_spare_tiles_follow_the_devices_l1(monkeypatch: pytest.MonkeyPatch) -> None:
    """An L1 of 8 sets of 64 ways holds a tile's 36 stores in one set: no spare tile, there or in the graph that
    a conv on a device with that L1 builds."""
    deep = CacheLevel(32 * 1024, 64, 64)
    assert spare_tiles(1, 128, 48, 36, DEFAULT_L1) == 1 and spare_tiles(1, 128, 48, 36, deep) == 0
    assert plane_sets(24 * 1024, deep) == 1 and plane_sets(24 * 1024 + 64, deep) == 8
    cpu = Device["CPU"]
    monkeypatch.setattr(cpu, "limits", replace(cpu.limits, l1=deep))
    x, wt = Tensor(rand(1, 48, 32, 64, seed=11)), Tensor(rand(16, 48, 3, 3, seed=12))
    names = kernel_names(winograd_conv2d(x, wt, padding=1))
    assert "E_6_6_128_48" in names and "E_6_6_129_48" not in names
