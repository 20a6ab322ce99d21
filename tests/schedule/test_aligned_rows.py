"""Reduce kernels' outputs stored in rows padded to whole cache lines (jit/schedule/aligned_rows.py): where the
target's vectors are a line, a conv over 111-wide rows stores them 112 apart, its readers read through the same
view, and results are unchanged, eager and captured."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jit import Tensor, capture
from jit.common.dtype import dtypes
from jit.schedule.aligned_rows import aligned_row_width
from jit.schedule.kernels import create_schedule
from targets.registry import Device

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 3, 64, 224), dtype=np.float32)
W = RNG.standard_normal((16, 3, 3, 3), dtype=np.float32)


def _stem(x: Tensor) -> Tensor:
    """squeezenet's stem, narrower: a 3x3 stride-2 conv to 111-wide rows, ReLU, a 3x3 stride-2 max pool."""
    return x.conv2d(Tensor(W), stride=2).relu().max_pool2d(3, 2)


def _stem_want(x: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    conv = np.maximum(np.einsum("nchwij,ocij->nohw", windows, W), 0)
    pools = np.lib.stride_tricks.sliding_window_view(conv, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return pools.max(axis=(-2, -1))


@pytest.mark.usefixtures("wide_vectors")
@pytest.mark.parametrize(("shape", "width"), [
    ((1, 64, 111, 111), 112),  # squeezenet's stem: one float of pad a row
    ((4, 100), 112),  # 12 of pad on 100 is within an eighth of the row
    ((1, 64, 55, 55), None),  # 9 of pad on 55 is more than an eighth
    ((1, 64, 112, 112), None),  # whole lines already
    ((1, 512, 13, 13), None),  # a row shorter than a line
    ((111,), None),  # one row: nothing after it to start on a line
])
def test_which_rows_are_padded(shape: tuple[int, ...], width: int | None) -> None:
    assert aligned_row_width(shape, dtypes.float32, "CPU") == width


def test_no_padded_rows_where_vectors_are_narrower_than_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"], "language", replace(Device["CPU"].language, vector_width=8))
    assert aligned_row_width((1, 64, 111, 111), dtypes.float32, "CPU") is None


@pytest.mark.usefixtures("wide_vectors")
def test_a_conv_stores_rows_a_line_apart_and_the_pool_reads_them_back() -> None:
    out = _stem(Tensor(X))
    kernels, _ = create_schedule([out.uop], "CPU")
    conv = next(k for k in kernels if k.name.startswith("r_16_31_111_3_3_3"))
    pool = next(k for k in kernels if conv.out_buffer in k.buffers[1:])
    assert conv.out_buffer.arg[2] == 16 * 31 * 112
    assert pool.out_buffer.arg[2] == 16 * 15 * 55  # the capture's output keeps its own layout
    np.testing.assert_allclose(out.numpy(), _stem_want(X), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("wide_vectors")
def test_a_captured_stem_over_padded_rows_matches_every_call() -> None:
    run = capture(lambda x: {"y": _stem(x)}, {"x": X}, target="CPU")
    source = next(k.source for k in run.cmdbuf.kernels if k.name.startswith("r_16_31_111_3_3_3"))
    assert "*112)" in source  # its rows' stores step a whole number of lines
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(X.shape, dtype=np.float32)
        np.testing.assert_allclose(run({"x": x})["y"], _stem_want(x), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("wide_vectors")
def test_a_value_asked_for_keeps_its_rows() -> None:
    out = Tensor(X).conv2d(Tensor(W), stride=2)
    kernels, _ = create_schedule([out.uop], "CPU")
    assert [k.out_buffer.arg[2] for k in kernels if k.name.startswith("r_")] == [16 * 31 * 111]
