"""Small and large synthetic ONNX models for tests and benchmarks (fixed seed, built with onnx.helper).

* ``tiny_model``: a uint8 frame (1, 2, 8, 8) and a float32 vector (1, 16) -> Cast, scale, Gemm, Relu, Gemm, Add:
  a package of a few kernels that builds in about a second.
* ``gemm_model(layers, width)``: ``layers`` float32 Gemm + Relu layers of width x width weights (4 * width**2
  bytes each): ``gemm_model(3, 2048)`` has about 50 MB of weights, the package-load benchmark's model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def tiny_model(seed: int = 0) -> onnx.ModelProto:
    """See the module docstring."""
    rng = np.random.default_rng(seed)
    inits = [_init("scale", np.array(1 / 255, dtype=np.float32)), _init("shape", np.array([1, 128], np.int64)),
             _init("w1", rng.standard_normal((128, 32)).astype(np.float32) * 0.1),
             _init("b1", rng.standard_normal(32).astype(np.float32)),
             _init("w2", rng.standard_normal((32, 16)).astype(np.float32) * 0.3),
             _init("b2", rng.standard_normal(16).astype(np.float32))]
    nodes = [helper.make_node("Cast", ["frame"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "scale"], ["fs"]),
             helper.make_node("Reshape", ["fs", "shape"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["o"]),
             helper.make_node("Add", ["o", "x"], ["outputs"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("frame", TensorProto.UINT8, [1, 2, 8, 8]),
                                              helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def gemm_model(layers: int = 3, width: int = 2048, seed: int = 0) -> onnx.ModelProto:
    """See the module docstring."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width), dtype=np.float32) * (1 / width ** 0.5)).astype(np.float32)
        inits += [_init(f"w{i}", w), _init(f"b{i}", np.zeros(width, np.float32))]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"]))
        out = "outputs" if i == layers - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        prev = out
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
