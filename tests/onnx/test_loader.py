"""The ONNX frontend's contract: errors at load, attribute defaults, constant folding of shape arithmetic."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from jit import Ops
from jit.common.errors import UnsupportedOp
from jit.onnx.loader import load_onnx
from jit.onnx.registry import OnnxError


def make(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[int]]], outputs: list[str],
         inits: dict[str, np.ndarray] | None = None, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unknown_op_fails_at_load_naming_node_and_opset() -> None:
    m = make([helper.make_node("FancyOp", ["x"], ["y"], name="Fancy_3")], [("x", TensorProto.FLOAT, [2])], ["y"])
    with pytest.raises(UnsupportedOp, match=r"FancyOp at node 'Fancy_3' \(opset 13\)"):
        load_onnx(m)


def test_garbage_bytes_are_a_clear_error() -> None:
    with pytest.raises(OnnxError, match="cannot parse ONNX"):
        load_onnx(b"\x00not a model at all\xff" * 3)


def test_missing_and_extra_inputs_are_named() -> None:
    m = load_onnx(make([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], ["y"]))
    with pytest.raises(OnnxError, match=r"missing \['x'\]"):
        m({})
    with pytest.raises(OnnxError, match=r"unexpected \['z'\]"):
        m(x=np.zeros(2, np.float32), z=np.zeros(2, np.float32))


def test_shape_arithmetic_is_folded_out_of_the_graph() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "zero_axes": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    m = load_onnx(make(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], ["y"], inits))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = m(x=x)["y"]
    assert y.shape == (2, 12)
    ops = {u.op for u in y.uop.toposort()}
    assert ops <= {Ops.BUFFER, Ops.RESHAPE}
    np.testing.assert_array_equal(y.numpy(), x.reshape(2, 12))


def test_if_with_constant_condition_inlines_the_branch() -> None:
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    m = load_onnx(make([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       [("x", TensorProto.FLOAT, [3])], ["y"], {"c": np.array(True)}))
    np.testing.assert_array_equal(m(x=np.array([1, -2, 3], np.float32))["y"].numpy(), [-1, 2, -3])


def test_attribute_defaults_come_from_the_schema() -> None:
    m = load_onnx(make([helper.make_node("LeakyRelu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], ["y"]))
    np.testing.assert_allclose(m(x=np.array([-1.0, 2.0], np.float32))["y"].numpy(), [-0.01, 2.0], rtol=1e-6)


def test_initializer_that_is_also_a_graph_input_can_be_overridden() -> None:
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([10, 20], np.float32), "b")])
    m = load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)]))
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(m(x=x)["y"].numpy(), [11, 22])
    np.testing.assert_array_equal(m(x=x, b=np.array([1, 1], np.float32))["y"].numpy(), [2, 3])


def test_unsupported_attribute_fails_at_load() -> None:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic", name="Resize_17")
    m = make([node], [("x", TensorProto.FLOAT, [1, 1, 2, 2])], ["y"], {"scales": np.ones(4, np.float32)})
    with pytest.raises(UnsupportedOp, match=r"^Resize\(mode='cubic'\) at node 'Resize_17' \(opset 13\)$"):
        load_onnx(m)


def test_constants_an_op_creates_live_on_the_model_device() -> None:
    """Regression: ConstantOfShape built its tensor on the default device (CPU) for a model loaded on OPENCL,
    and the next kernel launched a CPU kernel on OpenCL memory."""
    from jit import Device

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=numpy_helper.from_array(np.array([2.5], np.float32))),
             helper.make_node("Add", ["x", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.array([2, 3], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with Device.default_as("CPU"):
        y = load_onnx(model, device="OPENCL")({"x": x})["y"]
        assert y.device == "OPENCL" and Device.DEFAULT == "CPU"
        np.testing.assert_array_equal(y.numpy(), x + 2.5)


def test_a_model_loaded_without_a_device_captures_on_any_target() -> None:
    """Regression: ``capture_onnx(load_onnx(path), inputs, target="OPENCL")`` left the weights on the default device
    (CPU), and a weight-only kernel run at capture (a conv's weight re-layout) failed with a TypeError setting a
    numpy array as an OpenCL kernel argument; such a model now computes where its inputs are."""
    from jit import capture_onnx

    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((16, 8, 3, 3)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    want = capture_onnx(load_onnx(model, device="CPU"), feeds, target="CPU")(feeds)["y"]
    loaded = load_onnx(model)
    for target in ("OPENCL", "CPU"):
        for fold in (False, True):
            got = capture_onnx(loaded, feeds, target=target, fold_weights=fold)(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_element_initializers_are_inlined_as_constants() -> None:
    """The camera normalize ``x / 128 - 1`` reads its two scalars as immediates, not as weight buffers, so the
    symbolic pass can make the divide an exact multiply. Larger initializers stay buffers."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["xf", "scale"], ["d"]),
             helper.make_node("Sub", ["d", "one"], ["s"]),
             helper.make_node("Mul", ["s", "gain"], ["y"])]
    inits = {"scale": np.array(128.0, np.float32), "one": np.array([1.0], np.float32),
             "gain": np.array([0.5, 2.0], np.float32)}
    m = load_onnx(make(nodes, [("x", TensorProto.UINT8, [3, 2])], ["y"], inits))
    x = np.array([[0, 255], [128, 1], [64, 200]], np.uint8)
    y = m(x=x)["y"]
    consts = {u.arg for u in y.uop.toposort() if u.op is Ops.CONST}
    assert {128.0, 1.0} <= consts
    buffers = [u for u in y.uop.toposort() if u.op is Ops.BUFFER]
    assert len(buffers) == 2  # the input and gain
    want = (x.astype(np.float32) / np.float32(128) - np.float32(1)) * inits["gain"]
    np.testing.assert_array_equal(y.numpy(), want)
