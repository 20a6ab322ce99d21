"""Input checking on every replay: by name, dtype, shape, byte size, strides, alignment and device."""

from __future__ import annotations

import numpy as np
import pytest

from jit import DrivepackError, Tensor, capture
from targets.replay import InputError


@pytest.fixture(scope="module")
def policy_like():
    def fn(features_buffer: Tensor, desire: Tensor) -> dict[str, Tensor]:
        return {"out": features_buffer.sum(axis=2) + desire.sum(axis=2)}

    ex = {"features_buffer": np.zeros((1, 25, 512), np.float32), "desire": np.zeros((1, 25, 8), np.float32)}
    return capture(fn, ex), ex


def _bad(cap, ex, message: str, **override) -> None:
    with pytest.raises(InputError) as e:
        cap(ex | override)
    assert str(e.value) == message and isinstance(e.value, DrivepackError)


def test_good_inputs_pass(policy_like) -> None:
    cap, ex = policy_like
    assert cap(ex)["out"].shape == (1, 25)


def test_shape_message_names_input_and_field(policy_like) -> None:
    cap, ex = policy_like
    _bad(cap, ex, "features_buffer: shape expected (1, 25, 512), got (1, 24, 512)",
         features_buffer=np.zeros((1, 24, 512), np.float32))


def test_flat_input_of_the_wrong_length_is_refused(policy_like) -> None:
    cap, ex = policy_like
    _bad(cap, ex, "desire: shape expected (1, 25, 8), got (199,)", desire=np.zeros(199, np.float32))
    _bad(cap, ex, "desire: shape expected (1, 25, 8), got (200,)", desire=np.zeros(200, np.float32))


def test_dtype(policy_like) -> None:
    cap, ex = policy_like
    _bad(cap, ex, "desire: dtype expected float32, got float64", desire=np.zeros((1, 25, 8)))


def test_names_missing_and_unexpected(policy_like) -> None:
    cap, ex = policy_like
    with pytest.raises(InputError, match=r"names expected \['desire', 'features_buffer'\], got missing "
                                         r"\['desire'\], unexpected \[\]"):
        cap(features_buffer=ex["features_buffer"])
    with pytest.raises(InputError, match=r"got missing \[\], unexpected \['traffic_convention'\]"):
        cap(ex | {"traffic_convention": np.zeros((1, 2), np.float32)})


def test_strides(policy_like) -> None:
    cap, ex = policy_like
    wide = np.zeros((1, 25, 16), np.float32)[:, :, ::2]
    _bad(cap, ex, "desire: strides expected (800, 32, 4) (C-contiguous), got (1600, 64, 8)", desire=wide)
    _bad(cap, ex, "desire: strides expected (800, 32, 4) (C-contiguous), got (4, 4, 100)",
         desire=np.zeros((8, 25, 1), np.float32).T)


def test_alignment(policy_like) -> None:
    cap, ex = policy_like
    raw = np.zeros(800 + 8, np.uint8)
    start = (-raw.ctypes.data) % 4 + 1  # one byte past a 4-byte boundary
    odd = raw[start:start + 800].view(np.float32).reshape(1, 25, 8)
    _bad(cap, ex, "desire: alignment expected an address multiple of 4 bytes, got address % 4 == 1", desire=odd)


def test_device(policy_like) -> None:
    cap, ex = policy_like
    _bad(cap, ex, "desire: device expected a host numpy.ndarray, got Tensor on CPU", desire=Tensor(ex["desire"]))
    _bad(cap, ex, "desire: device expected a host numpy.ndarray, got list", desire=ex["desire"].tolist())
