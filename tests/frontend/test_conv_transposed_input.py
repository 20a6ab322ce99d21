"""A conv whose input is a transposed view (timm's LayerNorm2d: ``Transpose -> LayerNormalization -> Transpose``
in front of every ConvNeXt 1x1 conv) reads a contiguous copy instead of gathering its rows lane by lane
(nn_ops ``rows_across_memory``)."""

from __future__ import annotations

import numpy as np

from jit import capture
from jit.frontend import nn_ops
from jit.frontend.tensor import Tensor
from tests.frontend.test_nn_ops import ref_conv

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 28, 28, 40)).astype(np.float32)  # channels-last, as a LayerNorm2d computes it
W = (RNG.standard_normal((160, 40, 1, 1)) * 0.1).astype(np.float32)


def layer_norm_then_conv(x: Tensor) -> dict[str, Tensor]:
    y = x.layer_norm(40).permute(0, 3, 1, 2)
    return {"y": y.conv2d(Tensor(W))}


def reference(x: np.ndarray) -> np.ndarray:
    norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return ref_conv(norm.transpose(0, 3, 1, 2), W, None, 1, (1, 1), (1, 1), [(0, 0), (0, 0)])


def conv_source(run) -> str:  # noqa: ANN001 (a Captured)
    (conv,) = (k.source for k in run.cmdbuf.kernels if k.name.startswith("r_160"))
    return conv


def test_the_conv_reads_its_transposed_input_contiguously() -> None:
    run = capture(layer_norm_then_conv, {"x": X})
    np.testing.assert_allclose(run({"x": X})["y"], reference(X), rtol=1e-4, atol=1e-4)
    assert "*(ptr" not in conv_source(run)  # no vector built lane by lane from strided loads


def test_which_views_count_as_transposed() -> None:
    x = Tensor(X)
    assert nn_ops.rows_across_memory(x.permute(0, 3, 1, 2))
    assert nn_ops.rows_across_memory(x.permute(0, 3, 1, 2).reshape(1, 40, 28, 28))
    assert not nn_ops.rows_across_memory(x)
    assert not nn_ops.rows_across_memory(x.permute(0, 2, 1, 3))  # rows stay rows
    assert not nn_ops.rows_across_memory(x.permute(0, 3, 1, 2).contiguous())
