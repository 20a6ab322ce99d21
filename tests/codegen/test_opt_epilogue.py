"""Reduce epilogues (bias, BN, activation, residual add) run once, in the producing kernel, not in every reader."""

from __future__ import annotations

import numpy as np

from jit import Ops, Tensor
from jit.ir.uop import toposort
from jit.schedule.kernels import create_schedule


def _reduce_count(ast) -> int:
    return sum(1 for u in toposort([ast]) if u.op is Ops.REDUCE)


def test_matmul_bias_relu_feeding_a_matmul_is_stored_once() -> None:
    rng = np.random.default_rng(0)
    a, w1, b1, w2 = (rng.standard_normal(s, dtype=np.float32) for s in ((8, 32), (32, 64), (64,), (64, 16)))
    hidden = (Tensor(a).matmul(Tensor(w1)) + Tensor(b1)).relu()
    out = hidden.matmul(Tensor(w2))
    kernels, _ = create_schedule([out.uop], "CPU")
    assert len(kernels) == 2
    first, second = kernels
    assert len(first.buffers) == 4  # out, a, w1, b1: bias and relu are the first kernel's epilogue
    assert len(second.buffers) == 3  # out, hidden, w2: the second reads the stored activation, no bias
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ w1 + b1, 0) @ w2, rtol=1e-4, atol=1e-4)


def test_conv_bn_relu_chain_keeps_one_reduce_per_kernel_and_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 8, 8), dtype=np.float32)
    w1 = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    w2 = rng.standard_normal((8, 8, 3, 3), dtype=np.float32)
    scale, shift = rng.standard_normal((1, 8, 1, 1), dtype=np.float32), rng.standard_normal((1, 8, 1, 1),
                                                                                            dtype=np.float32)
    h = (Tensor(x).conv2d(Tensor(w1), padding=1) * Tensor(scale) + Tensor(shift)).relu()
    out = h.conv2d(Tensor(w2), padding=1) + h  # residual: h is read by the conv and by the add
    kernels, _ = create_schedule([out.uop], "CPU")
    assert [_reduce_count(k.ast) for k in kernels] == [1, 1]
    assert len(kernels[1].buffers) == 3  # out, h, w2: scale/shift/relu are not recomputed per read

    def conv(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        p = np.pad(v, ((0, 0), (0, 0), (1, 1), (1, 1)))
        return sum(np.einsum("nchw,oc->nohw", p[:, :, dy:dy + 8, dx:dx + 8], w[:, :, dy, dx])
                   for dy in range(3) for dx in range(3))
    ref_h = np.maximum(conv(x, w1) * scale + shift, 0)
    np.testing.assert_allclose(out.numpy(), conv(ref_h, w2) + ref_h, rtol=1e-3, atol=1e-3)


def test_softmax_keeps_its_kernel_structure() -> None:
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    sm = Tensor(x).softmax(axis=-1)
    kernels, _ = create_schedule([sm.uop], "CPU")
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert len(kernels) <= 3  # max, sum, normalise: exp(x - max) is not stored as its own kernel


def test_epilogue_of_a_shrunk_reduce_is_stored_once() -> None:
    # a Winograd conv whose tiles overhang the output shrinks its last reduce before the bias: that epilogue used
    # to be recomputed by the next matmul on every read (resnet50's 1x1 conv after it ran 2x slower)
    rng = np.random.default_rng(3)
    a, w1, b1, w2 = (rng.standard_normal(s, dtype=np.float32) for s in ((8, 32), (32, 64), (60,), (60, 16)))
    hidden = (Tensor(a).matmul(Tensor(w1))[:, :60] + Tensor(b1)).relu()
    out = hidden.matmul(Tensor(w2))
    kernels, _ = create_schedule([out.uop], "CPU")
    assert len(kernels) == 2
    assert len(kernels[0].buffers) == 4  # out, a, w1, b1: the shrink, bias and relu are the first kernel's
    assert len(kernels[1].buffers) == 3  # out, hidden, w2
    np.testing.assert_allclose(out.numpy(), np.maximum((a @ w1)[:, :60] + b1, 0) @ w2, rtol=1e-4, atol=1e-4)
