"""Short output rows: merged output axes (jit/codegen/opt/merge.py), rows no tile width divides, and kernels whose
epilogue adds a second reduce (resnet's projection shortcut) are tiled, with the results of the plain kernel."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from jit import Context, Ops, Tensor, UOp
from jit.codegen.opt import DEFAULT_OPTS, optimize_kernel, plan_tiles
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.options import OptOptions, OptOptionsError
from jit.codegen.opt.tiling import CHANNEL_VECTORS_PER_8_REGISTERS, vector_registers
from jit.codegen.opt.vectorize import choose_lanes
from jit.codegen.pipeline import commit_dtypes
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.cpu import CPU_VECTOR_WIDTH, WIDE_VECTOR_OPTS
from tests.codegen.test_opt_depthwise import _depthwise_reference as depthwise_reference
from tests.codegen.test_opt_tiling_threads import _conv_reference
from tests.helpers import float_accumulators


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _output_sizes(sink: UOp) -> list[int]:
    outs = sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    return [int(r.src[0].arg) for r in outs]


def test_a_pointwise_conv_on_a_short_row_merges_h_and_w() -> None:
    x, w = _rand(1, 32, 28, 28), _rand(64, 32, 1, 1, seed=1)
    out = Tensor(x).conv2d(Tensor(w)).relu()
    ast = _ast(out)
    assert _output_sizes(ast) == [64, 28, 28]
    assert _output_sizes(merge_output_dims(ast)) == [64, 784]
    np.testing.assert_allclose(out.numpy(), np.maximum(_conv_reference(x, w, np.zeros(64, np.float32), 0), 0),
                               rtol=1e-4, atol=1e-4)


def test_axes_read_other_than_row_major_are_not_merged() -> None:
    masked = _ast(Tensor(_rand(1, 4, 14, 14)).conv2d(Tensor(_rand(8, 4, 3, 3)), padding=1))  # masks use h, w
    assert merge_output_dims(masked) is masked
    transposed = _ast(Tensor(_rand(28, 28)).permute(1, 0) + Tensor(_rand(28, 28, seed=1)))
    assert merge_output_dims(transposed) is transposed
    wide = _ast(Tensor(_rand(32, 48)).matmul(Tensor(_rand(48, 64))))  # a 64-wide row already fills tiles
    assert merge_output_dims(wide) is wide


def test_a_row_no_width_divides_is_tiled_by_its_widest_divisor() -> None:
    ast = _ast(Tensor(_rand(1, 64, 7, 7)).conv2d(Tensor(_rand(32, 64, 3, 3)), padding=1))
    plan = plan_tiles(merge_output_dims(ast), OptOptions(channel_vector=0))  # no vectors across output channels
    assert plan is not None and plan.upcasts[0][1] == 7
    # with them, 8 channels a vector, even over weights blocked 16 channels wide (an AVX-512 host's conv2d): the
    # block's index splits at 8 (jit/codegen/passes/symbolic.py ``_split_at_block``) and reads whole vectors
    plan = plan_tiles(merge_output_dims(ast))
    assert plan is not None and plan.max_lanes == 8 and plan.upcasts[0][1] % 8 == 0


def test_two_reduces_in_one_kernel_are_tiled_together() -> None:
    x, y = _rand(1, 32, 28, 28), _rand(1, 64, 28, 28, seed=1)
    w1, w2 = _rand(48, 32, 1, 1, seed=2), _rand(48, 64, 1, 1, seed=3)
    out = (Tensor(x).conv2d(Tensor(w1)) + Tensor(y).conv2d(Tensor(w2))).relu()
    kernels = compile_uops([out.uop])
    assert len(kernels) == 1 and optimize_kernel(_ast(out)) is not _ast(out)
    assert float_accumulators(kernels[0].program.source) >= 2 * 16  # a tile of accumulators for each reduce
    zero = np.zeros(48, np.float32)
    want = np.maximum(_conv_reference(x, w1, zero, 0) + _conv_reference(y, w2, zero, 0), 0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("eight_lane_channels")
def test_short_rows_vectorize_across_output_channels_over_channels_last_weights() -> None:
    """resnet's 14- and 7-wide rows: conv2d stores the weights (Cin, kh, kw, Cout) (a weight-only copy) and the
    tile's vectors run across 8 output channels, loading each tap's 8 weights at once."""
    # 7 row outputs x 2 vectors of 8 channels for the 1x1 conv (4 where the registers are 32: AVX-512), x half as
    # many for the 3x3 (its reduce runs over taps)
    vectors = CHANNEL_VECTORS_PER_8_REGISTERS * vector_registers(CPU_VECTOR_WIDTH) // 8
    for shape, cout, k, pad, accumulators in (((1, 32, 14, 14), 32, 3, 1, 7 * 8 * (vectors // 2)),
                                              ((1, 512, 7, 7), 64, 1, 0, 7 * 8 * vectors)):
        x, w = _rand(*shape), _rand(cout, shape[1], k, k, seed=1)
        with Context(WINO="0"):  # the direct conv's tiles (a 3x3 conv this size is Winograd's by default)
            out = Tensor(x).conv2d(Tensor(w), padding=pad).relu()
        kernels = compile_uops([out.uop])
        conv = kernels[-1]
        assert kernels[0].name.startswith("E_") and "__builtin_memcpy(&_v, data2" in conv.program.source
        assert float_accumulators(conv.program.source) == accumulators
        want = np.maximum(_conv_reference(x, w, np.zeros(cout, np.float32), pad), 0)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("eight_lane_channels")
def test_channel_vectors_are_no_wider_than_the_weights_channel_block() -> None:
    """Regression (AVX-512): a 16-lane vector across output channels spanned two 8-channel weight blocks and
    gathered each tap's 16 weights lane by lane; the lanes stop at the block, whatever the machine's width."""
    x, w = _rand(1, 512, 7, 7), _rand(64, 512, 1, 1, seed=1)
    ast = _ast(Tensor(x).conv2d(Tensor(w)))
    plan = plan_tiles(merge_output_dims(ast))
    assert plan is not None and plan.max_lanes == DEFAULT_OPTS.channel_vector
    assert choose_lanes(ast, plan, DEFAULT_OPTS, 16) == DEFAULT_OPTS.channel_vector
    assert choose_lanes(ast, plan, DEFAULT_OPTS, 4) == 4


@pytest.mark.parametrize(("cout", "lanes"), [(64, 16), (40, 8)])
@pytest.mark.usefixtures("wide_vectors")
def test_wide_channel_vectors_where_the_weights_block_by_16(cout: int, lanes: int) -> None:
    """A machine whose 16-lane FMAs pay (OptOptions.wide_channel_vector, the CPU target's default there): output
    channels that divide by 16 are blocked by 16 and tiled 16 wide; 40 channels stay blocked by 8, tiled 8 wide."""
    x, w = _rand(1, 96, 7, 7), _rand(cout, 96, 1, 1, seed=1)
    out = Tensor(x).conv2d(Tensor(w))
    plan = plan_tiles(merge_output_dims(_ast(out)), WIDE_VECTOR_OPTS)
    assert plan is not None and plan.max_lanes == lanes
    (conv,) = [k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_")]
    assert f"dp_float32x{lanes} " in conv.program.source and (lanes == 8 or "dp_float32x8 " not in conv.program.source)
    np.testing.assert_allclose(out.numpy(), _conv_reference(x, w, np.zeros(cout, np.float32), 0), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize(("cin", "cout", "lanes"), [(16, 32, 16), (8, 32, 0), (16, 40, 0)])
@pytest.mark.usefixtures("wide_vectors")
def test_a_strided_conv_over_a_long_reduce_tiles_across_channels(cin: int, cout: int, lanes: int) -> None:
    """A stride-2 3x3 conv whose 16-wide output rows split into vectors: over a reduce of at least
    ``strided_channel_trips`` (16 x 9 taps) its weights are blocked by 16 and its tile runs across output channels,
    one contiguous weight vector and broadcast inputs a step; over 8 x 9, or with channels that fill no 16-lane
    vector (40), it keeps row vectors, each two loads and a shuffle (no channel lanes)."""
    assert 9 * 8 < WIDE_VECTOR_OPTS.strided_channel_trips <= 9 * 16
    x, w = _rand(1, cin, 17, 33), _rand(cout, cin, 3, 3, seed=1)
    out = Tensor(x).conv2d(Tensor(w), stride=2)
    assert out.shape == (1, cout, 8, 16)
    plan = plan_tiles(_ast(out), WIDE_VECTOR_OPTS, registers=32)
    assert plan is not None and plan.max_lanes == lanes
    off = plan_tiles(_ast(out), replace(WIDE_VECTOR_OPTS, strided_channel_trips=0), registers=32)
    assert off is not None and off.max_lanes == 0  # the knob off (OpenCL's CPU device): row vectors
    (conv,) = [k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_")]
    assert ("dp_scatter_float32x16" in conv.program.source) == bool(lanes)
    want = _conv_reference(x, w, np.zeros(cout, np.float32), 0)[:, :, ::2, ::2]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_wide_channel_vector_is_a_multiple_of_the_channel_vector() -> None:
    with pytest.raises(OptOptionsError, match="wide_channel_vector: expected 0 or a multiple of channel_vector 8"):
        OptOptions(wide_channel_vector=12)


def test_rows_that_merge_into_whole_vectors_keep_their_weights() -> None:
    out = Tensor(_rand(1, 32, 28, 28)).conv2d(Tensor(_rand(32, 32, 1, 1, seed=1)))  # 28 x 28 = 98 vectors
    assert len(compile_uops([out.uop])) == 1


@pytest.mark.usefixtures("wide_vectors")
def test_a_depthwise_conv_on_short_rows_takes_16_channel_vectors_where_they_pay() -> None:
    x, w, b = _rand(1, 64, 14, 14), _rand(64, 1, 5, 5, seed=1), _rand(64, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), groups=64, padding=2)
    conv = compile_uops([out.uop])[-1].program.source
    assert "dp_float32x16 acc" in conv and "dp_float32x8 acc" not in conv
    np.testing.assert_allclose(out.numpy(), depthwise_reference(x, w, b, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("wide_vectors")
def test_a_row_narrower_than_the_wide_vectors_runs_across_16_channels() -> None:
    """openpilot-shaped inputs end at 4 x 8 outputs: an 8-wide row fills half a 16-lane vector, so conv2d blocks the
    weights by 16 and the tile runs across channels; a 16-wide row keeps its row vectors and plain weights."""
    x, w = _rand(1, 64, 4, 8), _rand(64, 64, 3, 3, seed=1)
    out = Tensor(x).conv2d(Tensor(w), padding=1)
    plan = plan_tiles(_ast(out), WIDE_VECTOR_OPTS)
    assert plan is not None and plan.max_lanes == 16 and _size_of(plan.upcasts[0][0]) == 64
    (conv,) = [k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_")]
    assert "dp_float32x16 val" in conv.program.source and "__builtin_memcpy(&_v, data2" in conv.program.source
    np.testing.assert_allclose(out.numpy(), _conv_reference(x, w, np.zeros(64, np.float32), 1), rtol=1e-4, atol=1e-4)
    wider = Tensor(_rand(1, 64, 4, 16)).conv2d(Tensor(w), padding=1)
    plan = plan_tiles(_ast(wider), WIDE_VECTOR_OPTS)
    assert plan is not None and plan.max_lanes == 0 and _size_of(plan.upcasts[0][0]) == 16
    assert len([k for k in compile_uops([wider.uop], "CPU") if k.name.startswith("E_")]) == 1  # the pad, no weights


@pytest.mark.usefixtures("wide_vectors")
def test_a_3x3_conv_tile_takes_two_window_rows_where_32_registers_hold_them() -> None:
    """A 16-wide row x 8 channels tile loads 9 values a tap for 8 multiply-adds; with two output rows (OptOptions
    .window_tile) 10 values for 16. Not on a 16-register target (window_tile 0)."""
    x, w, b = _rand(1, 64, 8, 16), _rand(64, 64, 3, 3, seed=1), _rand(64, seed=2)
    with Context(WINO="0"):  # the direct conv (F(2,3) takes 8x16 outputs on wide units)
        out = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1)
    ast = _ast(out)
    plan = plan_tiles(ast, WIDE_VECTOR_OPTS)
    assert plan is not None and [(_size_of(r), u) for r, u in plan.upcasts] == [(16, 16), (64, 8), (8, 2)]
    plain = plan_tiles(ast, replace(WIDE_VECTOR_OPTS, window_tile=0))
    assert plain is not None and [(_size_of(r), u) for r, u in plain.upcasts] == [(16, 16), (64, 8)]
    (conv,) = [k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_")]
    assert float_accumulators(conv.program.source) == 16 * 8 * 2
    np.testing.assert_allclose(out.numpy(), _conv_reference(x, w, b, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("wide_vectors")
def test_a_strided_conv_tile_takes_two_output_rows_sharing_its_weights() -> None:
    """A stride-2 conv's rows share no sliding window (output row y reads input rows 2y + ky), but every output row
    reads the same weight at a reduce step: a tile two rows high loads each broadcast weight once for both
    (``_broadcast_sharing_axis``). resnet18's 7x7 stem over 112-wide rows (no 32-wide row divides them): 16 lanes x
    8 channels x 2 rows for each of the phase-split conv's two column phases, where one row loaded 9 values for 8
    multiply-adds."""
    x, w = _rand(1, 3, 224, 224), _rand(64, 3, 7, 7, seed=1)
    out = Tensor(x).conv2d(Tensor(w), stride=2, padding=3)
    conv = next(k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_"))
    assert float_accumulators(conv.program.source) == 16 * 8 * 2 * 2
    xp = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)))
    want = sum(np.einsum("oc,nchw->nohw", w[:, :, ky, kx], xp[:, :, ky:ky + 224:2, kx:kx + 224:2])
               for ky in range(7) for kx in range(7))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("wide_vectors")
def test_a_strided_conv_over_a_short_reduce_takes_three_rows_sharing_its_weights() -> None:
    """squeezenet's stem: 3 -> 64 channels, 3x3 at stride 2 over 224 x 224, a reduce of 27 taps (shorter than
    ``BROADCAST_SHARING_MIN_TRIPS``) into 111 x 111 outputs. A row of one 16-lane vector x 8 channels loaded two
    vectors, a shuffle and 8 broadcast weights for 8 multiply-adds; three output rows (111 = 3 x 37, no two divides
    it) share the weights: 24 accumulators. Their copies come rows first, so each broadcast weight feeds the three
    rows' multiply-adds one after another (in the reuse axis's order GCC spilled the tile)."""
    x, w, b = _rand(1, 3, 224, 224), _rand(64, 3, 3, 3, seed=1), _rand(64, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2)
    plan = plan_tiles(_ast(out), WIDE_VECTOR_OPTS, vector_registers(16))
    assert plan is not None and plan.window_first
    assert [(_size_of(r), u) for r, u in plan.upcasts][1:] == [(64, 8), (111, 3)]
    conv = next(k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_"))
    assert float_accumulators(conv.program.source) == 16 * 8 * 3
    updates = re.findall(r"acc\d+ = \(acc\d+\+\((val\d+)\*(val\d+)\)\);", conv.program.source)
    assert len({weight for _, weight in updates[:3]}) == 1 and len({row for row, _ in updates[:3]}) == 3
    want = sum(np.einsum("oc,nchw->nohw", w[:, :, ky, kx], x[:, :, ky:ky + 222:2, kx:kx + 222:2])
               for ky in range(3) for kx in range(3)) + b[None, :, None, None]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("wide_vectors")
def test_a_7x7_conv_over_two_vector_rows_takes_three_one_vector_rows_instead() -> None:
    """openpilot-shaped resnet18's stem: 12 -> 64 channels, 7x7 at stride 2 over 128 x 256 (phase-split: its rows
    read at stride 1), 64 output rows of 128. Two 16-lane vectors x 8 channels were 16 accumulators loading 10 values
    a step; one vector x 8 channels x three output rows sharing each broadcast weight are 24 loading 11, the last
    of the 22 row tiles shifted back (64 is no multiple of 3)."""
    x, w, b = _rand(1, 12, 128, 256), _rand(64, 12, 7, 7, seed=1) * np.float32(0.1), _rand(64, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=3)
    conv = next(k for k in compile_uops([out.uop], "CPU") if k.name.startswith("r_"))
    assert float_accumulators(conv.program.source) == 16 * 8 * 3 * 2  # for each of the two column phases
    assert conv.program.global_size[0] == 22
    xp = np.pad(x, ((0, 0), (0, 0), (3, 3), (3, 3)))
    want = sum(np.einsum("oc,nchw->nohw", w[:, :, ky, kx], xp[:, :, ky:ky + 128:2, kx:kx + 256:2])
               for ky in range(7) for kx in range(7)) + b[None, :, None, None]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)
    # a 1x1 conv over the same two-vector rows keeps them: its rows read input rows a plane apart
    pointwise = Tensor(_rand(1, 96, 32, 64)).conv2d(Tensor(_rand(24, 96, 1, 1, seed=3)))
    plan = plan_tiles(_ast(pointwise), WIDE_VECTOR_OPTS, vector_registers(16))
    assert plan is not None and not plan.overlap_window and len(plan.upcasts) == 2


def _size_of(rng: UOp) -> int:
    return int(rng.src[0].arg)
