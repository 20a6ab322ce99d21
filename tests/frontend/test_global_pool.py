"""jit/frontend/pooling.py ``global_avg_pool``: a large float32 plane sums as contiguous partial sums per channel,
then those; smaller or other planes take the plain mean. Checked against numpy and on the kernels' loads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jit import capture
from jit.frontend import pooling
from jit.frontend.tensor import Tensor
from tests.frontend.test_nn_ops import rand


@pytest.mark.parametrize("shape", [(1, 144, 56, 56), (2, 32, 112, 112), (1, 24, 32, 64)])
def test_large_planes_sum_in_two_steps_of_whole_vectors(shape: tuple[int, ...]) -> None:
    cap = capture(lambda x: {"y": x.global_avg_pool()}, {"x": rand(*shape, seed=1)})
    assert len(cap.cmdbuf.dispatches) == 2
    # the first step reads each channel's plane as rows of POOL_LANES: vector loads, never a gather across channels
    assert all("{*(data" not in k.source for k in cap.cmdbuf.kernels)
    x = rand(*shape, seed=2)
    got = cap({"x": x})["y"]
    assert got.shape == (*shape[:2], 1, 1)
    np.testing.assert_allclose(got, x.astype(np.float64).mean((2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,dtype", [((1, 8, 7, 7), np.float32), ((1, 8, 30, 30), np.float32),
                                         ((1, 8, 64, 64), np.float16)])
def test_small_odd_or_half_planes_take_the_plain_mean(shape: tuple[int, ...], dtype: type) -> None:
    # 49 pixels: below POOL_SPLIT_MIN; 900: no multiple of POOL_LANES; float16: accumulated in float32 by mean
    assert math.prod(shape[2:]) < pooling.POOL_SPLIT_MIN or math.prod(shape[2:]) % pooling.POOL_LANES or \
        dtype is np.float16
    x = rand(*shape, seed=3).astype(dtype)
    got = Tensor(x).global_avg_pool()
    want = Tensor(x).mean((2, 3), keepdim=True)
    np.testing.assert_array_equal(got.numpy(), want.numpy())

