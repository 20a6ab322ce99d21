"""Elementwise Tensor ops against numpy: unary math, activations, binary arithmetic and comparisons (logical and
bitwise ops, where/clip, broadcasting and dtype promotion: test_tensor_logical.py). numpy is only the oracle: every
result here is computed by drivepack kernels."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from jit import dtypes
from jit.common.errors import DTypeError
from jit.frontend.tensor import Tensor
from tests.helpers import check_tensor, rand_array

ALL_NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
          "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "int16": np.int16, "int64": np.int64}
TOL = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-6, 1e-6), np.dtype(np.float64): (1e-12, 1e-12)}


def check(t: Tensor, expected: Any, dtype: Any = None, rtol: float | None = None, atol: float | None = None) -> None:
    check_tensor(t, expected, dtype, rtol, atol, tol=TOL)


rand = rand_array


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


# --- unary float math ------------------------------------------------------------------------------------
# name -> (drivepack op, numpy oracle in float64, (lo, hi) input domain)
UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray], tuple[float, float]]] = {
    "exp": (Tensor.exp, np.exp, (-5, 5)),
    "log": (Tensor.log, np.log, (0.05, 10)),
    "sqrt": (Tensor.sqrt, np.sqrt, (0, 10)),
    "reciprocal": (Tensor.reciprocal, np.reciprocal, (0.2, 5)),
    "sin": (Tensor.sin, np.sin, (-6, 6)),
    "cos": (Tensor.cos, np.cos, (-6, 6)),
    "tan": (Tensor.tan, np.tan, (-1.2, 1.2)),
    "tanh": (Tensor.tanh, np.tanh, (-4, 4)),
    "erf": (Tensor.erf, _erf, (-3, 3)),
    "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-8, 8)),
    "relu": (Tensor.relu, lambda x: np.maximum(x, 0), (-3, 3)),
    "elu": (Tensor.elu, lambda x: np.where(x > 0, x, np.expm1(x)), (-3, 3)),
    "selu": (Tensor.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
             (-3, 3)),
    "gelu": (Tensor.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), (-4, 4)),
    "gelu_tanh": (lambda t: t.gelu(approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), (-4, 4)),
    "softplus": (Tensor.softplus, _softplus, (-30, 30)),
    "mish": (Tensor.mish, lambda x: x * np.tanh(_softplus(x)), (-5, 5)),
    "hardsigmoid": (Tensor.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1), (-5, 5)),
    "hardswish": (Tensor.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, (-5, 5)),
    "leaky_relu": (Tensor.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x), (-3, 3)),
    "leaky_relu_0.2": (lambda t: t.leaky_relu(0.2), lambda x: np.where(x > 0, x, 0.2 * x), (-3, 3)),
    "neg": (Tensor.neg, np.negative, (-3, 3)),
    "abs": (Tensor.abs, np.abs, (-3, 3)),
    "sign": (Tensor.sign, np.sign, (-3, 3)),
    "floor": (Tensor.floor, np.floor, (-3, 3)),
    "ceil": (Tensor.ceil, np.ceil, (-3, 3)),
    "trunc": (Tensor.trunc, np.trunc, (-3, 3)),
    "round": (Tensor.round, np.round, (-3, 3)),
    "square": (Tensor.square, np.square, (-3, 3)),
    "swish": (Tensor.swish, lambda x: x / (1 + np.exp(-x)), (-5, 5)),
    "silu": (Tensor.silu, lambda x: x / (1 + np.exp(-x)), (-5, 5)),
    "exp2": (Tensor.exp2, np.exp2, (-5, 5)),
    "log2": (Tensor.log2, np.log2, (0.05, 10)),
    "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 10)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_float(name: str, dtype: str) -> None:
    fn, ref, (lo, hi) = UNARY[name]
    x = rand((3, 5), dtype, lo, hi, seed=len(name))
    check(fn(Tensor(x)), ref(x.astype(np.float64)).astype(dtype), dtype=dtype)


@pytest.mark.parametrize("name", ["exp", "sqrt", "sin", "tanh", "sigmoid", "relu", "abs", "floor", "gelu"])
def test_unary_float16(name: str) -> None:
    fn, ref, (lo, hi) = UNARY[name]
    x = rand((4, 3), np.float16, lo, hi, seed=1)
    check(fn(Tensor(x)), ref(x.astype(np.float64)), dtype=np.float16, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "reciprocal", "sigmoid", "gelu", "erf"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "int8"])
def test_unary_float_math_on_ints_computes_in_float32(name: str, dtype: str) -> None:
    fn, ref, _ = UNARY[name]
    x = rand((2, 4), dtype, 1, 6, seed=2)
    check(fn(Tensor(x)), ref(x.astype(np.float64)), dtype=np.float32)


@pytest.mark.parametrize("name,ref", [("neg", np.negative), ("abs", np.abs), ("sign", np.sign),
                                      ("floor", lambda x: x), ("ceil", lambda x: x), ("round", lambda x: x),
                                      ("trunc", lambda x: x), ("relu", lambda x: np.maximum(x, 0)),
                                      ("square", np.square)])
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_unary_int_keeps_dtype(name: str, ref: Callable[[np.ndarray], np.ndarray], dtype: str) -> None:
    x = rand((3, 4), dtype, -128, 127, seed=3)
    if name == "neg":
        x[0, 0] = np.iinfo(dtype).min  # wraps like numpy
    with np.errstate(over="ignore"):
        expected = ref(x).astype(dtype)
    check(getattr(Tensor(x), name)(), expected, dtype=dtype)


def test_unary_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e30], dtype=np.float32)
    t = Tensor(x)
    with np.errstate(all="ignore"):
        check(t.exp(), np.exp(x))
        check(t.log(), np.log(x))
        check(t.sqrt(), np.sqrt(x))
        check(t.reciprocal(), np.reciprocal(x))
        check(t.tanh(), np.tanh(x))
        check(t.sigmoid(), 1 / (1 + np.exp(-x)))
        check(t.abs(), np.abs(x))
        check(t.sign(), np.sign(x))
        check(t.relu(), np.maximum(x, 0))  # NaN stays NaN, as onnxruntime's Relu
        check(t.softplus(), np.logaddexp(0, x))


@pytest.mark.parametrize("name,ref", [
    ("relu", lambda x: np.maximum(x, 0)), ("leaky_relu", lambda x: np.where(x > 0, x, 0.01 * x)),
    ("hardsigmoid", lambda x: np.clip(x / 6 + 0.5, 0, 1)), ("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("clip01", lambda x: np.clip(x, 0, 1)), ("max0", lambda x: np.maximum(x, 0)), ("min0", lambda x: np.minimum(x, 0)),
])
def test_nan_propagates_alike_folded_and_in_kernels(name: str, ref: Callable[[np.ndarray], np.ndarray]) -> None:
    """A NaN reaches the output whether the op runs in a kernel or is folded at compile time (jit/ir/alu.py)."""
    fn = {"clip01": lambda t: t.clip(0, 1), "max0": lambda t: t.maximum(0), "min0": lambda t: t.minimum(0)}.get(
        name, lambda t: getattr(t, name)())
    x = np.array([np.nan, np.inf, -np.inf, -2.0, 0.5], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        want = ref(x).astype(np.float32)
    check(fn(Tensor(x)), want)
    for v, w in zip(x, want, strict=True):
        check(fn(Tensor.full((2,), float(v))), np.full(2, w, np.float32))


def test_round_half_to_even_keeps_negative_zero() -> None:
    got = Tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]).round().numpy()
    np.testing.assert_array_equal(got, np.array([0, 2, 2, -0.0, -2, -2, 4], dtype=np.float32))
    assert np.signbit(got[3]) and not np.signbit(got[0])


def test_floor_ceil_trunc_signs() -> None:
    x = np.array([-2.5, -0.5, -0.0, 0.0, 0.5, 2.5, 1e9 + 0.5], dtype=np.float64)
    t = Tensor(x)
    for name, ref in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc), ("round", np.round)):
        got = getattr(t, name)().numpy()
        np.testing.assert_array_equal(got, ref(x))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref(x)))


def test_gelu_and_softplus_extremes() -> None:
    x = np.array([-100.0, -20.0, 0.0, 20.0, 100.0], dtype=np.float32)
    check(Tensor(x).softplus(), np.logaddexp(0, x.astype(np.float64)))
    check(Tensor(x).gelu(), np.where(x > 0, x, 0.0), atol=1e-5)
    check(Tensor(x).softplus(beta=2.0), np.logaddexp(0, 2.0 * x.astype(np.float64)) / 2)
    check(Tensor(x).elu(alpha=0.5), np.where(x > 0, x, 0.5 * np.expm1(x.astype(np.float64))))


# --- binary arithmetic -----------------------------------------------------------------------------------
def _np_trunc_div(a: np.ndarray, b: np.ndarray, dtype: Any) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
        return np.where((a < 0) != (b < 0), -q, q).astype(dtype)
    return np.trunc(a / b)


# name -> (drivepack op, numpy oracle, positive/nonzero divisor needed)
BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any], str]] = {
    "add": (lambda a, b: a + b, np.add, ""),
    "sub": (lambda a, b: a - b, np.subtract, ""),
    "mul": (lambda a, b: a * b, np.multiply, ""),
    "floordiv": (lambda a, b: a // b, np.floor_divide, "nonzero"),
    "div_floor": (lambda a, b: a.div(b, rounding_mode="floor"), np.floor_divide, "nonzero"),
    "div_trunc": (lambda a, b: a.div(b, rounding_mode="trunc"), None, "nonzero"),  # type: ignore[dict-item]
    "mod": (lambda a, b: a % b, np.mod, "nonzero"),
    "fmod": (lambda a, b: a.fmod(b), np.fmod, "nonzero"),
    "maximum": (lambda a, b: a.maximum(b), np.maximum, ""),
    "minimum": (lambda a, b: a.minimum(b), np.minimum, ""),
    "lt": (lambda a, b: a < b, np.less, ""),
    "le": (lambda a, b: a <= b, np.less_equal, ""),
    "gt": (lambda a, b: a > b, np.greater, ""),
    "ge": (lambda a, b: a >= b, np.greater_equal, ""),
    "eq": (lambda a, b: a == b, np.equal, ""),
    "ne": (lambda a, b: a != b, np.not_equal, ""),
}
CMP = {"lt", "le", "gt", "ge", "eq", "ne"}


def _binary_inputs(name: str, dtype: str, shape: tuple[int, ...] = (4, 5)) -> tuple[np.ndarray, np.ndarray]:
    a = rand(shape, dtype, -100, 100, seed=5)
    b = rand(shape, dtype, -9, 9, seed=6)
    if name in CMP:
        b.reshape(-1)[::3] = a.reshape(-1)[::3]  # make equality happen
    if BINARY[name][2] == "nonzero" and np.dtype(dtype).kind != "b":
        b = np.where(b == 0, np.ones_like(b), b)
    return a, b


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "uint8"])
def test_binary(name: str, dtype: str) -> None:
    fn, ref, _ = BINARY[name]
    a, b = _binary_inputs(name, dtype)
    with np.errstate(all="ignore"):
        expected = _np_trunc_div(a, b, dtype) if ref is None else ref(a, b)
    out_dtype = np.bool_ if name in CMP else dtype
    check(fn(Tensor(a), Tensor(b)), np.asarray(expected).astype(out_dtype), dtype=out_dtype)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum", "minimum", "lt", "eq", "floordiv", "mod"])
def test_binary_float16(name: str) -> None:
    fn, ref, _ = BINARY[name]
    a, b = _binary_inputs(name, "float16")
    a = (a / 10).astype(np.float16)
    expected = ref(a.astype(np.float32), b.astype(np.float32))
    out_dtype = np.bool_ if name in CMP else np.float16
    check(fn(Tensor(a), Tensor(b)), np.asarray(expected), dtype=out_dtype, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "minimum", "lt", "le", "gt", "eq", "ne", "ge"])
def test_binary_bool(name: str) -> None:
    fn, ref, _ = BINARY[name]
    a, b = rand((3, 4), np.bool_, seed=1), rand((3, 4), np.bool_, seed=2)
    check(fn(Tensor(a), Tensor(b)), ref(a, b), dtype=np.bool_)


def test_bool_sub_raises_like_numpy() -> None:
    with pytest.raises(DTypeError):
        Tensor([True, False]) - Tensor([True, True])
    with pytest.raises(DTypeError):
        True - Tensor([True, False])
    check(Tensor([True, False]) - 1, np.array([0, -1], dtype=np.int32))  # a weak int operand is a number


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8", "uint8"])
def test_true_div(dtype: str) -> None:
    a, b = _binary_inputs("floordiv", dtype)
    out = Tensor(a) / Tensor(b)
    want = np.float32 if np.dtype(dtype).kind in "iu" else dtype
    check(out, (a.astype(np.float64) / b.astype(np.float64)).astype(want), dtype=want)


def test_sub_negative_constant() -> None:
    # regression: the renderer once printed x - (-1.0) as `(x--1.0f)`, a C syntax error
    x = np.array([1.0, 2.5], dtype=np.float32)
    check(Tensor(x) - (-1.0), x + 1.0)
    check(Tensor(x.astype(np.float64)) - (-0.5), x.astype(np.float64) + 0.5)
    check(Tensor(np.array([1, 2], np.int32)) - (-3), np.array([4, 5], np.int32))
    check(Tensor(x).neg().neg(), x)


def test_kernel_with_folded_away_input() -> None:
    # regression: a kernel whose loads all fold away was launched with more buffers than its C signature takes
    check(Tensor([1, 2, 3]) * 0, np.zeros(3, np.int32))
    check(Tensor(np.array([1, 20, 250], np.uint8)).maximum(Tensor(np.array(246, np.uint8))).minimum(10),
          np.full(3, 10, np.uint8))


NARROW_INTERMEDIATES = {
    "int8_mul_then_cast": (lambda: (Tensor(np.array([88, -100], np.int8)) * 3).cast(dtypes.int32),
                           np.array([8, -44], np.int32)),
    "uint8_add_then_sum": (lambda: (Tensor(np.array([200, 1], np.uint8)) + 100).sum(), np.uint32(44 + 101)),
    "int16_mul_then_compare": (lambda: (Tensor(np.array([300], np.int16)) * 200) < 0, np.array([True])),
}


# regression: an inlined narrow ALU result must wrap/round to its dtype (C computes it in int/float)
@pytest.mark.parametrize("case", sorted(NARROW_INTERMEDIATES))
def test_narrow_intermediates_wrap_before_use(case: str) -> None:
    fn, expected = NARROW_INTERMEDIATES[case]
    check(fn(), expected)


@pytest.mark.cpu_only
def test_native_half_rounds_each_op() -> None:
    """Native float16 (the CPU's _Float16) overflows at the multiply. Emulated half (OPENCL on PoCL, which lacks
    cl_khr_fp16) computes a fused chain in float32 and rounds at the store, giving 30000: by design, the same
    trade as the reference system; an intermediate stored to memory (contiguous) rounds on every target."""
    check((Tensor(np.array([60000], np.float16)) * 2) / 4, np.array([np.inf], np.float16))


def test_half_stored_between_ops_rounds_on_every_target() -> None:
    x = (Tensor(np.array([60000], np.float16)) * 2).contiguous() / 4
    check(x, np.array([np.inf], np.float16))


def test_narrow_results_wrap_when_stored() -> None:
    check(Tensor(np.array([88, -100], np.int8)) * 3, np.array([8, -44], np.int8), dtype=np.int8)
    check(Tensor(np.array([200], np.uint8)) + 100, np.array([44], np.uint8), dtype=np.uint8)


def test_div_by_zero_float() -> None:
    a = np.array([1.0, -1.0, 0.0, np.inf, np.nan], dtype=np.float32)
    with np.errstate(all="ignore"):
        check(Tensor(a) / 0.0, a / np.float32(0))
        check(Tensor(a) / Tensor(np.zeros(5, np.float32)), a / np.zeros(5, np.float32))
        check(Tensor(a).reciprocal(), 1 / a)


def test_int_div_mod_by_zero_is_zero_like_numpy() -> None:
    a = np.array([7, -7, 0, 3], dtype=np.int32)
    z = np.zeros(4, dtype=np.int32)
    with np.errstate(all="ignore"):
        check(Tensor(a) // Tensor(z), a // z)
        check(Tensor(a) % Tensor(z), a % z)


@pytest.mark.parametrize("a,b", [(7, 3), (-7, 3), (7, -3), (-7, -3), (6, 3), (-6, 3), (0, -5), (1, 7), (-1, 7)])
@pytest.mark.parametrize("dtype", ["int32", "int8", "float32"])
def test_div_mod_signs(a: int, b: int, dtype: str) -> None:
    x, y = np.array([a], dtype=dtype), np.array([b], dtype=dtype)
    check(Tensor(x) // Tensor(y), x // y)
    check(Tensor(x) % Tensor(y), x % y)
    check(Tensor(x).fmod(Tensor(y)), np.fmod(x, y))
    check(Tensor(x).div(Tensor(y), rounding_mode="trunc"), _np_trunc_div(x, y, dtype))


def test_div_mod_scalar_operands_both_sides() -> None:
    x = np.array([-7, -3, -1, 1, 3, 8], dtype=np.int32)
    t = Tensor(x)
    check(t // 3, x // 3, dtype=np.int32)
    check(t % 3, x % 3, dtype=np.int32)
    check(t % -3, x % -3, dtype=np.int32)
    check(t // -2, x // -2, dtype=np.int32)
    check(17 // t, 17 // x, dtype=np.int32)
    check(17 % t, 17 % x, dtype=np.int32)
    check(-17 % t, -17 % x, dtype=np.int32)
    check(t.fmod(-3), np.fmod(x, -3), dtype=np.int32)
    xf = x.astype(np.float32)
    check(Tensor(xf) % 2.5, xf % np.float32(2.5))
    check(Tensor(xf) % -2.5, xf % np.float32(-2.5))
    check(5.5 % Tensor(xf), np.float32(5.5) % xf)
    check(Tensor(xf) // 2.5, xf // np.float32(2.5))


def test_invalid_rounding_mode_raises() -> None:
    with pytest.raises(ValueError):
        Tensor([1, 2]).div(2, rounding_mode="nearest")
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0]).div(2, rounding_mode="nearest")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_float(dtype: str) -> None:
    a = rand((3, 4), dtype, 0.1, 3, seed=1)
    b = rand((3, 4), dtype, -2, 2, seed=2)
    check(Tensor(a) ** Tensor(b), a ** b, dtype=dtype)
    check(Tensor(a) ** 2, a ** 2, dtype=dtype)
    check(Tensor(a) ** 0.5, np.sqrt(a), dtype=dtype)
    check(2 ** Tensor(b), np.power(2, b.astype(np.float64)).astype(dtype), dtype=dtype)
    neg = -a
    with np.errstate(invalid="ignore"):
        check(Tensor(neg) ** 3.0, neg ** 3, dtype=dtype)
        check(Tensor(neg) ** 0.5, neg ** 0.5, dtype=dtype)  # nan


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_pow_int(dtype: str) -> None:
    a = rand((3, 4), dtype, -5, 5, seed=1)
    b = rand((3, 4), dtype, 0, 3, seed=2)
    check(Tensor(a) ** Tensor(b), a ** b, dtype=dtype)
    check(Tensor(a) ** 2, a ** 2, dtype=dtype)
    check(Tensor(a).pow(3), (a ** 3).astype(dtype), dtype=dtype)


def test_maximum_minimum_nan_propagates() -> None:
    a = np.array([1.0, np.nan, 3.0, np.nan, -np.inf], dtype=np.float32)
    b = np.array([np.nan, 2.0, 1.0, np.nan, 0.0], dtype=np.float32)
    check(Tensor(a).maximum(Tensor(b)), np.maximum(a, b))
    check(Tensor(a).minimum(Tensor(b)), np.minimum(a, b))
    check(Tensor(a).maximum(0.5), np.maximum(a, np.float32(0.5)))
    check(Tensor(a).minimum(0.5), np.minimum(a, np.float32(0.5)))


def test_comparisons_with_nan() -> None:
    a = np.array([1.0, np.nan, 3.0, np.nan], dtype=np.float32)
    b = np.array([np.nan, 2.0, 3.0, np.nan], dtype=np.float32)
    ta, tb = Tensor(a), Tensor(b)
    for f in (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal):
        got = {np.less: ta < tb, np.less_equal: ta <= tb, np.greater: ta > tb, np.greater_equal: ta >= tb,
               np.equal: ta == tb, np.not_equal: ta != tb}[f]
        check(got, f(a, b), dtype=np.bool_)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "lt", "gt", "le", "ge", "eq", "ne", "maximum", "minimum",
                                "truediv", "pow"])
def test_scalar_operands_both_sides(op: str) -> None:
    x = np.array([[0.5, 1.0, 2.0], [3.0, 4.5, 6.0]], dtype=np.float32)
    t = Tensor(x)
    s = 2.0
    table: dict[str, tuple[Any, Any, Any, Any]] = {
        "add": (t + s, s + t, x + s, s + x), "sub": (t - s, s - t, x - s, s - x),
        "mul": (t * s, s * t, x * s, s * x), "lt": (t < s, s < t, x < s, s < x),
        "gt": (t > s, s > t, x > s, s > x), "le": (t <= s, s <= t, x <= s, s <= x),
        "ge": (t >= s, s >= t, x >= s, s >= x), "eq": (t == s, s == t, x == s, s == x),
        "ne": (t != s, s != t, x != s, s != x), "truediv": (t / s, s / t, x / s, s / x),
        "maximum": (t.maximum(s), t.maximum(s), np.maximum(x, s), np.maximum(x, s)),
        "minimum": (t.minimum(s), t.minimum(s), np.minimum(x, s), np.minimum(x, s)),
        "pow": (t ** s, s ** t, x ** s, s ** x),
    }
    g1, g2, e1, e2 = table[op]
    check(g1, np.asarray(e1))
    check(g2, np.asarray(e2))
