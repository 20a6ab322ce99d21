"""Blocked weights for products (jit/frontend/weight_layout.py ``weight_block_columns``): a product with a large
weight-only matrix stores it as contiguous (columns/64, k, 64) blocks, zero-padded to whole blocks, so each
64-wide output tile streams one block (a narrower tile part of each block row, still as whole vectors); a capture
folds that layout into the stored weights.

Checked on captured weights and kernels (structure, not timing) and against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from jit import capture
from jit.frontend import weight_layout
from jit.frontend.tensor import Tensor
from tests.frontend.test_nn_ops import rand

BLOCK = weight_layout.WEIGHT_BLOCK


def blocked(w: np.ndarray) -> np.ndarray:
    k, m = w.shape
    cols = -(-m // BLOCK) * BLOCK
    padded = np.zeros((k, cols), w.dtype)
    padded[:, :m] = w
    return padded.reshape(k, cols // BLOCK, BLOCK).transpose(1, 0, 2).reshape(-1)


@pytest.mark.parametrize("rows,k,m", [(1, 3204, 512), (1, 512, 559), (1, 300, 256), (25, 2048, 256), (197, 512, 192)])
def test_weight_only_products_store_blocks(rows: int, k: int, m: int) -> None:
    w, b = rand(k, m, seed=1), rand(m, seed=2)

    def fn(x: Tensor) -> dict[str, Tensor]:
        return {"y": (x @ Tensor(w) + Tensor(b)).relu()}

    cap = capture(fn, {"x": rand(rows, k, seed=3)})
    stored = [a.view(np.float32) for a in cap.weights.values()]
    assert any(a.shape == blocked(w).shape and np.array_equal(a, blocked(w)) for a in stored)
    assert not any(a.size == w.size and np.array_equal(a, w.reshape(-1)) for a in stored)
    for seed in (4, 5):
        x = rand(rows, k, seed=seed)
        want = np.maximum(x.astype(np.float64) @ w + b, 0)
        np.testing.assert_allclose(cap({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_padded_product_is_a_whole_block_kernel() -> None:
    """559 columns: the reduce computes 576 (whole blocks) in a kernel of its own, so its row tiles 64 wide;
    fused with the shrink it would be tiled by 559's widest divisor, 43."""
    w = rand(512, 559, seed=6)
    cap = capture(lambda x: {"y": x @ Tensor(w)}, {"x": rand(1, 512, seed=7)})
    names = [cap.cmdbuf.kernels[d.kernel].name for d in cap.cmdbuf.dispatches]
    assert names[0] == "r_576_512", names
    x = rand(1, 512, seed=8)
    np.testing.assert_allclose(cap({"x": x})["y"], x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_input_matrix_is_read_in_place() -> None:
    """An input (no data at capture) is not copied into blocks: the copy would run on every replay."""
    inputs = {"x": rand(1, 512, seed=9), "w": rand(512, 256, seed=10)}
    cap = capture(lambda x, w: {"y": x @ w}, inputs)
    assert cap.n_dispatches == 1
    np.testing.assert_allclose(cap(inputs)["y"], inputs["x"].astype(np.float64) @ inputs["w"], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("shape", [(512,), (1, 512), (2, 512), (3, 1, 512)])
def test_eager_products_match_numpy(shape: tuple[int, ...]) -> None:
    """Single rows take the blocked layout eagerly too; vectors, several rows and batches give numpy's shapes."""
    x, w = rand(*shape, seed=11), rand(512, 300, seed=12)
    got = (Tensor(x) @ Tensor(w)).numpy()
    want = x.astype(np.float64) @ w
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_small_or_thin_products_keep_their_layout() -> None:
    assert weight_layout.weight_block_columns(Tensor(rand(64, 64, seed=13)), 64, 64) == 0  # below the size
    assert weight_layout.weight_block_columns(Tensor(rand(4096, 40, seed=14)), 4096, 40) == 0  # under one block
    assert weight_layout.weight_block_columns(Tensor(rand(1024, 65, seed=15)), 1024, 65) == 0  # 63 zero columns
    assert weight_layout.weight_block_columns(Tensor(rand(2, 1024, 128, seed=16)), 1024, 128) == 0  # a batch
    assert weight_layout.weight_block_columns(Tensor(rand(1024, 128, seed=17)), 1024, 128) == 128


def test_tiles_narrower_than_a_block_load_whole_vectors() -> None:
    """25 rows share each weight row, so the tile is narrower than a block (32 wide over 16-lane vectors, 16 over 8):
    its weight address splits at the block and every load is a vector, never a lane-by-lane gather."""
    w = rand(2048, 256, seed=18)
    cap = capture(lambda x: {"y": x @ Tensor(w)}, {"x": rand(25, 2048, seed=19)})
    product = next(k for k in cap.cmdbuf.kernels if k.name.startswith("r_"))
    assert "dp_lo" in product.source and "{*(data" not in product.source, product.source
    x = rand(25, 2048, seed=20)
    np.testing.assert_allclose(cap({"x": x})["y"], x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("k,m", [(576, 144), (144, 576)])
def test_a_transposed_weight_is_stored_as_rows(k: int, m: int) -> None:
    """Gemm's transB (a Linear layer's (out, in) weight): read in place, a tile's row of the transposed view is a
    gather lane by lane. Stored in blocks where the columns fill them (576), else (144 would pad a third) as
    contiguous (k, m) rows."""
    w = rand(m, k, seed=21)
    cap = capture(lambda x: {"y": x.gemm(Tensor(w), trans_b=True)}, {"x": rand(1, k, seed=22)})
    stored = [a.view(np.float32) for a in cap.weights.values()]
    want = blocked(np.ascontiguousarray(w.T)) if m % BLOCK == 0 else np.ascontiguousarray(w.T).reshape(-1)
    assert any(np.array_equal(a, want) for a in stored)
    assert all("{*(data" not in kern.source for kern in cap.cmdbuf.kernels)
    x = rand(1, k, seed=23)
    np.testing.assert_allclose(cap({"x": x})["y"], x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


def test_a_small_transposed_weight_is_read_in_place() -> None:
    w = rand(16, 32, seed=24)  # 512 elements, below TRANSPOSED_COPY_MIN: the conformance tests' Gemms
    assert w.size < weight_layout.TRANSPOSED_COPY_MIN
    cap = capture(lambda x: {"y": x.gemm(Tensor(w), trans_b=True)}, {"x": rand(1, 32, seed=25)})
    assert not any(np.array_equal(a.view(np.float32), np.ascontiguousarray(w.T).reshape(-1))
                   for a in cap.weights.values())


def test_a_pointwise_conv_over_one_pixel_is_a_matrix_vector_product() -> None:
    """Squeeze-and-excitation's convs after the global pool: (1, 576, 1, 1) -> 144 channels, once a gather of 16
    weights a channel apart per vector (46 us on mobilenet_v3_small, 10 us as a product's rows)."""
    w, b = rand(144, 576, 1, 1, seed=26), rand(144, seed=27)
    cap = capture(lambda x: {"y": x.conv2d(Tensor(w), Tensor(b)).relu()}, {"x": rand(1, 576, 1, 1, seed=28)})
    stored = [a.view(np.float32) for a in cap.weights.values()]
    assert any(np.array_equal(a, np.ascontiguousarray(w[:, :, 0, 0].T).reshape(-1)) for a in stored)
    assert all("{*(data" not in kern.source for kern in cap.cmdbuf.kernels)
    x = rand(1, 576, 1, 1, seed=29)
    want = np.maximum(w[:, :, 0, 0].astype(np.float64) @ x[0, :, 0, 0] + b, 0).reshape(1, 144, 1, 1)
    got = cap({"x": x})["y"]
    assert got.shape == (1, 144, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tokens,copied", [(25, True), (4, False)])
def test_a_transposed_activation_is_copied_for_enough_rows(tokens: int, copied: bool) -> None:
    """Attention's scores ``q @ (k^T * s)`` (a 25-token transformer's four heads of 64): with 8 rows or more, k^T
    is copied once per call (a kernel of its own), so the product's rows are vectors over the keys instead of
    sums of scalar products; with fewer rows the product reads it in place, one kernel."""
    q, k = rand(4, tokens, 64, seed=11), rand(4, tokens, 64, seed=12)

    def fn(q: Tensor, k: Tensor) -> dict[str, Tensor]:
        return {"s": q @ (k.transpose(-1, -2) * 0.125)}

    cap = capture(fn, {"q": q, "k": k})
    names = [cap.cmdbuf.kernels[d.kernel].name for d in cap.cmdbuf.dispatches]
    assert len(names) == (2 if copied else 1), names
    product = cap.cmdbuf.kernels[cap.cmdbuf.dispatches[-1].kernel].source
    assert ("__builtin_memcpy(&_v, data" in product) == copied, product  # vector loads of the copied keys
    for seed in (13, 14):
        q, k = rand(4, tokens, 64, seed=seed), rand(4, tokens, 64, seed=seed + 10)
        want = q.astype(np.float64) @ (k.astype(np.float64).transpose(0, 2, 1) * 0.125)
        np.testing.assert_allclose(cap({"q": q, "k": k})["s"], want, rtol=1e-5, atol=1e-5)
