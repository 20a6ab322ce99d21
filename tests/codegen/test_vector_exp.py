"""jit/codegen/passes/vector_exp.py: float32 exp on vector lanes as arithmetic on the CPU target (C's expf takes
one float), within 1 ulp of the correctly rounded result, specials included; exp elsewhere keeps the library's."""

from __future__ import annotations

import re

import numpy as np

from jit import Device, Tensor
from jit.realize import compile_uops
from targets.cl_binding import CL_DEVICE_TYPE_GPU


def _source(t: Tensor, device: str = "CPU") -> str:
    return compile_uops([t.uop], device)[-1].program.source


def test_vector_exp_is_within_one_ulp_over_the_float_range_and_keeps_the_specials() -> None:
    rng = np.random.default_rng(0)
    specials = [0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.3, -103.9, -104.5, 1e-30, -1e-30, 89.5]
    x = np.concatenate([rng.uniform(-110, 95, 60000), rng.standard_normal(4000) * 3, specials]).astype(np.float32)
    x = x[: len(x) // 64 * 64]
    out = Tensor(x).exp()
    assert "expf" not in _source(out) and "rintf" not in _source(out)  # its roundings are two adds each
    got = out.numpy()
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    finite = np.isfinite(rounded) & (rounded > 0)
    ulps = np.abs(got[finite] - exact[finite]) / np.spacing(rounded[finite]).astype(np.float64)
    assert ulps.max() <= 1.0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(x)], rounded[~finite & ~np.isnan(x)])  # 0 and +inf


def test_sigmoid_on_vectors_needs_no_lane_by_lane_call() -> None:
    """SiLU's sigmoid: the exp as arithmetic, the reciprocal one vector division; its power of two read from the
    rounding's bits, so no float-to-int conversion and no NaN guard before one; ``e^-x`` reduced from ``x`` itself,
    with no negation."""
    x = np.random.default_rng(1).standard_normal(4096).astype(np.float32) * 6
    out = Tensor(x) * Tensor(x).sigmoid()
    src = _source(out)
    assert "expf" not in src and "(float)1/" not in src
    assert "__builtin_convertvector" not in src and "!=" not in src
    assert not re.search(r"\(-[A-Za-z_]\w*\)", src)  # no (-value)
    np.testing.assert_allclose(out.numpy(), x / (1 + np.exp(-x.astype(np.float64))), rtol=3e-7, atol=1e-30)


def test_a_scalar_exp_keeps_the_library_call_and_an_opencl_one_where_the_device_is_a_gpu() -> None:
    tiny = Tensor(np.linspace(-3, 3, 5, dtype=np.float32)).exp()  # too small to vectorize
    assert "expf(" in _source(tiny)
    np.testing.assert_allclose(tiny.numpy(), np.exp(np.linspace(-3, 3, 5, dtype=np.float32)), rtol=1e-7)
    x = Tensor(np.linspace(-3, 3, 4096, dtype=np.float32), device="OPENCL").exp()
    # a GPU's exp(floatN) is a few instructions; a CPU device's (PoCL's) is library code slower than the arithmetic
    gpu = bool(Device["OPENCL"].info.device_type & CL_DEVICE_TYPE_GPU)
    assert ("exp(" in _source(x, "OPENCL")) == gpu == Device["OPENCL"].language.vector_exp
    np.testing.assert_allclose(x.numpy(), np.exp(np.linspace(-3, 3, 4096, dtype=np.float32)), rtol=2e-7)


def test_vector_exp_is_within_one_ulp_where_its_reduction_rounds_a_tie() -> None:
    """x log2(e) within a few ulps of a half integer: the rounding of n (two adds, possibly fused into a
    multiply-add by the compiler) may go either way, and either way r stays within the polynomial's range."""
    m = np.arange(-149, 128, dtype=np.float64) + 0.5
    ties = (m * np.log(2)).astype(np.float32)
    x = np.concatenate([ties + np.spacing(ties) * k for k in range(-3, 4)]).astype(np.float32)
    x = np.concatenate([x, np.zeros(-len(x) % 64, np.float32)])
    got = Tensor(x).exp().numpy()
    exact = np.exp(x.astype(np.float64))
    rounded = exact.astype(np.float32)
    finite = np.isfinite(rounded) & (rounded > np.finfo(np.float32).tiny)
    ulps = np.abs(got[finite] - exact[finite]) / np.spacing(rounded[finite]).astype(np.float64)
    assert ulps.max() <= 1.0


def test_one_plus_exp_on_vectors_is_bit_for_bit_one_plus_the_exp_with_one_power_of_two() -> None:
    """A sigmoid's ``1 + e^x`` takes one power of two (the exponent field set once, 2**23 as its shift) instead of
    the exp's two, and rounds to exactly what ``1 + exp(x)`` does, over the whole range and at the specials."""
    rng = np.random.default_rng(2)
    specials = [0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, 89.5, -85.9, -86.0, -86.1, -87.3, -103.9, -104.5, 1e-30]
    x = np.concatenate([rng.uniform(-110, 95, 60000), rng.standard_normal(4000) * 3, specials]).astype(np.float32)
    x = np.concatenate([x, np.zeros(-len(x) % 64, np.float32)])
    one_plus = 1 + Tensor(x).exp()
    exp_alone = Tensor(x).exp()
    assert _source(one_plus).count("8388608") == 1 and _source(exp_alone).count("8388608") == 2
    with np.errstate(over="ignore"):
        want = np.float32(1) + exp_alone.numpy()
    np.testing.assert_array_equal(one_plus.numpy(), want)  # NaN where want has NaN, every other bit the same
    silu = Tensor(x) * Tensor(x).sigmoid()  # x / (1 + e^-x), one division (jit/codegen/passes/quotients.py)
    with np.errstate(over="ignore", invalid="ignore"):
        want_silu = x / (np.float32(1) + Tensor(-x).exp().numpy())
    np.testing.assert_array_equal(silu.numpy(), want_silu)
