"""1x1 convs over planes of whole vectors (jit/frontend/row_align.py): the producer of their input (a conv's
epilogue, or a concat of them) stores straight into the padded copy, no kernel copies it, the conv stores its
output planes padded alike with its last tile on a vector boundary, and results are unchanged, eager and
captured."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.codegen.opt.options import DEFAULT_OPTS
from jit.frontend.row_align import plane_aligned_rows
from jit.schedule.kernels import create_schedule
from jit.schedule.padded_stores import merges_last_dims
from targets.registry import Device
from tests.codegen.test_opt_tiling_threads import _conv_reference

pytestmark = pytest.mark.usefixtures("wide_vectors")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((1, 32, 13, 13), dtype=np.float32)
WA = RNG.standard_normal((256, 32, 1, 1), dtype=np.float32)
WB = RNG.standard_normal((256, 32, 3, 3), dtype=np.float32)
W_HEAD = RNG.standard_normal((1000, 512, 1, 1), dtype=np.float32) * np.float32(0.05)


def _conv(v: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    return _conv_reference(v, w, np.zeros(w.shape[0], np.float32), pad)


def _fire_head(x: Tensor) -> Tensor:
    """squeezenet's last fire module's expands, their concat, and its 512 -> 1000 classifier over 13 x 13."""
    a, b = (x.conv2d(Tensor(WA)) + 0.2).relu(), (x.conv2d(Tensor(WB), padding=1) + 0.3).relu()
    return Tensor.cat(a, b, dim=1).conv2d(Tensor(W_HEAD)).relu()


def _fire_head_want(x: np.ndarray) -> np.ndarray:
    cat = np.concatenate([np.maximum(_conv(x, WA, 0) + 0.2, 0), np.maximum(_conv(x, WB, 1) + 0.3, 0)], axis=1)
    return np.maximum(_conv(cat, W_HEAD, 0), 0)


# the 3x3 conv's last kernel: the direct conv, or Winograd's F(2,3) output transform (wide units take it at 13x13)
@pytest.mark.parametrize(("wino", "expand3x3"), [("0", "r_256_13_13_32_3_3"), ("auto", "r_256_13_13_4")])
def test_the_classifier_reads_planes_of_whole_vectors_that_the_concat_pieces_store_into(wino: str,
                                                                                         expand3x3: str) -> None:
    with Context(WINO=wino):
        out = _fire_head(Tensor(X))
    kernels, _ = create_schedule([out.uop], "CPU")
    head = next(k for k in kernels if k.name.startswith("r_1000_176_512"))
    expands = [k for k in kernels if k.name in ("r_256_13_13_32", expand3x3)]
    assert len(expands) == 2 and expands[0].out_buffer is expands[1].out_buffer is head.buffers[1]
    assert head.buffers[1].arg[2] == 512 * 176  # 169 floats a plane, padded to 11 vectors of 16
    # besides the expands, only the copy's border kernel writes it, and it reads nothing: no kernel copies planes
    assert [(k.name, len(k.buffers)) for k in kernels if k.out_buffer is head.buffers[1] and k not in expands] == \
        [("E_512_176", 1)]
    np.testing.assert_allclose(out.numpy(), _fire_head_want(X), rtol=1e-4, atol=1e-3)


def test_a_captured_classifier_over_aligned_planes_matches_every_call() -> None:
    run = capture(lambda x: {"y": _fire_head(x)}, {"x": X}, target="CPU")
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(X.shape, dtype=np.float32)
        np.testing.assert_allclose(run({"x": x})["y"], _fire_head_want(x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("wino", "producer"), [("0", "r_512_13_13_64"), ("auto", "r_512_13_13_4")])
def test_a_conv_epilogue_stores_into_the_aligned_copy_itself(wino: str, producer: str) -> None:
    x = RNG.standard_normal((1, 64, 13, 13), dtype=np.float32)
    w1, w2 = RNG.standard_normal((512, 64, 3, 3), dtype=np.float32), W_HEAD
    with Context(WINO=wino):
        out = (Tensor(x).conv2d(Tensor(w1), padding=1) + 0.1).relu().conv2d(Tensor(w2))
    kernels, _ = create_schedule([out.uop], "CPU")
    first = next(k for k in kernels if k.name.startswith(producer))
    head = next(k for k in kernels if k.name.startswith("r_1000_176_512"))
    assert first.out_buffer is head.buffers[1] and first.out_buffer.arg[2] == 512 * 176
    assert [(k.name, len(k.buffers)) for k in kernels if k.out_buffer is first.out_buffer and k is not first] == \
        [("E_512_176", 1)]
    want = _conv(np.maximum(_conv(x, w1, 1) + 0.1, 0), w2, 0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape, cout, aligned", [
    ((1, 512, 13, 13), 1000, True),  # squeezenet's classifier
    ((1, 512, 13, 13), 1024, False),  # channels fill the wide vectors: the conv tiles across them instead
    ((1, 512, 16, 16), 1000, False),  # planes are whole vectors already
    ((1, 512, 7, 7), 1000, False),  # a plane shorter than an overlapped row
    ((1, 512, 13, 13), 200, False),  # too few output channels to pay for the copy
])
def test_which_inputs_are_read_through_aligned_planes(shape: tuple[int, ...], cout: int, aligned: bool) -> None:
    x = Tensor(np.ones(shape, np.float32))
    rows = plane_aligned_rows(x, cout)
    assert (rows is not None) == aligned
    if rows is not None:
        assert rows.shape == (1, 512, 176)  # 169 values a plane, then zeros to 11 vectors of 16
        want = np.zeros((1, 512, 176), np.float32)
        want[..., :169] = 1
        np.testing.assert_array_equal(rows.numpy(), want)


def test_no_aligned_planes_without_wide_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"], "default_opts", DEFAULT_OPTS)  # wide_channel_vector 0: 8-lane machines
    assert plane_aligned_rows(Tensor(np.ones((1, 512, 13, 13), np.float32)), 1000) is None


def test_the_classifier_stores_padded_planes_and_starts_its_last_tile_on_a_vector() -> None:
    out = _fire_head(Tensor(X))
    kernels, _ = create_schedule([out.uop], "CPU")
    head = next(k for k in kernels if k.name.startswith("r_1000_176_512"))
    assert head.out_buffer.arg[2] == 1000 * 176  # its output planes padded like its input's
    run = capture(lambda x: {"y": _fire_head(x)}, {"x": X}, target="CPU")
    source = next(k.source for k in run.cmdbuf.kernels if k.name.startswith("r_1000_176_512"))
    # three-vector tiles at 0, 48, 96 and 128: the last ends on the padded row's last vector, not at 169 (121)
    assert "?alu1:128)" in source and ":121)" not in source
    np.testing.assert_allclose(run({"x": X})["y"], _fire_head_want(X), rtol=1e-4, atol=1e-3)


def test_merged_last_dims() -> None:
    assert merges_last_dims((1, 512, 13, 13), (1, 512, 169))
    assert merges_last_dims((4, 6), (24,))
    assert not merges_last_dims((1, 512, 13, 13), (512, 169))
    assert not merges_last_dims((1, 512, 13, 13), (1, 512, 13, 13, 1))
    assert not merges_last_dims((2, 6), (3, 4))
