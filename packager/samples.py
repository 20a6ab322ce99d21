"""Built-in sample models, shaped like openpilot's driving models, generated with onnx.helper and a fixed seed.

* ``vision``: two uint8 camera inputs ``input_imgs`` and ``big_input_imgs`` of shape (1, 12, 128, 256) (two
  YUV420 frames of six 128x256 channels each); cast and normalise, a strided conv stack with batch norm and
  residual blocks per camera, global pooling, an MLP, and one flat float32 output whose named slices are in
  the model's ``output_slices`` metadata (JSON: name -> [start, stop]).
* ``policy``: float32 ``features_buffer`` (1, 25, 512), ``desire`` (1, 25, 8), ``traffic_convention`` (1, 2),
  ``lateral_control_params`` (1, 2), ``prev_desired_curv`` (1, 25, 1); per-step projections, one self-attention
  block over the 25-step history with layer norm, and an MLP head with one flat float32 output.

Nothing is downloaded: the weights come from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
VISION_OUTPUT_SLICES = {"plan": (0, 495), "lane_lines": (495, 623), "lane_lines_prob": (623, 631),
                        "road_edges": (631, 695), "lead": (695, 797), "lead_prob": (797, 800),
                        "desire_state": (800, 808), "meta": (808, 863), "pose": (863, 875),
                        "hidden_state": (875, 1387)}
POLICY_OUTPUT_SLICES = {"plan": (0, 495), "desire_state": (495, 503), "desired_curvature": (503, 504),
                        "meta": (504, 559)}
POLICY_INPUTS = {"features_buffer": (1, 25, 512), "desire": (1, 25, 8), "traffic_convention": (1, 2),
                 "lateral_control_params": (1, 2), "prev_desired_curv": (1, 25, 1)}


class _Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, prefix: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        return self.const(prefix, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def const(self, prefix: str, value: np.ndarray) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0]

    def conv_bn(self, x: str, cin: int, cout: int, stride: int, relu: bool = True) -> str:
        w = self.weight("conv_w", (cout, cin, 3, 3))
        y = self.op("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
        scale = self.const("bn_scale", (1 + 0.1 * self.rng.standard_normal(cout)).astype(np.float32))
        bias = self.const("bn_bias", (0.1 * self.rng.standard_normal(cout)).astype(np.float32))
        mean = self.const("bn_mean", (0.1 * self.rng.standard_normal(cout)).astype(np.float32))
        var = self.const("bn_var", (1 + 0.1 * self.rng.random(cout)).astype(np.float32))
        y = self.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        return self.op("Relu", [y]) if relu else y

    def residual(self, x: str, ch: int) -> str:
        y = self.conv_bn(x, ch, ch, 1)
        y = self.conv_bn(y, ch, ch, 1, relu=False)
        return self.op("Relu", [self.op("Add", [x, y])])

    def gemm(self, x: str, n_in: int, n_out: int, relu: bool = False) -> str:
        w = self.weight("fc_w", (n_in, n_out), scale=(1.0 / n_in) ** 0.5)
        b = self.const("fc_b", (0.01 * self.rng.standard_normal(n_out)).astype(np.float32))
        y = self.op("Gemm", [x, w, b])
        return self.op("Relu", [y]) if relu else y

    def matmul(self, x: str, n_in: int, n_out: int) -> str:
        w = self.weight("mm_w", (n_in, n_out), scale=(1.0 / n_in) ** 0.5)
        b = self.const("mm_b", (0.01 * self.rng.standard_normal(n_out)).astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              slices: dict[str, tuple[int, int]]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="drivepack")
        model.ir_version = 8
        helper.set_model_props(model, {"output_slices": json.dumps({k: list(v) for k, v in slices.items()})})
        onnx.checker.check_model(model)
        return model


def _camera_tower(b: _Builder, img: str) -> str:
    x = b.op("Cast", [img], to=TensorProto.FLOAT)
    x = b.op("Sub", [b.op("Div", [x, b.const("scale", np.array(128.0, np.float32))]),
                     b.const("one", np.array(1.0, np.float32))])  # uint8 0..255 -> about -1..1
    x = b.conv_bn(x, 12, 24, 2)   # 64 x 128
    x = b.conv_bn(x, 24, 48, 2)   # 32 x 64
    x = b.residual(x, 48)
    x = b.conv_bn(x, 48, 96, 2)   # 16 x 32
    x = b.residual(x, 96)
    x = b.conv_bn(x, 96, 128, 2)  # 8 x 16
    pooled = b.op("GlobalAveragePool", [x])
    return b.op("Flatten", [pooled], axis=1)


def vision_model(seed: int = 0) -> onnx.ModelProto:
    """The openpilot-shaped vision sample (about 1 GFLOP)."""
    b = _Builder(seed)
    road = _camera_tower(b, "input_imgs")
    wide = _camera_tower(b, "big_input_imgs")
    feat = b.op("Concat", [road, wide], axis=1)
    hidden = b.gemm(feat, 256, 512, relu=True)
    n_out = max(stop for _, stop in VISION_OUTPUT_SLICES.values())
    out = b.gemm(hidden, 512, n_out)
    b.nodes[-1].output[0] = "outputs"
    frames = [helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 12, 128, 256])
              for n in ("input_imgs", "big_input_imgs")]
    del out
    return b.model("vision", frames, [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, n_out])],
                   VISION_OUTPUT_SLICES)


def policy_model(seed: int = 1) -> onnx.ModelProto:
    """The openpilot-shaped policy sample: history projections, one attention block, an MLP head."""
    b = _Builder(seed)
    feats = b.matmul("features_buffer", 512, 128)                       # (1, 25, 128)
    steps = b.op("Concat", [feats, "desire", "prev_desired_curv"], axis=2)  # (1, 25, 137)
    x = b.op("Relu", [b.matmul(steps, 137, 128)])
    q, k, v = (b.matmul(x, 128, 64) for _ in range(3))
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])])  # (1, 25, 25)
    scores = b.op("Mul", [scores, b.const("inv_sqrt_d", np.array(1 / 8, np.float32))])
    attn = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])         # (1, 25, 64)
    x = b.op("Add", [x, b.matmul(attn, 64, 128)])
    x = b.op("LayerNormalization", [x, b.const("ln_g", np.ones(128, np.float32)),
                                    b.const("ln_b", np.zeros(128, np.float32))], axis=-1, epsilon=1e-5)
    flat = b.op("Flatten", [x], axis=1)                                    # (1, 3200)
    ctx = b.op("Concat", [flat, "traffic_convention", "lateral_control_params"], axis=1)
    hidden = b.gemm(ctx, 3204, 512, relu=True)
    n_out = max(stop for _, stop in POLICY_OUTPUT_SLICES.values())
    b.gemm(hidden, 512, n_out)
    b.nodes[-1].output[0] = "outputs"
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in POLICY_INPUTS.items()]
    return b.model("policy", inputs, [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, n_out])],
                   POLICY_OUTPUT_SLICES)


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs for a sample model (uint8 frames across the whole 0-255 range)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for i in model.graph.input:
        tt = i.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == TensorProto.UINT8:
            out[i.name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        else:
            out[i.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


def float16_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` computing in float16: float32 weights stored as float16, casts to float32 become casts
    to float16, float32 outputs and intermediate value types become float16 (uint8 inputs stay uint8)."""
    out = onnx.ModelProto.FromString(model.SerializeToString())
    g = out.graph
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            elif node.op_type == "Constant" and a.type == onnx.AttributeProto.TENSOR and \
                    a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return out


SAMPLES = {"vision": vision_model, "policy": policy_model}
