"""jit/codegen/passes/vector_rint.py: float32 rint on vector lanes from adds, for a language whose vector rint is
slow (OpenCL on a CPU device: PoCL), bit for bit np.rint's, ties, signed zeros and specials included; a scalar rint
keeps the language's."""

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
