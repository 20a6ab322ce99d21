"""The optimizer's finishing steps: unroll hints, base pointers and parked accumulators, each on and off.

Each step rewrites the kernel graph (jit/codegen/opt/hints.py, hoist.py, park.py) and the renderer spells what it
built; with the step off the construct is absent, and the results are the same bit for bit (and NOOPT's, within
the rounding of a C compiler's contraction to FMA, which differs between loop structures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from jit import Context, Device, Ops, Tensor
from jit.codegen.opt import finish_kernel
from jit.codegen.opt.hints import UNROLL_HINT_MAX_LOADS, UNROLL_HINT_TRIPS, hint_unrolls
from jit.codegen.opt.options import OptOptions, OptOptionsError
from jit.ir.uop import toposort
from jit.realize import CompiledKernel, clear_compiled_kernels, compile_uops
from targets.opencl import CPU_DEVICE_OPTS, GPU_OPTS, WIDE_CPU_DEVICE_OPTS

RNG = np.random.default_rng(21)
A, B = RNG.standard_normal((64, 96), dtype=np.float32), RNG.standard_normal((96, 128), dtype=np.float32)
X = RNG.standard_normal((1, 16, 32, 64), dtype=np.float32)
W = RNG.standard_normal((32, 16, 3, 3), dtype=np.float32)
ALL_ON = {"unroll_hints": True, "hoist_base_pointers": True, "park_accumulators": True}
ALL_OFF = {"unroll_hints": False, "hoist_base_pointers": False, "park_accumulators": False}


@contextlib.contextmanager
def defaults(device: str, **changes: Any) -> Iterator[None]:
    """``device``'s target compiling with its default options changed (kernels compiled afresh inside)."""
    target = Device[device]
    had = "default_opts" in vars(target)
    before = getattr(target, "default_opts", OptOptions())
    target.default_opts = dataclasses.replace(before, **changes)
    clear_compiled_kernels()  # the compiled-kernel cache is keyed by the graph, not by the target's defaults
    try:
        yield
    finally:
        if had:
            target.default_opts = before
        else:
            del target.default_opts
        clear_compiled_kernels()


def _matmul(device: str) -> tuple[CompiledKernel, np.ndarray]:
    out = Tensor(A, device=device) @ Tensor(B, device=device)
    return compile_uops([out.uop], device)[-1], out.numpy()


def _strided_conv(device: str) -> tuple[CompiledKernel, np.ndarray]:
    out = Tensor(X, device=device).conv2d(Tensor(W, device=device), stride=2, padding=1).relu()
    return compile_uops([out.uop], device)[-1], out.numpy()


def _noopt(build: object, device: str) -> np.ndarray:
    with Context(NOOPT=1):
        clear_compiled_kernels()
        return build(device)[1]  # type: ignore[operator]


def test_the_new_fields_round_trip_and_are_checked() -> None:
    opts = OptOptions(**ALL_ON)
    assert OptOptions.from_dict(opts.to_dict()) == opts and opts.to_dict()["park_accumulators"] is True
    assert not any(getattr(OptOptions(), k) for k in ALL_ON)  # off unless a target's defaults turn them on
    with pytest.raises(OptOptionsError, match="OptOptions.hoist_base_pointers: expected a bool"):
        OptOptions(hoist_base_pointers=1)  # type: ignore[arg-type]


def test_finish_kernel_with_every_step_off_returns_the_same_graph() -> None:
    with defaults("CPU", **ALL_OFF):
        ck, _ = _strided_conv("CPU")
    assert finish_kernel(ck.lowered, OptOptions()) is ck.lowered


def test_unroll_hints_mark_short_reduce_loops_only() -> None:
    with defaults("CPU", unroll_hints=True):
        ck, hinted = _strided_conv("CPU")
    marked = [u for u in toposort([ck.lowered]) if u.op is Ops.RANGE and u.arg[2:] == ("unroll",)]
    assert marked and all(u.arg[1] == "reduce" and int(u.src[0].arg) <= UNROLL_HINT_TRIPS for u in marked)
    with defaults("CPU", unroll_hints=False):
        plain_ck, plain = _strided_conv("CPU")
    assert not any(u.op is Ops.RANGE and len(u.arg) > 2 for u in toposort([plain_ck.lowered]))
    # C spells no hint (GCC unrolls them itself); the kernels differ in name only, being different graphs
    assert ck.program.source.replace(ck.name, "k") == plain_ck.program.source.replace(plain_ck.name, "k")
    np.testing.assert_array_equal(hinted, plain)
    np.testing.assert_allclose(hinted, _noopt(_strided_conv, "CPU"), rtol=1e-4, atol=1e-4)  # FMA contraction may differ


def _loads_per_trip(ck: CompiledKernel) -> int:
    """The loads in the bodies of a kernel's reduces (a tile's accumulators share their loops and loads)."""
    return len({x for u in toposort([ck.lowered]) if u.op is Ops.REDUCE for x in toposort([u.src[0]])
                if x.op is Ops.LOAD})


def test_unroll_hints_skip_a_reduce_of_many_loads() -> None:
    """A 3x3 depthwise conv whose tile loads a vector per channel block and tap (efficientnet_b0 at 14x14) stays
    rolled where hints are on: unrolled it ran no faster on PoCL and took it about a second to compile. The strided
    conv keeps them."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 240, 14, 14), dtype=np.float32), rng.standard_normal((240, 1, 3, 3), np.float32)

    def depthwise(device: str) -> tuple[CompiledKernel, np.ndarray]:
        out = Tensor(x, device=device).conv2d(Tensor(w, device=device), padding=1, groups=240)
        return compile_uops([out.uop], device)[-1], out.numpy()

    # 8-lane tiles (PoCL's without 16-lane FMAs that pay): 16 loads a tap; hints on as on a GPU
    with defaults("OPENCL", **{**dataclasses.asdict(CPU_DEVICE_OPTS), "unroll_hints": True}):
        wide, wide_out = depthwise("OPENCL")
        narrow, _ = _strided_conv("OPENCL")
    assert _loads_per_trip(wide) > UNROLL_HINT_MAX_LOADS >= _loads_per_trip(narrow)
    assert hint_unrolls(wide.lowered) is wide.lowered
    assert any(u.op is Ops.RANGE and u.arg[2:] == ("unroll",) for u in toposort([narrow.lowered]))
    want = np.asarray([[np.sum(np.pad(x[0, c], 1)[i:i + 3, j:j + 3] * w[c, 0]) for j in range(14)]
                       for c in range(240) for i in range(14)], np.float32).reshape(1, 240, 14, 14)
    np.testing.assert_allclose(wide_out, want, rtol=1e-4, atol=1e-4)


def test_a_cpu_device_marks_only_short_loops_inside_a_longer_reduce_whose_trips_share_loads() -> None:
    """PoCL (a CPU OpenCL device) gets hints only where unrolling lets the trips share loads: a 3x3 conv tiled
    across channels over 13-wide rows (squeezenet's late expands) loads each input once for its three column taps
    only unrolled. A depthwise conv's taps, with no longer reduce around them, stay rolled (unrolled they ran no
    faster there)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 12, 13, 13), dtype=np.float32)  # too few channels for Winograd: a direct conv
    w = rng.standard_normal((64, 12, 3, 3), dtype=np.float32) / 4
    dw = rng.standard_normal((12, 1, 3, 3), dtype=np.float32)

    def conv(weight: np.ndarray, groups: int) -> tuple[CompiledKernel, np.ndarray]:
        out = Tensor(x, device="OPENCL").conv2d(Tensor(weight, device="OPENCL"), padding=1, groups=groups)
        return compile_uops([out.uop], "OPENCL")[-1], out.numpy()

    assert CPU_DEVICE_OPTS.unroll_shared_loads and WIDE_CPU_DEVICE_OPTS.unroll_shared_loads
    with defaults("OPENCL", **dataclasses.asdict(CPU_DEVICE_OPTS)):
        dense, hinted = conv(w, 1)
        depthwise, _ = conv(dw, 12)
    marked = [u for u in toposort([dense.lowered]) if u.op is Ops.RANGE and u.arg[2:] == ("unroll",)]
    assert marked and all(int(u.src[0].arg) == 3 for u in marked), dense.program.source
    assert "#pragma unroll" in dense.program.source
    assert not any(u.op is Ops.RANGE and len(u.arg) > 2 for u in toposort([depthwise.lowered]))
    with defaults("OPENCL", **{**dataclasses.asdict(CPU_DEVICE_OPTS), "unroll_shared_loads": False}):
        plain, rolled = conv(w, 1)
    assert "#pragma unroll" not in plain.program.source
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("oc,nchw->nohw", w[:, :, i, j], padded[:, :, i:i + 13, j:j + 13])
               for i in range(3) for j in range(3))
    np.testing.assert_allclose(hinted, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(hinted, rolled, rtol=1e-5, atol=1e-5)


def test_hoisted_base_pointers_on_the_c_target_read_the_same_elements() -> None:
    with defaults("CPU", hoist_base_pointers=True):
        ck, hoisted = _matmul("CPU")
    bases = [u for u in toposort([ck.lowered]) if u.op is Ops.INDEX and len(u.src) == 3]
    assert bases and all(b.src[2].op is Ops.INDEX and b.src[2].src[0] is b.src[0] for b in bases)
    pointers = re.findall(r"float\* (ptr\d+) = data\d\+", ck.program.source)
    assert pointers and all(f"*({p}+(" in ck.program.source for p in pointers)
    with defaults("CPU", hoist_base_pointers=False):
        plain_ck, plain = _matmul("CPU")
    assert "ptr" not in plain_ck.program.source
    np.testing.assert_array_equal(hoisted, plain)
    np.testing.assert_allclose(hoisted, _noopt(_matmul, "CPU"), rtol=1e-4, atol=1e-4)  # FMA contraction may differ


def test_parked_accumulators_on_the_c_target_keep_every_bit() -> None:
    with defaults("CPU", park_accumulators=True):
        ck, parked = _strided_conv("CPU")
    assert any(u.op is Ops.PARK and u.src[0].op is Ops.REDUCE for u in toposort([ck.lowered]))
    src = ck.program.source
    slots = re.findall(r"(park_\w+)\[(\d+)\] = acc", src)
    assert slots and all(f"volatile {name[5:]} {name}[{len(slots)}];" in src for name, _ in slots)
    if "dp_lo" in src:  # a thread's accumulators wait in its own array, declared inside the threads' loop
        assert src.index("< dp_hi;") < src.index("volatile")
    with defaults("CPU", park_accumulators=False):
        plain_ck, plain = _strided_conv("CPU")
    assert "park_" not in plain_ck.program.source
    np.testing.assert_array_equal(parked, plain)
    np.testing.assert_allclose(parked, _noopt(_strided_conv, "CPU"), rtol=1e-4, atol=1e-4)  # FMA contraction may differ


@pytest.mark.opencl
def test_opencl_defaults_turn_the_steps_on_where_its_compilers_need_them() -> None:
    # a GPU keeps waiting accumulators in registers; a CPU device's LLVM (PoCL) spills them inside the next loop
    assert Device["OPENCL"].default_opts in (GPU_OPTS, CPU_DEVICE_OPTS, WIDE_CPU_DEVICE_OPTS)
    assert GPU_OPTS.unroll_hints and GPU_OPTS.hoist_base_pointers and not GPU_OPTS.park_accumulators
    # PoCL compiles hinted loops slowly: hints only where a loop's trips share loads
    assert CPU_DEVICE_OPTS == OptOptions(**{**ALL_ON, "unroll_hints": False, "unroll_shared_loads": True})
    assert all(getattr(WIDE_CPU_DEVICE_OPTS, name) == (name != "unroll_hints") for name in ALL_ON)
    assert WIDE_CPU_DEVICE_OPTS.unroll_shared_loads and not GPU_OPTS.unroll_shared_loads
    assert Device["QCOM"].default_opts is GPU_OPTS  # an Adreno


@pytest.mark.opencl
def test_opencl_steps_on_and_off_change_the_source_not_the_results() -> None:
    with defaults("OPENCL", **ALL_ON):
        conv_on, conv_values = _strided_conv("OPENCL")
        mm_on, mm_values = _matmul("OPENCL")
    with defaults("OPENCL", **ALL_OFF):
        conv_off, conv_plain = _strided_conv("OPENCL")
        mm_off, mm_plain = _matmul("OPENCL")
    assert "#pragma unroll" in conv_on.program.source and "#pragma unroll" not in conv_off.program.source
    assert "park_" in conv_on.program.source and "park_" not in conv_off.program.source
    assert "__global float* ptr" in mm_on.program.source and "ptr" not in mm_off.program.source
    np.testing.assert_array_equal(conv_values, conv_plain)
    np.testing.assert_array_equal(mm_values, mm_plain)
    np.testing.assert_allclose(conv_values, _noopt(_strided_conv, "OPENCL"), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mm_values, A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
def test_noopt_keeps_the_opencl_spelling_steps() -> None:
    # they were the renderer's before they were optimizer steps, and NOOPT never turned them off
    with Context(NOOPT=1):
        clear_compiled_kernels()
        try:
            ck, values = _matmul("OPENCL")
        finally:
            clear_compiled_kernels()
    assert "__global float* ptr" in ck.program.source
    np.testing.assert_allclose(values, A @ B, rtol=1e-4, atol=1e-4)
