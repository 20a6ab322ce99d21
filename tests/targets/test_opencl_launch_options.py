"""OpenCL kernel options: work-group size choices and checks, tuned launches in captures, honest DEBUG=2 counts."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest

from jit import Context, Ops, Tensor, capture, graph_rewrite
from jit.codegen.opt import target_peel_dims
from jit.codegen.opt.hints import UNROLL_HINT_TRIPS
from jit.codegen.opt.options import OptOptions
from jit.codegen.opt.search import local_size_choices, use_tuning
from jit.codegen.opt.tuning import TuningEntry, TuningTable, device_fingerprint, kernel_key
from jit.codegen.passes.cast_const import pm_cast_const
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.pipeline import commit_dtypes
from jit.codegen.stats import shared_input
from jit.realize import clear_compiled_kernels, compile_uops
from jit.schedule.kernels import create_schedule
from targets.opencl import GPU_OPTS, HOST_L2, is_store_tile, opencl_vector_width
from targets.opencl_local_size import sharing_local_size, valid_local_size
from targets.registry import Device

RNG = np.random.default_rng(3)
X = RNG.standard_normal((1, 4, 24, 32), dtype=np.float32)  # many tiles, 8- or 16-lane ones
W = RNG.standard_normal((8, 4, 3, 3), dtype=np.float32)


def _conv() -> Tensor:
    return Tensor(X, device="OPENCL").conv2d(Tensor(W, device="OPENCL"), padding=1).relu()


def _table_for(out: Tensor, opts: OptOptions) -> TuningTable:
    kernels, _ = create_schedule([out.uop], "OPENCL")
    sink = graph_rewrite(graph_rewrite(commit_dtypes(kernels[-1].ast), pm_cast_const), pm_symbolic)
    key, dev = kernel_key(sink), device_fingerprint(Device["OPENCL"])
    return TuningTable({(key, "OPENCL", dev): TuningEntry(key, "OPENCL", dev, opts)})


def test_local_size_choices_divide_the_launch_within_limits() -> None:
    choices = local_size_choices((12, 32, 4), 64, (64, 64, 2))
    assert (1, 1, 1) in choices and len(choices) == len(set(choices)) > 3
    for local in choices:
        assert all(g % lo == 0 for g, lo in zip((12, 32, 4), local, strict=True))
        assert np.prod(local) <= 64 and local[2] <= 2


@pytest.mark.parametrize(("local", "ok"), [((4, 2), True), ((3, 2), False), ((4,), False), ((16, 8), False),
                                           ((8, 1), True), ((0, 1), False), ((1, 4), False)])
def test_valid_local_size_checks_division_dims_and_limits(local: tuple[int, ...], ok: bool) -> None:
    # global (16, 8); at most 64 items per group, at most (16, 2) per dimension
    assert (valid_local_size(local, (16, 8), 64, (16, 2)) == local) is ok


def test_counted_flops_do_not_depend_on_tiling_or_work_group_size() -> None:
    with Context(NOOPT=1):
        plain = compile_uops([_conv().uop], "OPENCL")[-1].stats
    default = compile_uops([_conv().uop], "OPENCL")[-1].stats
    stats = {}
    base = Device["OPENCL"].default_opts
    tried = (dataclasses.replace(base, inner_upcasts=(4,), reuse_upcasts=(2,), min_outputs=1),
             dataclasses.replace(base, local_size=(1, 2, 2)), dataclasses.replace(base, local_size=(1, 1, 1)))
    for opts in tried:
        with use_tuning(_table_for(_conv(), opts)):
            stats[opts] = compile_uops([_conv().uop], "OPENCL")[-1].stats
    flops = 2 * 8 * 24 * 32 * 4 * 9  # one multiply and one add per conv term
    assert plain.flops >= flops and {s.flops for s in stats.values()} == {default.flops} == {plain.flops}
    # bytes count loads as executed: a tile reads a shared operand once, never more often than without tiling
    assert all(s.bytes <= plain.bytes for s in stats.values())
    by_local = [stats[tried[1]], stats[tried[2]]]
    assert by_local[0] == by_local[1] == default  # the work-group size changes no loop: same counts


def test_a_tuned_work_group_size_is_recorded_in_the_capture_and_replays_the_same() -> None:
    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": x.conv2d(Tensor(W, device="OPENCL"), padding=1).relu()}

    x = {"x": X}
    plain = capture(model, x, target="OPENCL")
    launch = plain.cmdbuf.dispatches[-1]
    ones = (1,) * len(launch.global_size)  # divides any launch; the target's own choice groups more items
    assert launch.local_size != ones
    with use_tuning(_table_for(_conv(), OptOptions(local_size=ones))) as session:
        tuned = capture(model, x, target="OPENCL")
    assert session.hits == 1
    assert tuned.cmdbuf.dispatches[-1].local_size == ones
    np.testing.assert_array_equal(tuned(x)["y"], plain(x)["y"])  # a work-group size changes no arithmetic


@pytest.mark.parametrize(("preferred", "lanes"), [(1, 4), (4, 4), (8, 8), (16, 16), (32, 16), (6, 4)])
def test_vector_width_follows_the_devices_preferred_float_width(preferred: int, lanes: int) -> None:
    info = dataclasses.replace(Device["OPENCL"].info, preferred_vector_width_float=preferred)
    assert opencl_vector_width(info) == lanes


def test_opencl_tile_rows_are_vector_loads_and_match_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a device of 8 float lanes: where the device prefers 16 (PoCL on AVX-512) the 16-wide tile row is one
    # vector holding the padded first column, gathered lane by lane (no interior vector to load)
    target = Device["OPENCL"]
    monkeypatch.setattr(target, "language", dataclasses.replace(target.language, vector_width=8))
    clear_compiled_kernels()
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 12, 32, 64), dtype=np.float32), rng.standard_normal((16, 12, 3, 3), np.float32)
    out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"), stride=2, padding=1)
    src = compile_uops([out.uop], "OPENCL")[-1].program.source
    # stride-2 rows: two loads and their even / odd lanes (swizzles: PoCL's shuffle2 ran lane by lane)
    assert ("vload8(" in src or "({ float8 _v; __builtin_memcpy(&_v, " in src) and ".s2, " in src
    assert "shuffle2(" not in src
    assert "{ float8 _v = " in src or "vstore8(" in src  # a CPU device's vector loads and stores copy whole vectors
    want = Tensor(x).conv2d(Tensor(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    clear_compiled_kernels()


def test_opencl_reduce_loops_read_scalars_through_pointers_hoisted_out_of_the_loop() -> None:
    # a tile's broadcast loads: row-invariant base pointers declared before the reduce loop, only the loop's own
    # index added inside (PoCL's LLVM otherwise packs the four address sums into vector adds and extracts)
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 128), dtype=np.float32)
    out = Tensor(a, device="OPENCL") @ Tensor(b, device="OPENCL")
    src = compile_uops([out.uop], "OPENCL")[-1].program.source
    head, loop = src.split("for (", 1)
    pointers = re.findall(r"__global float\* (ptr\d+) = data\d\+", head)
    assert pointers and all(f"*({p}+(ridx" in loop for p in pointers)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert "ptr" not in compile_uops([(Tensor(a) @ Tensor(b)).uop], "CPU")[-1].program.source  # GCC needs none


def test_cpu_opencl_parks_the_first_phase_of_a_strided_conv_without_changing_a_bit() -> None:
    # a stride-2 conv sums two phase reduces: the first one's vector accumulators wait in a volatile private array
    # while the second loop runs (PoCL's LLVM spills them inside that loop otherwise)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((1, 16, 32, 64), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), np.float32)
    target = Device["OPENCL"]
    assert target.default_opts.park_accumulators  # PoCL: a CPU device

    def conv() -> tuple[str, np.ndarray]:
        clear_compiled_kernels()  # the same kernel graph, compiled again with the target's defaults as they are now
        out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"), stride=2, padding=1).relu()
        return compile_uops([out.uop], "OPENCL")[-1].program.source, out.numpy()

    src, parked = conv()
    n = target.language.vector_width
    slots = re.findall(rf"park_float{n}\[(\d+)\] = acc", src)
    assert f"volatile float{n} park_float{n}[{len(slots)}];" in src and slots
    assert all(f"park_float{n}[{k}]+acc" in src for k in slots)  # each read back once, when the sum is formed
    defaults = target.default_opts
    target.default_opts = dataclasses.replace(defaults, park_accumulators=False)
    try:
        src_plain, plain = conv()
    finally:
        target.default_opts = defaults
        clear_compiled_kernels()
    assert "park_" not in src_plain
    np.testing.assert_array_equal(parked, plain)
    want = np.maximum(Tensor(x).conv2d(Tensor(w), stride=2, padding=1).numpy(), 0)
    np.testing.assert_allclose(parked, want, rtol=1e-4, atol=1e-4)


def test_gpu_defaults_ask_to_unroll_short_reduce_loops_only_and_cpu_devices_never() -> None:
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((1, 16, 32, 64), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), np.float32)
    target = Device["OPENCL"]

    def conv_source() -> tuple[str, np.ndarray]:
        clear_compiled_kernels()  # the same kernel graph, compiled again with the target's defaults as they are now
        with Context(WINO="0"):  # the direct conv's loops (Winograd takes 16 channels on halved FMA units)
            out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"), padding=1)
            return compile_uops([out.uop], "OPENCL")[-1].program.source, out.numpy()

    assert not target.default_opts.unroll_hints  # PoCL: a CPU device compiles hinted loops 2.5-3.5x as long
    plain, plain_out = conv_source()
    assert "#pragma unroll" not in plain
    defaults = target.default_opts
    target.default_opts = dataclasses.replace(defaults, unroll_hints=GPU_OPTS.unroll_hints)
    try:
        src, out = conv_source()
    finally:
        target.default_opts = defaults
        clear_compiled_kernels()
    loops = re.findall(r"(#pragma unroll\s*)?for \(int ridx\d+ = 0; ridx\d+ < (\d+);", src)
    assert loops and all(bool(hint) == (int(trips) <= UNROLL_HINT_TRIPS) for hint, trips in loops)
    assert any(hint for hint, _ in loops)  # the kernel rows (3) at least
    on_cpu = Tensor(x).conv2d(Tensor(w), padding=1)
    assert "#pragma unroll" not in compile_uops([on_cpu.uop], "CPU")[-1].program.source  # GCC unrolls them itself
    np.testing.assert_allclose(out, on_cpu.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out, plain_out)


def test_cpu_opencl_peels_padded_rows_into_vector_loops_inside_a_work_item() -> None:
    # on a CPU device a pad copy's rows are loops of vector copies, one work-item per row (not per element)
    x = np.random.default_rng(10).standard_normal((8, 16, 64), dtype=np.float32)
    out = Tensor(x, device="OPENCL").pad(((0, 0), (1, 1), (1, 1)))
    ck = compile_uops([out.uop], "OPENCL")[-1]
    n = Device["OPENCL"].language.vector_width
    loads = (f"vload{n}(", f"({{ float{n} _v; __builtin_memcpy(&_v, ")  # a GPU's vector load, a CPU device's
    assert any(load in ck.program.source for load in loads) and "for (" in ck.program.source
    assert sorted(ck.program.global_size) == [8, 18]  # one work-item per row of 66
    np.testing.assert_array_equal(out.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1))))
    gpu_like = SimpleNamespace(language=dataclasses.replace(Device["OPENCL"].language, peel_launched_rows=False))
    assert (target_peel_dims(Device["OPENCL"]), target_peel_dims(gpu_like)) == (0, 3)


def test_opencl_elementwise_rows_convert_and_wrap_as_vectors() -> None:
    n = Device["OPENCL"].language.vector_width
    frames = np.random.default_rng(6).integers(0, 256, (1, 6, 32, 64), dtype=np.uint8)
    out = Tensor(frames, device="OPENCL").cast("float32") / 128 - 1
    assert f"convert_float{n}(" in compile_uops([out.uop], "OPENCL")[-1].program.source
    np.testing.assert_array_equal(out.numpy(), frames.astype(np.float32) / 128 - 1)
    a = np.random.default_rng(7).integers(-2**31, 2**31, (8, 64), dtype=np.int64).astype(np.int32)
    wrapped = (Tensor(a, device="OPENCL") * 70001 - 3).maximum(-9)
    assert f"as_uint{n}(" in compile_uops([wrapped.uop], "OPENCL")[-1].program.source
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(wrapped.numpy(), np.maximum(a * np.int32(70001) - 3, -9))


def test_a_sharing_work_group_spans_only_the_dimensions_whose_items_read_the_same_input() -> None:
    # a 1x1 conv's launch (x tiles, rows, channel blocks): the items of one row read the same activation row
    assert sharing_local_size((1, 32, 4), (False, False, True), 256, (256, 256, 256)) == (1, 1, 4)
    assert sharing_local_size((2, 16, 84), (False, False, True), 8, (8, 8, 8)) == (1, 1, 7)  # within the limits
    # as many work-groups as asked for: the group shrinks until the launch leaves them
    assert sharing_local_size((1, 2, 64), (False, False, True), 256, (256, 256, 256), min_groups=8) == (1, 1, 16)
    assert sharing_local_size((1, 32, 4), (False, False, False), 256, (256, 256, 256)) is None  # nothing shared
    assert sharing_local_size((1, 1, 4), (False, False, True), 256, (256, 256, 256), min_groups=8) is None
    assert sharing_local_size((7,), (), 256, (256,)) is None  # no ranges: a launch of one dimension


def test_the_largest_input_per_item_decides_which_ranges_share_it() -> None:
    # 144 -> 96 channels over 32 x 64: each row's activation (144 x 64 floats) outweighs its channel block's weights
    x = RNG.standard_normal((1, 144, 32, 64), dtype=np.float32)
    w = RNG.standard_normal((96, 144, 1, 1), dtype=np.float32)
    out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"))
    ck = compile_uops([out.uop], "OPENCL")[-1]
    local = ck.program.local_size  # the channel blocks (launch dimension 2) of one row a group on a CPU device
    assert (local[:2] == (1, 1) and local[2] > 1) is Device["OPENCL"].cpu_device
    np.testing.assert_allclose(out.numpy(), np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), rtol=1e-4, atol=1e-3)


def test_shared_input_is_read_the_same_along_a_convs_channels() -> None:
    x = RNG.standard_normal((1, 144, 32, 64), dtype=np.float32)
    w = RNG.standard_normal((24, 144, 1, 1), dtype=np.float32)
    kernels, _ = create_schedule([Tensor(x).conv2d(Tensor(w)).uop], "CPU")
    sink = commit_dtypes(kernels[-1].ast)
    ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    assert [int(r.src[0].arg) for r in ranges] == [24, 32, 64]  # channels, rows, columns
    assert shared_input(sink, ranges).along == (True, False, False)
    assert shared_input(sink, ranges[:1]).along == (True,)


def test_shared_input_reuse_counts_bytes_read_from_the_largest_input_per_byte_stored() -> None:
    x = RNG.standard_normal((1, 144, 32, 64), dtype=np.float32)
    w = RNG.standard_normal((24, 144, 1, 1), dtype=np.float32)
    for out, want in ((Tensor(x).conv2d(Tensor(w)), 144.0), (Tensor(x) + 1, 1.0)):
        sink = commit_dtypes(create_schedule([out.uop], "CPU")[0][-1].ast)
        ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "global"),
                        key=lambda u: u.arg[0])
        assert shared_input(sink, ranges).reuse == want  # 144 floats loaded per float stored; one per one


def test_a_conv_reading_few_channels_per_channel_stored_launches_groups_along_its_rows() -> None:
    # 16 -> 96 channels: each item reads 16 channels per block of 8 it stores, under MIN_SHARED_REUSE, and the output
    # outgrows the host's L2: a group along the channel blocks would write 96 rows apart to save re-reading 16 channels
    rows = (HOST_L2.size // (96 * 64 * 4) // 8 + 2) * 8
    x = RNG.standard_normal((1, 16, rows, 64), dtype=np.float32)
    w = RNG.standard_normal((96, 16, 1, 1), dtype=np.float32)
    out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"))
    (ck,) = compile_uops([out.uop], "OPENCL")
    local = ck.program.local_size  # launch dimensions: column tiles, rows, channel blocks
    assert (local[2] == 1 and local[1] > 1) is Device["OPENCL"].cpu_device
    np.testing.assert_allclose(out.numpy(), np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), rtol=1e-4, atol=1e-3)


def test_weights_outgrowing_the_l2_get_fewer_groups_each_reading_its_columns_once() -> None:
    # 25 tokens times weights larger than the host's L2 (a transformer's feed-forward product): too few groups
    # share a column block to leave the large-kernel count, so each of an even share of groups runs all the tokens
    # of one block, instead of every group streaming its block from memory again
    units = Device["OPENCL"].info.max_compute_units
    cols = 128 * units  # column blocks of at most 64: at least two per compute unit
    for k, outgrows in ((64, False), ((HOST_L2.size // (cols * 4) // 64 + 2) * 64, True)):
        x = RNG.standard_normal((25, k), dtype=np.float32)
        w = RNG.standard_normal((k, cols), dtype=np.float32)
        out = Tensor(x, device="OPENCL") @ Tensor(w, device="OPENCL")
        ck = compile_uops([out.uop], "OPENCL")[-1]  # after the weights' copy into column blocks
        glob, local = ck.program.global_size, ck.program.local_size
        token_groups = len(glob) == 2 and local[0] == 1 and local[1] == glob[1] > 1
        assert token_groups is (outgrows and Device["OPENCL"].cpu_device), (k, glob, local)
        assert not token_groups or glob[0] % units == 0
        np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-4, atol=1e-2)


def test_a_winograd_transform_launches_one_tile_per_work_group_on_a_cpu_device() -> None:
    x = RNG.standard_normal((1, 32, 14, 14), dtype=np.float32)
    w = RNG.standard_normal((32, 32, 3, 3), dtype=np.float32)
    with Context(WINO="4"):
        out = Tensor(x, device="OPENCL").conv2d(Tensor(w, device="OPENCL"), padding=1)
        compiled = compile_uops([out.uop], "OPENCL")
        got = out.numpy()
    # the input transform's kernel: no loop, a tile of 36 values stored per work-item
    stores = {ck.program.name: ck.program.source.count("data0+") for ck in compiled}
    tile = next(ck.program for ck in compiled if " for (" not in ck.program.source and stores[ck.program.name] >= 16)
    cpu_device = Device["OPENCL"].cpu_device
    assert all(n == 1 for n in tile.local_size) is cpu_device and tile.global_size != (1,) * len(tile.global_size)
    (plain,) = compile_uops([(Tensor(x, device="OPENCL") + 1).uop], "OPENCL")  # one store per work-item
    assert max(plain.program.local_size) > 1
    want = np.einsum("oikl,nihwkl->nohw", w, np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert not is_store_tile(commit_dtypes(create_schedule([(Tensor(x) + 1).uop], "CPU")[0][-1].ast))
