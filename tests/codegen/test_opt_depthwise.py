"""Depthwise convs and wide rows: conv2d reads a depthwise conv with rows too short for vectors channels-last
(jit/frontend/nn_ops.py), the tile's vectors then run across channels (jit/codegen/opt/tiling.py); a row without a
reuse axis and with a long reduce takes its widest divisor of whole vectors; the channel-vector tile's size follows
the target's vector registers."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from jit import Ops, Tensor, UOp
from jit.codegen.opt import plan_tiles, target_default_opts, tiling
from jit.codegen.opt.merge import merge_output_dims
from jit.codegen.opt.tiling import CHANNEL_VECTORS_PER_8_REGISTERS, DEFAULT_VECTOR_REGISTERS, vector_registers
from jit.codegen.pipeline import commit_dtypes
from jit.realize import clear_compiled_kernels, compile_uops
from jit.schedule.kernels import create_schedule
from targets.cpu import CPU_VECTOR_WIDTH
from targets.registry import Device
from tests.helpers import float_accumulators

# the exact 8-lane channel tiles these tests describe (a machine whose 16-lane FMAs pay tiles
# 16 wide: tests/codegen/test_opt_merge.py)
pytestmark = pytest.mark.usefixtures("eight_lane_channels")


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _depthwise_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    _, _, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], x.shape[1], oh, ow))
    for dy in range(kh):
        for dx in range(kw):
            win = xp[:, :, dy:dy + (oh - 1) * stride + 1:stride, dx:dx + (ow - 1) * stride + 1:stride]
            out += win * w[None, :, 0, dy, dx, None, None]
    return (out + b[None, :, None, None]).astype(np.float32)


def _vector_loads(source: str, buffer: str) -> int:
    return len(re.findall(rf"__builtin_memcpy\(&_v, {buffer}\+", source))


@pytest.mark.parametrize("c, hw, k, stride", [(64, 14, 5, 1), (256, 7, 7, 1), (48, 28, 5, 1), (1024, 14, 3, 2)])
def test_a_depthwise_conv_on_short_rows_vectorizes_across_channels(c: int, hw: int, k: int, stride: int) -> None:
    """Rows of 14, 7 (no vector divides them) and 28 (4-lane vectors would gather a channels-last input): the
    padded input is copied channels-last, the conv's tile is vectors of 8 channels x 7 row outputs, and every
    tap loads its inputs and its weights as vectors."""
    x, w, b = _rand(1, c, hw, hw), _rand(c, 1, k, k, seed=1), _rand(c, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), groups=c, stride=stride, padding=k // 2)
    kernels = compile_uops([out.uop])
    conv = kernels[-1].program.source
    assert kernels[0].name.startswith("E_") and kernels[0].name.endswith(f"_{c}")  # the channels-last copy
    # 7 row outputs x vectors of 8 channels: one on 16 registers, two on 32 (a reduce over taps takes half the
    # vectors a 1x1 conv's does)
    vectors = max(1, CHANNEL_VECTORS_PER_8_REGISTERS * vector_registers(CPU_VECTOR_WIDTH) // 8 // 2)
    assert float_accumulators(conv) == 7 * 8 * vectors and "dp_float32x8 acc" in conv
    assert _vector_loads(conv, "data1") >= 1 and _vector_loads(conv, "data2") >= 1
    np.testing.assert_allclose(out.numpy(), _depthwise_reference(x, w, b, k // 2, stride), rtol=1e-5, atol=1e-5)


def test_a_depthwise_conv_whose_rows_split_into_vectors_keeps_them() -> None:
    """A 56-wide row vectorizes as it is: no channels-last copy; its 7x7 window is a long reduce without a reuse
    axis, so the row is 56 wide (7 vectors of 8 accumulators in flight) rather than one vector."""
    x, w, b = _rand(1, 16, 56, 56), _rand(16, 1, 7, 7, seed=1), _rand(16, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), groups=16, padding=3)
    kernels = compile_uops([out.uop])
    conv = kernels[-1].program.source
    assert kernels[0].name == "E_16_62_62"  # the padded copy, channel-major
    assert float_accumulators(conv) == 56
    np.testing.assert_allclose(out.numpy(), _depthwise_reference(x, w, b, 3), rtol=1e-5, atol=1e-5)


def test_a_short_reduce_without_reuse_axis_keeps_its_one_vector_row() -> None:
    """A 3x3 window: 9 taps, which the core overlaps with the next tile's, so the row stays one vector wide, 4 rows
    of the sliding window high (``test_a_depthwise_conv_tiles_rows_of_its_sliding_window``)."""
    x, w = _rand(1, 16, 56, 56), _rand(16, 1, 3, 3, seed=1)
    out = Tensor(x).conv2d(Tensor(w), groups=16, padding=1)
    conv = compile_uops([out.uop])[-1].program.source
    assert float_accumulators(conv) == 8 * tiling.WINDOW_HEIGHTS[0]
    np.testing.assert_allclose(out.numpy(), _depthwise_reference(x, w, np.zeros(16, np.float32), 1),
                               rtol=1e-5, atol=1e-5)


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def test_vector_registers_bound_the_channel_vector_tile() -> None:
    """A 1x1 conv on 7x7 rows: 7 row outputs x 2 vectors of 8 channels on 16 registers (AVX2), x 4 on 32 (AVX-512),
    and the machine's own width picks its own count."""
    assert vector_registers(16) == 32 and vector_registers(8) == vector_registers(4) == DEFAULT_VECTOR_REGISTERS
    x, w = _rand(1, 512, 7, 7), _rand(64, 512, 1, 1, seed=1)
    ast = merge_output_dims(_ast(Tensor(x).conv2d(Tensor(w))))

    def sizes(registers: int) -> list[int]:
        plan = plan_tiles(ast, registers=registers)
        assert plan is not None
        return [u for _, u in plan.upcasts]
    assert sizes(16) == [16, 7] and sizes(32) == [32, 7]
    out = Tensor(x).conv2d(Tensor(w))
    src = compile_uops([out.uop])[-1].program.source
    assert float_accumulators(src) == 7 * sizes(vector_registers(CPU_VECTOR_WIDTH))[0]
    np.testing.assert_allclose(out.numpy(), np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), rtol=1e-4, atol=1e-4)


def test_plan_keeps_a_row_none_of_whose_loads_gather() -> None:
    """The channel tile's trigger for rows of 4 is a gathered load, not the row's width: a channel-major depthwise
    input read contiguously along a 28-wide row keeps its row vectors (no channels-last copy below the size)."""
    x, w = _rand(1, 8, 28, 28), _rand(8, 1, 3, 3, seed=1)
    ast = _ast(Tensor(x).conv2d(Tensor(w), groups=8, padding=1))
    plan = plan_tiles(ast)
    assert plan is not None and plan.upcasts[0][0].op is Ops.RANGE and plan.max_lanes == 0


def test_a_small_strided_depthwise_conv_reads_a_padded_copy() -> None:
    """mobilenet's first depthwise conv (16 channels, stride 2, 112 -> 56): below the general size for a padded
    copy, but read lazily each of its loads is a masked gather; copied (phase-split by the stride), it is not."""
    x, w, b = _rand(1, 16, 112, 112), _rand(16, 1, 3, 3, seed=1), _rand(16, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), groups=16, stride=2, padding=1)
    kernels = compile_uops([out.uop])
    assert len(kernels) == 2 and kernels[0].name.startswith("E_")
    assert "*(data1+alu" not in kernels[-1].program.source.split("for (int ridx3")[1]  # no lane-by-lane gather
    np.testing.assert_allclose(out.numpy(), _depthwise_reference(x, w, b, 1, 2), rtol=1e-5, atol=1e-5)


def test_a_small_pointwise_conv_on_short_rows_tiles_across_channels() -> None:
    """shufflenet's 96 -> 96 1x1 conv on 7x7 rows (451k multiply-adds): its weights are channel-blocked too, so its
    tile is vectors of 8 channels (not 56 scalars), and its result is the conv's."""
    x, w = _rand(1, 96, 7, 7), _rand(96, 96, 1, 1, seed=1)
    out = Tensor(x).conv2d(Tensor(w))
    src = compile_uops([out.uop])[-1].program.source
    assert "dp_float32x8 acc" in src and "float acc" not in src and _vector_loads(src, "data2") >= 1
    np.testing.assert_allclose(out.numpy(), np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), rtol=1e-4, atol=1e-4)


def test_a_reduce_over_several_ranges_takes_half_the_channel_vectors() -> None:
    """A stride-2 3x3 conv (resnet's 512 channels on 7x7 rows): its reduce runs over channels, kernel rows and
    column phases, so it holds half the channel vectors a 1x1 conv does: one on 16 registers, two on 32."""
    x, w = _rand(1, 512, 14, 14), _rand(512, 512, 3, 3, seed=1)
    ast = _ast(Tensor(x).conv2d(Tensor(w), stride=2, padding=1))
    for registers, lanes in ((16, 8), (32, 16)):
        plan = plan_tiles(ast, registers=registers)
        assert plan is not None and plan.upcasts[0][1] == lanes and plan.upcasts[1][1] == 7


def test_a_global_pool_with_few_outputs_is_tiled_and_sums_in_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Squeeze-and-excitation's pool: 144 outputs (under ``min_outputs``), each a sum of 3136. Tiled because the
    reduce is long, so many outputs' sums are in flight at once; each output still adds its terms in order, so
    the result is bit for bit the untiled kernel's. Lane reduces off: they take such a pool otherwise
    (jit/codegen/opt/reduce_lanes.py, tests/codegen/test_reduce_lanes.py)."""
    cpu = Device["CPU"]
    monkeypatch.setattr(cpu, "default_opts", replace(target_default_opts(cpu), reduce_lanes=False))
    x = _rand(1, 144, 56, 56)
    src = compile_uops([Tensor(x).mean((2, 3)).uop])[-1].program.source
    assert float_accumulators(src) >= 8
    tiled = Tensor(x).mean((2, 3)).numpy()
    monkeypatch.setenv("DRIVEPACK_RENDER_CACHE", "0")
    monkeypatch.setattr(tiling, "LONG_REDUCE_TRIPS", 1 << 62)
    monkeypatch.setattr(tiling, "SMALL_KERNEL_WORK", 1 << 62)
    clear_compiled_kernels()
    assert float_accumulators(compile_uops([Tensor(x).mean((2, 3)).uop])[-1].program.source) == 1
    np.testing.assert_array_equal(tiled, Tensor(x).mean((2, 3)).numpy())
    np.testing.assert_allclose(tiled, x.astype(np.float64).mean((2, 3)), rtol=1e-5, atol=1e-6)


def test_a_prime_row_keeps_its_row_tile_whatever_the_registers() -> None:
    """squeezenet's 13x13 1x1 convs: no divisor of 169 up to the cap but 1, and a tile one output wide is a few
    channel vectors at best, so the tile is the 13-wide row x one vector on 32 registers as on 16 (two vectors of
    a row that long spill)."""
    x, w = _rand(1, 512, 13, 13), _rand(64, 512, 1, 1, seed=1)
    ast = merge_output_dims(_ast(Tensor(x).conv2d(Tensor(w))))
    for registers in (16, 32):
        plan = plan_tiles(ast, registers=registers)
        assert plan is not None and [u for _, u in plan.upcasts] == [8, 13]



@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_a_depthwise_conv_tiles_rows_of_its_sliding_window(device: str) -> None:
    """EfficientNet's 3x3 depthwise conv over 56-wide rows: no axis is read by one row alone (each channel has its
    own weights), but output row y at tap ky + 1 reads what row y + 1 reads at tap ky, so a tile of 4 rows loads 6
    input rows where 4 separate rows loaded 12 (and has 4x the accumulators)."""
    x, w, b = _rand(1, 32, 56, 56), _rand(32, 1, 3, 3, seed=1), _rand(32, seed=2)
    out = Tensor(x, device=device).conv2d(Tensor(w, device=device), Tensor(b, device=device), groups=32, padding=1)
    plan = plan_tiles(_ast(Tensor(x).conv2d(Tensor(w), Tensor(b), groups=32, padding=1)))
    assert plan is not None and [int(r.src[0].arg) for r, _ in plan.upcasts] == [56, 56]
    assert plan.upcasts[1][1] == tiling.WINDOW_HEIGHTS[0]
    # a 7x7 window's long reduce keeps its whole 56-wide row, with no room left for rows
    x7, w7 = _rand(1, 16, 56, 56), _rand(16, 1, 7, 7, seed=1)
    wide = plan_tiles(_ast(Tensor(x7).conv2d(Tensor(w7), groups=16, padding=3)))
    assert wide is not None and [f for _, f in wide.upcasts] == [56]
    np.testing.assert_allclose(out.numpy(), _depthwise_reference(x, w, b, 1), rtol=1e-5, atol=1e-5)


def test_a_strided_window_is_no_row_tile() -> None:
    # at stride 2, row y + 1 reads two input rows further, not the next tap's row: nothing is shared
    x, w = _rand(1, 32, 56, 56), _rand(32, 1, 1, 3, seed=1)
    ast = _ast(Tensor(x).conv2d(Tensor(w), groups=32, stride=(2, 1), padding=(0, 1)))
    plan = plan_tiles(ast)
    assert plan is None or len(plan.upcasts) == 1
