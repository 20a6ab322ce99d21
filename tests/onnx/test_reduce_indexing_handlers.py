"""ONNX reduce / indexing / quantization handlers (jit/onnx/ops/reduce.py, indexing.py,
quantize.py) on cases the node conformance suite does not cover, checked against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from jit.common.errors import UnsupportedOp
from jit.onnx.loader import load_onnx
from tests.helpers import single_op_model

RNG = np.random.default_rng(0)


def model(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 18,
          consts: dict[str, np.ndarray] | None = None, **attrs: object) -> onnx.ModelProto:
    return single_op_model(op, inputs, n_out, opset, consts, **attrs)


def check(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 18,
          consts: dict[str, np.ndarray] | None = None, **attrs: object) -> None:
    m = model(op, inputs, n_out, opset, consts, **attrs)
    want = ReferenceEvaluator(m).run(None, inputs)
    got = load_onnx(m)(inputs)
    for i, w in enumerate(want):
        w = np.asarray(w)
        g = got[f"y{i}"].numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _positive(op: str, x: np.ndarray) -> np.ndarray:
    return np.abs(x) + 0.5 if op == "ReduceLogSum" else x


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute_before_input_opset(op: str) -> None:
    since = 13 if op == "ReduceSum" else 18
    x = _positive(op, f32(3, 4, 5))
    check(op, {"x": x}, opset=since - 1, axes=[0, -1], keepdims=0)
    check(op, {"x": x}, opset=since, consts={"axes": np.array([1], np.int64)}, keepdims=1)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op: str) -> None:
    x = _positive(op, f32(2, 3))
    check(op, {"x": x, "axes": np.array([], np.int64)}, noop_with_empty_axes=1)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1"])
def test_reduce_integers_keep_their_dtype(op: str) -> None:
    x = RNG.integers(-9, 9, (3, 4)).astype(np.int8)
    check(op, {"x": x, "axes": np.array([1], np.int64)}, keepdims=0)


@pytest.mark.parametrize("op,dtype", [("ReduceMax", np.int32), ("ReduceMin", np.int32), ("ReduceProd", np.int32)])
def test_reduce_empty_set_integers(op: str, dtype: type) -> None:
    check(op, {"x": np.zeros((2, 0, 3), dtype), "axes": np.array([1], np.int64)})


def test_reduce_sum_folds_int32_constants_without_widening() -> None:
    x = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    m = model("ReduceSum", {}, opset=13, consts={"x": x, "axes": np.array([1], np.int64)}, keepdims=0)
    got = load_onnx(m)()["y0"].numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, x.sum(1))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extreme_ties_and_nan(op: str, last: int) -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [np.nan, 1, np.nan, 0]], np.float32)
    check(op, {"x": x}, axis=1, keepdims=0, select_last_index=last)
    check(op, {"x": x.T.copy()}, axis=0, keepdims=1, select_last_index=last)


@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative_int8_middle_axis(op: str, opset: int, exclusive: int, reverse: int) -> None:
    x = RNG.integers(-3, 4, (2, 5, 3)).astype(np.int8)
    check(op, {"x": x, "axis": np.array(1, np.int64)}, opset=opset, exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [0, 1, 4, 6])
def test_topk_ties_go_to_the_lower_index(largest: int, k: int) -> None:
    x = np.array([[3, 1, 3, 2, 5, 5], [0, 0, 0, 0, 0, 0], [6, 5, 4, 3, 2, 1]], np.float32)
    check("TopK", {"x": x, "k": np.array([k], np.int64)}, n_out=2, opset=11, axis=1, largest=largest)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_nan_inf_and_middle_axis(largest: int) -> None:
    x = np.array([1, np.nan, 3, -np.inf, np.inf], np.float32)
    check("TopK", {"x": x, "k": np.array([5], np.int64)}, n_out=2, opset=11, largest=largest)
    check("TopK", {"x": f32(3, 4, 2), "k": np.array([2], np.int64)}, n_out=2, opset=11, axis=1, largest=largest)


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_onehot_axes_and_negative_indices(axis: int) -> None:
    check("OneHot", {"i": np.array([[1, -1, 7], [0, 3, -5]], np.int64), "d": np.array(5, np.int64),
                     "v": np.array([0, 1], np.float32)}, opset=11, axis=axis)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_partial_updates(reduction: str, axis: int) -> None:
    data = f32(4, 5, 3)
    shape = [2, 3, 2]
    shape[axis] = 3
    if reduction == "none":  # distinct targets per line: the spec leaves duplicate writes undefined
        idx = np.argsort(RNG.random([data.shape[axis] if i == axis % 3 else s for i, s in enumerate(shape)]),
                         axis=axis)
        idx = np.take(idx, range(3), axis=axis) - data.shape[axis] * (RNG.random(shape) < 0.5)
    else:
        idx = RNG.integers(-data.shape[axis], data.shape[axis], shape)
    check("ScatterElements", {"d": data, "i": idx.astype(np.int64), "u": f32(*shape)}, axis=axis,
          reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatternd_element_and_slice_indices(reduction: str) -> None:
    data = f32(4, 3, 2)
    idx = np.array([[1, 2], [0, 0], [3, 1]] if reduction == "none" else [[1, 2], [1, 2], [-1, 1]], np.int64)
    check("ScatterND", {"d": data, "i": idx, "u": f32(3, 2)}, reduction=reduction)
    check("ScatterND", {"d": data, "i": np.array([[2], [0]], np.int64), "u": f32(2, 3, 2)}, reduction=reduction)


@pytest.mark.parametrize("batch_dims,idx_shape", [(0, (3, 2)), (0, (2, 1, 4)), (1, (2, 2)), (2, (2, 3, 6, 1))])
def test_gathernd_batch_dims(batch_dims: int, idx_shape: tuple[int, ...]) -> None:
    data = f32(2, 3, 4, 5)
    hi = data.shape[batch_dims:batch_dims + idx_shape[-1]]
    idx = np.stack([RNG.integers(-h, h, idx_shape[:-1]) for h in hi], -1).astype(np.int64)
    check("GatherND", {"d": data, "i": idx}, opset=13, batch_dims=batch_dims)


def test_gathernd_size1_source() -> None:
    check("GatherND", {"d": f32(1, 4), "i": np.zeros((3, 1), np.int64)}, opset=13)


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_outputs(sorted_: int) -> None:
    check("Unique", {"x": np.array([3, 1, 3, 2, 1, 7], np.int32)}, n_out=4, opset=11, sorted=sorted_)
    u = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32)
    check("Unique", {"x": u}, n_out=4, opset=11, sorted=sorted_, axis=0)


def test_data_dependent_shapes_need_load_time_data() -> None:
    x = f32(3, 2)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOp, match="NonZero"):
        load_onnx(m)({"x": x})


def test_reverse_sequence_batch_last() -> None:
    check("ReverseSequence", {"x": f32(3, 5, 4), "l": np.array([4, 0, 2, 3], np.int64)}, opset=10,
          batch_axis=2, time_axis=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_granularities(dtype: type) -> None:
    info = np.iinfo(dtype)
    x = (RNG.standard_normal((2, 6, 4)) * 50).astype(np.float32)
    x[0, 0, :4] = [0.5, 1.5, 2.5, -2.5]  # round half to even
    s = (RNG.random(6) + 0.5).astype(np.float32)
    z = RNG.integers(max(info.min, -5), 10, 6).astype(dtype)
    check("QuantizeLinear", {"x": x, "s": s, "z": z}, opset=21, axis=1)
    sb = (RNG.random((2, 2, 4)) + 0.5).astype(np.float32)
    zb = RNG.integers(max(info.min, -5), 10, (2, 2, 4)).astype(dtype)
    check("QuantizeLinear", {"x": x, "s": sb, "z": zb}, opset=21, axis=1, block_size=4)  # a remainder block
    q = RNG.integers(info.min, info.max, (2, 6, 4), endpoint=True).astype(dtype)
    check("DequantizeLinear", {"q": q, "s": sb, "z": zb}, opset=21, axis=1, block_size=3)
    check("DequantizeLinear", {"q": q, "s": np.array(0.25, np.float16)}, opset=21)


@pytest.mark.parametrize("values", [[0.0, 2.0, -3.0, -2.5, 1.34, 0.5], [1.0, 2.0, 3.0], [0.0, 0.0]])
def test_dynamic_quantize_linear(values: list[float]) -> None:
    check("DynamicQuantizeLinear", {"x": np.array(values, np.float32)}, n_out=3, opset=11)
