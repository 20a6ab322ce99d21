"""A concat along the channels of short rows whose every piece is a conv stored into its slice is laid out
channels-last (jit/schedule/channels_last.py ``channels_last_concat``), and each piece's kernel then tiles across
channels (jit/codegen/opt/tiling.py: a row whose stores lie apart), so its vectors store whole instead of
scattering; results unchanged. A concat with a piece copied in, or of channels no wide vector divides, keeps the
plain layout."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.ir.uop import Ops
from jit.schedule.kernels import create_schedule
from tests.codegen.test_opt_tiling_threads import _conv_reference

# 16-lane channel vectors and direct convs for the 16-channel expands, whatever this machine's probe found
pytestmark = pytest.mark.usefixtures("wide_vectors", "full_width_units")

RNG = np.random.default_rng(29)
X = RNG.standard_normal((1, 32, 27, 27), dtype=np.float32)
WS = RNG.standard_normal((16, 32, 1, 1), dtype=np.float32) / 4
WA = RNG.standard_normal((64, 16, 1, 1), dtype=np.float32) / 4
WB = RNG.standard_normal((48, 16, 3, 3), dtype=np.float32) / 8


def _fire(x: Tensor, wa: np.ndarray = WA) -> Tensor:
    """squeezenet's fire module: a squeeze, two expands concatenated, then a max pool reading the concat."""
    s = (x.conv2d(Tensor(WS)) + 0.1).relu()
    a, b = (s.conv2d(Tensor(wa)) + 0.2).relu(), (s.conv2d(Tensor(WB), padding=1) + 0.3).relu()
    return Tensor.cat(a, b, dim=1).max_pool2d(3, 2)


def _want(x: np.ndarray, wa: np.ndarray = WA) -> np.ndarray:
    def conv(v: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
        return _conv_reference(v, w, np.zeros(w.shape[0], np.float32), pad)

    s = np.maximum(conv(x, WS, 0) + 0.1, 0)
    cat = np.concatenate([np.maximum(conv(s, wa, 0) + 0.2, 0), np.maximum(conv(s, WB, 1) + 0.3, 0)], axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(cat, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return windows.max(axis=(-2, -1))


def _channels_last_views(out: Tensor) -> list[tuple[int, ...]]:
    """The (N, H, W, C) views of the values a schedule of ``out`` computes."""
    _, becomes = create_schedule([out.uop], "CPU")
    return [v.src[0].src[0].shape for v in becomes.values() if v.op is Ops.RESHAPE and v.src[0].op is Ops.PERMUTE]


def test_a_fire_modules_concat_is_stored_channels_last() -> None:
    assert (27, 27, 112) in _channels_last_views(_fire(Tensor(X)))
    with Context(STORE_VIEWS=0):
        assert _channels_last_views(_fire(Tensor(X))) == []


def _expand_sources(run: object) -> list[str]:
    cb = run.cmdbuf
    return [cb.kernels[d.kernel].source for d in cb.dispatches
            if cb.kernels[d.kernel].name.startswith(("r_64_27_27", "r_48_27_27"))]


def test_its_pieces_store_whole_vectors() -> None:
    """Both expands, the 1x1 one included (its merged 729-wide rows would otherwise take overlapped row vectors,
    each stored lane by lane into the channels-last concat)."""
    run = capture(lambda x: {"y": _fire(x)}, {"x": X}, target="CPU")
    sources = _expand_sources(run)
    assert len(sources) == 2
    assert all("scatter" not in s for s in sources), sources


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_its_results_are_unchanged(target: str) -> None:
    run = capture(lambda x: {"y": _fire(x)}, {"x": X}, target=target)
    other = RNG.standard_normal(X.shape, dtype=np.float32)
    for x in (X, other):
        np.testing.assert_allclose(run({"x": x})["y"], _want(x), rtol=1e-4, atol=1e-4)


def test_a_concat_with_a_piece_copied_in_keeps_the_plain_layout() -> None:
    """shufflenet's channel split: half the input passes through, which a channels-last concat copies lane by
    lane."""
    x = Tensor(X)
    out = Tensor.cat(x[:, :16], (x[:, 16:].conv2d(Tensor(WA[:, :16])) + 0.2).relu(), dim=1).max_pool2d(3, 2)
    assert all(shape[-1] != 80 for shape in _channels_last_views(out))


def test_channels_no_wide_vector_divides_keep_the_plain_layout() -> None:
    """shufflenet's 24-channel pieces at 28-wide rows: cheaper along the rows than in 8-lane channel vectors."""
    wa = WA[:24]
    assert all(shape[-1] != 72 for shape in _channels_last_views(_fire(Tensor(X), wa)))
    np.testing.assert_allclose(_fire(Tensor(X), wa).numpy(), _want(X, wa), rtol=1e-4, atol=1e-4)
