"""jit/codegen/opt/overlap.py: a reduce kernel's tile row that no vector width divides runs as whole vectors, the
last one shifted back to end at the row's end; every output is the same as without it."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Device, Ops, Tensor, UOp
from jit.codegen.opt import OptOptions, optimize_kernel, plan_tiles
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.options import WIDE_VECTOR_OPTS
from jit.codegen.opt.overlap import SCALAR_OVERLAP_WIDTH, plan_overlap, plan_overlapped_row, plan_scalar_overlap
from jit.codegen.opt.tiling import overlap_height, plan_chains
from jit.codegen.pipeline import commit_dtypes
from jit.frontend import nn_ops
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _max_pool_want(x: np.ndarray, k: int, s: int) -> np.ndarray:
    c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.full((c, oh, ow), -np.inf, np.float32)
    for dy in range(k):
        for dx in range(k):
            out = np.maximum(out, x[:, dy:dy + s * oh:s, dx:dx + s * ow:s])
    return out


# the CPU target's defaults where 16-lane vectors pay (targets/cpu.py)
WIDE = OptOptions(wide_channel_vector=16, inner_upcasts=(32, 16, 8, 4), max_upcast=160, fill_tile=128)


def _vector_store_rows(source: str) -> bool:
    return "__builtin_memcpy(data0" in source or "vstore" in source


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("width, stride", [(111, 2), (55, 2), (27, 2), (13, 1), (29, 1)])
def test_a_pool_row_no_vector_divides_is_vectors_and_matches_numpy(width: int, stride: int, device: str) -> None:
    # squeezenet's 3x3/2 max pools: rows of 55, 27 and 13 outputs (prime factors 5, 11, 3, 13), once scalar code
    rng = np.random.default_rng(width)
    x = rng.standard_normal((8, width, width), dtype=np.float32)
    x[0, 0, :5] = np.nan  # a NaN wins in every window it is in, including those stored twice
    y = Tensor(x, device=device).max_pool2d(3, stride)
    source = compile_uops([y.uop], device)[-1].program.source
    assert _vector_store_rows(source), source
    np.testing.assert_array_equal(y.numpy(), _max_pool_want(x, 3, stride))


def _factors(plan) -> list[tuple[int, int]]:
    return [(int(r.src[0].arg), f) for r, f in plan.upcasts]


def test_a_short_reduce_sharing_nothing_runs_rows_of_another_axis_as_chains() -> None:
    """squeezenet's 3x3/2 max pool over 27-wide rows: one 16-lane vector a tile, each of its 9 taps waiting on the
    one before; 4 channels beside it (its 27 rows no chain height divides) are 4 independent chains. A stride-2
    depthwise conv's weights do not move with the row, and a row of scalars is chains already: plans kept."""
    ast = _ast(Tensor(np.zeros((8, 55, 55), np.float32)).max_pool2d(3, 2))
    row = plan_overlap(ast, plan_tiles(ast, WIDE), WIDE, 16)
    assert row is not None and _factors(row) == [(27, 16)]
    assert _factors(plan_chains(ast, row, 16, WIDE)) == [(27, 16), (8, 4)]
    assert plan_chains(ast, row, 1, WIDE) is row
    conv = Tensor(np.zeros((1, 8, 57, 57), np.float32)).conv2d(Tensor(np.zeros((8, 1, 3, 3), np.float32)), stride=2,
                                                                 groups=8)
    dw = _ast(conv)
    dw_row = plan_overlap(dw, plan_tiles(dw, WIDE), WIDE, 16)
    assert dw_row is not None and plan_chains(dw, dw_row, 16, WIDE) is dw_row


@pytest.mark.parametrize("vector_width, width", [(8, 16), (16, 16), (4, 16)])
def test_the_width_is_the_cheapest_tile(vector_width: int, width: int) -> None:
    x = np.zeros((8, 111, 111), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))  # 55 outputs a row
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan.upcasts[0][1] % 4  # no vector width divides the row as it is planned
    overlapped = plan_overlap(ast, plan, OptOptions(), vector_width)
    assert overlapped is not None and overlapped.overlap
    # widths (16, 8, 4), one row a tile: a step loads each vector and stores nothing else; 8 lanes: 4 tiles of two
    # vectors (8: 7 tiles of one); 4 lanes: 4 tiles of four (8: 7 of two)
    assert overlapped.upcasts[0][1] == width


def test_a_tile_with_shared_rows_takes_the_vectors_its_registers_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    # squeezenet's classifier, a 512 -> 1000 1x1 conv over 13x13: its 169 outputs a channel are one merged row,
    # tiled by 8 channels; on 32 registers 48 wide (three 16-lane vectors: 24 multiply-adds to 11 loads a step, where
    # two vectors did 16 to 10); on 16 registers (8 lanes) one vector by the 8 rows, as before. (Over planes padded
    # to whole vectors where the target has wide ones, jit/frontend/row_align.py: here the 169 row itself.)
    monkeypatch.setattr(nn_ops, "plane_aligned_rows", lambda x, cout: None)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 512, 13, 13), np.float32), rng.standard_normal((1000, 512, 1, 1), np.float32)
    y = Tensor(x).conv2d(Tensor(w))
    ast = _ast(y)
    for vector_width, width in ((16, 48), (8, 8)):
        sink = optimize_kernel(ast, WIDE, vector_width=vector_width)
        vectors = [u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "vector"]
        assert [int(v.src[0].arg) for v in vectors] == [vector_width]
        assert any(u.op is Ops.MIN and u.src[1].op is Ops.CONST and int(u.src[1].arg) == 169 - width
                   for u in toposort([sink])), vector_width
    np.testing.assert_allclose(y.numpy()[0, :, 6, 6], w[:, :, 0, 0] @ x[0, :, 6, 6], rtol=1e-4, atol=1e-4)
    # where 8-lane channel vectors are the target's full width, they stay: no overlap
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan.max_lanes == 8 and plan_overlap(ast, plan, OptOptions(), 8) is None


@pytest.mark.parametrize("stride", [2, 1])
def test_a_short_reduce_over_a_long_row_takes_row_vectors_not_channel_vectors(stride: int) -> None:
    # squeezenet's first conv: 3 -> 64 channels, 3x3 at stride 2 over 224x224, 27 taps a 111-wide row (3 x 37):
    # across channels every output is stored lane by lane, which costs more than the 27 multiply-adds per output
    rng = np.random.default_rng(stride)
    size = 224 if stride == 2 else 113  # 111 outputs a row either way
    x, w = rng.standard_normal((1, 3, size, size), np.float32), rng.standard_normal((64, 3, 3, 3), np.float32)
    y = Tensor(x).conv2d(Tensor(w), stride=stride)
    ast = _ast(y)
    plan = plan_tiles(ast, WIDE, registers=32)
    assert plan is not None and not plan.max_lanes and plan.upcasts[0][0].arg[0] == 2  # not across channels
    sink = optimize_kernel(ast, WIDE, vector_width=16)
    assert any(u.op is Ops.RANGE and u.arg[1] == "vector" for u in toposort([sink]))
    assert any(u.op is Ops.MIN for u in toposort([sink]))  # overlapped: 111 is no multiple of 16
    end = 111 * stride
    want = sum(np.einsum("oc,cyx->oyx", w[:, :, dy, dx], x[0, :, dy:dy + end:stride, dx:dx + end:stride])
               for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(y.numpy()[0], want, rtol=1e-4, atol=1e-4)
    # a long reduce keeps the channel tile (its stores are a small share of the work)
    long = _ast(Tensor(rng.standard_normal((1, 16, 224, 224), np.float32)).conv2d(
        Tensor(rng.standard_normal((64, 16, 3, 3), np.float32)), stride=2))
    long_plan = plan_tiles(long, WIDE, registers=32)
    assert long_plan is not None and long_plan.max_lanes == 16


def test_a_channel_tile_too_small_for_both_fma_units_gives_way_to_row_vectors() -> None:
    # squeezenet's 128 -> 16 squeeze over 55x55 = 3025 outputs (5^2 x 11^2): across its one block of 16 channels
    # the tile is 5 outputs wide, 5 accumulators where two FMA units need 8; the merged row takes overlapped vectors
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 128, 55, 55), np.float32), rng.standard_normal((16, 128, 1, 1), np.float32)
    y = Tensor(x).conv2d(Tensor(w))
    plan = plan_tiles(merge_output_dims(_ast(y)), WIDE, registers=32)  # as optimize_kernel plans it, rows merged
    assert plan is not None and not plan.max_lanes and int(plan.upcasts[0][0].src[0].arg) == 3025
    np.testing.assert_allclose(y.numpy()[0], np.einsum("oc,cyx->oyx", w[:, :, 0, 0], x[0]), rtol=1e-4, atol=1e-4)
    # 64 channels are 4 blocks: 5 outputs by 2 vectors, enough accumulators to keep the channel tile
    wide = Tensor(x).conv2d(Tensor(rng.standard_normal((64, 128, 1, 1), np.float32)))
    wide_plan = plan_tiles(merge_output_dims(_ast(wide)), WIDE, registers=32)
    assert wide_plan is not None and wide_plan.max_lanes == 16


def test_a_channel_tile_of_one_vector_gives_way_to_row_vectors() -> None:
    # squeezenet's 256 -> 32 squeeze over 27x27 = 729 outputs (3^6): across channels the tile is one vector of 16 by
    # 9 outputs, enough accumulators, but each multiply-add loads a broadcast input of its own (10 loads a step for
    # 9 multiply-adds); row vectors share each broadcast weight across the row, so the merged row overlaps
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((1, 256, 27, 27), np.float32), rng.standard_normal((32, 256, 1, 1), np.float32)
    y = Tensor(x).conv2d(Tensor(w))
    plan = plan_tiles(merge_output_dims(_ast(y)), WIDE, registers=32)
    assert plan is not None and not plan.max_lanes and int(plan.upcasts[0][0].src[0].arg) == 729
    np.testing.assert_allclose(y.numpy()[0], np.einsum("oc,cyx->oyx", w[:, :, 0, 0], x[0]), rtol=1e-4, atol=1e-4)
    # a row short enough for several channel vectors keeps them (resnet's 7x7: 7 outputs by 4 vectors)
    short = Tensor(rng.standard_normal((1, 256, 7, 7), np.float32)).conv2d(
        Tensor(rng.standard_normal((64, 256, 1, 1), np.float32)))
    short_plan = plan_tiles(merge_output_dims(_ast(short)), WIDE, registers=32)
    assert short_plan is not None and short_plan.max_lanes == 16


def test_a_product_over_a_prime_token_count_fills_32_registers_with_whole_weight_block_rows() -> None:
    # a ViT's 197 tokens by 192 -> 768: no height divides 197, so the rows overlap; on 32 registers the tile is 4
    # vectors (one 64-wide row of the blocked weights) by 6 tokens, 24 accumulators, where 2 by 8 were 16
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((197, 192), np.float32), rng.standard_normal((192, 768), np.float32)
    y = Tensor(x) @ Tensor(w)
    ast = _ast(y)
    plan = plan_tiles(ast, WIDE_VECTOR_OPTS, registers=32)
    assert plan is not None and plan.overlap_reuse and [u for _, u in plan.upcasts] == [64, 6]
    narrow = plan_tiles(ast, WIDE_VECTOR_OPTS, registers=16)
    assert narrow is not None and [u for _, u in narrow.upcasts] == [32, 8]
    np.testing.assert_allclose(y.numpy(), x @ w, rtol=1e-4, atol=1e-3)


def test_a_1x1_conv_row_tile_widens_to_fill_32_registers() -> None:
    # efficientnet's 144 -> 24 projection over 56x56: 2 vectors of its merged row by 8 channels (16 accumulators)
    # become 4 vectors by 6 channels (24) where the registers hold them
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 144, 56, 56), np.float32), rng.standard_normal((24, 144, 1, 1), np.float32)
    y = Tensor(x).conv2d(Tensor(w))
    ast = merge_output_dims(_ast(y))
    plan = plan_tiles(ast, WIDE_VECTOR_OPTS, registers=32)
    assert plan is not None and [u for _, u in plan.upcasts] == [64, 6]
    narrow = plan_tiles(ast, WIDE_VECTOR_OPTS, registers=16)
    assert narrow is not None and [u for _, u in narrow.upcasts] == [32, 8]
    np.testing.assert_allclose(y.numpy()[0], np.einsum("oc,cyx->oyx", w[:, :, 0, 0], x[0]), rtol=1e-4, atol=1e-4)


def test_the_last_tile_starts_where_it_ends_the_row() -> None:
    x = np.zeros((8, 27, 27), np.float32)
    sink = optimize_kernel(_ast(Tensor(x).max_pool2d(3, 1)), OptOptions(), vector_width=8)  # 25 outputs a row
    mins = [u for u in toposort([sink]) if u.op is Ops.MIN and u.dtype.is_int and u.src[1].op is Ops.CONST]
    assert [int(m.src[1].arg) for m in mins] == [25 - 16]  # 2 tiles of 16 (two vectors each): 0, then 9, not 16


def test_off_the_row_stays_scalar_copies() -> None:
    x = np.zeros((8, 111, 111), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))
    off = OptOptions(overlap_rows=False)
    plan = plan_tiles(ast, off)
    assert plan is not None and plan_overlap(ast, plan, off, 8) is None
    sink = optimize_kernel(ast, off, vector_width=8)
    assert not any(u.op is Ops.RANGE and u.arg[1] == "vector" for u in toposort([sink]))


def test_a_row_a_vector_divides_keeps_its_plan() -> None:
    x = np.zeros((8, 66, 66), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))  # 32 outputs a row
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan_overlap(ast, plan, OptOptions(), 8) is None


# --- the reuse axis (jit.codegen.opt.tiling.overlap_height) ---------------------------------------------------
def _product(rows: int, k: int, m: int, device: str = "CPU") -> tuple[Tensor, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(rows)
    x, w = rng.standard_normal((rows, k), np.float32), rng.standard_normal((k, m), np.float32)
    return Tensor(x, device=device) @ Tensor(w, device=device), x, w


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("rows", [197, 67])
def test_rows_no_height_divides_share_their_weights_and_match_numpy(rows: int, device: str) -> None:
    # ViT's 197 tokens, and 67: prime, so no height of (4, 3, 5, 2) divides them; once one row a tile, every row
    # re-reading the whole weight matrix (a 197 x 768 x 768 product 6x onnxruntime's time)
    y, x, w = _product(rows, 256, 192, device)
    np.testing.assert_allclose(y.numpy(), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


def test_a_prime_row_count_tiles_overlapped_within_the_waste_bound() -> None:
    ast = _ast(_product(197, 256, 192)[0])
    plan = plan_tiles(ast, WIDE, registers=32)
    assert plan is not None and plan.overlap_reuse and not plan.overlap
    (_, width), (rows, height) = plan.upcasts
    # 4 vectors (a whole row of the 64-wide weight blocks) by 6 rows on 32 registers: 33 tiles, 198 rows
    assert int(rows.src[0].arg) == 197 and (width, height) == (64, 6)
    sink = optimize_kernel(ast, WIDE, vector_width=16)
    assert any(u.op is Ops.MIN and u.src[1].op is Ops.CONST and int(u.src[1].arg) == 197 - 6
               for u in toposort([sink]))
    # on 16 registers the row keeps its 32 by the tallest height within max_upcast: 40 tiles, 200 rows
    narrow = plan_tiles(ast, WIDE, registers=16)
    assert narrow is not None and [u for _, u in narrow.upcasts] == [32, 5]


def test_rows_whose_overlap_would_waste_too_much_stay_untiled() -> None:
    # 7 rows: the nearest heights compute 8, 9 or 10 rows, more than a sixteenth twice
    assert overlap_height(7, (4, 3, 5, 2), 10) is None
    assert overlap_height(197, (4, 3, 5, 2), 5) == 5
    assert overlap_height(197, (4, 3, 5, 2), 4) == 4  # the registers cap the height
    assert overlap_height(25, (4, 3, 2), 4) is None  # 28 or 27 rows for 25: too many twice; 2 high: too low
    ast = _ast(_product(7, 256, 192)[0])
    plan = plan_tiles(ast, WIDE, registers=32)
    assert plan is None or not plan.overlap_reuse
    off = plan_tiles(_ast(_product(197, 256, 192)[0]), OptOptions(overlap_rows=False))
    assert off is None or not off.overlap_reuse


def _softmax_want(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # the row holding +inf: inf - inf
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("tokens", [197, 25, 7])
def test_an_exp_row_no_vector_divides_is_vectors_and_matches_numpy(tokens: int, device: str) -> None:
    # softmax over a ViT's 197 tokens and a transformer's 25: the exp kernel's rows were a scalar loop of library
    # calls; as vectors its exp is the vector polynomial, the last vector shifted back over the row's end
    rng = np.random.default_rng(tokens)
    x = rng.standard_normal((max(3, 300 // tokens ** 2), tokens, tokens), dtype=np.float32) * 4
    x[0, 0, -1] = np.inf  # the last lanes are stored twice: both times the same value
    x[1, 2, -2] = -np.inf
    y = Tensor(x, device=device).softmax(-1)
    programs = [r.program for r in compile_uops([y.uop], device)]
    elementwise = [p.source for p in programs if "acc" not in p.source]
    if device == "CPU":
        assert elementwise and all("expf(" not in s and _vector_store_rows(s) for s in elementwise), elementwise
    elif Device[device].language.peel_launched_rows:  # a CPU device (PoCL): the same vectors, from its work-items
        assert elementwise and all(" exp(" not in s and "__builtin_memcpy" in s for s in elementwise), elementwise
    np.testing.assert_allclose(y.numpy(), _softmax_want(x), rtol=2e-6, atol=1e-7)


def _ew_ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(next(k.ast for k in kernels if not any(u.op is Ops.REDUCE for u in toposort([k.ast]))))


def test_an_elementwise_row_is_overlapped_only_with_exp_or_erf_and_no_whole_width() -> None:
    x = np.zeros((32, 197), np.float32)
    assert plan_overlapped_row(_ew_ast(Tensor(x).exp()), OptOptions(), 16).upcasts[0][1] == 16
    assert plan_overlapped_row(_ew_ast(Tensor(x).erf()), OptOptions(), 8).upcasts[0][1] == 8
    assert plan_overlapped_row(_ew_ast(Tensor(x) * 2 + 1), OptOptions(), 16) is None  # the C compiler's loop
    assert plan_overlapped_row(_ew_ast(Tensor(np.zeros((32, 192), np.float32)).exp()), OptOptions(), 16) is None
    assert plan_overlapped_row(_ew_ast(Tensor(x).exp()), OptOptions(overlap_rows=False), 16) is None
    assert plan_overlapped_row(_ew_ast(Tensor(x).exp()), OptOptions(), 0) is None
    # a row read at a stride (a transposed input) stays a loop: each lane would be a load of its own
    assert plan_overlapped_row(_ew_ast(Tensor(np.zeros((197, 32), np.float32)).T.exp()), OptOptions(), 16) is None


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_a_prime_row_matmul_is_tiled_overlapped_and_matches_numpy(device: str) -> None:
    # a ViT's attention scores, q @ k^T over 197 tokens: no width divides 197, and the kernel was left untiled
    # (one scalar accumulator an output, 5x slower than the same work in attn @ v)
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((3, 197, 64), np.float32), rng.standard_normal((3, 64, 197), np.float32)
    y = Tensor(q, device=device).matmul(Tensor(k, device=device))
    plan = plan_tiles(_ast(Tensor(q).matmul(Tensor(k))), OptOptions())
    assert plan is not None and plan.upcasts[0][1] == 1 and plan.overlap_reuse  # widened by the optimizer
    if device == "CPU":
        assert _vector_store_rows(compile_uops([y.uop], device)[-1].program.source)
    np.testing.assert_allclose(y.numpy(), q @ k, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_a_strided_short_row_reduce_runs_eight_chains_overlapped_and_matches_numpy(device: str) -> None:
    # softmax's max over 197 tokens: each output reads its own contiguous row, so consecutive outputs are 197
    # apart (no vectors); the 3 x 197 outputs merge into one row of 591 = 3 x 197, tiled 3 wide: three chains
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 197, 197), np.float32)
    x[2, 196, 5] = np.nan  # in the last, overlapped tile: stored twice, NaN both times
    x[0, 0, :] = -np.inf
    y = Tensor(x, device=device).max(-1)
    merged = merge_output_dims(_ast(Tensor(x).max(-1)))
    plan = plan_tiles(merged, OptOptions())
    assert plan is not None and plan.upcasts[0][1] == 3
    wide = plan_scalar_overlap(merged, plan, OptOptions())
    assert wide is not None and wide.overlap and wide.upcasts[0][1] == SCALAR_OVERLAP_WIDTH
    assert plan_scalar_overlap(merged, plan, OptOptions(overlap_rows=False)) is None
    np.testing.assert_array_equal(y.numpy(), x.max(-1))


def test_a_row_only_narrow_vectors_divide_takes_wide_overlapped_ones() -> None:
    # mobilenet_v3's 240 -> 40 projection over 14x14: the merged row of 196 splits into 4-lane vectors only, and 40
    # channels into 8-lane ones, where this machine's FMAs do 16 lanes: 16-lane vectors over the row, overlapped
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 240, 14, 14), np.float32), rng.standard_normal((40, 240, 1, 1), np.float32)
    sink = optimize_kernel(merge_output_dims(_ast(Tensor(x).conv2d(Tensor(w)))), WIDE, vector_width=16)
    vectors = [u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "vector"]
    assert [int(v.src[0].arg) for v in vectors] == [16]
    assert any(u.op is Ops.MIN and u.src[1].op is Ops.CONST and int(u.src[1].arg) % 16 == 196 % 16
               for u in toposort([sink]))
    # where 8-lane vectors are the widest that pay (no wide channel vector), 4-lane rows stay as they were
    narrow = optimize_kernel(merge_output_dims(_ast(Tensor(x).conv2d(Tensor(w)))), OptOptions(), vector_width=8)
    assert not any(u.op is Ops.MIN and u.src[1].op is Ops.CONST for u in toposort([narrow]))
    want = np.einsum("oc,chw->ohw", w[:, :, 0, 0].astype(np.float64), x[0].astype(np.float64))
    np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w)).numpy()[0], want, rtol=1e-4, atol=1e-4)


def test_an_elementwise_kernel_over_short_rows_runs_them_as_one_row() -> None:
    # squeeze-and-excitation's scale, (576, 7, 7) * (576, 1, 1): one loop of 49 per channel instead of 7 of 7
    rng = np.random.default_rng(4)
    x, s = rng.standard_normal((1, 576, 7, 7), np.float32), rng.standard_normal((1, 576, 1, 1), np.float32)
    y = Tensor(x) * Tensor(s)
    sink = optimize_kernel(_ew_ast(y), OptOptions(), vector_width=16)
    sizes = sorted(int(u.src[0].arg) for u in toposort([sink]) if u.op is Ops.RANGE)
    assert sizes == [49, 576]
    np.testing.assert_array_equal(y.numpy(), x * s)
