"""The OpenCL target on the machine's OpenCL device (PoCL in CI, installed by the README's test command).

These tests never skip: a machine without an OpenCL device fails them, on purpose.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import targets.cl_binding as cllib
import targets.opencl as cl
import targets.opencl_local_size as clsize
import targets.opencl_runtime as clrt
from jit import Context, Tensor, dtypes
from jit.common.errors import CompileError
from jit.realize import compile_uops
from targets.base import Program
from targets.registry import Device, DeviceError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.opencl


@pytest.fixture(scope="module")
def target() -> cl.OpenCLTarget:
    t = Device["OPENCL"]
    assert isinstance(t, cl.OpenCLTarget)
    return t


def both(fn, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``fn`` over the same host arrays as Tensors on CPU and on OPENCL."""
    cpu = fn(*[Tensor(a, device="CPU") for a in arrays]).numpy()
    ocl = fn(*[Tensor(a, device="OPENCL") for a in arrays]).numpy()
    return cpu, ocl


# --- discovery and declared dtypes -------------------------------------------------------------------------

def test_device_discovery(target: cl.OpenCLTarget) -> None:
    devices = cllib.list_devices()
    assert devices and devices[0][2].name == target.info.name
    assert target.info.max_work_group_size >= 1 and len(target.info.max_work_item_sizes) >= 1
    assert target.limits.max_local_size == target.info.max_work_group_size
    assert "OPENCL" in repr(target)


def test_declared_dtypes_follow_extensions(target: cl.OpenCLTarget) -> None:
    ext, supported = target.info.extensions, target.supported_dtypes()
    assert (dtypes.float16 in supported) == ("cl_khr_fp16" in ext)
    assert (dtypes.float64 in supported) == ("cl_khr_fp64" in ext)
    assert dtypes.bfloat16 not in supported and dtypes.float32 in supported and dtypes.bool in supported
    if "Portable Computing Language" in target.info.platform:  # PoCL on a CPU: fp64 yes, fp16 no
        assert dtypes.float64 in supported and dtypes.float16 not in supported
        assert "cl_khr_command_buffer" in ext


def test_fine_grained_svm_is_reported_only_where_the_loader_and_device_offer_it(monkeypatch: pytest.MonkeyPatch,
                                                                                target: cl.OpenCLTarget) -> None:
    if "Portable Computing Language" in target.info.platform:  # PoCL 3 on a CPU: OpenCL 3.0, fine-grained buffers
        assert target.info.svm_fine_grain_buffer
    ffi, lib = cllib.libopencl()

    class LoaderWithoutSvm:  # an ICD loader older than OpenCL 2.0: no clSVMAlloc to resolve
        def __getattr__(self, name: str) -> object:
            if name.startswith("clSVM"):
                raise AttributeError(name)
            return getattr(lib, name)

    monkeypatch.setattr(cllib, "libopencl", lambda: (ffi, LoaderWithoutSvm()))
    assert [d[2].svm_fine_grain_buffer for d in cllib.list_devices()] == [False] * len(cllib.list_devices())


def test_platform_selection(monkeypatch: pytest.MonkeyPatch, target: cl.OpenCLTarget) -> None:
    monkeypatch.setenv(cllib.PLATFORM_ENV, target.info.platform[:8].lower())
    assert cl.OpenCLTarget("OPENCL").info.name == target.info.name
    monkeypatch.setenv(cllib.PLATFORM_ENV, "no such platform")
    with pytest.raises(cllib.OpenCLDeviceError, match="no such platform"):
        cl.OpenCLTarget("OPENCL")


def test_missing_device_is_typed() -> None:
    with pytest.raises(DeviceError, match=r"OPENCL:7.*index below") as e:
        Device["OPENCL:7"]
    assert isinstance(e.value, cllib.OpenCLError) and e.value.code_name == "CL_DEVICE_NOT_FOUND"
    with pytest.raises(DeviceError):
        Tensor([1.0], device="opencl:7")


# --- Tensor programs match the CPU target ------------------------------------------------------------------

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("case", ["add_mul_exp", "where_cmp", "int_ops", "int64", "float64", "bool", "bitcast"])
def test_elementwise(case: str) -> None:
    a = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    b = RNG.standard_normal((5, 7)).astype(np.float32)
    i = RNG.integers(-100, 100, (6, 9)).astype(np.int32)
    j = RNG.integers(1, 9, (6, 9)).astype(np.int32)
    fns = {
        "add_mul_exp": (lambda x, y: (x * y + 1.5).exp() - x.sqrt().abs(), a, b),
        "where_cmp": (lambda x, y: (x < y).where(x.sin(), y.cos().maximum(x)), a, b),
        "int_ops": (lambda x, y: (x // y) + (x % y) * 3 - (x << 2) ^ y, i, j),
        "int64": (lambda x, y: x.cast(dtypes.int64) * (2**33) + y, i, j),
        "float64": (lambda x, y: (x.cast(dtypes.float64) * 1e-300).log() + y, a, b.astype(np.float64)),
        "bool": (lambda x, y: (x > 0) & (y < 0.5) | (x == y), a, b),
        "bitcast": (lambda x, y: x.bitcast(dtypes.int32) + y.bitcast(dtypes.int32), a, b),
    }
    fn, *args = fns[case]
    cpu, ocl = both(fn, *args)
    assert cpu.dtype == ocl.dtype
    np.testing.assert_allclose(ocl, cpu, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reduce(axis: int | tuple[int, ...] | None) -> None:
    a = RNG.standard_normal((4, 33, 10)).astype(np.float32)
    for fn in (lambda x: x.sum(axis), lambda x: x.max(axis), lambda x: (x * 2).exp().mean(axis)):
        cpu, ocl = both(fn, a)
        np.testing.assert_allclose(ocl, cpu, rtol=1e-5, atol=1e-5)


def test_matmul() -> None:
    a = RNG.standard_normal((37, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 29)).astype(np.float32)
    cpu, ocl = both(lambda x, y: x @ y, a, b)
    np.testing.assert_allclose(ocl, cpu, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ocl, a @ b, rtol=1e-4, atol=1e-4)


def test_conv2d() -> None:
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal((8,)).astype(np.float32)
    cpu, ocl = both(lambda x, w, b: x.conv2d(w, b, stride=2, padding=1).relu().max_pool2d(2), x, w, bias)
    assert ocl.shape == cpu.shape == (2, 8, 3, 2)
    np.testing.assert_allclose(ocl, cpu, rtol=1e-5, atol=1e-5)


def test_float16_is_emulated_on_a_device_without_fp16(target: cl.OpenCLTarget) -> None:
    a = np.array([1.5, -2.25, 65504, 1e-7, 3.14159], dtype=np.float16)
    cpu, ocl = both(lambda x: x * 2 + 1, a)
    assert ocl.dtype == np.float16
    np.testing.assert_array_equal(ocl.view(np.uint16), cpu.view(np.uint16))
    if dtypes.float16 not in target.supported_dtypes():
        t = Tensor(a, device="OPENCL") * 2
        (ck,) = compile_uops([t.uop], "OPENCL")
        assert dtypes.float16 in ck.dtype_policy.emulated_dtypes
        assert "half" not in ck.program.source


# --- rendering, launch geometry, timing ---------------------------------------------------------------------

def test_rendered_source_and_global_size(target: cl.OpenCLTarget) -> None:
    x = Tensor(np.zeros((9, 40, 50), np.float32), device="OPENCL")
    (ck,) = compile_uops([(x + 1).exp().uop], "OPENCL")
    src = ck.program.source
    assert "__kernel void" in src and "__global float*" in src and "get_global_id(0)" in src
    assert "expf" not in src
    # vectors loaded and stored whole: a CPU device's vstoreN is library code that stores a float16 in three pieces,
    # and its compiler took far longer over vloadN's pieces
    cpu_device = not target.info.device_type & cllib.CL_DEVICE_TYPE_GPU
    assert ("__builtin_memcpy" in src) == cpu_device and ("vstore" in src) == (not cpu_device)
    assert ("vload" in src) == (not cpu_device)
    # an elementwise kernel's contiguous (40, 50) launch as one row of 2000, in work-items of whole vectors
    rows, planes = ck.program.global_size
    assert planes == 9 and 2000 % rows == 0 and rows < 2000
    local = ck.program.local_size
    assert local is not None and all(g % lo == 0 for g, lo in zip(ck.program.global_size, local, strict=True))
    assert np.prod(local) <= min(target.info.max_work_group_size, ck.program.handle.max_group)


def test_math_functions_take_the_whole_vector(target: cl.OpenCLTarget) -> None:
    # regression: each float8 lane went through its own scalar library call (rint: most of PoCL's modeld warp)
    x = RNG.standard_normal((64, 256)).astype(np.float32) * 4
    out = Tensor(x, device="OPENCL").exp() * Tensor(x, device="OPENCL").sqrt().abs()
    (ck,) = compile_uops([out.uop], "OPENCL")
    src = ck.program.source
    assert re.search(r"float(8|16) \w+ = (exp|sqrt)\(", src) and not re.search(r"(exp|sqrt)\([^()]*\.s0\)", src)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(out.numpy(), np.exp(x) * np.abs(np.sqrt(x)), rtol=1e-6)


def test_a_vector_of_one_value_is_a_one_value_literal(target: cl.OpenCLTarget) -> None:
    """OpenCL's ``(floatN)(v)`` puts v in every lane: a SiLU's clamp constants were 16-value literals, which PoCL
    parsed and the index-range checks walked 16 times over (efficientnet_b2_op's capture: 0.25 s of 4.8). The C
    target keeps every lane (GCC's compound literal zeroes the lanes it is not given)."""
    x = RNG.standard_normal((64, 256)).astype(np.float32) * 30
    silu = Tensor(x, device="OPENCL").silu()
    (ck,) = compile_uops([silu.uop], "OPENCL")
    src = ck.program.source
    repeated = r"89\.0f\)?, \(?-?89\.0f"
    assert re.search(r"\(\(float(8|16)\)\(\(?-?89\.0f\)?\)\)", src) and not re.search(repeated, src), src
    np.testing.assert_allclose(silu.numpy(), x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5, atol=1e-6)
    (c_kernel,) = compile_uops([Tensor(x).silu().uop], "CPU")
    assert re.search(repeated, c_kernel.program.source)


@pytest.mark.parametrize(("start", "words"), [(0, True), (4, True), (1, False)])
def test_byte_vectors_move_as_words_where_aligned(target: cl.OpenCLTarget, start: int, words: bool) -> None:
    # regression: PoCL loads a uchar16 vload16 byte by byte; a copy at a multiple of 4 bytes goes as uint words,
    # one at an odd offset may not (vload4 of uint needs 4-byte alignment) and stays a vloadN of bytes
    x = RNG.integers(0, 256, (12, 128, 260), dtype=np.uint8)
    out = Tensor(x, device="OPENCL")[:, :, start:start + 256].contiguous()
    (ck,) = compile_uops([out.uop], "OPENCL")
    src = ck.program.source
    assert ("(__global const uint*)" in src) is words and "(__global uint*)" in src, src
    np.testing.assert_array_equal(out.numpy(), x[:, :, start:start + 256])


def test_choose_local_size_respects_limits() -> None:
    assert clsize.choose_local_size((1024, 8), 4096, (4096, 4096)) == (256, 1)
    assert clsize.choose_local_size((50, 40, 9), 1024, (1024, 1024, 64)) == (50, 5, 1)
    assert clsize.choose_local_size((7, 3), 16, (4, 16)) == (1, 3)  # 7 is prime and above the per-dim limit
    assert clsize.choose_local_size((1000,), 64, (64,), preferred=256) == (50,)
    assert clsize.choose_local_size((12, 12), 8, (8, 8)) == (6, 1)


def test_choose_local_size_leaves_enough_work_groups_for_the_compute_units() -> None:
    """Regression: a register-tiled conv launched (2, 16, 24) items as 3 groups of 256 on 2 compute units."""
    assert clsize.choose_local_size((2, 16, 24), 1024, (1024, 1024, 1024)) == (2, 16, 8)
    local = clsize.choose_local_size((2, 16, 24), 1024, (1024, 1024, 1024), min_groups=8)
    assert local == (2, 16, 2) and 2 * 16 * 24 // np.prod(local) >= 8
    assert clsize.choose_local_size((4,), 1024, (1024,), min_groups=8) == (1,)  # fewer items than groups asked for
    assert Device["OPENCL"].min_groups == clsize.GROUPS_PER_COMPUTE_UNIT * Device["OPENCL"].info.max_compute_units


def test_a_cpu_devices_large_kernels_are_split_into_more_work_groups(target: cl.OpenCLTarget) -> None:
    """A kernel of LARGE_KERNEL_FLOPS or more on a CPU device asks for LARGE_KERNEL_GROUPS_PER_UNIT groups per
    compute unit (PoCL's threads share them out more evenly), recorded in its metadata for the runtime that
    compiles it; a small kernel, and any kernel on a GPU, keeps GROUPS_PER_COMPUTE_UNIT."""
    rng = np.random.default_rng(4)
    cpu_device = not target.info.device_type & cllib.CL_DEVICE_TYPE_GPU
    units = target.info.max_compute_units
    for n, large in ((96, False), (384, True)):  # n^3 multiply-adds: 1.8 and 113 MFLOP
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        ck = compile_uops([(Tensor(a, device="OPENCL") @ Tensor(b, device="OPENCL")).uop], "OPENCL")[-1]
        want = (cl.LARGE_KERNEL_GROUPS_PER_UNIT if large and cpu_device else clsize.GROUPS_PER_COMPUTE_UNIT) * units
        assert ck.program.meta.get("min_groups", target.min_groups) == want
        items, group = int(np.prod(ck.program.global_size)), int(np.prod(ck.program.local_size))
        assert items // group >= min(want, items)  # as many work-groups as asked for, where there are items for them
        np.testing.assert_allclose(Tensor(a, device="OPENCL").matmul(Tensor(b, device="OPENCL")).numpy(), a @ b,
                                   rtol=1e-4, atol=1e-3)


def test_nolocals_and_timing(target: cl.OpenCLTarget) -> None:
    a = RNG.standard_normal((64, 48)).astype(np.float32)
    with Context(NOLOCALS=1):
        cpu, ocl = both(lambda x: (x * 3).exp() + x, a)
    np.testing.assert_allclose(ocl, cpu, rtol=1e-6, atol=1e-6)
    prog, bufs = _simple_kernel(target, 128)
    elapsed = target.launch(prog, bufs, wait=True)
    assert isinstance(elapsed, float) and 0 <= elapsed < 10


def _simple_kernel(target: cl.OpenCLTarget, n: int, name: str = "scale") -> tuple[Program, list]:
    src = f"__kernel void {name}(__global float* a, __global const float* b) {{\n" \
          f"  int i = get_global_id(0); a[i] = b[i] * 2.0f;\n}}\n"
    prog = target.compile(name, src, {"global_size": (n,)})
    out, inp = target.allocate(4 * n), target.allocate(4 * n)
    target.copyin(inp, memoryview(np.arange(n, dtype=np.float32).view(np.uint8)))
    return prog, [out, inp]


# --- typed errors --------------------------------------------------------------------------------------------

def test_syntax_error_has_build_log(target: cl.OpenCLTarget) -> None:
    src = "__kernel void broken(__global float* a) {\n  a[0] = 1.0f +;\n}\n"
    with pytest.raises(CompileError) as e:
        target.compile("broken", src, {"global_size": (1,)})
    err = e.value
    assert isinstance(err, cllib.OpenCLBuildError) and err.code_name == "CL_BUILD_PROGRAM_FAILURE"
    assert "error" in err.build_log.lower() and err.build_log in str(err)
    assert "CL_BUILD_PROGRAM_FAILURE" in str(err)


def test_out_of_range_local_size(target: cl.OpenCLTarget) -> None:
    max_group, items = target.info.max_work_group_size, target.info.max_work_item_sizes
    l0 = min(items[0], max_group)
    l1 = max_group // l0 + 1  # l0 * l1 > max_group while each dimension stays within its own limit
    assert l1 <= items[1]
    src = "__kernel void k2(__global float* a) { a[get_global_id(1) * get_global_size(0) + get_global_id(0)] = 1; }"
    prog = target.compile("k2", src, {"global_size": (l0, l1)})
    buf = target.allocate(4 * l0 * l1)
    prog.local_size = (l0, l1)
    with pytest.raises(cllib.OpenCLError, match="CL_INVALID_WORK_GROUP_SIZE") as e:
        target.launch(prog, [buf])
    assert e.value.code == -54


# --- compile cache and object lifetimes ----------------------------------------------------------------------

@pytest.mark.parametrize("binaries", [True, False], ids=["binaries cached", "CPU device: no binaries"])
def test_compile_cache_across_processes(tmp_path: Path, binaries: bool) -> None:
    """Where the device's binaries are cached a second process builds nothing; on a CPU device (PoCL, whose
    binary fetch compiles every kernel once more) the program's source is kept instead and the second process
    builds it again (the driver's own cache answers)."""
    script = textwrap.dedent(f"""
        import numpy as np
        import targets.opencl_runtime as clrt
        from jit.frontend.tensor import Tensor
        from targets.registry import Device
        assert Device["OPENCL"].cache_binaries is False  # PoCL, a CPU device
        Device["OPENCL"].cache_binaries = {binaries}
        x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device="OPENCL")
        out = ((x * 0.731).sin() + x.sum(1, keepdim=True)).numpy()
        print(clrt.cl_builds, float(out.sum()))
    """)
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DEV", None)

    def run() -> tuple[int, str]:
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        builds, total = proc.stdout.split()
        return int(builds), total

    first, second = run(), run()
    assert first[0] >= 1 and first[1] == second[1]
    assert (second[0] == 0) is binaries
    assert bool(list(tmp_path.glob("opencl-*.bin"))) is binaries
    assert bool(list(tmp_path.glob("opencl-*.cl"))) is not binaries


def _check_batch(target: cl.OpenCLTarget, progs: list, first: int = 0) -> None:
    for i, prog in enumerate(progs, first):
        buf = target.allocate(32)
        target.launch(prog, [buf])
        out = np.empty(8, np.float32)
        target.copyout(buf, memoryview(out.view(np.uint8)))
        np.testing.assert_array_equal(out, np.full(8, i + 0.5, np.float32))


def _batch_items(n: int, first: int = 0) -> list:
    return [(f"bk{i}", f"__kernel void bk{i}(__global float* a) {{ a[get_global_id(0)] = {i}.5f; }}\n",
             {"global_size": (8,)}) for i in range(first, first + n)]


@pytest.mark.parametrize("binaries", [True, False], ids=["binaries cached", "CPU device: sources cached"])
def test_batched_build_and_cache(target: cl.OpenCLTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 binaries: bool) -> None:
    """One build for a batch; a second compile of its kernels in this process takes the program it built (no
    build); once the process forgets it, one loads the batch binary through each kernel's .ref (no build), or on a
    CPU device builds the kept batch source once (the driver's cache answers that)."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(target, "cache_binaries", binaries)
    before = target.build_count
    for _ in range(2):
        _check_batch(target, target.compile_many(_batch_items(4)))
        assert target.build_count == before + 1
    target.forget_compiled()
    _check_batch(target, target.compile_many(_batch_items(4)))
    assert target.build_count == before + 1 + (0 if binaries else 1)
    ext = "bin" if binaries else "cl"
    assert len(list(tmp_path.glob("opencl-*.ref"))) == 4 and len(list(tmp_path.glob(f"opencl-*.{ext}"))) == 1
    # kernels of that batch in a new company: built from the kept batch, the new one in a batch of its own
    progs = target.compile_many(_batch_items(1, first=2) + _batch_items(1, first=7))
    _check_batch(target, progs[:1], first=2)
    _check_batch(target, progs[1:], first=7)


def test_a_cached_batch_source_that_is_not_its_name_is_ignored(target: cl.OpenCLTarget, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept source edited on disk (its hash no longer its name) is never built: the kernels build from their
    own sources and give their own results."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(target, "cache_binaries", False)
    target.compile_many(_batch_items(3))
    (batch,) = tmp_path.glob("opencl-*.cl")
    batch.write_text(batch.read_text().replace(".5f", ".25f"))
    target.forget_compiled()  # as a new process would: the program built before is not kept
    before = target.build_count
    _check_batch(target, target.compile_many(_batch_items(3)))
    assert target.build_count == before + 1  # the kernels' own batch, not the edited file


def test_kept_programs_are_bounded_and_forgotten_with_compiled_kernels(
        target: cl.OpenCLTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most KEPT_PROGRAMS built programs are kept (the least recently used released first), and
    ``clear_compiled_kernels`` forgets them: the next compile goes to the disk cache again (a build on a CPU
    device, whose kept batch is its source)."""
    from jit.realize import clear_compiled_kernels
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(target, "cache_binaries", False)
    monkeypatch.setattr(clrt, "KEPT_PROGRAMS", 1)
    before = target.build_count
    _check_batch(target, target.compile_many(_batch_items(1, first=0)))
    _check_batch(target, target.compile_many(_batch_items(1, first=1)), first=1)
    _check_batch(target, target.compile_many(_batch_items(1, first=1)), first=1)
    assert target.build_count == before + 2  # the second batch is kept
    _check_batch(target, target.compile_many(_batch_items(1, first=0)))
    assert target.build_count == before + 3  # the first was released to keep the second
    clear_compiled_kernels()
    _check_batch(target, target.compile_many(_batch_items(1, first=0)))
    assert target.build_count == before + 4


def test_broken_kernel_in_a_batch_is_named(target: cl.OpenCLTarget) -> None:
    good = ("fine_k", "__kernel void fine_k(__global float* a) { a[0] = 2.0f; }\n", {"global_size": (1,)})
    bad = ("bad_k", "__kernel void bad_k(__global float* a) { a[0] = undefined_name; }\n", {"global_size": (1,)})
    with pytest.raises(cllib.OpenCLBuildError) as e:
        target.compile_many([good, bad])
    assert "bad_k" in e.value.source and "fine_k" not in e.value.source
    assert "undefined_name" in e.value.build_log


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_no_leak_across_10000_launches(target: cl.OpenCLTarget) -> None:
    prog, bufs = _simple_kernel(target, 256, "leak_check")
    for _ in range(200):  # warm-up: the driver's own caches, Python's allocator
        target.launch(prog, bufs, wait=False)
    target.synchronize()
    live, rss = dict(target.live), _rss_kib()
    for i in range(10_000):
        target.launch(prog, bufs, wait=i % 10 == 0)  # every 10th with an event (timing), released again
    target.synchronize()
    assert dict(target.live) == live
    assert _rss_kib() - rss < 32 * 1024, "RSS grew by more than 32 MiB over 10,000 launches"
    out = np.empty(256, np.float32)
    target.copyout(bufs[0], memoryview(out.view(np.uint8)))
    np.testing.assert_array_equal(out, np.arange(256, dtype=np.float32) * 2)


def test_buffers_and_programs_are_released(target: cl.OpenCLTarget) -> None:
    import gc
    gc.collect()
    before = dict(target.live)
    bufs = [target.allocate(1024) for _ in range(100)]
    assert target.live["mem"] == before.get("mem", 0) + 100
    prog, extra = _simple_kernel(target, 16, "release_check")
    assert target.live["kernel"] == before.get("kernel", 0) + 1
    del bufs, prog, extra
    gc.collect()
    assert dict(target.live) == {k: before.get(k, 0) for k in target.live}
    x = Tensor(np.ones(1000, np.float32), device="OPENCL") + 1
    x.numpy()
    del x
    gc.collect()
    assert target.live["mem"] == before.get("mem", 0)


def test_copies_round_trip_and_check_sizes(target: cl.OpenCLTarget) -> None:
    data = np.arange(100, dtype=np.uint8)
    buf = target.allocate(100)
    target.copyin(buf, memoryview(data))
    out = np.zeros(100, np.uint8)
    target.copyout(buf, memoryview(out))
    np.testing.assert_array_equal(out, data)
    with pytest.raises(ValueError, match="expected 100 host bytes, got 99"):
        target.copyin(buf, memoryview(data[:99]))
    empty = (Tensor(np.zeros((0, 3), np.float32), device="OPENCL") + 1).numpy()
    assert empty.shape == (0, 3)


# --- PoCL's worker threads ------------------------------------------------------------------------------------------

@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning is only visible with two or more usable cores")
@pytest.mark.parametrize("setting", [None, "0", "taskset"], ids=["default: pinned", "caller's 0 kept",
                                                                "process kept to one core: unpinned"])
def test_pocl_worker_threads_pinned_by_default(setting: str | None) -> None:
    """The binding defaults ``POCL_AFFINITY`` to 1 before libOpenCL loads, so PoCL's CPU driver pins each worker to
    one core (unpinned, a replay's first launches ran on one core); a value the caller set is kept, and a process
    kept to some cores is left alone (PoCL would pin its workers to cores 0, 1, ... regardless)."""
    script = textwrap.dedent("""
        import os, sys
        if sys.argv[1] == "taskset":
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        allowed = os.sched_getaffinity(0)
        import numpy as np
        from jit.frontend.tensor import Tensor
        x = Tensor(np.arange(4096, dtype=np.float32), device="OPENCL")
        (x * 2.0 + 1.0).numpy()
        masks = [os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")]
        print(os.environ.get("POCL_AFFINITY", "unset"), sum(len(m) == 1 for m in masks),
              all(m <= allowed for m in masks))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("POCL_AFFINITY", None)
    if setting == "0":
        env["POCL_AFFINITY"] = setting
    proc = subprocess.run([sys.executable, "-c", script, str(setting)], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    value, pinned, within = proc.stdout.split()
    assert value == {None: "1", "0": "0", "taskset": "unset"}[setting]
    assert within == "True"  # no PoCL worker escapes the cores the process was given
    if setting != "taskset":  # there every thread's mask is the one core
        assert (int(pinned) >= 2) is (setting is None)
