"""OptOptions: checked fields, round trip through a dict, and each knob changing what optimize_kernel does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jit import Context, DrivepackError, Ops, Tensor
from jit.codegen.opt import OptOptions, OptOptionsError, optimize_kernel, plan_tiles
from jit.codegen.pipeline import commit_dtypes
from jit.frontend import nn_ops
from jit.ir.uop import toposort
from jit.schedule.kernels import create_schedule


def _matmul_ast():
    a = Tensor(np.ones((64, 48), np.float32))
    b = Tensor(np.ones((48, 80), np.float32))
    kernels, _ = create_schedule([a.matmul(b).uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def test_dict_round_trip_keeps_every_field() -> None:
    opts = OptOptions(inner_upcasts=(8,), reuse_upcasts=(2,), max_upcast=16, threads=False)
    assert OptOptions.from_dict(opts.to_dict()) == opts


@pytest.mark.parametrize("field,value", [("inner_upcasts", (0,)), ("inner_upcasts", [4]), ("max_upcast", 0),
                                         ("tile", 1), ("min_reduce_trips", -1), ("min_outputs", True),
                                         ("strided_tile", (8,)), ("wide_upcasts", (0,)), ("fill_tile", -1),
                                         ("fill_upcast", -1), ("group_reduce", -2), ("strided_channel_trips", -1)])
def test_bad_field_is_a_typed_error_naming_it(field: str, value: object) -> None:
    with pytest.raises(OptOptionsError, match=f"OptOptions.{field}: expected") as e:
        OptOptions(**{field: value})
    assert isinstance(e.value, DrivepackError)


def test_unknown_field_in_dict_is_refused() -> None:
    with pytest.raises(OptOptionsError, match="unknown \\['upcastz'\\]"):
        OptOptions.from_dict({"upcastz": 4})


def test_knobs_change_the_plan() -> None:
    ast = _matmul_ast()
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    assert sizes(plan_tiles(ast, OptOptions())) == [(80, 16), (64, 4)]
    assert sizes(plan_tiles(ast, OptOptions(inner_upcasts=(8,), reuse_upcasts=(2,), fill_tile=0))) == \
        [(80, 8), (64, 2)]
    # fill_tile: the 8 x 2 tile doubles its height while it has fewer than 64 elements
    assert sizes(plan_tiles(ast, OptOptions(inner_upcasts=(8,), reuse_upcasts=(2,)))) == [(80, 8), (64, 8)]
    assert sizes(plan_tiles(ast, OptOptions(max_upcast=16))) == [(80, 16)]  # no reuse axis fits under the cap
    assert plan_tiles(ast, OptOptions(min_reduce_trips=49)) is None
    # min_outputs gates small kernels only: this one's 245,760 multiply-adds are tiled whatever it says
    assert plan_tiles(ast, OptOptions(min_outputs=64 * 80 + 1)) is not None
    small = _ast_of(Tensor(np.ones((4, 8), np.float32)).matmul(Tensor(np.ones((8, 16), np.float32))))
    assert plan_tiles(small, OptOptions(min_outputs=64)) is not None
    assert plan_tiles(small, OptOptions(min_outputs=65)) is None


def test_a_small_matrix_vector_product_with_enough_work_is_tiled() -> None:
    # squeeze-and-excitation's 240 -> 64: 64 outputs (under min_outputs) of 240 terms each, 15,360 multiply-adds
    x, w = np.ones((1, 240), np.float32), np.ones((240, 64), np.float32)
    plan = plan_tiles(_ast_of(Tensor(x).matmul(Tensor(w))), OptOptions())
    assert plan is not None and plan.upcasts[0][1] >= 16
    assert plan_tiles(_ast_of(Tensor(x[:, :16]).matmul(Tensor(w[:16]))), OptOptions()) is None  # 1,024: not


def _ast_of(t: Tensor):
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def test_rows_no_even_height_divides_share_loads_five_high() -> None:
    """The policy's 25-row products (0.103 -> 0.064 ms at 512 deep): 5 rows of a 16-wide tile (10 vector
    accumulators); max_upcast 80 admits it, and rows of 4 still come first."""
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    ast = _ast_of(Tensor(np.ones((25, 512), np.float32)).matmul(Tensor(np.ones((512, 128), np.float32))))
    assert sizes(plan_tiles(ast, OptOptions())) == [(128, 16), (25, 5)]
    assert sizes(plan_tiles(ast, OptOptions(max_upcast=64))) == [(128, 64)]  # no reuse: one wide row


def test_one_vector_rows_fill_eight_high() -> None:
    """resnet's 56-wide rows tile 8 wide: 4 output channels would be 4 accumulators, too few for the FMA
    latency; fill_tile makes them 8 (3.9 vs 4.25 ms on r_64_56_56_64_3_3)."""
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    x = Tensor(np.ones((1, 64, 56, 56), np.float32))
    with Context(WINO="0"):  # the direct conv (Winograd's by default at this size)
        ast = _ast_of(x.conv2d(Tensor(np.ones((64, 64, 3, 3), np.float32)), padding=1))
    assert sizes(plan_tiles(ast, OptOptions())) == [(56, 8), (64, 8)]
    assert sizes(plan_tiles(ast, OptOptions(fill_tile=0))) == [(56, 8), (64, 4)]


def test_fill_upcast_lets_a_shared_row_grow_past_max_upcast() -> None:
    """openpilot-shaped resnet18's stem (7x7/2 over 12 channels, its column phases split): a 32-wide row of two
    16-lane vectors fills 8 output channels high only past max_upcast 160 (16 accumulators a phase instead of 8);
    a ViT's 197-token product takes 8 rows the same way. Channel-vector tiles, whose
    broadcasts are live beside the accumulators, keep max_upcast's row (efficientnet's 672 -> 112 over 14 x 14)."""
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    base = OptOptions(wide_channel_vector=16, inner_upcasts=(32, 16, 8, 4), max_upcast=160, fill_tile=256)
    grown = dataclasses.replace(base, fill_upcast=256)
    stem = _ast_of(Tensor(np.ones((1, 12, 128, 256), np.float32)).conv2d(
        Tensor(np.ones((64, 12, 7, 7), np.float32)), stride=2, padding=3))
    assert sizes(plan_tiles(stem, base))[-1] == (64, 4)
    assert sizes(plan_tiles(stem, grown))[-1] == (64, 8)
    tokens = _ast_of(Tensor(np.ones((197, 192), np.float32)).matmul(Tensor(np.ones((192, 768), np.float32))))
    assert [f for _, f in plan_tiles(tokens, base).upcasts] == [32, 5]
    assert [f for _, f in plan_tiles(tokens, grown).upcasts] == [32, 8]
    # a height that cannot double (25 tokens, 5 high): the row doubles instead, 2 vectors by 5 rows to 4 by 5
    feed_forward = _ast_of(Tensor(np.ones((25, 256), np.float32)).matmul(Tensor(np.ones((256, 2048), np.float32))))
    assert [f for _, f in plan_tiles(feed_forward, base).upcasts] == [32, 5]
    assert [f for _, f in plan_tiles(feed_forward, dataclasses.replace(base, fill_upcast=320)).upcasts] == [64, 5]
    project = _ast_of(Tensor(np.ones((1, 672, 14, 14), np.float32)).conv2d(Tensor(np.ones((112, 672, 1, 1),
                                                                                           np.float32))))
    assert plan_tiles(project, grown) == plan_tiles(project, base)


def test_short_reduces_are_tiled() -> None:
    """A reduce of 6 (a Winograd transform step against its 6x6 table) is tiled: its row becomes vectors (the
    vision model's transforms went from 0.4 to well under 0.1 ms each)."""
    x = Tensor(np.ones((96, 16, 6), np.float32))
    table = Tensor(np.ones((6, 1, 1, 6), np.float32))
    ast = _ast_of((x.reshape(1, 96, 16, 6) * table).sum(-1))
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan.upcasts[0][1] >= 8
    assert plan_tiles(ast, OptOptions(min_reduce_trips=7)) is None


def test_tile_off_leaves_one_store() -> None:
    ast = _matmul_ast()
    stores = lambda s: sum(1 for u in toposort([s]) if u.op is Ops.STORE)  # noqa: E731
    assert stores(optimize_kernel(ast, OptOptions(tile=False))) == 1
    assert stores(optimize_kernel(ast)) == 64


def test_short_row_no_width_divides_is_tiled_whole() -> None:
    x = Tensor(np.ones((1, 8, 14, 14), np.float32))
    w = Tensor(np.ones((8, 8, 3, 3), np.float32))
    kernels, _ = create_schedule([x.conv2d(w, padding=1).uop], "CPU")
    plan = plan_tiles(commit_dtypes(kernels[-1].ast))
    assert plan is not None and [(int(r.src[0].arg), f) for r, f in plan.upcasts] == [(14, 14), (8, 4)]


def _conv_ast(stride: int):
    """An unpadded 3x3 conv with a 32-wide output row: read directly, at the given stride, over 8 input channels (a
    longer strided reduce tiles across channels: tests/codegen/test_opt_merge.py)."""
    x = Tensor(np.ones((1, 8, 33 if stride == 2 else 34, 65 if stride == 2 else 66), np.float32))
    kernels, _ = create_schedule([x.conv2d(Tensor(np.ones((32, 8, 3, 3), np.float32)), stride=stride).uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _tile_sizes(plan) -> list[int]:
    return [u for _, u in plan.upcasts]


def test_a_row_read_at_stride_two_gets_the_strided_tile() -> None:
    assert _tile_sizes(plan_tiles(_conv_ast(2))) == [8, 8]  # 8 output channels share each shuffled row
    assert _tile_sizes(plan_tiles(_conv_ast(2), OptOptions(strided_tile=()))) == [16, 4]
    assert _tile_sizes(plan_tiles(_conv_ast(1))) == [16, 4]  # contiguous rows: the usual tile


def test_a_matrix_vector_product_gets_a_wide_row() -> None:
    mv = Tensor(np.ones((1, 96), np.float32)).matmul(Tensor(np.ones((96, 256), np.float32)))
    kernels, _ = create_schedule([mv.uop], "CPU")
    ast = commit_dtypes(kernels[-1].ast)
    assert _tile_sizes(plan_tiles(ast)) == [64]  # no reuse axis: 8 vectors of accumulators in flight
    assert _tile_sizes(plan_tiles(ast, OptOptions(wide_upcasts=()))) == [16]


@pytest.mark.usefixtures("eight_lane_channels")
def test_short_rows_run_across_two_channel_vectors() -> None:
    """resnet's 14-wide rows: 7 outputs of a row times two vectors of 8 output channels (14 accumulators; one
    vector of channels would be 7, too few for the FMA latency), where the reduce runs over one range (a 1x1
    conv); a 3x3 conv's reduce over channels and kernel taps keeps one vector (GCC spilled the 14 there)."""
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    x = Tensor(np.ones((1, 64, 14, 14), np.float32))
    ast = _ast_of(x.conv2d(Tensor(np.ones((256, 64, 1, 1), np.float32))))
    with Context(WINO="0"):  # the direct conv (Winograd's by default at this size)
        taps = _ast_of(x.conv2d(Tensor(np.ones((256, 64, 3, 3), np.float32)), padding=1))
        odd = _ast_of(x.conv2d(Tensor(np.ones((72, 64, 3, 3), np.float32)), padding=1))
    assert sizes(plan_tiles(ast, OptOptions())) == [(256, 16), (14, 7)]
    assert sizes(plan_tiles(odd, OptOptions())) == [(72, 8), (14, 7)]  # 72 channels: 9 vectors, no pairs
    assert sizes(plan_tiles(taps, OptOptions())) == [(256, 8), (14, 7)]


def test_a_row_of_a_large_prime_still_gets_enough_accumulators(monkeypatch: pytest.MonkeyPatch) -> None:
    """squeezenet's 13-wide rows: no divisor of 13 up to the row cap, so the tile held one vector accumulator and a
    512 -> 1000 1x1 conv ran at 14 GFLOP/s, waiting on each FMA; 13 rows of one channel vector fill the registers.
    (The conv as over 13 x 13 planes, not over planes padded to whole vectors: jit/frontend/row_align.py.)"""
    monkeypatch.setattr(nn_ops, "plane_aligned_rows", lambda x, cout: None)
    sizes = lambda p: [(int(r.src[0].arg), f) for r, f in p.upcasts]  # noqa: E731
    x = Tensor(np.ones((1, 512, 13, 13), np.float32))
    ast = _ast_of(x.conv2d(Tensor(np.ones((1000, 512, 1, 1), np.float32))))
    assert sizes(plan_tiles(ast, OptOptions())) == [(1000, 8), (13, 13)]  # before merging the spatial axes
    w = np.random.default_rng(0).standard_normal((48, 64, 1, 1)).astype(np.float32)
    xs = np.random.default_rng(1).standard_normal((1, 64, 13, 13)).astype(np.float32)
    got = Tensor(xs).conv2d(Tensor(w)).numpy()
    np.testing.assert_allclose(got, np.einsum("oc,nchw->nohw", w[:, :, 0, 0], xs), rtol=1e-4, atol=1e-4)


def test_a_product_that_would_be_one_tile_keeps_two_for_threads() -> None:
    # squeeze-and-excitation's 576 -> 144: one tile 144 wide left the kernel nothing to share over threads
    x, w = np.ones((1, 576), np.float32), np.ones((576, 144), np.float32)
    wide = OptOptions(wide_channel_vector=16, inner_upcasts=(32, 16, 8, 4), max_upcast=160, fill_tile=128)
    plan = plan_tiles(_ast_of(Tensor(x).matmul(Tensor(w))), wide)
    assert plan is not None and plan.upcasts[0][1] == 48  # 3 tiles of 3 vectors
    # a global pool over 144 channels of 28 x 28, alike
    pool = plan_tiles(_ast_of(Tensor(np.ones((1, 144, 28, 28), np.float32)).mean((2, 3))), wide)
    assert pool is not None and 144 // pool.upcasts[0][1] >= 2
    # little work (144 outputs of 64 terms): one tile, as before
    small = plan_tiles(_ast_of(Tensor(x[:, :64]).matmul(Tensor(w[:64]))), wide)
    assert small is not None and small.upcasts[0][1] == 144
