"""Reverse-mode autodiff (jit/frontend/autograd.py): exact small cases, every rule against central finite differences,
and random op chains (hypothesis) against finite differences.

Finite differences run batched: each function under test maps a (B, *shape) float64 tensor to (B, ...) and
never mixes the leading axis, so all 2N perturbed inputs of an N-element x are evaluated in one realize.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jit import GroupOp, Ops, UOp, dtypes
from jit.frontend.autograd import compute_gradients, pm_gradient
from jit.frontend.tensor import Tensor

Fn = Callable[[Tensor], Tensor]
H = 1e-6


def fd_check(fn: Fn, x: np.ndarray, seed: int = 0, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Assert the gradient of sum(fn(x) * w) (random w) matches central finite differences in float64."""
    x = np.asarray(x, dtype=np.float64)
    xt = Tensor(x[None])
    out = fn(xt)
    w_np = np.random.default_rng([1, seed]).uniform(0.5, 1.5, out.shape)  # its own stream: never equal to x
    grad, = (out * Tensor(w_np)).sum().gradient(xt)
    got = grad.numpy()[0]
    assert got.dtype == np.float64
    n = x.size
    eye = np.eye(n, dtype=np.float64).reshape(n, *x.shape) * H
    batch = np.concatenate([x[None] + eye, x[None] - eye])
    outb = fn(Tensor(batch))
    losses = (outb * Tensor(w_np)).reshape(2 * n, -1).sum(1).numpy()
    want = ((losses[:n] - losses[n:]) / (2 * H)).reshape(x.shape)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


# --- exact cases ---------------------------------------------------------------------------------------------
def test_polynomial_gradient() -> None:
    x = Tensor([2.0], requires_grad=True)
    y = x**2 + 3 * x + 1
    grad, = y.sum().gradient(x)
    assert grad.item() == 7.0


def test_log_gradient() -> None:
    x = Tensor([2.0], requires_grad=True)
    z = (x**2 + 1).log()
    grad, = z.sum().gradient(x)
    assert grad.item() == pytest.approx(0.8)


def test_backward_sets_grad() -> None:
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    unused = Tensor([5.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [2.0, -4.0, 6.0]
    assert unused.grad is not None and unused.grad.tolist() == [0.0]


def test_node_used_twice_accumulates() -> None:
    x = Tensor([3.0])
    grad, = (x * x + x).sum().gradient(x)
    assert grad.item() == 7.0


def test_unreached_target_gets_zeros_of_its_shape_and_dtype() -> None:
    x, y = Tensor([1.0, 2.0]), Tensor(np.ones((2, 3), dtype=np.float64))
    gx, gy = (x * 2).sum().gradient(x, y)
    assert gx.tolist() == [2.0, 2.0]
    assert gy.shape == (2, 3) and gy.dtype == dtypes.float64 and gy.numpy().sum() == 0


def test_intermediate_target() -> None:
    x = Tensor([1.0, 2.0])
    y = x * 3
    gx, gy = (y * y).sum().gradient(x, y)
    assert gy.tolist() == [6.0, 12.0] and gx.tolist() == [18.0, 36.0]


def test_explicit_grad_seed() -> None:
    x = Tensor([1.0, 2.0])
    grad, = (x * x).gradient(x, grad=Tensor([1.0, 10.0]))
    assert grad.tolist() == [2.0, 40.0]


def test_cast_gradient_returns_to_source_dtype() -> None:
    x = Tensor([1.0, 2.0])  # float32
    grad, = (x.cast(dtypes.float64) * 3).sum().gradient(x)
    assert grad.dtype == dtypes.float32 and grad.tolist() == [3.0, 3.0]


def test_integer_paths_carry_no_gradient() -> None:
    x = Tensor([1.5, 2.5])
    grad, = (x.int().float() * 3 + x.floor() + (x > 2).where(x, 0)).sum().gradient(x)
    assert grad.tolist() == [0.0, 1.0]


def test_elementwise_max_min_split_ties() -> None:
    x = Tensor([1.0, 2.0, 3.0])
    c = Tensor([2.0, 2.0, 2.0])
    gx, gc = x.maximum(c).sum().gradient(x, c)
    assert gx.tolist() == [0.0, 0.5, 1.0] and gc.tolist() == [1.0, 0.5, 0.0]
    gx, gc = x.minimum(c).sum().gradient(x, c)
    assert gx.tolist() == [1.0, 0.5, 0.0] and gc.tolist() == [0.0, 0.5, 1.0]


def test_reduce_max_divides_among_ties() -> None:
    x = Tensor([[3.0, 1.0, 3.0, 3.0], [0.0, 5.0, 1.0, 2.0]])
    grad, = x.max(1).sum().gradient(x)
    third = 1 / 3
    np.testing.assert_allclose(grad.numpy(), [[third, 0, third, third], [0, 1, 0, 0]], rtol=1e-6)
    grad, = x.min().gradient(x)
    assert grad.numpy().tolist() == [[0, 0, 0, 0], [1, 0, 0, 0]]


def test_pow_at_zero_is_finite() -> None:
    x = Tensor([0.0, 2.0])
    e = Tensor([2.0, 0.0])
    gx, ge = (x**e).sum().gradient(x, e)
    assert gx.tolist() == [0.0, 0.0]
    assert ge.tolist() == [0.0, pytest.approx(math.log(2.0))]


def test_every_tensor_level_op_with_sources_has_a_rule() -> None:
    tensor_ops = GroupOp.ALU | GroupOp.Movement | {Ops.REDUCE_AXIS, Ops.GATHER, Ops.CONTIGUOUS, Ops.CAST,
                                                   Ops.BITCAST}
    missing = [op.name for op in tensor_ops if not pm_gradient._by_op[op]]
    assert missing == []


def test_compute_gradients_rejects_a_misshaped_seed() -> None:
    x = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="grad shape"):
        compute_gradients((x * 2).uop, Tensor([1.0]).uop, [x.uop])


def test_target_read_through_another_reshape() -> None:
    # Tensor.reshape folds reshape(reshape(b)) into reshape(b): x's own node is not in the graph of x.reshape(4)
    x = Tensor(np.ones((2, 2)))
    grad, = (x.sum() + (x.reshape(4) * Tensor(np.arange(4.0))).sum()).gradient(x)
    assert grad.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def _fd_unbatched(loss: Callable[[np.ndarray], Tensor], arr: np.ndarray) -> np.ndarray:
    """Central finite differences of a scalar loss, one element of ``arr`` at a time."""
    want = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        step = np.zeros_like(arr)
        step[i] = H
        hi, lo = loss(arr + step), loss(arr - step)
        Tensor.realize_all(hi, lo)
        want[i] = (hi.item() - lo.item()) / (2 * H)
    return want


def test_conv_weight_and_bias_gradients() -> None:
    rng = np.random.default_rng(3)
    x_np, w_np, b_np = rng.uniform(-1, 1, (2, 2, 5, 5)), rng.uniform(-1, 1, (3, 2, 2, 2)), rng.uniform(-1, 1, 3)

    def loss(w: np.ndarray, b: np.ndarray) -> Tensor:
        return (Tensor(x_np).conv2d(Tensor(w), Tensor(b), stride=2, padding=1) ** 2).sum()

    w, b = Tensor(w_np), Tensor(b_np)
    gw, gb = (Tensor(x_np).conv2d(w, b, stride=2, padding=1) ** 2).sum().gradient(w, b)
    np.testing.assert_allclose(gw.numpy(), _fd_unbatched(lambda v: loss(v, b_np), w_np), atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(gb.numpy(), _fd_unbatched(lambda v: loss(w_np, v), b_np), atol=1e-6, rtol=1e-5)


# --- each rule against finite differences ------------------------------------------------------------------
def _window(t: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    return Tensor(UOp(Ops.WINDOW, t.dtype, (t.uop,), (kernel, stride, dilation)))


_C = np.random.default_rng(7).uniform(0.5, 2.0, (1, 3, 4))

RULE_CASES: dict[str, Fn] = {
    "cos": lambda t: t.cos(),
    "tan": lambda t: (t * 0.5).tan(),
    "erf": lambda t: t.erf(),
    "reciprocal": lambda t: (t * t + 1).reciprocal(),
    "rsqrt": lambda t: (t * t + 1).rsqrt(),
    "pow_base": lambda t: (t * t + 0.5) ** Tensor(_C),
    "pow_exponent": lambda t: Tensor(_C) ** t,
    "pow_both": lambda t: (t * t + 0.5) ** t,
    "maximum": lambda t: t.maximum(Tensor(_C) - 1.2),
    "minimum": lambda t: t.minimum(Tensor(_C) - 1.2),
    "abs": lambda t: t.abs() * 2,
    "relu_where": lambda t: t.relu(),
    "fmod": lambda t: (t * 3).fmod(Tensor(_C)),
    "neg_sub_div": lambda t: -(t - 2) / (Tensor(_C) + t * t),
    "prod": lambda t: (t + 3).prod(2),
    "min_reduce": lambda t: t.min((1, 2)),
    "mean_var": lambda t: t.var(1),
    "contiguous": lambda t: (t * 2).contiguous().exp(),
    "cumsum": lambda t: t.cumsum(2),
    "window_stride_dilation": lambda t: _window(t, (2, 2), (2, 1), (1, 2)) * 1.5,
    "window_big_stride": lambda t: _window(t, (1, 2), (3, 3), (1, 1)).sin(),
    "stride_3": lambda t: t[:, ::2, ::3] * 2,
    "negative_step": lambda t: t[:, ::-1, 3:0:-2].sin(),
    "reflect_pad": lambda t: t.pad(((0, 0), (1, 1), (2, 1)), mode="reflect").sin(),
    "edge_pad": lambda t: t.pad(((0, 0), (0, 2), (1, 0)), mode="edge").exp(),
    "matmul": lambda t: t @ Tensor(_C[0].T),
    "gather": lambda t: t.gather(2, Tensor(np.array([[[0, 3, 3], [1, -1, 0], [2, 2, 2]]])).expand(len(t), 3, 3)),
    "take": lambda t: t.take(Tensor(np.array([1, 1, 0])), axis=1).exp(),
    "split_cat": lambda t: Tensor.cat(*reversed(t.split(2, dim=2)), dim=2).sin(),
    "repeat": lambda t: t.repeat(1, 2, 1).tanh(),
    "softplus_gelu_mish": lambda t: t.softplus() + t.gelu() + t.mish() + t.gelu(approximate="tanh"),
}


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_rule_matches_finite_differences(name: str) -> None:
    x = np.random.default_rng(zlib.crc32(name.encode())).uniform(-1.5, 1.5, (3, 4))
    fd_check(RULE_CASES[name], x)


_W = np.random.default_rng(11).uniform(-1, 1, (3, 2, 2, 3))
_WG = np.random.default_rng(12).uniform(-1, 1, (4, 1, 3, 3))
_WT = np.random.default_rng(13).uniform(-1, 1, (2, 3, 2, 2))

NN_CASES: dict[str, Fn] = {
    "conv2d_stride_dilation_pad": lambda t: t.conv2d(Tensor(_W), stride=(2, 1), dilation=(1, 2), padding=1),
    "conv2d_groups": lambda t: t.conv2d(Tensor(_WG), groups=2, padding=(1, 0)).tanh(),
    "conv_transpose2d": lambda t: t.conv_transpose2d(Tensor(_WT), stride=2, padding=1),
    "max_pool2d": lambda t: t.max_pool2d(2),
    "max_pool2d_strided_padded": lambda t: t.max_pool2d(3, stride=2, padding=1, dilation=(1, 2)),
    "avg_pool2d_exclude_pad": lambda t: t.avg_pool2d(3, stride=2, padding=1, count_include_pad=False),
    "softmax": lambda t: t.softmax(-1) * Tensor(np.arange(6.0)),
    "log_softmax": lambda t: t.log_softmax(2),
    "logsumexp": lambda t: t.logsumexp((2, 3)),
    "layer_norm": lambda t: t.layer_norm((5, 6)),
}


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_op_matches_finite_differences(name: str) -> None:
    x = np.random.default_rng(zlib.crc32(name.encode())).uniform(-1.5, 1.5, (2, 5, 6))
    fd_check(NN_CASES[name], x)


# --- random chains against finite differences ---------------------------------------------------------------
_UNARY: dict[str, Fn] = {
    "exp": lambda t: (t * 0.3).exp(),
    "log": lambda t: (t * t + 0.5).log(),
    "sqrt": lambda t: (t * t + 0.5).sqrt(),
    "tanh": lambda t: t.tanh(),
    "sigmoid": lambda t: t.sigmoid(),
    "sin": lambda t: t.sin(),
    "square": lambda t: t * t,
    "self_mix": lambda t: t * t.sin() - t,
}
_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": lambda t, c: t + c,
    "sub": lambda t, c: c - t,
    "mul": lambda t, c: t * c,
    "div": lambda t, c: t / (c * c + 0.5),
    "rdiv": lambda t, c: c / (t * t + 0.5),
}


@st.composite
def op_chains(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[str, Fn]]]:
    """An input shape and a chain of steps; each step maps (B, *shape) -> (B, *shape') without mixing B.

    ``live`` marks the elements that depend on x; a step after which none does is dropped (its gradient is
    trivially zero and would only slow the search down).
    """
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    start = shape
    live = np.ones(shape, dtype=bool)
    steps: list[tuple[str, Fn]] = []
    rng = np.random.default_rng([2, draw(st.integers(0, 2**16))])  # not x's stream: t - c must not tie at 0
    for _ in range(draw(st.integers(1, 5))):
        nd = len(shape)
        kinds = ["unary", "binary"] + (["reduce", "pad", "shrink", "expand"] if nd else [])
        kinds += ["permute"] * (nd >= 2)
        kinds += ["flip", "reshape"] * bool(nd) + ["stride"] * any(s >= 2 for s in shape)
        kind = draw(st.sampled_from(kinds))
        step: tuple[str, Fn]
        new_live = live
        if kind == "unary":
            name = draw(st.sampled_from(sorted(_UNARY)))
            step = (name, _UNARY[name])
        elif kind == "binary":
            name = draw(st.sampled_from(sorted(_BINARY)))
            c, f = Tensor(rng.uniform(-1.5, 1.5, (1, *shape))), _BINARY[name]
            step = (name, lambda t, c=c, f=f: f(t, c))
        elif kind == "reduce":
            op = draw(st.sampled_from(["sum", "max", "mean"]))
            axes = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
            keep = draw(st.booleans())
            step = (f"{op}{axes}{keep}",
                    lambda t, op=op, axes=tuple(a + 1 for a in axes), keep=keep: getattr(t, op)(axes, keep))
            new_live = live.any(axes, keepdims=keep)
        elif kind == "reshape":
            how = draw(st.sampled_from(["flatten", "reverse", "insert1", "merge"]))
            if how == "flatten":
                new = (math.prod(shape),)
            elif how == "reverse":
                new = tuple(reversed(shape))
            elif how == "insert1":
                i = draw(st.integers(0, nd))
                new = (*shape[:i], 1, *shape[i:])
            else:
                i = draw(st.integers(0, max(nd - 2, 0)))
                new = (*shape[:i], math.prod(shape[i:i + 2]), *shape[i + 2:])
            step = (f"reshape{new}", lambda t, new=new: t.reshape(t.shape[0], *new))
            new_live = live.reshape(new)
        elif kind == "permute":
            perm = tuple(draw(st.permutations(range(nd))))
            step = (f"permute{perm}", lambda t, perm=perm: t.permute(0, *(p + 1 for p in perm)))
            new_live = live.transpose(perm)
        elif kind == "expand":
            i, k = draw(st.integers(0, nd)), draw(st.integers(2, 3))
            new = (*shape[:i], k, *shape[i:])
            step = (f"expand{new}", lambda t, i=i, new=new: t.unsqueeze(i + 1).expand(t.shape[0], *new))
            new_live = np.broadcast_to(np.expand_dims(live, i), new)
        elif kind == "pad":
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
            step = (f"pad{pads}", lambda t, pads=pads: t.pad(((0, 0), *pads)))
            new_live = np.pad(live, pads)
        elif kind == "shrink":
            bounds = []
            for s in shape:
                b = draw(st.integers(0, s - 1))
                bounds.append((b, draw(st.integers(b + 1, s))))
            step = (f"shrink{bounds}", lambda t, bounds=tuple(bounds): t.shrink(((0, t.shape[0]), *bounds)))
            new_live = live[tuple(slice(b, e) for b, e in bounds)]
        elif kind == "flip":
            axes = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
            step = (f"flip{axes}", lambda t, axes=tuple(a + 1 for a in axes): t.flip(*axes))
            new_live = np.flip(live, axes)
        else:  # stride
            ax = draw(st.sampled_from([i for i, s in enumerate(shape) if s >= 2]))
            key = (slice(None), *(slice(None),) * ax, slice(None, None, 2))
            step = (f"[::2]@{ax}", lambda t, key=key: t[key])
            new_live = live[key[1:]]
        if not new_live.any():
            continue
        steps.append(step)
        live, shape = new_live, new_live.shape
        if live.size > 96:  # expands and pads grow the tensor: sum the first axis away to keep kernels small
            steps.append(("cut", lambda t: t.sum(1)))
            live = live.any(0)
            shape = live.shape
    return start, steps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op_chains(), st.integers(0, 2**16))
def test_random_chains_match_finite_differences(chain: tuple[tuple[int, ...], list[tuple[str, Fn]]],
                                               seed: int) -> None:
    shape, steps = chain

    def fn(t: Tensor) -> Tensor:
        for _, step in steps:
            t = step(t)
        return t

    x = np.random.default_rng([0, seed]).uniform(-1.5, 1.5, shape)
    fd_check(fn, x, seed=seed, atol=1e-5, rtol=1e-4)


# --- regression tests for core bugs found while testing autograd ------------------------------------------------
def test_core_flip_after_merging_reshape() -> None:
    x = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2))
    assert (x + 1).reshape(4).flip(0).tolist() == [4.0, 3.0, 2.0, 1.0]


def test_core_kernel_reading_only_padding() -> None:
    x = Tensor(np.array([5.0, 6.0], dtype=np.float32))
    assert x.pad(((2, 0),)).shrink(((0, 1),)).tolist() == [0.0]
