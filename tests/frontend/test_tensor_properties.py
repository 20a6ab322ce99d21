"""Property tests: random chains of elementwise, reduce and movement ops on random shapes, run by drivepack and
by numpy (the oracle) side by side. Each example compiles a few new kernels (~0.1-0.3 s each), so examples are
few and the op vocabulary is small enough that kernels repeat and hit the on-disk cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jit.frontend.tensor import Tensor

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Pair = tuple[Tensor, np.ndarray]
Step = Callable[[st.DataObject, Tensor, np.ndarray], Pair]

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


def _axis(data: st.DataObject, ndim: int) -> int:
    return data.draw(st.integers(-ndim, ndim - 1), label="axis")


# --- float steps --------------------------------------------------------------------------------------------
def f_unary(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    name = data.draw(st.sampled_from(["tanh", "sigmoid", "relu", "abs", "neg", "sin", "floor"]), label="unary")
    ref = {"tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
           "abs": np.abs, "neg": np.negative, "sin": np.sin, "floor": np.floor}[name]
    return getattr(t, name)(), ref(n)


def f_scalar(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    op = data.draw(st.sampled_from(["add", "mul", "sub", "rsub", "max", "min"]), label="scalar op")
    c = data.draw(st.sampled_from([0.5, -1.0, 2.0, 0.25]), label="c")
    return {"add": (t + c, n + c), "mul": (t * c, n * c), "sub": (t - c, n - c), "rsub": (c - t, c - n),
            "max": (t.maximum(c), np.maximum(n, c)), "min": (t.minimum(c), np.minimum(n, c))}[op]


def f_self_binary(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    """Combine the tensor with a moved copy of itself (same shape)."""
    ax = _axis(data, t.ndim)
    op = data.draw(st.sampled_from(["add", "mul", "max", "where"]), label="self op")
    tf, nf = t.flip(ax), np.flip(n, ax)
    if op == "add":
        return t + tf, n + nf
    if op == "mul":
        return t * tf, n * nf
    if op == "max":
        return t.maximum(tf), np.maximum(n, nf)
    return (t < tf).where(t, tf * 0.5), np.where(n < nf, n, nf * 0.5)


def f_reduce(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    op = data.draw(st.sampled_from(["sum", "max", "min", "mean"]), label="reduce")
    keep = data.draw(st.booleans(), label="keepdim")
    if data.draw(st.booleans(), label="multi-axis") and t.ndim > 1:
        axes = tuple(sorted(data.draw(st.sets(st.integers(0, t.ndim - 1), min_size=1), label="axes")))
        ax: Any = axes
    else:
        ax = _axis(data, t.ndim)
    ref = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[op]
    return getattr(t, op)(ax, keepdim=keep), ref(n, axis=ax, keepdims=keep)


def f_permute(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    order = tuple(data.draw(st.permutations(range(t.ndim)), label="order"))
    return t.permute(order), n.transpose(order)


def f_reshape(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    size = n.size
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    a = data.draw(st.sampled_from(divisors), label="lead")
    shape = data.draw(st.sampled_from([(size,), (a, size // a), (a, -1), (1, size // a, a), (size // a, 1, a)]),
                      label="shape")
    return t.reshape(shape), n.reshape(shape)


def f_slice(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    key = []
    for s in n.shape:
        start = data.draw(st.integers(0, s - 1), label="start")
        step = data.draw(st.sampled_from([1, 2, -1, -2]), label="step")
        key.append(slice(start, None, step) if step > 0 else slice(start, None, step))
    return t[tuple(key)], n[tuple(key)]


def f_pad(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    pads = tuple((data.draw(st.integers(0, 2), label="before"), data.draw(st.integers(0, 2), label="after"))
                 for _ in n.shape)
    mode = data.draw(st.sampled_from(["constant", "edge"]), label="mode")
    value = data.draw(st.sampled_from([0.0, 1.5]), label="value") if mode == "constant" else 0.0
    if mode == "constant":
        return t.pad(pads, value=value), np.pad(n, pads, constant_values=value)
    return t.pad(pads, mode="edge"), np.pad(n, pads, mode="edge")


def f_expand(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    ax = data.draw(st.integers(0, t.ndim), label="new axis")
    k = data.draw(st.integers(1, 3), label="copies")
    shape = list(n.shape)
    shape.insert(ax, k)
    return t.unsqueeze(ax).expand(*shape), np.broadcast_to(np.expand_dims(n, ax), shape)


def f_cat(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    ax = _axis(data, t.ndim)
    return Tensor.cat(t, t.flip(ax) * 2, dim=ax), np.concatenate([n, np.flip(n, ax) * 2], axis=ax)


def f_cumsum(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    ax = _axis(data, t.ndim)
    return t.cumsum(ax), np.cumsum(n, axis=ax)


def f_realize(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    return t.realize(), n


FLOAT_STEPS: list[Step] = [f_unary, f_scalar, f_self_binary, f_reduce, f_permute, f_reshape, f_slice, f_pad,
                           f_expand, f_cat, f_cumsum, f_realize]


def _run_chain(data: st.DataObject, t: Tensor, n: np.ndarray, steps: list[Step], n_steps: int) -> Pair:
    for _ in range(n_steps):
        choices = [s for s in steps if t.ndim > 0 and (s is not f_expand or t.ndim < 4)
                   and (s not in (f_cat, f_pad, f_expand) or n.size < 300)]
        if not choices:
            break
        step = data.draw(st.sampled_from(choices), label="step")
        t, n = step(data, t, n)
        assert t.shape == n.shape, (step.__name__, t.shape, n.shape)
    return t, n


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2 ** 16), data=st.data())
def test_random_float_chains(shape: tuple[int, ...], seed: int, data: st.DataObject) -> None:
    x = np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)
    t, n = _run_chain(data, Tensor(x), x.astype(np.float64), FLOAT_STEPS, data.draw(st.integers(1, 5), label="len"))
    np.testing.assert_allclose(t.numpy(), n, rtol=1e-4, atol=1e-4)


# --- int chains (exact) -----------------------------------------------------------------------------------
def i_arith(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    op = data.draw(st.sampled_from(["add", "mul", "floordiv", "mod", "rmod", "max", "neg", "abs", "xor", "shr"]),
                   label="int op")
    c = data.draw(st.sampled_from([3, -2, 5, 7]), label="c")
    ci = np.int32(c)
    return {"add": (t + c, n + ci), "mul": (t * c, n * ci), "floordiv": (t // c, n // ci), "mod": (t % c, n % ci),
            "rmod": ((t.abs() + 1) % c, (np.abs(n) + 1) % ci) if c > 0 else (t % c, n % ci),
            "max": (t.maximum(c), np.maximum(n, ci)), "neg": (-t, -n), "abs": (t.abs(), np.abs(n)),
            "xor": (t ^ c, n ^ ci), "shr": (t >> 1, n >> np.int32(1))}[op]


def i_where(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    c = data.draw(st.sampled_from([0, 1, -3]), label="threshold")
    cmp = data.draw(st.sampled_from(["lt", "ge", "eq", "ne"]), label="cmp")
    cond_t = {"lt": t < c, "ge": t >= c, "eq": t == c, "ne": t != c}[cmp]
    cond_n = {"lt": n < c, "ge": n >= c, "eq": n == c, "ne": n != c}[cmp]
    return cond_t.where(t, -t), np.where(cond_n, n, -n)


def i_reduce(data: st.DataObject, t: Tensor, n: np.ndarray) -> Pair:
    op = data.draw(st.sampled_from(["sum", "max", "min", "argmax"]), label="int reduce")
    ax = _axis(data, t.ndim)
    if op == "argmax":
        return t.argmax(ax).cast("int32"), np.argmax(n, axis=ax).astype(np.int32)
    ref = {"sum": lambda a, axis: np.sum(a, axis=axis, dtype=np.int32), "max": np.max, "min": np.min}[op]
    return getattr(t, op)(ax), ref(n, axis=ax)


INT_STEPS: list[Step] = [i_arith, i_arith, i_where, i_reduce, f_permute, f_reshape, f_slice, f_expand, f_cat,
                         f_realize]


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2 ** 16), data=st.data())
def test_random_int_chains(shape: tuple[int, ...], seed: int, data: st.DataObject) -> None:
    x = np.random.default_rng(seed).integers(-20, 20, size=shape).astype(np.int32)
    t, n = _run_chain(data, Tensor(x), x, INT_STEPS, data.draw(st.integers(1, 5), label="len"))
    got = t.numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, n)


# --- indexing ------------------------------------------------------------------------------------------------
@st.composite
def index_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    key: list[Any] = []
    for s in shape:
        kind = draw(st.sampled_from(["int", "slice", "full", "none"]))
        if kind == "int":
            key.append(draw(st.integers(-s, s - 1)))
        elif kind == "slice":
            start = draw(st.none() | st.integers(-s - 1, s + 1))
            stop = draw(st.none() | st.integers(-s - 1, s + 1))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(start, stop, step))
        elif kind == "none":
            key.extend([None, slice(None)])
        else:
            key.append(slice(None))
    if draw(st.booleans()) and key:
        cut = draw(st.integers(0, len(key) - 1))
        key = [*key[:cut], Ellipsis] if all(k is not None for k in key[cut:]) else key
    return tuple(key)


@SETTINGS
@given(data=st.data(), shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple))
def test_random_getitem(data: st.DataObject, shape: tuple[int, ...]) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    key = data.draw(index_keys(shape), label="key")
    expected = x[key]
    got = Tensor(x)[key]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)
