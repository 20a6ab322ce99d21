"""Concats written in place (jit/schedule/concat_stores.py): each piece's kernel stores into its slice of the
concat's buffer and the concat's copy kernel is gone; results unchanged, eager and captured."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.schedule.concat_stores import concat_pieces
from jit.schedule.kernels import create_schedule
from tests.codegen.test_opt_tiling_threads import _conv_reference

# the fire module's 16-channel expands as direct convs (jit/frontend/winograd.py picks them by machine)
pytestmark = pytest.mark.usefixtures("full_width_units")

RNG = np.random.default_rng(3)
X = RNG.standard_normal((1, 32, 27, 27), dtype=np.float32)
WS = RNG.standard_normal((16, 32, 1, 1), dtype=np.float32)
WA = RNG.standard_normal((64, 16, 1, 1), dtype=np.float32)
WB = RNG.standard_normal((48, 16, 3, 3), dtype=np.float32)
WN = RNG.standard_normal((16, 112, 1, 1), dtype=np.float32)


def _fire(x: Tensor) -> Tensor:
    """squeezenet's fire module (squeeze, two expands, concat) and the next squeeze, which reads the concat."""
    s = (x.conv2d(Tensor(WS)) + 0.1).relu()
    a, b = (s.conv2d(Tensor(WA)) + 0.2).relu(), (s.conv2d(Tensor(WB), padding=1) + 0.3).relu()
    return Tensor.cat(a, b, dim=1).conv2d(Tensor(WN)).relu()


def _want(x: np.ndarray) -> np.ndarray:
    def conv(v: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
        return _conv_reference(v, w, np.zeros(w.shape[0], np.float32), pad)

    s = np.maximum(conv(x, WS, 0) + 0.1, 0)
    cat = np.concatenate([np.maximum(conv(s, WA, 0) + 0.2, 0), np.maximum(conv(s, WB, 1) + 0.3, 0)], axis=1)
    return np.maximum(conv(cat, WN, 0), 0)


def test_each_piece_stores_into_its_slice_and_no_kernel_copies_the_concat() -> None:
    out = _fire(Tensor(X))
    kernels, _ = create_schedule([out.uop], "CPU")
    expands = [k for k in kernels if k.name in ("r_64_27_27_16", "r_48_27_27_16_3_3")]
    assert len(expands) == 2 and expands[0].out_buffer is expands[1].out_buffer  # both write the concat
    assert not any(k.name.startswith("E_112_27_27") for k in kernels)
    np.testing.assert_allclose(out.numpy(), _want(X), rtol=1e-4, atol=1e-3)
    with Context(STORE_VIEWS=0):
        plain, _ = create_schedule([_fire(Tensor(X)).uop], "CPU")
    assert any(k.name.startswith("E_112_27_27") for k in plain)


W_IN = RNG.standard_normal((64, 32, 1, 1), dtype=np.float32)
W_MIX = RNG.standard_normal((8, 96, 1, 1), dtype=np.float32)


def _input_beside_a_conv(x: Tensor) -> Tensor:
    return Tensor.cat(x, (x.conv2d(Tensor(W_IN)) + 0.2).relu(), dim=1).conv2d(Tensor(W_MIX)).relu()


def test_a_piece_no_kernel_computes_is_copied_into_its_slice() -> None:
    """An input piece beside a conv's: the input is copied into its slice (one kernel, as the concat was)."""
    kernels, _ = create_schedule([_input_beside_a_conv(Tensor(X)).uop], "CPU")
    with Context(STORE_VIEWS=0):
        plain, _ = create_schedule([_input_beside_a_conv(Tensor(X)).uop], "CPU")
        want = _input_beside_a_conv(Tensor(X)).numpy()
    assert len(kernels) <= len(plain)
    np.testing.assert_allclose(_input_beside_a_conv(Tensor(X)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_concat_pieces_reads_tensor_cat_and_nothing_else() -> None:
    a, b, c = Tensor(X[:, :4]), Tensor(X[:, 4:10]), Tensor(X[:, 10:12])
    pieces = concat_pieces(Tensor.cat(a, b, c, dim=1).uop)
    assert pieces is not None and [(p.axis, p.offset) for p in pieces] == [(1, 0), (1, 4), (1, 10)]
    assert concat_pieces((a + 1).uop) is None
    padded = a.pad(((0, 0), (0, 4), (0, 0), (0, 0)))  # a select of two pads that do not tile the axis
    assert concat_pieces((padded > 0).where(padded, padded).uop) is None


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_captured_fire_module_matches_on_every_call(target: str) -> None:
    run = capture(lambda x: {"y": _fire(x)}, {"x": X}, target=target)
    other = RNG.standard_normal(X.shape, dtype=np.float32)
    for x in (X, other):
        np.testing.assert_allclose(run({"x": x})["y"], _want(x), rtol=1e-4, atol=1e-3)


W_C = RNG.standard_normal((16, 80, 1, 1), dtype=np.float32)


def _dense_block(x: Tensor) -> Tensor:
    a, b = (x.conv2d(Tensor(W_IN)) + 0.2).relu(), (x.conv2d(Tensor(WS)) + 0.1).relu()
    inner = Tensor.cat(a, b, dim=1)  # 80 channels, read by the next conv: a kernel output of its own
    outer = Tensor.cat(inner, (inner.conv2d(Tensor(W_C)) + 0.3).relu(), dim=1)
    return outer.conv2d(Tensor(W_MIX)).relu()


def test_a_concat_of_a_concat_copies_the_inner_one_into_its_slice() -> None:
    """Regression (densenet121's growing features): a piece that is itself a stored concat writes its own buffer;
    taken as a piece stored in place, nothing ever wrote its slice of the outer concat."""
    with Context(STORE_VIEWS=0):
        want = _dense_block(Tensor(X)).numpy()
    np.testing.assert_allclose(_dense_block(Tensor(X)).numpy(), want, rtol=1e-5, atol=1e-5)
