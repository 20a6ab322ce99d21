"""A per-channel scale in front of a 1x1 conv moves onto its weights (jit/frontend/channel_scale.py)."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Tensor
from jit.common.errors import ShapeError
from jit.frontend.channel_scale import channel_scaled
from jit.schedule.kernels import create_schedule

RNG = np.random.default_rng(4)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _reference(x: np.ndarray, s: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x * s)


def test_squeeze_and_excitation_scales_the_weights_not_the_activation() -> None:
    x, w = _rand(1, 32, 28, 28), _rand(16, 32, 1, 1)
    pooled = Tensor(x).mean(axis=(2, 3), keepdim=True)
    scale = pooled.sigmoid()  # computed from the activation itself, as squeeze-and-excitation does
    out = (Tensor(x) * scale).conv2d(Tensor(w))
    names = [k.name for k in create_schedule([out.uop], "CPU")[0]]
    assert not any(n.startswith("E_") and "28_28" in n for n in names), names  # no pass over the activation
    s = 1 / (1 + np.exp(-x.mean(axis=(2, 3), keepdims=True)))
    np.testing.assert_allclose(out.numpy(), _reference(x, s, w), rtol=1e-4, atol=1e-4)


def test_blocked_weights_are_scaled_in_their_own_layout() -> None:
    """mobilenet_v3's 240 -> 40 projection at 14x14 (rows no vector divides: channel-blocked weights): the scale
    multiplies the blocked copy in one contiguous pass of Cout x Cin elements, which reads the blocks in order."""
    x, s, w = _rand(1, 240, 14, 14), _rand(1, 240, 1, 1), _rand(40, 240, 1, 1)
    out = (Tensor(x) * Tensor(s)).conv2d(Tensor(w))
    kernels = create_schedule([out.uop], "CPU")[0]
    assert not any(k.name.startswith("E_") and "14_14" in k.name for k in kernels), [k.name for k in kernels]
    products = [k for k in kernels if k.name.startswith("E_") and len(k.buffers) == 3]
    assert [k.name for k in products] == ["E_5_240_8"], [k.name for k in kernels]
    copies = {k.out_buffer for k in kernels if len(k.buffers) == 2}  # the blocked copy, folded by a capture
    assert any(b in copies for b in products[0].buffers[1:])  # the product reads the blocked copy, not the weights
    np.testing.assert_allclose(out.numpy(), _reference(x, s, w), rtol=1e-4, atol=1e-4)


def test_an_input_scale_of_another_shape_is_refused() -> None:
    with pytest.raises(ShapeError, match="input_scale expected shape \\(32,\\)"):
        Tensor(_rand(1, 32, 8, 8)).conv2d(Tensor(_rand(16, 32, 1, 1)), input_scale=Tensor(_rand(16)))


@pytest.mark.parametrize(("x_shape", "w_shape", "groups"), [
    ((1, 32, 4, 4), (64, 32, 1, 1), 1),  # weights larger than the activation: the product stays
    ((2, 32, 28, 28), (16, 32, 1, 1), 1),  # a scale per sample: one weight set cannot carry it
    ((1, 32, 28, 28), (16, 32, 3, 3), 1),  # not a 1x1 conv
    ((1, 32, 28, 28), (32, 16, 1, 1), 2),  # grouped
])
def test_other_convs_keep_the_scaled_activation(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                                groups: int) -> None:
    x, s, w = _rand(*x_shape), _rand(x_shape[0], x_shape[1], 1, 1), _rand(*w_shape)
    scaled = Tensor(x) * Tensor(s)
    assert channel_scaled(scaled, Tensor(w), groups) is None
    got = scaled.conv2d(Tensor(w), groups=groups, padding=w_shape[-1] // 2).numpy()
    want = (Tensor(x * s).conv2d(Tensor(w), groups=groups, padding=w_shape[-1] // 2)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_scale_of_another_shape_is_not_taken() -> None:
    x, w = _rand(1, 32, 28, 28), _rand(16, 32, 1, 1)
    assert channel_scaled(Tensor(x) * Tensor(_rand(1, 1, 28, 28)), Tensor(w), 1) is None  # per position
    assert channel_scaled(Tensor(x) + Tensor(_rand(1, 32, 1, 1)), Tensor(w), 1) is None  # a shift, not a scale
    assert channel_scaled(Tensor(x) * Tensor(_rand(1, 32, 1, 1)), Tensor(w), 1) is not None
