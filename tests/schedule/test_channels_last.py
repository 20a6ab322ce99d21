"""Kernel outputs tiled across channels are stored channels-last and read back through a permute
(jit/schedule/channels_last.py): whole vector stores instead of scatters, results unchanged bit for bit, on the CPU
and OpenCL; rows tiled along and the values asked for keep their own layout. An elementwise value over such outputs
(a squeeze-and-excitation scale, a norm between two permutes) is stored channels-last with them, its loop over
channels innermost (jit/codegen/opt/order.py ``contiguous_store_innermost``)."""

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


@pytest.mark.usefixtures("no_chains")  # the hidden conv's kernel under its own name
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


def _squeeze_excite(w1: np.ndarray, w2: np.ndarray):  # noqa: ANN202 - a capture's model function
    def fn(x: Tensor) -> dict[str, Tensor]:
        hidden = x.conv2d(Tensor(w1)).relu()  # channels-last (above), and read twice: its own kernel
        # the activation after the scale keeps it out of the next conv's weights (jit/frontend/channel_scale.py)
        scaled = (hidden * hidden.mean(axis=(2, 3), keepdim=True).sigmoid() - 0.25).relu()
        return {"y": scaled.conv2d(Tensor(w2))}
    return fn


def _channel_norm(w1: np.ndarray, w2: np.ndarray):  # noqa: ANN202 - a capture's model function
    def fn(x: Tensor) -> dict[str, Tensor]:
        hidden = x.conv2d(Tensor(w1)).relu().permute(0, 2, 3, 1)  # (N, H, W, C), as timm's LayerNorm2d
        centred = hidden - hidden.mean(axis=-1, keepdim=True)
        normed = centred * (centred * centred).mean(axis=-1, keepdim=True).add(1e-6).rsqrt()
        return {"y": normed.permute(0, 3, 1, 2).contiguous().conv2d(Tensor(w2))}  # stored as (N, C, H, W)
    return fn


def _scale_kernel(run: object, prefix: str) -> str:
    cb = run.cmdbuf
    return next(cb.kernels[d.kernel].source for d in cb.dispatches if cb.kernels[d.kernel].name.startswith(prefix))


def _want_squeeze_excite(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    hidden = np.maximum(_pointwise(x, w1), 0)
    return _pointwise(np.maximum(hidden / (1 + np.exp(-hidden.mean(axis=(2, 3), keepdims=True))) - 0.25, 0), w2)


def _want_channel_norm(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    hidden = np.maximum(_pointwise(x, w1), 0)
    centred = hidden - hidden.mean(axis=1, keepdims=True)
    return _pointwise(centred / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + 1e-6), w2)


@pytest.mark.parametrize(("model", "want"), [(_squeeze_excite, _want_squeeze_excite),
                                             (_channel_norm, _want_channel_norm)])
def test_an_elementwise_value_over_a_channels_last_one_is_stored_channels_last(model, want) -> None:  # noqa: ANN001
    x, w1, w2 = _two_convs(14)
    out = model(w1, w2)(Tensor(x))["y"]
    assert _channels_last_views(out).count((14, 14, 64)) == 2  # the conv's output and the value over it


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
@pytest.mark.parametrize(("model", "want"), [(_squeeze_excite, _want_squeeze_excite),
                                             (_channel_norm, _want_channel_norm)])
def test_its_results_are_unchanged(target: str, model, want) -> None:  # noqa: ANN001
    x, w1, w2 = _two_convs(14)
    got = capture(model(w1, w2), {"x": x}, target=target)(x=x)["y"]
    np.testing.assert_allclose(got, want(x, w1, w2), rtol=1e-4, atol=1e-4)
    with Context(STORE_VIEWS=0):  # the conv after it may tile otherwise, reading another layout: not bit for bit
        plain = capture(model(w1, w2), {"x": x}, target=target)(x=x)["y"]
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)


def test_its_loop_over_channels_is_innermost_and_vectorized() -> None:
    x, w1, w2 = _two_convs(14)
    source = _scale_kernel(capture(_squeeze_excite(w1, w2), {"x": x}, target="CPU"), "E_64_14_14")
    with Context(STORE_VIEWS=0):
        plain = _scale_kernel(capture(_squeeze_excite(w1, w2), {"x": x}, target="CPU"), "E_64_14_14")
    # channels-last: the channels loop (64 over the vectors' lanes) inside the pixels' (196)
    assert source.index("< 196;") < source.index("_v; })"), source
    assert "*196)" not in source and "*196)" in plain, (source, plain)


def test_a_value_over_as_many_plain_values_keeps_the_plain_layout() -> None:
    x, w1, w2 = _two_convs(14)
    tiled = Tensor(x).conv2d(Tensor(w1)).relu()  # channels-last
    residual = Tensor(_rand(1, 64, 14, 14))  # a buffer in its own order

    def views(value: Tensor) -> int:
        return _channels_last_views(value.conv2d(Tensor(w2))).count((14, 14, 64))

    assert views((tiled + residual) * tiled.mean(axis=(2, 3), keepdim=True)) == 1
    assert views((tiled * tiled.mean(axis=(2, 3), keepdim=True) - 0.25).relu() + residual) == 1
    broadcast = Tensor(_rand(1, 1, 14, 14))  # read a pixel for every channel: either layout alike
    assert views((tiled * tiled.mean(axis=(2, 3), keepdim=True) - 0.25).relu() + broadcast) == 2
