"""Kernel outputs tiled across channels are stored channels-last and read back through a permute
(jit/schedule/channels_last.py): whole vector stores instead of scatters, results unchanged bit for bit, on the CPU
and OpenCL; rows tiled along and the values asked for keep their own layout."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.ir.uop import Ops
from jit.schedule.kernels import create_schedule

RNG = np.random.default_rng(23)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape, dtype=np.float32)


def _pointwise(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x)


def _two_convs(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _rand(1, 32, size, size), _rand(64, 32, 1, 1) / 4, _rand(32, 64, 1, 1) / 8


def _model(w1: np.ndarray, w2: np.ndarray):  # noqa: ANN202 - a capture's model function
    def fn(x: Tensor) -> dict[str, Tensor]:
        hidden = x.conv2d(Tensor(w1)).relu()  # 14-wide rows: tiled across its 64 channels
        return {"y": hidden.conv2d(Tensor(w2))}
    return fn


def _channels_last_views(*targets: Tensor) -> list:
    """The channels-last views (N, H, W, C) of the values a schedule of ``targets`` computes."""
    _, becomes = create_schedule([t.uop for t in targets], "CPU")
    return [v.src[0].src[0].shape for v in becomes.values() if v.op is Ops.RESHAPE and v.src[0].op is Ops.PERMUTE]


def test_a_conv_tiled_across_channels_stores_its_output_channels_last() -> None:
    x, w1, w2 = _two_convs(14)
    out = Tensor(x).conv2d(Tensor(w1)).relu().conv2d(Tensor(w2))
    assert _channels_last_views(out) == [(14, 14, 64)]


def test_rows_tiled_along_keep_the_plain_layout() -> None:
    x, w1, w2 = _two_convs(56)  # 56-wide rows: row vectors store whole in NCHW
    assert _channels_last_views(Tensor(x).conv2d(Tensor(w1)).relu().conv2d(Tensor(w2))) == []


def _hidden_kernel(run: object) -> str:
    """The source of the captured first conv's kernel (64 channels at 14 x 14)."""
    cb = run.cmdbuf
    return next(cb.kernels[d.kernel].source for d in cb.dispatches if cb.kernels[d.kernel].name.startswith("r_64_14"))


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_the_stores_are_whole_vectors_and_the_results_unchanged(target: str) -> None:
    x, w1, w2 = _two_convs(14)
    run = capture(_model(w1, w2), {"x": x}, target=target)
    assert "scatter" not in _hidden_kernel(run), _hidden_kernel(run)
    got = run(x=x)["y"]
    np.testing.assert_allclose(got, _pointwise(np.maximum(_pointwise(x, w1), 0), w2), rtol=1e-4, atol=1e-4)
    with Context(STORE_VIEWS=0):  # every buffer in its value's own layout
        plain = capture(_model(w1, w2), {"x": x}, target=target)
    assert "scatter" in _hidden_kernel(plain)  # what it replaces
    np.testing.assert_array_equal(plain(x=x)["y"], got)


def test_values_asked_for_keep_their_layout() -> None:
    x, w1, w2 = _two_convs(14)
    hidden = Tensor(x).conv2d(Tensor(w1)).relu()
    assert _channels_last_views(hidden.conv2d(Tensor(w2)), hidden) == []


def test_an_eager_intermediate_reads_back_in_its_own_order() -> None:
    x, w1, w2 = _two_convs(14)
    hidden = Tensor(x).conv2d(Tensor(w1)).relu()
    out = hidden.conv2d(Tensor(w2)).numpy()  # realizes the hidden value channels-last on the way
    want = np.maximum(_pointwise(x, w1), 0)
    np.testing.assert_allclose(hidden.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, _pointwise(want, w2), rtol=1e-4, atol=1e-4)
