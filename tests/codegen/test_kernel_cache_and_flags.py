"""Scheduling, kernel naming, rendering, the on-disk compile cache, and the DEBUG/NOOPT/VIZ flags."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from jit import Context, Device, Tensor
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.registry import DeviceError

ROOT = Path(__file__).resolve().parents[2]


def run_py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=ROOT, env=full_env, check=True)


def test_signed_overflow_wraps_even_where_c_may_assume_it_cannot() -> None:
    """Regression (-fwrapv was dropped so index arithmetic strength-reduces): ``x + 1 > x`` is what a C compiler
    folds to true for signed ints; the kernels must compute it as numpy does, where INT_MAX + 1 wraps."""
    big = np.array([2**31 - 1, 5, -2**31], np.int32)
    t = Tensor(big)
    assert ((t + 1) > t).tolist() == [False, True, True]
    assert (t * 2).tolist() == (big * 2).tolist()
    assert (-t).tolist() == (-big).tolist()
    assert t.abs().tolist() == np.abs(big).tolist()


def test_constant_folding_is_visible_in_the_source() -> None:
    t = Tensor([1, 2, 3, 4])
    out = t + 3 + 4
    kernels = compile_uops([out.uop])
    assert len(kernels) == 1
    src = kernels[0].program.source
    stores = [ln for ln in src.splitlines() if ln.strip().startswith("*(data0")]
    # one add of the folded 7 per element (signed adds wrap through the unsigned type)
    assert len(stores) == 4 and all(ln.rstrip().endswith("+(unsigned int)(7)));") for ln in stores)
    assert kernels[0].name.startswith("E_4")
    assert out.tolist() == [8, 9, 10, 11]


def test_noopt_keeps_the_loop() -> None:
    t = Tensor([5, 6, 7, 8])
    with Context(NOOPT=1):
        src = compile_uops([(t + 9).uop])[0].program.source
    assert "for (int ridx0 = 0; ridx0 < 4; ridx0++)" in src
    src_opt = compile_uops([(t + 10).uop])[0].program.source
    assert "for (" not in src_opt  # upcast: four straight-line statements


def test_elementwise_chain_is_one_kernel() -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = ((x * 2 + 1).exp() - x).sqrt()
    kernels, _ = create_schedule([y.uop], Device.DEFAULT)
    assert len(kernels) == 1 and kernels[0].name == "E_3_4"


def test_reduce_fuses_its_elementwise_epilogue() -> None:
    a = Tensor(np.ones((16, 32), np.float32))
    out = (a * 3).sum(axis=1).relu() + 1
    kernels, _ = create_schedule([out.uop], Device.DEFAULT)
    assert [k.name for k in kernels] == ["r_16_32"]
    np.testing.assert_allclose(out.numpy(), np.full(16, 97, np.float32))


def test_reduce_consumed_through_expand_is_its_own_kernel() -> None:
    x = Tensor(np.random.default_rng(0).random((4, 8), dtype=np.float32))
    shifted = x - x.max(axis=1, keepdim=True)
    kernels, _ = create_schedule([shifted.uop], Device.DEFAULT)
    assert [k.name for k in kernels] == ["r_4_8", "E_4_8"]
    ref = x.numpy() - x.numpy().max(axis=1, keepdims=True)
    np.testing.assert_allclose(shifted.numpy(), ref)


def test_same_name_different_kernel_gets_a_suffix() -> None:
    t = Tensor(np.arange(6, dtype=np.int32))
    a = compile_uops([(t * 11 + 1).uop])[0].name
    b = compile_uops([(t * 13 - 1).uop])[0].name
    assert a.startswith("E_6") and b.startswith("E_6") and a != b


def test_device_default_can_be_overridden() -> None:
    assert Device.DEFAULT == "CPU"
    Device.DEFAULT = "cpu"
    assert Device.DEFAULT == "CPU"
    try:
        Device.DEFAULT = "TPU"
    except DeviceError as e:
        assert "TPU" in str(e)
    else:  # pragma: no cover
        raise AssertionError("unknown device accepted")
    out = run_py("from targets.registry import Device; print(Device.DEFAULT)", DEV="CPU")
    assert out.stdout.strip() == "CPU"


def test_second_process_compiles_nothing(tmp_path: Path) -> None:
    code = """
        import numpy as np
        from jit.frontend.tensor import Tensor
        import targets.cpu_runtime as cpu
        x = Tensor(np.arange(10, dtype=np.float32))
        print((x * 2.5 + 1).sum().item(), cpu.cc_invocations)
    """
    first = run_py(code, DRIVEPACK_CACHE=str(tmp_path)).stdout.split()
    second = run_py(code, DRIVEPACK_CACHE=str(tmp_path)).stdout.split()
    assert first[0] == second[0] == "122.5"
    assert int(first[1]) >= 1 and second[1] == "0"
    assert list(tmp_path.glob("*.so"))


def test_a_cache_filled_on_a_machine_with_other_instruction_sets_is_not_reused(tmp_path: Path) -> None:
    """Regression: the key ignored the host CPU, so ``-march=native`` objects from a cache a machine with AVX-512
    filled would load on one without it (SIGILL). Another ``host_isa`` must compile again."""
    code = """
        import numpy as np
        import targets.cpu_runtime as cpu
        if {other}:
            cpu.host_isa = lambda: "x86_64:sse2"
        from jit.frontend.tensor import Tensor
        x = Tensor(np.arange(10, dtype=np.float32))
        print((x * 2.5 + 1).sum().item(), cpu.cc_invocations)
    """
    first = run_py(code.format(other=False), DRIVEPACK_CACHE=str(tmp_path)).stdout.split()
    other = run_py(code.format(other=True), DRIVEPACK_CACHE=str(tmp_path)).stdout.split()
    same = run_py(code.format(other=False), DRIVEPACK_CACHE=str(tmp_path)).stdout.split()
    assert first[0] == other[0] == same[0] == "122.5"
    assert int(first[1]) >= 1 and int(other[1]) >= 1 and same[1] == "0"


def test_debug_flags_print_kernels_and_source(tmp_path: Path) -> None:
    code = """
        from jit.frontend.tensor import Tensor
        print((Tensor([1.0, 2.0, 3.0]) * 4).tolist())
    """
    d2 = run_py(code, DEBUG="2").stdout
    line = next(ln for ln in d2.splitlines() if ln.startswith("***"))
    assert "E_3" in line and "ms" in line and "GFLOP/s" in line and "GB/s" in line
    d4 = run_py(code, DEBUG="4").stdout
    assert "void E_3(" in d4
    viz = run_py(code, VIZ="1", TMPDIR=str(tmp_path)).stdout
    path = Path(next(ln for ln in viz.splitlines() if ln.startswith("VIZ:")).split()[-1])
    html = path.read_text()
    assert "symbolic" in html and "before" in html and "after" in html


def test_division_by_a_constant_has_no_trap_guard() -> None:
    """Regression: `(8)==0||(8)==-1 ? 0 : x % 8` made clang warn about '||' with constant operands on every
    PoCL build; a constant divisor other than 0 and -1 cannot trap, so it is divided directly."""
    x = Tensor(np.arange(-8, 8, dtype=np.int32))
    for t, want in ((x // 3, np.arange(-8, 8) // 3), (x % 3, np.arange(-8, 8) % 3)):
        src = compile_uops([t.uop])[0].program.source
        assert "==0" not in src and "==-1" not in src, src
        np.testing.assert_array_equal(t.numpy(), want)
    y = Tensor(np.array([3, 0, -1], dtype=np.int32))
    np.testing.assert_array_equal((Tensor(np.array([7, 7, 7], dtype=np.int32)) % y).numpy(), [1, 0, 0])


def test_unloading_the_last_openmp_kernel_library_does_not_crash(tmp_path: Path) -> None:
    """Regression: when the last loaded kernel library using OpenMP was garbage-collected, dlclose unmapped
    libgomp under its idle pool threads and the process died with SIGSEGV; the CPU target now pins libgomp."""
    code = textwrap.dedent("""
        import gc, time
        from targets.cpu import CPUTarget
        src = '''#include <omp.h>
        int dp_omp_threads = 2;
        void k(float* restrict a, float* restrict b) {
          #pragma omp parallel for num_threads(dp_omp_threads) schedule(static)
          for (int i = 0; i < 65536; i++) a[i] = b[i] * 3.0f;
        }'''
        for _ in range(3):
            t = CPUTarget(threads=2)
            prog = t.compile("k", src, {"openmp": True})
            t.launch(prog, [t.allocate(65536 * 4), t.allocate(65536 * 4)])
            del prog, t
            gc.collect()
            time.sleep(0.1)
        print("ok")
    """)
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])
