"""NaN, +Inf and -Inf propagate through drivepack's ONNX ops as onnxruntime propagates them, op by op, on CPU and
OPENCL: a table of one-node models fed inputs holding NaN, +Inf, -Inf, -0.0 and ordinary values.

A case passes when drivepack's output has NaN, +Inf and -Inf at exactly onnxruntime's positions and the finite
values agree within tolerance (the sign of a zero is not compared: onnxruntime's Relu(-0.0) is -0.0,
onnx.reference's 0). Where onnxruntime disagrees with the ONNX spec or is inconsistent, the table says so
(``NOTES``), the case is checked against onnx.reference (or numpy) instead, and another test checks that
onnxruntime still differs there. All models of one device are built and realized together (PoCL pays ~0.3 s per
program build).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from tests.helpers import single_op_model

NAN, INF = np.nan, np.inf
# (1, 2, 4, 4): reductions over the last axis see a NaN row, an Inf row, a row with +Inf and -Inf, clean rows;
# 2x2 pool windows see NaN, +Inf, -Inf and mixes of them
X = np.array([[[[NAN, 1.0, -2.0, 3.0], [INF, -1.0, 0.5, 2.0], [-INF, 4.0, -0.0, 0.0], [0.25, -3.0, 1.5, -0.5]],
               [[1.0, 2.0, NAN, INF], [-INF, INF, 3.0, -4.0], [0.7, -0.2, 5.0, 6.0], [-1.0, -2.0, -3.0, -4.0]]]],
             dtype=np.float32)
# a second operand with its specials elsewhere: NaN meets finite, +Inf meets -Inf, finite meets NaN
Y = np.array([[[[2.0, NAN, -INF, 3.0], [-INF, 0.5, INF, -0.0], [INF, NAN, 2.0, -1.0], [1.0, 0.0, -2.0, INF]],
               [[NAN, -3.0, 1.0, -INF], [INF, -INF, NAN, 2.0], [0.5, 0.0, -1.0, -INF], [4.0, NAN, -0.5, 1.0]]]],
             dtype=np.float32)
POSITIVE = np.abs(Y)  # a Pow exponent of both signs' bases, NaN and Inf included
COND = (np.arange(32).reshape(X.shape) % 3 == 0)


@dataclass(frozen=True)
class Case:
    """One op: its inputs (graph inputs), initializers, attributes, opset."""

    name: str
    op: str
    inputs: dict[str, np.ndarray] = field(default_factory=lambda: {"x": X})
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 21
    node_inputs: tuple[str, ...] = ()  # the node's input names where they are not inputs then consts ("" skips)
    expect: Callable[[], np.ndarray] | None = None  # drivepack's expected output where no runtime gives it

    def model(self) -> onnx.ModelProto:
        m = single_op_model(self.op, self.inputs, 1, self.opset, self.consts, **self.attrs)
        if self.node_inputs:
            m.graph.node[0].input[:] = self.node_inputs
        return m


def _f(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _max_pool_3x3_pad1(x: np.ndarray) -> np.ndarray:
    """3x3 max pool, stride 1, padded by one -inf: np.max propagates NaN."""
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h, w = x.shape[2:]
    return np.stack([np.stack([p[:, :, i:i + 3, j:j + 3].max(axis=(2, 3)) for j in range(w)], -1)
                     for i in range(h)], -2)


def _axes(*axes: int) -> dict[str, np.ndarray]:
    return {"axes": np.array(axes, dtype=np.int64)}


_UNARY = ["Relu", "Sigmoid", "HardSwish", "Abs", "Neg", "Sqrt", "Exp", "Log", "Tanh", "Erf", "Floor", "Ceil",
          "Round", "Sign", "Softplus", "Softsign", "Reciprocal", "Sin", "Cos", "Identity", "IsNaN", "IsInf",
          "Elu", "Selu", "Celu", "Mish", "Gelu", "Softmax", "LogSoftmax", "Hardmax", "Atan", "Asinh", "Sinh",
          "Cosh"]
_BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Equal", "Less", "Greater",
           "LessOrEqual", "GreaterOrEqual"]
_REDUCE = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceLogSumExp", "ReduceL1",
           "ReduceL2", "ReduceSumSquare", "ReduceLogSum"]

CASES: list[Case] = [
    *(Case(op, op) for op in _UNARY),
    Case("LeakyRelu", "LeakyRelu", attrs={"alpha": 0.1}),
    Case("HardSigmoid", "HardSigmoid", attrs={"alpha": 0.2, "beta": 0.5}),
    Case("ThresholdedRelu", "ThresholdedRelu", attrs={"alpha": 0.6}),
    Case("Gelu-tanh", "Gelu", attrs={"approximate": "tanh"}),
    Case("Softmax-axis1", "Softmax", attrs={"axis": 1}),
    Case("Clip", "Clip", consts={"lo": _f(-1.5).reshape(()), "hi": _f(2.5).reshape(())}),
    Case("Clip-min-only", "Clip", consts={"lo": _f(0.0).reshape(())}),
    Case("Clip-max-only", "Clip", consts={"hi": _f(0.0).reshape(())}, node_inputs=("x", "", "hi")),
    Case("Clip-no-bounds", "Clip"),
    Case("PRelu", "PRelu", consts={"slope": _f(0.25, -2.0).reshape(2, 1, 1)}),
    *(Case(op, op, inputs={"x": X, "y": Y}) for op in _BINARY),
    Case("Pow-positive-exp", "Pow", inputs={"x": X, "y": POSITIVE}),
    Case("Max-3", "Max", inputs={"x": X, "y": Y, "z": -X}),
    Case("Min-3", "Min", inputs={"x": X, "y": Y, "z": -X}),
    Case("Max-broadcast-scalar", "Max", consts={"zero": _f(0.0).reshape(())}),
    Case("Min-broadcast-scalar", "Min", consts={"zero": _f(0.0).reshape(())}),
    Case("Mod-fmod", "Mod", inputs={"x": X, "y": Y}, attrs={"fmod": 1}),
    Case("Where", "Where", inputs={"c": COND, "x": X, "y": Y}),
    *(Case(f"{op}-last", op, consts=_axes(-1), attrs={"keepdims": 1}) for op in _REDUCE),
    *(Case(f"{op}-hw", op, consts=_axes(2, 3), attrs={"keepdims": 0}) for op in _REDUCE),
    Case("ReduceMax-all", "ReduceMax"),
    Case("ReduceMin-all", "ReduceMin"),
    Case("MaxPool", "MaxPool", attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    Case("MaxPool-3x3-pad", "MaxPool", attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
         expect=lambda: _max_pool_3x3_pad1(X)),
    Case("AveragePool", "AveragePool", attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    Case("GlobalMaxPool", "GlobalMaxPool"),
    Case("GlobalAveragePool", "GlobalAveragePool"),
    Case("LpNormalization", "LpNormalization", attrs={"axis": -1, "p": 2}),
    Case("LpNormalization-p1", "LpNormalization", attrs={"axis": -1, "p": 1}),
    Case("ArgMax", "ArgMax", attrs={"axis": -1}),
    Case("ArgMin", "ArgMin", attrs={"axis": -1}),
    Case("ArgMax-last-index", "ArgMax", attrs={"axis": -1, "select_last_index": 1}),
    Case("CumSum", "CumSum", consts={"axis": np.array(3, dtype=np.int64)}),
]

# onnxruntime's max reductions and pools keep a running max with `x > acc`: a NaN is kept only when it is the
# window's first element, so a NaN in the data may or may not reach the output depending on where it is. The ONNX
# spec defines ReduceMax/Min "as numpy" (NaN propagates) and the pools as the max of the window; drivepack
# propagates NaN wherever it is (as its elementwise Max, and onnxruntime's), so that a NaN check downstream sees it.
_ORDER = "onnxruntime keeps a NaN only when it comes first in the window; drivepack (and onnx.reference) propagate it"
_ARG = ("onnxruntime returns a NaN's index only when it comes first; drivepack returns the first (last with "
        "select_last_index) NaN's index, as numpy's argmax and onnx.reference")
# cases where onnxruntime disagrees with the ONNX spec or is inconsistent: drivepack matches onnx's reference
# evaluator instead, and the test checks that onnxruntime still differs (so a stale note shows up)
NOTES: dict[str, str] = {
    **{f"{op}-{axes}": _ORDER for op in ("ReduceMax", "ReduceMin") for axes in ("last", "hw")},
    "MaxPool": _ORDER, "GlobalMaxPool": _ORDER,
    "MaxPool-3x3-pad": _ORDER + " (onnx.reference too ignores NaN in a padded window: numpy's max of the window)",
    "ArgMax": _ARG, "ArgMin": _ARG, "ArgMax-last-index": _ARG,
    "Hardmax": "with a NaN in the row onnxruntime's Hardmax gives an all-zero row ([nan, 1, 2, 3]) or a 1 at a "
               "non-maximum ([1, nan, 2, 3]: index 2); drivepack puts the 1 at the first NaN, as onnx.reference",
}

DEVICES = ["CPU", "OPENCL"]


def onnxruntime_output(case: Case) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = onnx.shape_inference.infer_shapes(case.model())  # onnxruntime wants typed outputs
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, case.inputs)[0]


def reference(case: Case) -> np.ndarray:
    """What drivepack must give: onnxruntime's output, or onnx.reference's for the cases of ``NOTES``."""
    if case.name not in NOTES:
        return onnxruntime_output(case)
    if case.expect is not None:
        return case.expect().astype(X.dtype)
    return ReferenceEvaluator(case.model()).run(None, case.inputs)[0]


def mismatch(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when ``got`` has ``want``'s NaN/+Inf/-Inf positions and finite values (within tolerance)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype}, onnxruntime {want.shape} {want.dtype}"
    if want.dtype.kind != "f":
        bad = np.argwhere(got != want)
        return None if bad.size == 0 else f"at {bad[:4].tolist()}: {got[got != want][:4]} vs {want[got != want][:4]}"
    problems = []
    for label, test in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        if (diff := test(got) != test(want)).any():
            problems.append(f"{label} at {np.argwhere(diff)[:4].tolist()}: got {got[diff][:4]}, "
                            f"onnxruntime {want[diff][:4]}")
    finite = np.isfinite(got) & np.isfinite(want)
    if not np.allclose(got[finite], want[finite], rtol=1e-4, atol=1e-5):
        problems.append(f"finite values differ by {np.abs(got[finite] - want[finite]).max():.3g}")
    return "; ".join(problems) or None


_RESULTS: dict[str, dict[str, np.ndarray | str]] = {}


def device_results(device: str) -> dict[str, np.ndarray | str]:
    """Every case's output on ``device`` (or why it failed), all realized together."""
    if device not in _RESULTS:
        from jit.frontend.tensor import Tensor
        from jit.onnx.loader import load_onnx
        out: dict[str, Any] = {}
        for case in CASES:
            try:
                runner = load_onnx(case.model(), device=device)
                out[case.name] = runner(case.inputs)[runner.output_names[0]]
            except Exception as e:  # noqa: BLE001 - reported by the case's own test
                out[case.name] = f"{type(e).__name__}: {e}"
        Tensor.realize_all(*(t for t in out.values() if not isinstance(t, str)))
        _RESULTS[device] = {k: v if isinstance(v, str) else v.numpy() for k, v in out.items()}
    return _RESULTS[device]


def test_table_names_are_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    assert set(NOTES) <= {c.name for c in CASES}


@pytest.mark.parametrize("name", sorted(NOTES))
def test_noted_cases_still_differ_in_onnxruntime(name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    assert mismatch(onnxruntime_output(case), reference(case)) is not None, f"{name}: drop it from NOTES"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_nonfinite_matches_onnxruntime(case: Case, device: str) -> None:
    got = device_results(device)[case.name]
    assert not isinstance(got, str), got
    assert (reason := mismatch(got, reference(case))) is None, f"{case.name} on {device}: {reason}"
