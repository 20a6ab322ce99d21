"""Composite nn ops (jit/frontend/nn_ops.py, pooling.py) against straightforward numpy references written here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops
from jit.schedule.kernels import create_schedule

RTOL, ATOL = 1e-4, 1e-4
Pads = list[tuple[int, int]]


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape) * 7919 + len(shape)).standard_normal(shape).astype(np.float32)


def close(got: Tensor, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> None:
    out = got.numpy()
    assert out.shape == want.shape, f"shape {out.shape} != {want.shape}"
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def n_kernels(t: Tensor) -> int:
    """Kernels realizing ``t`` would run (call before realizing it)."""
    return len(create_schedule([t.uop], t.device)[0])


def norm_pads(padding: int | tuple[int, ...], nd: int) -> Pads:
    if isinstance(padding, int):
        return [(padding, padding)] * nd
    if len(padding) == nd:
        return [(p, p) for p in padding]
    return [(padding[i], padding[i + nd]) for i in range(nd)]


def tup(v: int | tuple[int, ...], nd: int) -> tuple[int, ...]:
    return (v,) * nd if isinstance(v, int) else tuple(v)


# --- numpy references --------------------------------------------------------------------------------
def ref_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, groups: int, stride: tuple[int, ...],
             dilation: tuple[int, ...], pads: Pads) -> np.ndarray:
    nd = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    cout, cin_g, *k = w.shape
    cout_g = cout // groups
    out_sp = [(xp.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((x.shape[0], cout, *out_sp))
    for g in range(groups):
        xs = xp[:, g * cin_g:(g + 1) * cin_g]
        ws = w[g * cout_g:(g + 1) * cout_g].astype(np.float64)
        for off in np.ndindex(*k):
            sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                       for o, d, n, s in zip(off, dilation, out_sp, stride, strict=True))
            patch = xs[(slice(None), slice(None), *sl)]
            out[:, g * cout_g:(g + 1) * cout_g] += np.einsum("nc...,oc->no...", patch, ws[(slice(None), slice(None),
                                                                                          *off)])
    if b is not None:
        out += b.reshape(1, cout, *[1] * nd)
    return out.astype(np.float32)


def ref_conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, groups: int, stride: tuple[int, ...],
                       dilation: tuple[int, ...], pads: Pads, out_pad: tuple[int, ...]) -> np.ndarray:
    """Scatter definition: out[i*s + k*d - pad_begin] += x[i] * w[k]."""
    nd = x.ndim - 2
    cin, cout_g, *k = w.shape
    cin_g = cin // groups
    sp = x.shape[2:]
    out_sp = [(sp[i] - 1) * stride[i] - pads[i][0] - pads[i][1] + dilation[i] * (k[i] - 1) + out_pad[i] + 1
              for i in range(nd)]
    full = [(sp[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 + out_pad[i] + pads[i][0] for i in range(nd)]
    buf = np.zeros((x.shape[0], cout_g * groups, *full))
    for g in range(groups):
        xs = x[:, g * cin_g:(g + 1) * cin_g].astype(np.float64)
        ws = w[g * cin_g:(g + 1) * cin_g].astype(np.float64)
        for off in np.ndindex(*k):
            contrib = np.einsum("nc...,co->no...", xs, ws[(slice(None), slice(None), *off)])
            sl = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                       for o, d, n, s in zip(off, dilation, sp, stride, strict=True))
            buf[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *sl)] += contrib
    out = buf[(slice(None), slice(None), *[slice(p[0], p[0] + n) for p, n in zip(pads, out_sp, strict=True)])]
    if b is not None:
        out = out + b.reshape(1, -1, *[1] * nd)
    return out.astype(np.float32)


def pool_out_size(n: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool) -> int:
    span = n + pb + pe - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + pb:
        out -= 1
    return out


def ref_pool(x: np.ndarray, kind: str, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
             pads: Pads, ceil_mode: bool = False, count_include_pad: bool = True, p: float = 2.0) -> np.ndarray:
    """Pool the trailing len(kernel) dims by explicit window loops."""
    nd = len(kernel)
    lead, sp = x.shape[:-nd], x.shape[-nd:]
    outs = [pool_out_size(sp[i], kernel[i], stride[i], dilation[i], *pads[i], ceil_mode) for i in range(nd)]
    res = np.zeros((*lead, *outs))
    for o in np.ndindex(*outs):
        vals, n_pad = [], 0
        for kk in np.ndindex(*kernel):
            pos = [o[i] * stride[i] - pads[i][0] + kk[i] * dilation[i] for i in range(nd)]
            if all(0 <= pos[i] < sp[i] for i in range(nd)):
                vals.append(x[(Ellipsis, *pos)].astype(np.float64))
            elif all(-pads[i][0] <= pos[i] < sp[i] + pads[i][1] for i in range(nd)):
                n_pad += 1  # explicit padding (ceil_mode's extra cells are never counted)
        stack = np.stack(vals)
        if kind == "max":
            res[(Ellipsis, *o)] = stack.max(0)
        elif kind == "lp":
            res[(Ellipsis, *o)] = (np.abs(stack) ** p).sum(0) ** (1 / p)
        else:
            res[(Ellipsis, *o)] = stack.sum(0) / (len(vals) + (n_pad if count_include_pad else 0))
    return res.astype(x.dtype)


def ref_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


# --- matmul ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)), ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 1, 3, 4), (5, 4, 6)),
    ((3, 1, 1, 4), (2, 4, 2)), ((7,), (2, 7, 3)), ((2, 3, 5), (5,)), ((1, 1), (1, 1)),
])
def test_matmul(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = rand(*sa), rand(*sb, seed=1)
    close(Tensor(a) @ Tensor(b), np.matmul(a, b))
    close(Tensor(a).dot(Tensor(b)), np.matmul(a, b))


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_matmul_int(dtype: type) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (2, 3, 8)).astype(dtype)
    b = rng.integers(-50, 50, (8, 4)).astype(dtype)
    out = Tensor(a) @ Tensor(b)
    want = np.matmul(a, b)  # int8 wraps, as numpy's does
    assert out.numpy().dtype == want.dtype
    np.testing.assert_array_equal(out.numpy(), want)


def test_matmul_one_kernel() -> None:
    assert n_kernels(Tensor(rand(2, 3, 4)) @ Tensor(rand(4, 5))) == 1


@pytest.mark.parametrize("sa,sb", [((3, 4), (5, 6)), ((4,), (5,)), ((2, 3, 4), (3, 4, 2))])
def test_matmul_shape_error(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError) as err:
        Tensor(rand(*sa)) @ Tensor(rand(*sb))
    assert str(sa) in str(err.value) and str(sb) in str(err.value)


def test_linear_gemm() -> None:
    x, w, b = rand(3, 5), rand(4, 5, seed=1), rand(4, seed=2)
    close(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w.T + b)
    close(Tensor(rand(2, 3, 5)).linear(Tensor(w)), rand(2, 3, 5) @ w.T)
    a, bb, c = rand(5, 3), rand(4, 5, seed=1), rand(1, 4, seed=2)
    close(Tensor(a).gemm(Tensor(bb), Tensor(c), alpha=0.5, beta=2.0, trans_a=True, trans_b=True),
          0.5 * a.T @ bb.T + 2.0 * c)
    close(Tensor(a.T).gemm(Tensor(bb.T)), a.T @ bb.T)


# --- convolution -------------------------------------------------------------------------------------
CONV_CASES = [
    # (input shape, weight shape, groups, stride, dilation, padding, bias)
    ((2, 3, 9), (4, 3, 3), 1, 1, 1, 0, True),
    ((1, 4, 10), (6, 2, 3), 2, 2, 2, (1, 2), False),
    ((2, 3, 7, 8), (4, 3, 3, 3), 1, 1, 1, 1, True),
    ((1, 4, 8, 7), (4, 1, 3, 2), 4, (2, 1), (1, 2), (1, 0), True),
    ((1, 6, 9, 9), (4, 3, 2, 3), 2, 2, 1, (0, 1, 2, 1), True),  # ONNX pads: asymmetric
    ((1, 2, 5, 6), (3, 2, 1, 1), 1, 1, 1, 0, False),
    ((1, 2, 5, 5, 6), (4, 2, 2, 3, 2), 1, (1, 2, 1), 1, (1, 0, 1), True),
    ((1, 4, 6, 5, 5), (2, 2, 3, 1, 2), 2, 2, (1, 1, 2), (1, 0, 0, 0, 2, 1), False),
]


@pytest.mark.parametrize("xs,ws,groups,stride,dilation,padding,has_bias", CONV_CASES)
def test_conv(xs: tuple[int, ...], ws: tuple[int, ...], groups: int, stride: int | tuple[int, ...],
              dilation: int | tuple[int, ...], padding: int | tuple[int, ...], has_bias: bool) -> None:
    nd = len(xs) - 2
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[0], seed=2) if has_bias else None
    want = ref_conv(x, w, b, groups, tup(stride, nd), tup(dilation, nd), norm_pads(padding, nd))
    out = Tensor(x).conv2d(Tensor(w), Tensor(b) if b is not None else None, groups=groups, stride=stride,
                           dilation=dilation, padding=padding)
    assert n_kernels(out) == 1  # conv and bias fuse into one reduce
    close(out, want)


def test_conv_int() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(-9, 9, (1, 4, 5, 6)).astype(np.int32)
    w = rng.integers(-9, 9, (2, 2, 2, 3)).astype(np.int32)
    out = Tensor(x).conv2d(Tensor(w), groups=2, stride=(1, 2), padding=1)
    want = ref_conv(x.astype(np.float32), w.astype(np.float32), None, 2, (1, 2), (1, 1), [(1, 1)] * 2)
    assert out.dtype == Tensor(x).dtype
    np.testing.assert_array_equal(out.numpy(), want.astype(np.int32))


def test_conv_aliases_and_pairs() -> None:
    x, w = rand(1, 2, 6, 5), rand(3, 2, 2, 2, seed=1)
    want = ref_conv(x, w, None, 1, (1, 1), (1, 1), [(2, 0), (1, 1)])
    close(Tensor(x).conv(Tensor(w), padding=((2, 0), (1, 1))), want)
    x1, w1 = rand(1, 2, 8), rand(3, 2, 3, seed=1)
    close(Tensor(x1).conv1d(Tensor(w1), padding=1), ref_conv(x1, w1, None, 1, (1,), (1,), [(1, 1)]))


def test_conv_errors() -> None:
    with pytest.raises(ShapeError, match="channels"):
        Tensor(rand(1, 3, 5, 5)).conv2d(Tensor(rand(4, 2, 3, 3)))
    with pytest.raises(ShapeError, match="channels"):
        Tensor(rand(1, 4, 5, 5)).conv2d(Tensor(rand(3, 2, 3, 3)), groups=2)  # 3 outputs, 2 groups
    with pytest.raises(ShapeError):
        Tensor(rand(1, 3, 5)).conv2d(Tensor(rand(4, 3, 3, 3)))
    with pytest.raises(ShapeError, match="bias"):
        Tensor(rand(1, 3, 5, 5)).conv2d(Tensor(rand(4, 3, 3, 3)), Tensor(rand(3)))
    with pytest.raises(ShapeError):
        Tensor(rand(1, 3, 2, 2)).conv2d(Tensor(rand(4, 3, 3, 3)))


CONVT_CASES = [
    # (input shape, weight shape, groups, stride, dilation, padding, output_padding, bias)
    ((1, 2, 5), (2, 3, 3), 1, 1, 1, 0, 0, True),
    ((2, 4, 4), (4, 2, 3), 2, 2, 1, 1, 1, False),
    ((1, 2, 4, 5), (2, 3, 3, 3), 1, 2, 1, 1, 1, True),
    ((1, 4, 3, 4), (4, 1, 2, 3), 2, (3, 2), (2, 1), (0, 1), (1, 0), True),
    ((1, 2, 4, 4), (2, 2, 3, 3), 1, 2, 2, (1, 0, 3, 2), 0, False),  # ONNX pads: asymmetric
    ((1, 2, 4, 4), (2, 2, 2, 2), 1, 3, 1, 2, 1, False),  # padding > dilation*(k-1): the border is cropped
    ((1, 2, 3, 3), (2, 2, 3, 3), 1, 1, 1, 2, 0, False),  # padding == d*(k-1): no extra border
    ((1, 2, 3, 3, 2), (2, 2, 2, 2, 3), 1, (2, 1, 2), 1, (0, 1, 1), (1, 0, 1), True),
]


@pytest.mark.parametrize("xs,ws,groups,stride,dilation,padding,out_pad,has_bias", CONVT_CASES)
def test_conv_transpose(xs: tuple[int, ...], ws: tuple[int, ...], groups: int, stride: int | tuple[int, ...],
                        dilation: int | tuple[int, ...], padding: int | tuple[int, ...],
                        out_pad: int | tuple[int, ...], has_bias: bool) -> None:
    nd = len(xs) - 2
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[1] * groups, seed=2) if has_bias else None
    want = ref_conv_transpose(x, w, b, groups, tup(stride, nd), tup(dilation, nd), norm_pads(padding, nd),
                              tup(out_pad, nd))
    out = Tensor(x).conv_transpose2d(Tensor(w), Tensor(b) if b is not None else None, groups=groups, stride=stride,
                                     dilation=dilation, padding=padding, output_padding=out_pad)
    assert n_kernels(out) == 1
    close(out, want)


def test_conv_transpose_channel_error() -> None:
    with pytest.raises(ShapeError, match="channels"):
        Tensor(rand(1, 3, 4, 4)).conv_transpose2d(Tensor(rand(2, 3, 3, 3)))


# --- pooling -----------------------------------------------------------------------------------------
POOL_CASES = [
    # (input shape, kernel, stride, dilation, padding, ceil_mode)
    ((1, 2, 6, 6), (2, 2), None, 1, 0, False),
    ((2, 1, 7, 6), (3, 3), 2, 1, 1, False),
    ((1, 2, 7, 7), (3, 3), 2, 1, 1, True),
    ((1, 1, 6, 8), (3, 2), (2, 3), 1, (1, 0), True),
    ((1, 1, 8, 7), (2, 3), (3, 2), (2, 1), (0, 1, 1, 1), True),  # ONNX pads
    ((1, 2, 5, 5), (2, 2), 2, 1, 0, True),
    ((2, 3, 9), (3,), 2, 1, 1, True),
    ((1, 1, 4, 5, 5), (2, 3, 2), (2, 2, 1), 1, (1, 1, 0), True),
]


@pytest.mark.parametrize("xs,kernel,stride,dilation,padding,ceil_mode", POOL_CASES)
def test_max_pool(xs: tuple[int, ...], kernel: tuple[int, ...], stride: int | tuple[int, ...] | None,
                  dilation: int | tuple[int, ...], padding: int | tuple[int, ...], ceil_mode: bool) -> None:
    nd = len(kernel)
    x = rand(*xs)
    st = kernel if stride is None else tup(stride, nd)
    want = ref_pool(x, "max", kernel, st, tup(dilation, nd), norm_pads(padding, nd), ceil_mode)
    out = Tensor(x).max_pool2d(kernel, stride, dilation=dilation, padding=padding, ceil_mode=ceil_mode)
    assert n_kernels(out) == 1
    close(out, want)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("xs,kernel,stride,dilation,padding,ceil_mode", POOL_CASES)
def test_avg_pool(xs: tuple[int, ...], kernel: tuple[int, ...], stride: int | tuple[int, ...] | None,
                  dilation: int | tuple[int, ...], padding: int | tuple[int, ...], ceil_mode: bool,
                  count_include_pad: bool) -> None:
    nd = len(kernel)
    x = rand(*xs)
    st = kernel if stride is None else tup(stride, nd)
    want = ref_pool(x, "avg", kernel, st, tup(dilation, nd), norm_pads(padding, nd), ceil_mode, count_include_pad)
    out = Tensor(x).avg_pool2d(kernel, stride, padding=padding, ceil_mode=ceil_mode,
                               count_include_pad=count_include_pad, dilation=dilation)
    assert n_kernels(out) == 1
    close(out, want)


def test_pool_int_kernel_and_aliases() -> None:
    x = rand(1, 2, 7, 6)
    close(Tensor(x).max_pool2d(3, 2, padding=1), ref_pool(x, "max", (3, 3), (2, 2), (1, 1), [(1, 1)] * 2))
    close(Tensor(x).avg_pool2d(2), ref_pool(x, "avg", (2, 2), (2, 2), (1, 1), [(0, 0)] * 2))
    x1 = rand(2, 3, 9)
    close(Tensor(x1).max_pool1d(3, 2), ref_pool(x1, "max", (3,), (2,), (1,), [(0, 0)]))
    close(Tensor(x1).avg_pool1d(2, 1, padding=1, count_include_pad=False),
          ref_pool(x1, "avg", (2,), (1,), (1,), [(1, 1)], count_include_pad=False))
    x3 = rand(1, 1, 4, 4, 4)
    close(Tensor(x3).max_pool3d(2), ref_pool(x3, "max", (2, 2, 2), (2, 2, 2), (1, 1, 1), [(0, 0)] * 3))


def test_max_pool_int_dtype() -> None:
    x = np.random.default_rng(5).integers(-100, -1, (1, 2, 5, 5)).astype(np.int32)  # all negative: pad must not win
    out = Tensor(x).max_pool2d(3, 2, padding=1, ceil_mode=True)
    np.testing.assert_array_equal(out.numpy(), ref_pool(x, "max", (3, 3), (2, 2), (1, 1), [(1, 1)] * 2, True))


LARGE_POOL_CASES = [
    # (input shape, kernel, stride, padding, ceil_mode, phase copy): at least PAD_MATERIALIZE_MIN_MACS window
    # elements; the last dim is read from a phase copy (jit/frontend/pooling.py _phase_split_max) where the input is
    # padded or the stride is past what vector loads read without a gather, else directly
    ((1, 64, 112, 112), 3, 2, 1, False, True),  # resnet's stem pool
    ((2, 32, 121, 135), 3, 2, 1, True, True),  # odd sizes: the copy's last phase is shorter
    ((1, 64, 260, 131), (2, 3), (2, 3), 0, False, True),  # stride 3 in the last dim
    ((1, 64, 240, 160), 2, 2, 0, False, False),  # kernel = stride, unpadded: read at stride 2
    ((1, 64, 111, 111), 3, 2, 0, True, False),  # squeezenet's first pool: ceil_mode adds no padding here
]


@pytest.mark.parametrize("xs,kernel,stride,padding,ceil_mode,phase_copy", LARGE_POOL_CASES)
def test_max_pool_over_phase_rows(xs: tuple[int, ...], kernel: int | tuple[int, ...], stride: int | tuple[int, ...],
                                  padding: int, ceil_mode: bool, phase_copy: bool) -> None:
    x = rand(*xs)
    x[0, 3, 5, 7] = np.nan  # max propagates NaN, split into phases or not
    x[-1, -1, 0, :9] = np.inf
    k, st = tup(kernel, 2), tup(stride, 2)
    want = ref_pool(x, "max", k, st, (1, 1), [(padding, padding)] * 2, ceil_mode)
    out = Tensor(x).max_pool2d(kernel, stride, padding=padding, ceil_mode=ceil_mode)
    names = [k.name for k in create_schedule([out.uop], out.device)[0]]
    if phase_copy:  # the phase copy, then every phase's pool in one kernel
        assert len(names) == 2 and names[0].startswith("E_")
    else:
        assert len(names) == 1 and names[0].startswith("r_")
    np.testing.assert_array_equal(out.numpy(), want)


def test_max_pool_over_phase_rows_int_dtype() -> None:
    x = np.random.default_rng(6).integers(-100, -1, (1, 32, 130, 131)).astype(np.int32)  # the pad must not win
    out = Tensor(x).max_pool2d(3, 2, padding=1)
    np.testing.assert_array_equal(out.numpy(), ref_pool(x, "max", (3, 3), (2, 2), (1, 1), [(1, 1)] * 2))


def test_lp_pool() -> None:
    x = rand(1, 2, 6, 5)
    close(Tensor(x).lp_pool2d(2, 2, 1, padding=1), ref_pool(x, "lp", (2, 2), (1, 1), (1, 1), [(1, 1)] * 2))
    close(Tensor(x).lp_pool2d(3, (3, 2), 2), ref_pool(x, "lp", (3, 2), (2, 2), (1, 1), [(0, 0)] * 2, p=3.0))


def test_global_pools() -> None:
    x = rand(2, 3, 4, 5)
    close(Tensor(x).global_avg_pool(), x.mean((2, 3), keepdims=True))
    close(Tensor(x).global_max_pool(), x.max((2, 3), keepdims=True))


def test_pool_kernel_too_large() -> None:
    with pytest.raises(ShapeError):
        Tensor(rand(1, 1, 2, 2)).max_pool2d(3)


# --- softmax and normalization -----------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 7), -1), ((3, 7), 0), ((2, 3, 4), 1)])
def test_softmax(shape: tuple[int, ...], axis: int) -> None:
    x = rand(*shape) * 10
    close(Tensor(x).softmax(axis), ref_softmax(x, axis))
    close(Tensor(x).log_softmax(axis), np.log(ref_softmax(x.astype(np.float64), axis)).astype(np.float32))
    lse = np.log(np.exp(x.astype(np.float64)).sum(axis))
    close(Tensor(x).logsumexp(axis), lse.astype(np.float32))


def test_softmax_inverts_each_row_sum_once() -> None:
    """The row's sum is inverted once and multiplied in, as onnxruntime does, not divided into every element."""
    nodes = Tensor(rand(3, 197)).softmax(-1).uop.toposort()
    assert not any(u.op is Ops.FDIV for u in nodes)
    (recip,) = [u for u in nodes if u.op is Ops.RECIPROCAL]
    assert recip.shape == (3, 1)


def test_softmax_large_values() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], dtype=np.float32)
    close(Tensor(x).softmax(), ref_softmax(x.astype(np.float64), -1).astype(np.float32))
    close(Tensor(x).logsumexp(1, keepdim=True), np.array([[1001.40760596], [-1000 + math.log(3)]], np.float32))
    close(Tensor(np.full((2, 3), -np.inf, np.float32)).logsumexp(1), np.full((2,), -np.inf, np.float32))


def ref_layer_norm(x: np.ndarray, axes: tuple[int, ...], w: np.ndarray | None, b: np.ndarray | None,
                   eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(axes, keepdims=True)
    out = (x64 - mu) / np.sqrt(x64.var(axes, keepdims=True) + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out.astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 5), 1), ((2, 3, 5), -1), ((2, 3, 4), 0)])
def test_layer_norm_axis(shape: tuple[int, ...], axis: int) -> None:
    x = rand(*shape) * 3 + 1
    axes = tuple(range(axis % len(shape), len(shape)))
    w, b = rand(*shape[axes[0]:], seed=1), rand(*shape[axes[0]:], seed=2)
    close(Tensor(x).layer_norm(weight=Tensor(w), bias=Tensor(b), axis=axis), ref_layer_norm(x, axes, w, b, 1e-5))


def test_layer_norm_shape() -> None:
    x = rand(2, 3, 4)
    close(Tensor(x).layer_norm((3, 4), eps=1e-3), ref_layer_norm(x, (1, 2), None, None, 1e-3))
    close(Tensor(x).layer_norm(4), ref_layer_norm(x, (2,), None, None, 1e-5))
    close(Tensor(x).layer_norm(), ref_layer_norm(x, (2,), None, None, 1e-5))
    with pytest.raises(ShapeError):
        Tensor(x).layer_norm((2, 4))


def test_batch_norm() -> None:
    x = rand(2, 3, 4, 5)
    w, b, mean, var = rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), np.abs(rand(3, seed=4)) + 0.5
    c = (slice(None), None, None)
    want = (x - mean[c]) / np.sqrt(var[c] + 1e-5) * w[c] + b[c]
    close(Tensor(x).batch_norm(Tensor(w), Tensor(b), Tensor(mean), Tensor(var)), want)
    invstd = (1 / np.sqrt(var + 1e-5)).astype(np.float32)
    close(Tensor(x).batch_norm(Tensor(w), Tensor(b), Tensor(mean), invstd=Tensor(invstd)), want)
    close(Tensor(x).batch_norm(None, None, Tensor(mean), Tensor(var), eps=1e-3), (x - mean[c]) / np.sqrt(var[c] + 1e-3))
    with pytest.raises(ShapeError):
        Tensor(x).batch_norm(None, None, Tensor(rand(4)), Tensor(var))


def test_references_agree_on_sizes() -> None:
    """The pool size rule in the reference matches PyTorch's documented examples."""
    # torch: MaxPool2d(3, 2, ceil_mode=True) on 6 -> 3 (window at 4 starts inside); (2, 2, pad 1, ceil) on 5 -> 3
    assert pool_out_size(6, 3, 2, 1, 0, 0, True) == 3
    assert pool_out_size(5, 2, 2, 1, 1, 1, True) == 3
    assert [pool_out_size(n, 2, 2, 1, 0, 0, True) for n in range(2, 7)] == [1, 2, 2, 3, 3]
    assert [pool_out_size(7, 3, 2, 1, 1, 1, c) for c in (False, True)] == [4, 4]
