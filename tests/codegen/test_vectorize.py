"""Tile rows as vector types (codegen/opt/vectorize.py, the renderer's vector spelling): which kernels get vectors, that
contiguous and stride-2 loads become vector loads, and that every vectorized kernel computes what the scalar
copies compute."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from abi.frames import nv12_geometry
from jit import Device, Ops, Tensor, UOp, capture, dtypes
from jit.codegen.opt import OptOptions, plan_tiles
from jit.codegen.opt.search import use_tuning
from jit.codegen.opt.tuning import TuningEntry, TuningTable, device_fingerprint, kernel_key
from jit.codegen.opt.vectorize import addressed_by_data, choose_lanes
from jit.codegen.pipeline import commit_dtypes
from jit.common.dtype import PtrDType
from jit.frontend import nn_ops
from jit.realize import clear_compiled_kernels, compile_uops
from jit.schedule.kernels import create_schedule
from packager.modeld.warp import model_frame
from targets.cpu import CPU_LANGUAGE, CPU_VECTOR_WIDTH
from tests.codegen.test_beam import _pre_opt_sink
from tests.codegen.test_opt_tiling_threads import _conv_reference

pytestmark = pytest.mark.cpu_only  # the CPU target's C vector spelling; OpenCL's is tested in test_opencl_opt.py
N = CPU_VECTOR_WIDTH  # this machine's lanes (8 with AVX2, 16 with AVX-512): the spellings below name it


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _source(t: Tensor) -> str:
    return compile_uops([t.uop])[-1].program.source


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_lanes_are_the_widest_power_of_two_dividing_the_tile_row() -> None:
    ast = _ast(Tensor(_rand(64, 48)).matmul(Tensor(_rand(48, 80))))
    plan = plan_tiles(ast)
    assert plan is not None and plan.upcasts[0][1] == 16
    assert choose_lanes(ast, plan, OptOptions(), 8) == 8
    assert choose_lanes(ast, plan, OptOptions(), 16) == 16
    assert choose_lanes(ast, plan, OptOptions(), 0) == 0  # the language has no vectors
    assert choose_lanes(ast, plan, OptOptions(vectorize=False), 8) == 0
    row14 = _ast(Tensor(_rand(64, 48)).matmul(Tensor(_rand(48, 14))))
    plan14 = plan_tiles(row14)
    assert plan14 is not None and plan14.upcasts[0][1] == 14  # a whole short row: no lane count divides it
    assert choose_lanes(row14, plan14, OptOptions(), 8) == 0


def test_a_value_of_a_type_without_vectors_keeps_scalar_copies() -> None:
    a = Tensor(np.arange(64 * 48).reshape(64, 48) % 7).cast(dtypes.int64)
    ast = _ast(a.matmul(Tensor(np.ones((48, 32), np.int64))))
    plan = plan_tiles(ast)
    assert plan is not None and choose_lanes(ast, plan, OptOptions(), 8) == 0


def test_matmul_rows_are_vector_loads_and_stores() -> None:
    a, b = _rand(64, 48), _rand(48, 80, seed=1)
    out = Tensor(a).matmul(Tensor(b)).relu()
    src = _source(out)
    # one tile row of B (16 wide): 16 // N vectors
    assert f"dp_float32x{N} acc" in src and src.count("__builtin_memcpy(&_v, data2") == 16 // N
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


def test_vectors_compute_exactly_what_scalar_copies_compute() -> None:
    x, w, b = _rand(1, 8, 16, 32), _rand(16, 8, 3, 3, seed=1), _rand(16, seed=2)

    def conv() -> Tensor:
        return Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).relu() * 0.5 - 1

    vector = conv().numpy()
    table = TuningTable()
    table.put(TuningEntry(kernel_key(_pre_opt_sink(conv())), "CPU", device_fingerprint(Device["CPU"]),
                          OptOptions(vectorize=False)))
    with use_tuning(table) as session:
        scalar = conv().numpy()
        assert "dp_float32x" not in _source(conv())
    assert session.hits >= 1
    np.testing.assert_array_equal(vector, scalar)


def test_stride_two_loads_are_two_vector_loads_and_a_shuffle() -> None:
    x, w = _rand(1, 12, 65, 129), _rand(24, 12, 3, 3, seed=1)
    out = Tensor(x).conv2d(Tensor(w), stride=2)  # unpadded: the conv reads its input directly, at stride 2
    assert "__builtin_shuffle" in _source(out)
    want = _conv_reference(x, w, np.zeros(24, np.float32), 0)[:, :, ::2, ::2]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [3, 4, 5])
def test_a_padded_stride_two_conv_reads_each_phase_contiguously(kernel: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """conv2d's phase split: one copy kernel lays the padded input out as (even columns, odd columns) and the
    phases' convs fuse into one kernel of plain vector loads (no shuffle, no gather), bias and ReLU included."""
    monkeypatch.setattr(nn_ops, "CHANNELS_LAST_MIN_MACS", math.inf)  # a 65-wide row would add a weight copy
    x, w, b = _rand(1, 12, 64, 128), _rand(24, 12, kernel, kernel, seed=1), _rand(24, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=kernel // 2).relu()
    kernels = compile_uops([out.uop])
    assert len(kernels) == 2 and kernels[0].name.startswith("E_")  # the copy, then the conv
    src = kernels[1].program.source
    assert "__builtin_shuffle" not in src
    if out.shape[3] % 8 == 0:  # a row of whole vectors (kernel 4 makes it 65 wide: scalar copies)
        assert "*(data1+" not in src.split("for (int ridx3")[1]  # every input load is a vector load
    pad = kernel // 2
    want = np.maximum(_conv_reference(x, w, b, pad)[:, :, ::2, ::2], 0)
    np.testing.assert_allclose(out.numpy(), want[:, :, :out.shape[2], :out.shape[3]], rtol=1e-4, atol=1e-4)


def test_masked_loads_are_gathered_lane_by_lane() -> None:
    """A small conv reads its padding through masks (no copy kernel): the masks are bool lanes."""
    x, w, b = _rand(1, 3, 9, 16), _rand(8, 3, 3, 3, seed=1), _rand(8, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1)
    kernels = compile_uops([out.uop])
    assert any(u.op is Ops.RANGE and u.arg[1] == "vector" for k in kernels for u in k.lowered.toposort())
    np.testing.assert_allclose(out.numpy(), _conv_reference(x, w, b, 1), rtol=1e-4, atol=1e-4)


def test_integer_tiles_wrap_like_numpy() -> None:
    a = (np.arange(32 * 24, dtype=np.int32).reshape(32, 24) * 40_000_003) % 1_000_003
    b = np.full((24, 32), 70_001, np.int32)
    got = Tensor(a).matmul(Tensor(b)).numpy()
    np.testing.assert_array_equal(got, a @ b)  # int32 products overflow and wrap


def test_uint8_frames_cast_in_vector_lanes() -> None:
    frames = np.random.default_rng(4).integers(0, 256, (1, 6, 32, 64), dtype=np.uint8)
    w = _rand(8, 6, 3, 3, seed=1)
    out = (Tensor(frames).cast(dtypes.float32) / 128 - 1).conv2d(Tensor(w), padding=1)
    want = _conv_reference(frames.astype(np.float32) / 128 - 1, w, np.zeros(8, np.float32), 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_stride_two_loads_of_narrow_types_shuffle_with_masks_as_wide_as_their_lanes() -> None:
    """Regression: a shuffle's mask lanes must be as wide as the data's (uint8 frames read at stride 2)."""
    frames = np.random.default_rng(5).integers(0, 256, (1, 6, 34, 130), dtype=np.uint8)
    w = _rand(8, 6, 3, 3, seed=1)
    out = (Tensor(frames).cast(dtypes.float32) / 128 - 1).conv2d(Tensor(w), stride=2)
    assert "__builtin_shuffle" in _source(out)
    want = _conv_reference(frames.astype(np.float32) / 128 - 1, w, np.zeros(8, np.float32), 0)[:, :, ::2, ::2]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_relu_epilogue_compares_and_selects_whole_vectors() -> None:
    """Regression: a ReLU computed lane by lane kept a conv's eight accumulators live across per-lane code and GCC
    spilled one in the reduce loop (43 vs 66 GFLOP/s); the compare and the select are now vector expressions."""
    a, b = _rand(64, 48), _rand(48, 80, seed=1)
    out = Tensor(a).matmul(Tensor(b)).relu()
    src = _source(out)
    assert "[0]" not in src  # no lane is extracted
    if CPU_LANGUAGE.vector_minmax:  # relu: (x < 0) ? 0 : x, which keeps NaN: x86's maxps(0, x) exactly
        assert f"dp_max_float32x{CPU_LANGUAGE.vector_minmax_lanes}(" in src and "&-alu" not in src
    else:
        assert "<0.0f))" in src and "&-alu" in src
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


def _specials(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = _rand(*shape, seed=seed)
    x.flat[::7], x.flat[3::11], x.flat[5::13], x.flat[2::17], x.flat[4::19] = np.nan, -np.inf, -0.0, 0.0, np.inf
    return x


def test_min_max_helpers_compute_the_selects_they_replace() -> None:
    """A where of a comparison of the two values it picks, and a clamp to a constant bound other than zero, are
    rendered as the min/max helpers where the language has them (targets/minmax.py) and give the ternary's lanes
    (the clamps: ``test_vector_float_max_min_against_a_constant_...`` below):
    NaN from whichever side the comparison fails to, -0.0 and +0.0 kept as picked, infinities."""
    x, y = _specials((32, 48), 8), _specials((32, 48), 9)
    tx, ty = Tensor(x), Tensor(y)
    cases = {"relu": (tx.relu(), np.where(x < 0, np.float32(0), x)),
             "where max": ((tx < ty).where(ty, tx), np.where(x < y, y, x)),
             "where min": ((tx < ty).where(tx, ty), np.where(x < y, x, y))}
    for name, (out, want) in cases.items():
        assert "dp_m" in _source(out) or not CPU_LANGUAGE.vector_minmax, name
        got = out.numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)  # NaN where want has NaN
        assert np.array_equal(np.signbit(got), np.signbit(want)), name


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_vector_compares_and_selects_match_numpy(dtype: type) -> None:
    """Each comparison and a select with a vector and a scalar branch, on the lanes of a tiled kernel's epilogue:
    signed and unsigned ordering (uint32 values above 2**31), NaN, infinities and -0.0 as numpy has them."""
    rng = np.random.default_rng(7)
    if dtype is np.float32:
        a, b = _rand(32, 24, seed=3), _rand(24, 32, seed=4)
        t = _rand(32, 32, seed=5)
        t.flat[::7], t.flat[3::11], t.flat[5::13] = np.nan, -np.inf, -0.0
        u = _rand(32, 32, seed=6)
    else:
        a = rng.integers(0, 50, (32, 24)).astype(dtype)
        b = rng.integers(0, 50, (24, 32)).astype(dtype)
        top = 2**32 if dtype is np.uint32 else 2**31
        t = rng.integers(0, top, (32, 32), dtype=np.int64).astype(dtype)
        t.flat[::5] = (a @ b).flat[::5]  # ties: equal and not-equal both taken
        u = rng.integers(0, top, (32, 32), dtype=np.int64).astype(dtype)
    y = Tensor(a).matmul(Tensor(b))
    tt, uu = Tensor(t), Tensor(u)
    outs = {"lt": (y < tt).where(y, uu), "eq": (y == tt).where(uu, y), "ne": (y != tt).where(y, 3),
            "gt": (tt < y).where(2, uu)}
    src = _source(outs["lt"])
    assert "&-alu" in src and "(-(" in src
    ya = a @ b
    want = {"lt": np.where(ya < t, ya, u), "eq": np.where(ya == t, u, ya), "ne": np.where(ya != t, ya, 3),
            "gt": np.where(t < ya, 2, u)}
    for k, out in outs.items():
        got = out.numpy()
        assert got.dtype == want[k].dtype, k
        np.testing.assert_allclose(got, want[k], rtol=1e-5, atol=1e-5, err_msg=k)
        if dtype is np.float32:
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want[k].astype(np.float32)), err_msg=k)


def test_elementwise_rows_are_vectors() -> None:
    """A copy whose innermost axis splits into whole vectors (the uint8 frames' normalization) is one vector per
    step: a vector load, a lane conversion, a vector store."""
    frames = np.random.default_rng(8).integers(0, 256, (1, 6, 32, 64), dtype=np.uint8)
    out = Tensor(frames).cast(dtypes.float32) / 128 - 1
    src = _source(out)
    assert "__builtin_convertvector(" in src and "[0]" not in src and "memcpy(data0" in src
    np.testing.assert_array_equal(out.numpy(), frames.astype(np.float32) / 128 - 1)


@pytest.mark.parametrize("src_dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("dst", ["float32", "int32"])
def test_narrow_lanes_widen_one_step_at_a_time(src_dtype: type, dst: str) -> None:
    """8- and 16-bit lanes convert to 32-bit ones through the next wider integer lanes (GCC converts a direct
    uint8 -> float vector lane by lane), with the C cast's values at both ends of the range."""
    info = np.iinfo(src_dtype)
    x = np.random.default_rng(10).integers(info.min, info.max + 1, (8, 64)).astype(src_dtype)
    x[0, :2] = info.min, info.max
    out = Tensor(x).cast(getattr(dtypes, dst)) * 3
    src = _source(out)
    half = f"dp_uint16x{N}" if src_dtype is np.uint8 else f"dp_int16x{N}"
    steps = [half] if np.dtype(src_dtype).itemsize == 1 else []
    steps += [f"dp_int32x{N}"] + ([f"dp_float32x{N}"] if dst == "float32" else [])
    chain = "".join("__builtin_convertvector(" for _ in steps)
    assert chain in src and all(f", {vt})" in src for vt in steps), src
    np.testing.assert_array_equal(out.numpy(), x.astype(getattr(np, dst)) * 3)


def test_vector_integer_and_bool_ops_match_numpy() -> None:
    """Signed products and sums that overflow (wrapping through the unsigned type), clamps (min/max as compare
    and select) and and/or/xor/not of bool lanes, all as whole-vector expressions."""
    rng = np.random.default_rng(9)
    a = rng.integers(-2**31, 2**31, (16, 64), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (16, 64), dtype=np.int64).astype(np.int32)
    ta, tb = Tensor(a), Tensor(b)
    wrapped = (ta * 70001 + tb - 5).maximum(-1000).minimum(tb)
    src = _source(wrapped)
    assert f"(dp_uint32x{N})" in src and "[0]" not in src
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(wrapped.numpy(), np.minimum(np.maximum(a * np.int32(70001) + b - 5, -1000), b))
    p, q = ta < tb, ta > 0
    logic = ((p & q) | (p ^ ~q)).where(ta, tb)
    assert "[0]" not in _source(logic)
    pa, qa = a < b, a > 0
    np.testing.assert_array_equal(logic.numpy(), np.where((pa & qa) | (pa ^ ~qa), a, b))


def test_vector_float_max_min_propagate_nan_like_numpy() -> None:
    """Float max/min as whole-vector compare and select, NaN propagating as numpy's maximum/minimum (elementwise
    and as a max-pool's reduce combine)."""
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal((16, 64), dtype=np.float32), rng.standard_normal((16, 64), dtype=np.float32)
    a.flat[::9], b.flat[::7], b.flat[1::13] = np.nan, np.nan, -np.inf
    for fn, ref in ((Tensor.maximum, np.maximum), (Tensor.minimum, np.minimum)):
        out = fn(Tensor(a), Tensor(b))
        assert "[0]" not in _source(out)
        np.testing.assert_array_equal(out.numpy(), ref(a, b))
    x = rng.standard_normal((1, 8, 32, 64), dtype=np.float32)
    x[0, 1, 5, 9] = np.nan
    pooled = Tensor(x).max_pool2d(2)
    want = x.reshape(1, 8, 16, 2, 32, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(pooled.numpy(), want)


def test_vector_float_max_min_against_a_constant_take_one_compare_and_match_numpy_bit_for_bit() -> None:
    """Against a constant bound (a clip's) MAX and MIN are one compare and a select (a min/max helper against a
    bound other than zero, where the language has them), with numpy's lanes exactly: NaN propagates and a zero of
    either sign is the one numpy returns."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, 64), dtype=np.float32) * 4
    a.flat[::5], a.flat[1::7], a.flat[2::11], a.flat[3::13] = -0.0, 0.0, np.nan, np.inf
    a.flat[4::17] = -np.inf
    for bound in (0.0, -0.0, 1.5, -2.0):
        for fn, ref in ((Tensor.maximum, np.maximum), (Tensor.minimum, np.minimum)):
            out = fn(Tensor(a), bound)
            src = _source(out)
            helper = bool(CPU_LANGUAGE.vector_minmax) and bound != 0
            assert ("dp_m" in src if helper else "<=" in src) and "!=" not in src and "[0]" not in src
            want = ref(a, np.float32(bound))
            np.testing.assert_array_equal(out.numpy().view(np.int32), want.view(np.int32))
    clipped = Tensor(a).clip(0, 3)
    np.testing.assert_array_equal(clipped.numpy().view(np.int32),
                                  np.minimum(np.maximum(a, np.float32(0)), np.float32(3)).view(np.int32))


def test_a_load_at_a_constant_lane_stride_reads_from_one_scalar_base() -> None:
    """A transposing copy (channels-last from planes) gathers its lanes a plane apart: from one scalar pointer at
    constant offsets, not from a vector of addresses taken apart lane by lane."""
    x = _rand(16, 4, 12)
    t = Tensor(x).permute(1, 2, 0).contiguous()  # (4, 12, 16): each row of 16 reads one element of each plane
    src = _source(t)
    assert "+48)" in src and "[0]" not in src  # lane 1 is 4 * 12 elements past lane 0
    np.testing.assert_array_equal(t.numpy(), x.transpose(1, 2, 0))


def test_a_border_constant_over_contiguous_lanes_is_one_vector_store() -> None:
    """Regression: a channels-last pad stored its zero border lane by lane (the value depends on no lane, so the
    store was not taken for a vector one): 16 scalar stores per vector, and 1.5x the compile time of the kernel."""
    x = _rand(1, 7, 7, 16 * N)
    t = Tensor(x).pad(((0, 0), (1, 1), (1, 1), (0, 0))).contiguous()  # NHWC, border rows and columns all zero
    src = _source(t)
    assert "= 0.0f;" not in src and "[0]" not in src
    np.testing.assert_array_equal(t.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))))


def test_a_row_no_load_or_store_walks_contiguously_stays_scalar() -> None:
    """Regression: an NCHW pad of a 7x7 map has its 9x9 positions unrolled (jit/codegen/opt/select.py), which left
    the channels innermost: vectorized, every lane was loaded and stored on its own 49 and 81 floats apart (1,296
    scalar stores per channel block; resnet18's kernel took 1.5 s to compile and twice the time to run)."""
    x = _rand(1, 32 * N, 7, 7)
    t = Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
    src = _source(t)
    assert "lane" not in src and "memcpy" not in src
    np.testing.assert_array_equal(t.numpy(), np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))))


def test_channel_vectors_into_planes_are_scattered_where_the_language_has_a_scatter() -> None:
    """A 1x1 conv over a 7x7 map tiles 16-lane channel vectors, each stored into 16 NCHW planes 49 floats apart:
    one call of the scatter helper per vector on a 16-lane (AVX-512) host, lane by lane elsewhere."""
    x, w, b = _rand(1, 64, 7, 7), _rand(64, 64, 1, 1, seed=1) * 0.1, _rand(64, seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b)).relu()
    src = _source(out)
    scattered = N == 16
    assert ("dp_scatter_float32x16(data0, " in src) == scattered and ("*(data0+" in src) != scattered
    np.testing.assert_allclose(out.numpy(), np.maximum(_conv_reference(x, w, b, 0), 0), rtol=1e-4, atol=1e-4)


def test_rows_addressed_by_data_take_at_most_eight_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The modeld warp samples the frame at pixels computed from the transform: its rows gather every lane's byte
    on its own, and on a 16-lane target they stay 8 lanes wide (moving each index out of a wider vector costs
    more than the wider arithmetic saves). The sampled frame is the same bytes."""
    g = nv12_geometry(1344, 760)
    frame = np.random.default_rng(3).integers(0, 256, g.size, dtype=np.uint8)
    tfm = np.array([[1.02, 0.01, 100.0], [-0.01, 1.0, 50.0], [0.0, 0.0, 1.0]], np.float32)

    def warp() -> tuple[list[str], np.ndarray]:
        clear_compiled_kernels()
        cap = capture(lambda frame, tfm: {"img": model_frame(frame, tfm, g)},
                      {"frame": np.zeros(g.size, np.uint8), "tfm": np.eye(3, dtype=np.float32)}, target="CPU")
        return [k.source for k in cap.cmdbuf.kernels], cap({"frame": frame, "tfm": tfm})["img"]

    want = warp()[1]
    monkeypatch.setattr(Device["CPU"], "language", replace(Device["CPU"].language, vector_width=16))
    sources, got = warp()
    gathers = [s for s in sources if "dp_uint8x" in s and "*(data" in s]
    assert gathers and all("dp_uint8x8 " in s and "x16 " not in s for s in gathers)
    np.testing.assert_array_equal(got, want)
    clear_compiled_kernels()


def test_an_address_computed_from_a_load_or_a_float_is_addressed_by_data() -> None:
    i32 = dtypes.int32
    i = UOp(Ops.RANGE, i32, (UOp.const(i32, 64),), (0, "global"))
    g = UOp(Ops.DEFINE_GLOBAL, PtrDType(i32, 64), (), 1)
    loaded = UOp(Ops.LOAD, i32, (UOp(Ops.INDEX, g.dtype, (g, i)),))
    rounded = (i.cast(dtypes.float32) * 1.5).cast(i32)
    assert not addressed_by_data(i * 2 + 1)
    assert addressed_by_data(loaded + 1) and addressed_by_data(rounded)
