"""Built-in sample models, shaped like openpilot's driving models, generated with onnx.helper and a fixed seed.

One sample per role of the vehicle profiles (``SAMPLES``: role name -> builder), in three openpilot generations
(DESIGN.md "openpilot model generations"):

* split-0.10, ``vision``: two uint8 camera inputs ``input_imgs`` and ``big_input_imgs`` of shape (1, 12, 128,
  256) (two YUV420 frames of six 128x256 channels each); cast and normalise, a strided conv stack with batch norm
  and residual blocks per camera, global pooling, an MLP, and one flat float32 output.
* split-0.10, ``policy``: float32 ``features_buffer`` (1, 25, 512), ``desire`` (1, 25, 8), ``traffic_convention``
  (1, 2), ``lateral_control_params`` (1, 2), ``prev_desired_curv`` (1, 25, 1); per-step projections, one
  self-attention block over the 25-step history with layer norm, and an MLP head with one flat float32 output.
* split-pipeline, ``vision_pipeline`` (uint8 ``img``, ``big_img``) and ``policy_pipeline`` (float32
  ``features_buffer`` (1, 25, 512), ``desire_pulse`` (1, 25, 8), ``traffic_convention`` (1, 2)): small strided
  conv towers and MLPs, fed by the in-graph frame pipeline on the device.
* supercombo-0.11, ``supercombo``: uint8 ``img``, ``big_img``; float16 ``features_buffer`` (1, 24, 512),
  ``desire_pulse`` (1, 25, 8), ``traffic_convention`` (1, 2), ``action_t`` (1, 2); computing in float16, one
  float16 output (1, 2576) whose ``hidden_state`` slice is the next call's newest features.

Every sample writes ``output_slices`` as openpilot's build does (``openpilot_output_slices``: base64 of a
pickle of {name: slice(start, stop, None)}) and names itself in ``vision_model`` / ``policy_model``.
Nothing is downloaded: the weights come from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable

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
CAMERA_SHAPE = (1, 12, 128, 256)
# split-pipeline: the vision output is laid out as in 0.10; the policy's head has no curvature history input
POLICY_PIPELINE_INPUTS = {"features_buffer": (1, 25, 512), "desire_pulse": (1, 25, 8), "traffic_convention": (1, 2)}
POLICY_PIPELINE_OUTPUT_SLICES = {"plan": (0, 495), "desire_state": (495, 503), "action": (503, 505),
                                 "meta": (505, 560)}
# supercombo-0.11: float16 inputs after the two uint8 cameras; features_buffer holds the 24 past steps, the
# newest one is computed in the graph. The output layout is drivepack's guess (the real one is the model's
# output_slices); hidden_state is last so that the feedback is one contiguous copy
SUPERCOMBO_INPUTS = {"features_buffer": (1, 24, 512), "desire_pulse": (1, 25, 8), "traffic_convention": (1, 2),
                     "action_t": (1, 2)}
SUPERCOMBO_OUTPUT_SLICES = {"plan": (0, 990), "lane_lines": (990, 1518), "lane_lines_prob": (1518, 1526),
                            "road_edges": (1526, 1790), "lead": (1790, 1934), "lead_prob": (1934, 1937),
                            "desire_state": (1937, 1945), "meta": (1945, 2000), "desire_pred": (2000, 2032),
                            "pose": (2032, 2044), "wide_from_device_euler": (2044, 2050),
                            "road_transform": (2050, 2062), "action": (2062, 2064), "hidden_state": (2064, 2576)}
# fixed, so that a sample's bytes do not depend on the Python version's default protocol
PICKLE_PROTOCOL = 4


def openpilot_output_slices(slices: dict[str, tuple[int, int]]) -> str:
    """``output_slices`` metadata as openpilot's build writes it: base64 of a pickle of {name: slice}."""
    as_slices = {k: slice(a, b, None) for k, (a, b) in slices.items()}
    return base64.b64encode(pickle.dumps(as_slices, protocol=PICKLE_PROTOCOL)).decode()


class _Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed: int, float_dtype: type[np.floating] = np.float32) -> None:
        self.rng = np.random.default_rng(seed)
        self.fdt = float_dtype  # dtype of the weights weight() and the fully connected biases make
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, prefix: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        return self.const(prefix, (self.rng.standard_normal(shape) * std).astype(np.float32).astype(self.fdt))

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
        b = self.const("fc_b", (0.01 * self.rng.standard_normal(n_out)).astype(np.float32).astype(self.fdt))
        y = self.op("Gemm", [x, w, b])
        return self.op("Relu", [y]) if relu else y

    def matmul(self, x: str, n_in: int, n_out: int) -> str:
        w = self.weight("mm_w", (n_in, n_out), scale=(1.0 / n_in) ** 0.5)
        b = self.const("mm_b", (0.01 * self.rng.standard_normal(n_out)).astype(np.float32).astype(self.fdt))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def conv(self, x: str, cin: int, cout: int, stride: int) -> str:
        """A 3x3 convolution with bias and ReLU (the small towers: no batch norm to fold)."""
        w = self.weight("conv_w", (cout, cin, 3, 3))
        b = self.const("conv_b", (0.01 * self.rng.standard_normal(cout)).astype(np.float32).astype(self.fdt))
        y = self.op("Conv", [x, w, b], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
        return self.op("Relu", [y])

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              slices: dict[str, tuple[int, int]], names: dict[str, str]) -> onnx.ModelProto:
        """The checked model; ``names``: openpilot's ``vision_model`` / ``policy_model`` strings."""
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="drivepack")
        model.ir_version = 8
        helper.set_model_props(model, {"output_slices": openpilot_output_slices(slices), **names})
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
                   VISION_OUTPUT_SLICES, {"vision_model": f"drivepack-sample-vision-seed{seed}"})


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
                   POLICY_OUTPUT_SLICES, {"policy_model": f"drivepack-sample-policy-seed{seed}"})


def _small_tower(b: _Builder, img: str, to: int) -> str:
    """A light camera tower (three strided convs, pooled to 64 features): the pipeline and supercombo samples
    are about the ABI, not the compute, and must compile in seconds."""
    scale, one = (b.const(n, np.array(v, b.fdt)) for n, v in (("scale", 128.0), ("one", 1.0)))
    x = b.op("Sub", [b.op("Div", [b.op("Cast", [img], to=to), scale]), one])  # uint8 0..255 -> about -1..1
    x = b.conv(x, 12, 16, 4)   # 32 x 64
    x = b.conv(x, 16, 32, 4)   # 8 x 16
    x = b.conv(x, 32, 64, 2)   # 4 x 8
    return b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)


def _frames(names: tuple[str, str]) -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info(n, TensorProto.UINT8, list(CAMERA_SHAPE)) for n in names]


def _named_output(b: _Builder, elem_type: int, n_out: int) -> list[onnx.ValueInfoProto]:
    b.nodes[-1].output[0] = "outputs"  # openpilot's name for the one flat output
    return [helper.make_tensor_value_info("outputs", elem_type, [1, n_out])]


def vision_pipeline_model(seed: int = 2) -> onnx.ModelProto:
    """split-pipeline vision: ``img``, ``big_img`` -> the 0.10 vision output layout (hidden_state included)."""
    b = _Builder(seed)
    feat = b.op("Concat", [_small_tower(b, "img", TensorProto.FLOAT), _small_tower(b, "big_img", TensorProto.FLOAT)],
                axis=1)
    hidden = b.gemm(feat, 128, 512, relu=True)
    n_out = max(stop for _, stop in VISION_OUTPUT_SLICES.values())
    b.gemm(hidden, 512, n_out)
    outputs = _named_output(b, TensorProto.FLOAT, n_out)
    return b.model("vision_pipeline", _frames(("img", "big_img")), outputs, VISION_OUTPUT_SLICES,
                   {"vision_model": f"drivepack-sample-vision_pipeline-seed{seed}"})


def policy_pipeline_model(seed: int = 3) -> onnx.ModelProto:
    """split-pipeline policy: the feature history (projected per step), the pooled desire pulses and the traffic
    convention through an MLP."""
    b = _Builder(seed)
    steps = b.op("Flatten", [b.matmul("features_buffer", 512, 32)], axis=1)   # (1, 800)
    desire = b.op("Flatten", ["desire_pulse"], axis=1)                         # (1, 200)
    ctx = b.op("Concat", [steps, desire, "traffic_convention"], axis=1)        # (1, 1002)
    hidden = b.gemm(ctx, 1002, 256, relu=True)
    n_out = max(stop for _, stop in POLICY_PIPELINE_OUTPUT_SLICES.values())
    b.gemm(hidden, 256, n_out)
    outputs = _named_output(b, TensorProto.FLOAT, n_out)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in POLICY_PIPELINE_INPUTS.items()]
    return b.model("policy_pipeline", inputs, outputs, POLICY_PIPELINE_OUTPUT_SLICES,
                   {"policy_model": f"drivepack-sample-policy_pipeline-seed{seed}"})


def supercombo_model(seed: int = 4) -> onnx.ModelProto:
    """supercombo-0.11, computing in float16: the vision towers give this step's features (the output's
    hidden_state), the history and the other inputs go through the policy MLP; one float16 output (1, 2576)."""
    b = _Builder(seed, np.float16)
    f16 = TensorProto.FLOAT16
    feat = b.op("Concat", [_small_tower(b, "img", f16), _small_tower(b, "big_img", f16)], axis=1)
    hidden = b.gemm(feat, 128, 512, relu=True)                                  # (1, 512): fed back
    history = b.op("Flatten", [b.matmul("features_buffer", 512, 32)], axis=1)  # (1, 768)
    desire = b.op("Flatten", ["desire_pulse"], axis=1)                         # (1, 200)
    ctx = b.op("Concat", [hidden, history, desire, "traffic_convention", "action_t"], axis=1)  # (1, 1484)
    head = b.gemm(b.gemm(ctx, 1484, 256, relu=True), 256, SUPERCOMBO_OUTPUT_SLICES["hidden_state"][0])
    b.op("Concat", [head, hidden], axis=1)
    outputs = _named_output(b, f16, SUPERCOMBO_OUTPUT_SLICES["hidden_state"][1])
    inputs = [*_frames(("img", "big_img")),
              *(helper.make_tensor_value_info(n, f16, list(s)) for n, s in SUPERCOMBO_INPUTS.items())]
    return b.model("supercombo", inputs, outputs, SUPERCOMBO_OUTPUT_SLICES,
                   {"vision_model": f"drivepack-sample-supercombo-vision-seed{seed}",
                    "policy_model": f"drivepack-sample-supercombo-policy-seed{seed}"})


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


# role name (as in the vehicle profiles) -> builder
SAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {
    "vision": vision_model, "policy": policy_model, "vision_pipeline": vision_pipeline_model,
    "policy_pipeline": policy_pipeline_model, "supercombo": supercombo_model}
