"""``load_onnx(..., float16=True)``: a float32 model computed in float16 (openpilot's compile3 FLOAT16=1)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from jit import capture_onnx, load_onnx


def _conv_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    scales = numpy_helper.from_array(np.array([1, 1, 1.5, 1.5], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Resize", ["r", "", "scales"], ["y"], mode="nearest", name="resize")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 9, 9))], [w, b, scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_float16_compute_matches_the_float32_reference_within_float16_tolerance(device: str) -> None:
    model = _conv_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    half = capture_onnx(load_onnx(model, device=device, float16=True), {"x": x}, target=device)
    full = capture_onnx(load_onnx(model, device=device), {"x": x}, target=device)
    got, exact = half(x=x)["y"], full(x=x)["y"]
    # the I/O contract is the model's: float32 out, the Resize scale read on the host in full precision
    assert got.dtype == np.float32 and got.shape == want.shape == (1, 8, 9, 9)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    assert not np.array_equal(got, exact)  # it did compute in float16: rounding differs from float32
    # the weights are stored as float16, the model's float32 input is what the replay takes
    assert {w.dtype for w in half.cmdbuf.weights if w.dtype.startswith("float")} == {"float16"}
    assert {w.dtype for w in full.cmdbuf.weights if w.dtype.startswith("float")} == {"float32"}
    assert {b.dtype for b in half.cmdbuf.inputs} == {"float32"}


def test_float16_compute_leaves_non_float_values_alone() -> None:
    idx = numpy_helper.from_array(np.array([2, 0], np.int64), "idx")
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1, name="gather"),
             helper.make_node("Cast", ["g"], ["y"], to=TensorProto.INT32, name="cast")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, (1, 2))], [idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([[1000.4, 7.0, 65504.0]], np.float32)
    got = capture_onnx(load_onnx(model, device="CPU", float16=True), {"x": x}, target="CPU")(x=x)["y"]
    assert got.dtype == np.int32
    assert got.tolist() == [[65504, 1000]]  # 1000.4 rounds to 1000.0 in float16
