"""jit/codegen/passes/vector_rint.py: float32 rint on vector lanes from adds, for a language whose vector rint is
slow (OpenCL on a CPU device: PoCL), bit for bit np.rint's, ties, signed zeros and specials included; a scalar rint
keeps the language's; a rint converted to int whose source lies in [0, 2**23) is the two adds alone."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Tensor
from jit.codegen.passes.vector_rint import lower_vector_rint
from jit.common.dtype import dtypes
from jit.ir.uop import Ops, UOp
from jit.realize import compile_uops
from targets.registry import Device


@pytest.fixture(scope="module")
def opencl_cpu_device() -> None:
    lang = Device["OPENCL"].language  # type: ignore[attr-defined]
    assert not lang.vector_rint  # PoCL (CI's OpenCL) is a CPU device: the pass runs there


def test_vector_rint_is_rint_bit_for_bit(opencl_cpu_device: None) -> None:
    rng = np.random.default_rng(3)
    ties = np.arange(-64, 64, dtype=np.float32) + 0.5
    specials = np.array([0.0, -0.0, -0.3, 0.3, -0.5, 0.5, -0.7, 2**23 - 0.5, -(2**23) + 0.5, 2**23, 2**23 + 1,
                         2**22 + 0.5, -(2**22) - 0.5, 3e38, -3e38, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                         np.nextafter(0.5, 0), np.nextafter(0.5, 1), np.nextafter(-1.5, 0)], np.float32)
    bits = rng.integers(0, 2**32, 40000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([ties, specials, bits, rng.uniform(-1e4, 1e4, 20000).astype(np.float32)])
    x = x[: len(x) // 64 * 64]
    out = Tensor(x, device="OPENCL").round()
    src = compile_uops([out.uop], "OPENCL")[-1].program.source
    assert "rint(" not in src and "8388608.0f" in src
    with np.errstate(invalid="ignore"):  # signalling NaNs among the random bits: rint quiets them, as the pass does
        want = np.rint(x)
    np.testing.assert_array_equal(out.numpy().view(np.uint32), want.view(np.uint32))


def test_scalar_rint_is_left_to_the_language() -> None:
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.RINT, dtypes.float32, (UOp.const(dtypes.float32, 2.5),)),))
    assert lower_vector_rint(sink) is sink


def test_a_rint_of_a_clamped_coordinate_converted_to_int_is_two_adds(opencl_cpu_device: None) -> None:
    """The warp's shape (packager/modeld/warp.py): clamp to [0, 1927] absorbing NaN, round, convert. No compare
    or select of the full lowering, and every int equals numpy's, ties to even included."""
    rng = np.random.default_rng(4)
    ties = np.arange(-3, 1931, dtype=np.float32) + 0.5
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 1926.5, 1927.5, 0.5, 2.5], np.float32)
    x = np.concatenate([ties, specials, rng.uniform(-100, 2100, 9000).astype(np.float32)])
    x = x[: len(x) // 64 * 64]
    t = Tensor(x, device="OPENCL")
    lo, hi = Tensor(0.0, device="OPENCL"), Tensor(1927.0, device="OPENCL")
    clamped = (lo < t).where(t, lo)
    out = (clamped < hi).where(clamped, hi).round().cast(dtypes.int32)
    src = compile_uops([out.uop], "OPENCL")[-1].program.source
    assert "+8388608.0f)-8388608.0f)" in src and "(-8388608.0f)" not in src and "rint(" not in src
    want = np.clip(np.rint(np.where(np.isnan(x), 0, x)), 0, 1927).astype(np.int32)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("case", ["may be negative", "unbounded", "stays float"])
def test_other_rints_keep_the_full_lowering(opencl_cpu_device: None, case: str) -> None:
    x = Tensor(np.linspace(-5, 5, 8192, dtype=np.float32), device="OPENCL")
    lo, hi = Tensor(-1.0 if case == "may be negative" else 0.0, device="OPENCL"), Tensor(3.0, device="OPENCL")
    clamped = (lo < x).where(x, lo)
    clamped = (clamped < hi).where(clamped, hi)
    rounded = (x if case == "unbounded" else clamped).round()
    out = rounded if case == "stays float" else rounded.cast(dtypes.int32)
    src = compile_uops([out.uop], "OPENCL")[-1].program.source
    assert "(-8388608.0f)" in src  # the sign-aware constant of the full lowering
