"""jit/codegen/passes/vector_erf.py: float32 erf on vector lanes as a rational polynomial on the CPU target (C's
erff takes one float), within 5e-7 of erf, specials included; erf elsewhere keeps the library's call."""

from __future__ import annotations

import math

import numpy as np

from jit import Device, Tensor
from jit.codegen.passes.vector_erf import vector_erf
from jit.common.dtype import dtypes
from jit.ir.alu import exec_alu
from jit.ir.uop import Ops, UOp
from jit.realize import compile_uops
from targets.cl_binding import CL_DEVICE_TYPE_GPU
from targets.cpu import CPU_VECTOR_WIDTH


def _source(t: Tensor, device: str = "CPU") -> str:
    return compile_uops([t.uop], device)[-1].program.source


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) if not np.isnan(v) else np.nan for v in x])


def test_vector_erf_is_within_5e7_of_erf_and_keeps_the_specials() -> None:
    rng = np.random.default_rng(0)
    specials = [0, -0.0, np.inf, -np.inf, np.nan, 3.9, 4.0, 4.1, -3.2, 1e-30, -1e-30, 1e-40, 10.0, -10.0]
    x = np.concatenate([specials, rng.uniform(-6, 6, 60000), rng.standard_normal(4000)]).astype(np.float32)
    x = x[: len(x) // 64 * 64]
    out = Tensor(x).erf()
    src = _source(out)
    assert "erff" not in src and f"dp_float32x{CPU_VECTOR_WIDTH}" in src
    assert "!=" not in src  # NaN kept by the clamp, not selected back
    got = out.numpy()
    want = _erf(x)
    finite = ~np.isnan(x)
    assert np.abs(got[finite] - want[finite]).max() <= 5e-7
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    assert list(got[:4]) == [0.0, 0.0, 1.0, -1.0] and np.signbit(got[1]) and not np.signbit(got[0])
    tiny = np.abs(x) < 1e-20  # erf(x) = 2x / sqrt(pi) there: no flush to 0
    np.testing.assert_allclose(got[tiny], x[tiny] * 2 / math.sqrt(math.pi), rtol=1e-6, atol=1e-43)


def test_the_polynomial_graph_matches_erf_when_interpreted() -> None:
    """The UOp graph itself (before any C compiler contracts multiply-adds), run by the IR's interpreter."""
    xs = np.linspace(-5, 5, 201, dtype=np.float32)
    x = UOp(Ops.NOOP, dtypes.float32, ())  # a placeholder the interpreter binds
    graph = vector_erf(x)
    order = graph.toposort()

    def run(v: float) -> float:
        vals: dict[UOp, float] = {}
        for u in order:
            vals[u] = v if u is x else u.arg if u.op is Ops.CONST else \
                exec_alu(u.op, u.dtype, tuple(vals[s] for s in u.src))
        return float(vals[graph])
    got = np.array([run(float(v)) for v in xs], np.float32)
    assert np.abs(got - _erf(xs)).max() <= 5e-7


def test_exact_gelu_before_a_pointwise_conv_calls_no_erff_per_lane() -> None:
    """The exact GELU epilogue of a 1x1 conv (convnext's MLP): the erf is vector arithmetic, not a library call per
    lane, and the result is GELU's."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    w = (rng.standard_normal((64, 32, 1, 1)) * 0.2).astype(np.float32)
    out = Tensor(x).conv2d(Tensor(w)).gelu()
    assert "erff" not in _source(out)
    y = np.einsum("nchw,oc->nohw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    want = y * 0.5 * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_scalar_erf_keeps_the_library_call_and_an_opencl_one_where_the_device_is_a_gpu() -> None:
    tiny = Tensor(np.linspace(-3, 3, 5, dtype=np.float32)).erf()  # too small to vectorize
    assert "erff(" in _source(tiny)
    np.testing.assert_allclose(tiny.numpy(), _erf(np.linspace(-3, 3, 5, dtype=np.float32)), rtol=1e-6)
    x = Tensor(np.linspace(-3, 3, 4096, dtype=np.float32), device="OPENCL").erf()
    # a GPU's erf(floatN) is a few instructions; a CPU device's (PoCL's) is library code slower than the arithmetic
    gpu = bool(Device["OPENCL"].info.device_type & CL_DEVICE_TYPE_GPU)
    assert ("erf(" in _source(x, "OPENCL")) == gpu == Device["OPENCL"].language.vector_exp
    np.testing.assert_allclose(x.numpy(), _erf(np.linspace(-3, 3, 4096, dtype=np.float32)), rtol=1e-6, atol=5e-7)
