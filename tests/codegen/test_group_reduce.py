"""Group reduces (codegen/opt/group.py): on OpenCL, each output's reduce shared by one work-group through local memory.

PoCL is a CPU device, so OPENCL keeps them off by default (``default_opts``); these tests turn them on through the
target's defaults, the way a GPU device and the QCOM profile have them, and check the rendered kernel, its launch
and its values against numpy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jit import Device, Ops, Tensor, capture
from jit.codegen.opt import DEFAULT_OPTS, OptOptions, optimize_kernel, target_default_opts
from jit.codegen.opt.group import GROUP_MAX_OUTPUTS, plan_group
from jit.codegen.opt.search import neighbours
from jit.codegen.pipeline import commit_dtypes
from jit.common.errors import CompileError
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.cl_binding import CL_DEVICE_TYPE_GPU
from targets.cpu import CPU_VECTOR_WIDTH, WIDE_VECTOR_OPTS
from targets.cpu_fma import halved_wide_fma, wide_vectors_pay
from targets.opencl import CPU_DEVICE_OPTS, GPU_OPTS, WIDE_CPU_DEVICE_OPTS
from targets.opencl_local_size import group_local_size

pytestmark = pytest.mark.cpu_only  # the OPENCL device is chosen per test; nothing here runs per device
RNG = np.random.default_rng(11)


@pytest.fixture
def grouped(monkeypatch: pytest.MonkeyPatch) -> str:
    """OPENCL with a GPU's defaults: group reduces on."""
    monkeypatch.setattr(Device["OPENCL"], "default_opts", OptOptions(group_reduce=16))
    return "OPENCL"


def _ast(t: Tensor):
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def test_matrix_vector_product_shares_each_reduce_across_a_work_group(grouped: str) -> None:
    x, w = RNG.standard_normal((1, 3204), dtype=np.float32), RNG.standard_normal((3204, 256), dtype=np.float32)
    out = Tensor(x, device=grouped) @ Tensor(w, device=grouped)
    kernel = compile_uops([out.uop], grouped)[-1]
    src = kernel.program.source
    assert "__local float part" in src and src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "get_local_id(0)" in src and "if (lidx0 == 0)" in src
    assert kernel.program.global_size == (16, 256) and kernel.program.local_size == (16, 1)
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("n", [1024, 1000])  # 1000: 16 does not divide it, the last steps are masked
def test_grouped_reduces_match_numpy(grouped: str, op: str, n: int) -> None:
    x = RNG.standard_normal((40, n), dtype=np.float32)
    x[3, 17], x[5, n - 1] = np.nan, np.inf
    got = getattr(Tensor(x, device=grouped), op)(1).numpy()
    want = getattr(np, op)(x.astype(np.float64), axis=1)
    src = compile_uops([getattr(Tensor(x, device=grouped), op)(1).uop], grouped)[-1].program.source
    assert "barrier(" in src
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_integer_sums_are_exact(grouped: str) -> None:
    x = RNG.integers(-2**20, 2**20, (8, 5000), dtype=np.int32)
    np.testing.assert_array_equal(Tensor(x, device=grouped).sum(1).numpy(), x.sum(1, dtype=np.int32))


def test_captured_group_reduce_replays_with_its_work_group(grouped: str) -> None:
    w = RNG.standard_normal((2048, 64), dtype=np.float32)
    cap = capture(lambda x: {"y": (x @ Tensor(w, device=grouped)).relu()}, {"x": np.ones((1, 2048), np.float32)},
                  target=grouped)
    reduce_dispatch = next(d for d in cap.cmdbuf.dispatches if cap.cmdbuf.kernels[d.kernel].name.startswith("r_"))
    assert reduce_dispatch.local_size == (16, 1)
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((1, 2048), dtype=np.float32)
        np.testing.assert_allclose(cap({"x": x})["y"], np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-4,
                                   atol=1e-3)


def test_plan_takes_only_few_outputs_long_single_reduces() -> None:
    on = OptOptions(group_reduce=16)
    assert plan_group(_ast(Tensor(np.ones((8, 4096), np.float32)).sum(1)), on) is not None
    assert plan_group(_ast(Tensor(np.ones((8, 4096), np.float32)).sum(1)), DEFAULT_OPTS) is None  # off
    assert plan_group(_ast(Tensor(np.ones((8, 200), np.float32)).sum(1)), on) is None  # shares under 16 steps
    many = Tensor(np.ones((GROUP_MAX_OUTPUTS, 512), np.float32)).sum(1)
    assert plan_group(_ast(many), on) is None  # outputs enough without it
    x = Tensor(np.ones((8, 4096), np.float32))
    two = x.sum(1) + x.max(1)
    assert plan_group(_ast(two), on) is None  # two reduces


def test_only_targets_with_local_memory_group() -> None:
    ast = _ast(Tensor(np.ones((8, 4096), np.float32)).sum(1))
    on = OptOptions(group_reduce=16)
    groups = lambda s: [u for u in toposort([s]) if u.op is Ops.RANGE and u.arg[1] == "group"]  # noqa: E731
    assert not groups(optimize_kernel(ast, on, 8, local_memory=False))
    assert len(groups(optimize_kernel(ast, on, 8, local_memory=True))) == 1


def test_defaults_follow_the_device_type() -> None:
    cl = Device["OPENCL"]
    is_gpu = bool(cl.info.device_type & CL_DEVICE_TYPE_GPU)
    # a CPU device (PoCL) is the host: the CPU target's wide tiles where its 16-lane vectors pay there too
    cpu_device_opts = WIDE_CPU_DEVICE_OPTS if wide_vectors_pay(cl.language.vector_width) else CPU_DEVICE_OPTS
    assert target_default_opts(cl) == (GPU_OPTS if is_gpu else cpu_device_opts)
    # and Winograd's choice by the host's multiply-add units (resnet18's 7x7 convs by F(2,3) on halved ones)
    assert cl.halved_wide_fma == (not is_gpu and halved_wide_fma(cl.language.vector_width))
    assert target_default_opts(Device["QCOM"]) == GPU_OPTS  # an Adreno profile, whatever stands in for it
    assert not Device["QCOM"].halved_wide_fma and not Device["QCOM"].large_kernel_groups  # nor the host's units
    # 16-lane channel vectors where this machine's probe finds they pay (targets/cpu_fma.py)
    wide = wide_vectors_pay(CPU_VECTOR_WIDTH)
    want = WIDE_VECTOR_OPTS if wide else DEFAULT_OPTS
    assert target_default_opts(Device["CPU"]) == replace(want, prefetch_next_slices=True)  # C takes prefetches


def test_work_group_is_one_outputs_items() -> None:
    assert group_local_size((32, 300, 2), 32, 256, (256, 256, 256)) == (32, 1, 1)
    assert group_local_size((64, 10), 0, 256, (256, 256)) != (64, 1)  # no group: the usual choice
    with pytest.raises(CompileError, match="group reduce: 512 work-items"):
        group_local_size((512, 4), 512, 256, (256, 256))


def test_beam_moves_include_group_sizes_only_with_local_memory() -> None:
    cl_moves = {o.group_reduce for o in neighbours(DEFAULT_OPTS, Device["OPENCL"], (64,))}
    cpu_moves = {o.group_reduce for o in neighbours(DEFAULT_OPTS, Device["CPU"], (64,))}
    assert {16, 32, 64} <= cl_moves and cpu_moves == {0}
