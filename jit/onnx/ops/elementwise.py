"""ONNX elementwise ops: arithmetic, math functions, activations, comparisons, logic, Cast, BitCast."""

from __future__ import annotations

import math
from functools import reduce

import ml_dtypes
import numpy as np
from onnx import helper

from jit.common.dtype import DType, dtypes, from_numpy
from jit.common.errors import UnsupportedOp
from jit.frontend.tensor import Tensor
from jit.onnx.ops.nn_helpers import compute_dtype
from jit.onnx.registry import OpContext, onnx_op


def onnx_dtype(code: int) -> DType:
    """The drivepack dtype of an ONNX TensorProto element type code."""
    try:
        return from_numpy(helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedOp(f"element type {helper.tensor_dtype_to_string(code)} is not supported") from None


def _binary(fn_name: str) -> None:
    @onnx_op(fn_name)
    def handler(ctx: OpContext) -> Tensor:
        a, b = ctx.t(0), ctx.t(1)
        return _strict(a, b, BINARY[fn_name])


def _strict(a: Tensor, b: Tensor, fn: str) -> Tensor:
    """ONNX binary ops take operands of one dtype; the result keeps it (no promotion)."""
    out = getattr(a, fn)(b.cast(a.dtype))
    return out


BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}
for _name in BINARY:
    _binary(_name)


@onnx_op("Div")
def div(ctx: OpContext) -> Tensor:
    a, b = ctx.t(0), ctx.t(1).cast(ctx.t(0).dtype)
    if a.dtype.is_float:
        return a.div(b)
    return a.div(b, rounding_mode="trunc")


@onnx_op("Mod")
def mod(ctx: OpContext) -> Tensor:
    a, b = ctx.t(0), ctx.t(1).cast(ctx.t(0).dtype)
    if ctx.attr("fmod", 0):
        return a.fmod(b)
    return a.mod(b)


@onnx_op("Pow")
def pow_(ctx: OpContext) -> Tensor:
    a, b = ctx.t(0), ctx.t(1)
    if a.dtype.is_float:
        return a.pow(b.cast(a.dtype))
    # integer base: compute in float64 so large exact results survive, then back to the base's dtype
    return a.cast(dtypes.float64).pow(b.cast(dtypes.float64)).cast(a.dtype)


def _unary(name: str, fn: str) -> None:
    @onnx_op(name)
    def handler(ctx: OpContext) -> Tensor:
        x = ctx.t(0)
        out = getattr(x, fn)()
        return out.cast(x.dtype) if out.dtype != x.dtype and not out.dtype.is_bool else out


for _name, _fn in {"Neg": "neg", "Abs": "abs", "Sign": "sign", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
                   "Reciprocal": "reciprocal", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh",
                   "Sigmoid": "sigmoid", "Relu": "relu", "Erf": "erf", "Floor": "floor", "Ceil": "ceil",
                   "Round": "round", "Softplus": "softplus", "Mish": "mish", "HardSwish": "hardswish"}.items():
    _unary(_name, _fn)


@onnx_op("Identity")
def identity(ctx: OpContext) -> Tensor:
    return ctx.t(0)


@onnx_op("Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
def inverse_trig(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    op = ctx.node.op_type
    if op == "Sinh":
        return ((x.exp() - (-x).exp()) * 0.5).cast(x.dtype)
    if op == "Cosh":
        return ((x.exp() + (-x).exp()) * 0.5).cast(x.dtype)
    if op == "Asinh":
        # on |x| (odd function): x + sqrt(x*x + 1) at -inf is -inf + inf = NaN; past 1e18 (where x*x overflows
        # float32) asinh is log(2|x|) within rounding
        a = x.abs()
        r = (a > 1e18).where(a.log() + math.log(2), (a + (a * a + 1).sqrt()).log())
        return (x < 0).where(-r, r).cast(x.dtype)
    if op == "Acosh":
        return (x + (x * x - 1).sqrt()).log().cast(x.dtype)
    if op == "Atanh":
        return (((1 + x) / (1 - x)).log() * 0.5).cast(x.dtype)
    if op == "Atan":
        return _atan(x)
    if op == "Asin":
        return _atan(x / (1 - x * x).sqrt()).cast(x.dtype)
    return (math.pi / 2 - _atan(x / (1 - x * x).sqrt())).cast(x.dtype)  # Acos


def _atan(x: Tensor) -> Tensor:
    """atan by range reduction to |t| <= tan(pi/12) and a short odd series (float32-accurate)."""
    ax = x.abs()
    inv = ax > 1
    t = inv.where(1 / ax.maximum(1e-30), ax)
    shift = t > 0.2679491924311227
    t2 = shift.where((t * math.sqrt(3) - 1) / (t + math.sqrt(3)), t)
    z = t2 * t2
    series = t2 * (1 - z * (1 / 3 - z * (1 / 5 - z * (1 / 7 - z * (1 / 9 - z / 11)))))
    r = shift.where(series + math.pi / 6, series)
    r = inv.where(math.pi / 2 - r, r)
    return (x < 0).where(-r, r).cast(x.dtype)


@onnx_op("LeakyRelu")
def leaky_relu(ctx: OpContext) -> Tensor:
    return ctx.t(0).leaky_relu(ctx.attr("alpha", 0.01))


@onnx_op("Elu")
def elu(ctx: OpContext) -> Tensor:
    return ctx.t(0).elu(ctx.attr("alpha", 1.0))


@onnx_op("Selu")
def selu(ctx: OpContext) -> Tensor:
    return ctx.t(0).selu(ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875))


@onnx_op("Celu")
def celu(ctx: OpContext) -> Tensor:
    x, alpha = ctx.t(0), ctx.attr("alpha", 1.0)
    return x.maximum(0) + ((x / alpha).exp() - 1).minimum(0) * alpha


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return (x > ctx.attr("alpha", 1.0)).where(x, 0)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx: OpContext) -> Tensor:
    return ctx.t(0).hardsigmoid(ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5))


@onnx_op("Softsign")
def softsign(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return x / (1 + x.abs())


@onnx_op("Gelu")
def gelu(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return x.gelu(ctx.attr("approximate", "none")).cast(x.dtype)


@onnx_op("Swish")
def swish(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return x * (x * ctx.attr("alpha", 1.0)).sigmoid()


@onnx_op("SwiGLU")
def swiglu(ctx: OpContext) -> Tensor:
    """``a * sigmoid(alpha * a) * b`` (the sigmoid rounded to the input dtype, as the reference)."""
    a, b = ctx.t(0), ctx.t(1)
    alpha = float(ctx.attr("alpha", 1.0) or 1.0)
    cd = compute_dtype(a.dtype)
    s = (a.cast(cd) * alpha).sigmoid().cast(a.dtype)
    return (a.cast(cd) * s.cast(cd) * b.cast(cd)).cast(a.dtype)


@onnx_op("PRelu")
def prelu(ctx: OpContext) -> Tensor:
    x, slope = ctx.t(0), ctx.t(1)
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        slope = slope.reshape(-1, *([1] * (x.ndim - 2)))  # old exports: one slope per channel (axis 1)
    return (x < 0).where(x * slope, x)


@onnx_op("Clip")
def clip(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", None), ctx.attr("max", None)
        return x.clip(lo, hi)
    lo_t, hi_t = ctx.opt(1), ctx.opt(2)
    # the spec's defaults are numeric_limits::lowest() and max(): an omitted bound still clips an infinity to the
    # largest finite value, as onnxruntime does (NaN stays NaN: MAX and MIN propagate it)
    finite = _finite_max(x.dtype)
    out = x
    if lo_t is not None:
        out = out.maximum(lo_t.cast(x.dtype))
    elif finite is not None:
        out = out.maximum(-finite)
    if hi_t is not None:
        out = out.minimum(hi_t.cast(x.dtype))
    elif finite is not None:
        out = out.minimum(finite)
    return out


def _finite_max(d: DType) -> float | None:
    """The largest finite value of an IEEE float type with infinities (None for others)."""
    if d not in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        return None
    return (2 - 2.0 ** -d.mant_bits) * 2.0 ** (2 ** (d.exp_bits - 1) - 1)


@onnx_op("Shrink")
def shrink(ctx: OpContext) -> Tensor:
    x, lambd, bias = ctx.t(0), ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


def _variadic(name: str, fn: str) -> None:
    @onnx_op(name)
    def handler(ctx: OpContext) -> Tensor:
        xs = [ctx.t(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
        d = xs[0].dtype
        out = reduce(lambda a, b: getattr(a, fn)(b.cast(d)), xs)
        return out


for _name, _fn in {"Max": "maximum", "Min": "minimum", "Sum": "add"}.items():
    _variadic(_name, _fn)


@onnx_op("Mean")
def mean(ctx: OpContext) -> Tensor:
    xs = [ctx.t(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    return (reduce(lambda a, b: a + b, xs) / len(xs)).cast(xs[0].dtype)


def _compare(name: str, fn: str) -> None:
    @onnx_op(name)
    def handler(ctx: OpContext) -> Tensor:
        a, b = ctx.t(0), ctx.t(1)
        return getattr(a, fn)(b.cast(a.dtype))


for _name, _fn in {"Equal": "__eq__", "Less": "__lt__", "Greater": "__gt__", "LessOrEqual": "__le__",
                   "GreaterOrEqual": "__ge__"}.items():
    _compare(_name, _fn)


def _logic(name: str, fn: str) -> None:
    @onnx_op(name)
    def handler(ctx: OpContext) -> Tensor:
        return getattr(ctx.t(0), fn)(ctx.t(1))


for _name, _fn in {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor", "BitwiseAnd": "bitwise_and",
                   "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}.items():
    _logic(_name, _fn)


@onnx_op("Not")
def not_(ctx: OpContext) -> Tensor:
    return ctx.t(0).logical_not()


@onnx_op("BitwiseNot")
def bitwise_not(ctx: OpContext) -> Tensor:
    return ctx.t(0).bitwise_not()


@onnx_op("BitShift")
def bit_shift(ctx: OpContext) -> Tensor:
    x, n = ctx.t(0), ctx.t(1).cast(ctx.t(0).dtype)
    # the shift count is unsigned: a negative or >= width count shifts every bit out (C leaves it undefined)
    too_far = (n < 0) | (n >= x.dtype.bits)
    safe = too_far.where(0, n)
    if ctx.attr("direction") == "LEFT":
        return too_far.where(0, x.lshift(safe))
    return too_far.where((x < 0).where(-1, 0) if not x.dtype.is_unsigned else 0, x.rshift(safe))


@onnx_op("Where")
def where(ctx: OpContext) -> Tensor:
    x, y = ctx.t(1), ctx.t(2)
    return ctx.t(0).where(x, y.cast(x.dtype))


@onnx_op("IsNaN")
def isnan(ctx: OpContext) -> Tensor:
    return ctx.t(0).isnan()


@onnx_op("IsInf")
def isinf(ctx: OpContext) -> Tensor:
    return ctx.t(0).isinf(bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1)))


def _cast_to(x: Tensor, to: DType, saturate: bool) -> Tensor:
    if saturate and to.is_float and to.itemsize == 1 and x.dtype.is_float:
        # fp8 saturation (ONNX Cast saturate=1): out-of-range values and +-inf clamp to the largest finite
        # value of the format; NaN stays NaN (clip propagates it)
        hi = float(ml_dtypes.finfo(_np_of(to)).max)
        x = x.clip(-hi, hi)
    return x.cast(to)


def _np_of(d: DType) -> np.dtype:
    from jit.common.dtype import to_numpy
    return to_numpy(d)


@onnx_op("Cast")
def cast(ctx: OpContext) -> Tensor:
    return _cast_to(ctx.t(0), onnx_dtype(ctx.attr("to")), bool(ctx.attr("saturate", 1)))


@onnx_op("CastLike")
def cast_like(ctx: OpContext) -> Tensor:
    return _cast_to(ctx.t(0), ctx.t(1).dtype, bool(ctx.attr("saturate", 1)))


@onnx_op("BitCast")
def bitcast(ctx: OpContext) -> Tensor:
    """Reinterpret the bits of each element as another type of the same width."""
    return ctx.t(0).bitcast(onnx_dtype(int(ctx.attr("to"))))
