"""Materialized conv padding (nn_ops ``_materialize_pad``): a big padded conv reads its zero-padded input
from a buffer of its own, written by an elementwise copy kernel, so the conv kernel's loads carry no mask.

Checked on the scheduled kernel graphs (structure, not timing), against a float64 numpy reference and
onnxruntime, against the same conv with materialization turned off, and through capture.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from jit import Ops, UOp, capture, load_onnx
from jit.frontend import nn_ops
from jit.frontend.tensor import Tensor
from jit.ir.uop import toposort
from jit.schedule.kernels import ScheduledKernel, create_schedule
from tests.frontend.test_nn_ops import norm_pads, rand, ref_conv, tup

# direct convs, whatever this machine's Winograd choice for 16 channels (jit/frontend/winograd.py)
pytestmark = pytest.mark.usefixtures("full_width_units")

# (input shape, weight shape, groups, stride, dilation, padding): every case is above the threshold
BIG_CASES = [
    ((1, 16, 32, 32), (16, 16, 3, 3), 1, 1, 1, 1),  # the vision model's residual convs, smaller
    ((1, 16, 64, 48), (16, 16, 3, 3), 1, 2, 1, 1),  # stride 2 (four per vision tower)
    ((1, 16, 62, 65), (16, 16, 3, 3), 1, 2, 1, (1, 1, 2, 0)),  # stride 2, odd sizes, ONNX asymmetric pads
    ((2, 8, 24, 24), (16, 8, 3, 3), 1, 1, 2, 2),  # dilation
    ((1, 32, 32, 32), (32, 8, 3, 3), 4, 1, 1, (0, 2, 1, 1)),  # groups, asymmetric pads
    ((1, 64, 48, 48), (64, 1, 3, 3), 64, 1, 1, 1),  # depthwise
    ((1, 16, 4096), (16, 16, 5), 1, 1, 1, (2, 1)),  # 1-d
    ((1, 4, 12, 16, 16), (16, 4, 3, 3, 3), 1, (1, 2, 2), 1, 1),  # 3-d
]


@pytest.fixture(autouse=True)
def _no_channels_last_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the kernels padding makes; the weight copy of short-row convs (channels-last weights,
    tests/codegen/test_opt_merge.py) would be one more."""
    monkeypatch.setattr(nn_ops, "CHANNELS_LAST_MIN_MACS", math.inf)


def conv_macs(xs: tuple[int, ...], ws: tuple[int, ...], groups: int, stride: int | tuple[int, ...],
              dilation: int | tuple[int, ...], padding: int | tuple[int, ...]) -> int:
    nd = len(xs) - 2
    pads, st, dl = norm_pads(padding, nd), tup(stride, nd), tup(dilation, nd)
    out = [(n + b + e - d * (k - 1) - 1) // s + 1 for n, (b, e), k, s, d in zip(xs[2:], pads, ws[2:], st, dl,
                                                                               strict=True)]
    return xs[0] * ws[0] * math.prod(out) * ws[1] * math.prod(ws[2:])


def conv_tensor(x: np.ndarray, w: np.ndarray, groups: int, stride: int | tuple[int, ...],
                dilation: int | tuple[int, ...], padding: int | tuple[int, ...]) -> Tensor:
    return Tensor(x).conv2d(Tensor(w), groups=groups, stride=stride, dilation=dilation, padding=padding)


def schedule(t: Tensor) -> list[ScheduledKernel]:
    return create_schedule([t.uop], t.device)[0]


def reduces(k: ScheduledKernel) -> bool:
    return any(n.op is Ops.REDUCE for n in toposort([k.ast]))


def selects(ast: UOp) -> list[UOp]:
    """The WHERE nodes of a kernel graph (a lazily lowered PAD is a WHERE over clamped loads)."""
    return [n for n in toposort([ast]) if n.op is Ops.WHERE]


def clamps(ast: UOp) -> list[UOp]:
    """Index clamps (MAX/MIN of integer values): the other half of a lazily lowered PAD."""
    return [n for n in toposort([ast]) if n.op in (Ops.MAX, Ops.MIN) and not n.dtype.is_float]


@pytest.mark.parametrize("xs,ws,groups,stride,dilation,padding", BIG_CASES)
def test_big_conv_reads_a_padded_buffer_without_masks(xs: tuple[int, ...], ws: tuple[int, ...], groups: int,
                                                      stride: int | tuple[int, ...], dilation: int | tuple[int, ...],
                                                      padding: int | tuple[int, ...]) -> None:
    assert conv_macs(xs, ws, groups, stride, dilation, padding) >= nn_ops.PAD_MATERIALIZE_MIN_MACS
    x, w = rand(*xs), rand(*ws, seed=1)
    kernels = schedule(conv_tensor(x, w, groups, stride, dilation, padding))
    assert [reduces(k) for k in kernels] == [False, True]  # the pad copy, then the conv
    copy, conv = kernels
    nd = len(xs) - 2
    padded = math.prod(xs[:2]) * math.prod(n + b + e for n, (b, e) in zip(xs[2:], norm_pads(padding, nd),
                                                                          strict=True))
    assert copy.out_buffer.arg[2] == padded
    assert selects(copy.ast)  # the copy writes the zero border
    assert copy.out_buffer in conv.buffers
    assert not selects(conv.ast) and not clamps(conv.ast)  # every load of the conv is a plain one


@pytest.mark.parametrize("xs,ws,groups,stride,dilation,padding", BIG_CASES)
def test_big_conv_values(xs: tuple[int, ...], ws: tuple[int, ...], groups: int, stride: int | tuple[int, ...],
                         dilation: int | tuple[int, ...], padding: int | tuple[int, ...],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    nd = len(xs) - 2
    x, w = rand(*xs), rand(*ws, seed=1)
    got = conv_tensor(x, w, groups, stride, dilation, padding).numpy()
    want = ref_conv(x, w, None, groups, tup(stride, nd), tup(dilation, nd), norm_pads(padding, nd))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the same conv read through the lazy PAD: the same sums in the same order, up to float32 rounding (the C
    # compiler contracts multiply-adds differently around a select)
    monkeypatch.setattr(nn_ops, "PAD_MATERIALIZE_MIN_MACS", 1 << 62)
    monkeypatch.setattr(nn_ops, "DEPTHWISE_PAD_MATERIALIZE_MIN_MACS", 1 << 62)
    lazy = conv_tensor(x, w, groups, stride, dilation, padding)
    assert len(schedule(lazy)) == 1
    np.testing.assert_allclose(got, lazy.numpy(), rtol=1e-5, atol=2e-5)


def test_matches_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    x, w, b = rand(1, 16, 62, 65), rand(32, 8, 3, 3, seed=1), rand(32, seed=2)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2, 1], dilations=[1, 2],
                            pads=[2, 1, 0, 2])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    out = load_onnx(m)({"x": x})["y"]
    assert [reduces(k) for k in schedule(out)] == [False, True]
    got = out.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_padding_applies_after_elementwise_preprocessing() -> None:
    """The border is the PAD's zero, not the preprocessing of a zero (x + 3 would make it 3)."""
    x, w = rand(1, 8, 32, 32), rand(16, 8, 3, 3, seed=1)
    t = (Tensor(x) + 3.0).relu().conv2d(Tensor(w), padding=1)
    kernels = schedule(t)
    assert len(kernels) == 2 and not selects(kernels[1].ast)  # the preprocessing runs in the copy
    want = ref_conv(np.maximum(x + 3.0, 0), w, None, 1, (1, 1), (1, 1), [(1, 1)] * 2)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)


def test_conv_of_a_conv_keeps_the_copy_cheap() -> None:
    """A reduce under the materialized PAD is its own kernel with its epilogue (the ReLU): the copy never
    recomputes the first conv or its activation."""
    x, w1, w2 = rand(1, 16, 32, 32), rand(16, 16, 3, 3, seed=1), rand(16, 16, 3, 3, seed=2)
    t = Tensor(x).conv2d(Tensor(w1), padding=1).relu().conv2d(Tensor(w2), padding=1)
    kernels = schedule(t)
    # the input's padded copy, then the first conv writing into the second's padded copy, whose zeros a kernel of
    # their own writes (after it, or before it where the rows are a few cache lines: jit/schedule/padded_stores.py)
    assert [reduces(k) for k in kernels] in ([False, True, False, True], [False, False, True, True])
    first, second = (k for k in kernels if reduces(k))
    assert len(selects(first.ast)) == 1 and not selects(second.ast)  # the ReLU; unmasked loads
    want = ref_conv(np.maximum(ref_conv(x, w1, None, 1, (1, 1), (1, 1), [(1, 1)] * 2), 0), w2, None, 1, (1, 1),
                    (1, 1), [(1, 1)] * 2)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)


def test_pad_of_a_reduce_is_a_kernel_boundary() -> None:
    """A PAD reads the reduce below it from that reduce's own buffer (schedule.py's _KEEPS_DIRECT)."""
    x = rand(6, 5)
    t = Tensor(x).sum(1).pad(((2, 1),))
    assert [reduces(k) for k in schedule(t)] == [True, False]
    np.testing.assert_allclose(t.numpy(), np.pad(x.sum(1), (2, 1)), rtol=1e-6)


@pytest.mark.parametrize("xs,ws,padding", [
    ((1, 3, 5, 5), (4, 3, 3, 3), 1),  # conformance-sized: below the threshold
    ((1, 16, 64, 64), (16, 16, 1, 1), 1),  # 1x1 window: each input element is read once
    ((1, 16, 64, 64), (16, 16, 3, 3), 0),  # nothing to pad
])
def test_small_pointwise_or_unpadded_convs_stay_one_kernel(xs: tuple[int, ...], ws: tuple[int, ...],
                                                           padding: int) -> None:
    x, w = rand(*xs), rand(*ws, seed=1)
    t = conv_tensor(x, w, 1, 1, 1, padding)
    assert len(schedule(t)) == 1
    want = ref_conv(x, w, None, 1, (1, 1), (1, 1), norm_pads(padding, 2))
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)


W1 = rand(16, 8, 3, 3, seed=1)
B1 = rand(16, seed=2)


def conv_model(x: Tensor) -> dict[str, Tensor]:
    return {"y": x.conv2d(Tensor(W1), Tensor(B1), padding=1).relu()}


def test_capture_keeps_the_padded_copy_in_the_arena() -> None:
    inputs = {"x": rand(1, 8, 32, 32, seed=3)}
    cap = capture(conv_model, inputs)
    assert cap.n_dispatches == 2  # the pad copy and the conv
    assert sorted(w.nbytes for w in cap.weights.values()) == sorted([W1.nbytes, B1.nbytes])
    padded_bytes = 8 * 34 * 34 * 4
    assert cap.report.arena_bytes >= padded_bytes
    for seed in (3, 4):
        x = rand(1, 8, 32, 32, seed=seed)
        got = cap({"x": x})["y"]
        eager = conv_model(Tensor(x))["y"].numpy()
        assert got.tobytes() == eager.tobytes()


def test_capture_folds_the_padded_copy_of_a_weight_only_input() -> None:
    const_in = rand(1, 8, 32, 32, seed=5)

    def fn(x: Tensor) -> dict[str, Tensor]:
        return {"y": Tensor(const_in).conv2d(Tensor(W1), padding=1) * x}

    inputs = {"x": rand(1, 16, 32, 32, seed=6)}
    cap = capture(fn, inputs)
    assert cap.n_dispatches == 1  # copy and conv read no input: both folded, only the product runs
    want = ref_conv(const_in, W1, None, 1, (1, 1), (1, 1), [(1, 1)] * 2) * inputs["x"]
    np.testing.assert_allclose(cap(inputs)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("padding", [0, 1])
def test_strided_pointwise_conv_reads_a_subsampled_copy(padding: int) -> None:
    """A big 1x1 stride-2 conv (resnet's projection shortcut) is a copy of every second row and column, then a
    stride-1 pointwise conv whose rows merge (the conv reads its input contiguously, no shuffle)."""
    x, w, b = rand(1, 32, 56, 56, seed=8), rand(64, 32, 1, 1, seed=9), rand(64, seed=10)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=padding)
    kernels = schedule(out)
    assert [k.name[0] for k in kernels] == ["E", "r"]
    pads = [(padding, padding)] * 2
    np.testing.assert_allclose(out.numpy(), ref_conv(x, w, b, 1, (2, 2), (1, 1), pads), rtol=1e-4, atol=1e-4)
