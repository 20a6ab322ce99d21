"""Host ops (jit/onnx/host_ops.py): the one registry of ONNX ops that compute on the host, the loader's record of
the nodes that ran host code, capture's refusal of a host op that would have to run at replay time, and the
conformance run's count of cases that went through host code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from jit import capture_onnx
from jit.common.errors import UnsupportedOp
from jit.onnx.host_ops import HOST_OPS, HostNode, HostOpError
from jit.onnx.loader import load_onnx
from jit.onnx.registry import OPS
from tests.conftest import ROOT, node_dir
from tests.onnx.conformance.conformance import CaseResult, host_code_summary, run_case
from tests.onnx.conformance.tally import CASES_PROPERTY, HostCodeTally


def make(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
         inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                     for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


X = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, 6.0]], np.float32)


def test_registry_lists_exactly_the_data_dependent_ops() -> None:
    assert set(HOST_OPS) == {"NonZero", "Unique", "Compress", "NonMaxSuppression", "MelWeightMatrix", "RoiAlign"}
    for op, entry in HOST_OPS.items():
        assert op in OPS and entry.op == op and entry.reason and entry.inputs


def test_loader_records_each_node_that_ran_host_code() -> None:
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nz"), helper.make_node("Relu", ["x"], ["r"])]
    m = load_onnx(make(nodes, {"x": X}, ["nz", "r"]))
    out = m({"x": X})
    np.testing.assert_array_equal(out["nz"].numpy(), np.stack(np.nonzero(X)))
    assert m.host_nodes == [HostNode("nz", "NonZero")]
    relu = load_onnx(make([helper.make_node("Relu", ["x"], ["r"])], {"x": X}, ["r"]))
    relu({"x": X})
    assert relu.host_nodes == []


@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_is_a_host_op_only_with_an_adaptive_grid(ratio: int) -> None:
    ins = {"x": np.ones((1, 1, 6, 6), np.float32), "rois": np.array([[0.0, 0.0, 4.0, 4.0]], np.float32),
           "b": np.zeros(1, np.int64)}
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], name="roi", output_height=2, output_width=2,
                            sampling_ratio=ratio)
    m = load_onnx(make([node], ins, ["y"]))
    m(ins)["y"].numpy()
    assert m.host_nodes == ([HostNode("roi", "RoiAlign")] if ratio == 0 else [])


def test_capture_refuses_a_host_op_on_a_placeholder_naming_the_node() -> None:
    m = load_onnx(make([helper.make_node("NonZero", ["x"], ["nz"], name="find")], {"x": X}, ["nz"]))
    with pytest.raises(HostOpError, match=r"^NonZero at node 'find' \(opset 16\): computes on the host .* input 0 "
                                          r"'x' is only known at run time") as e:
        capture_onnx(m, {"x": X}, target="CPU")
    assert isinstance(e.value, UnsupportedOp) and "\n" not in str(e.value)


def test_capture_refuses_a_host_op_on_a_value_computed_from_a_placeholder() -> None:
    nodes = [helper.make_node("Greater", ["x", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["y"], name="pick", axis=1)]
    m = load_onnx(make(nodes, {"x": X}, ["y"], {"zero": np.zeros((), np.float32)}))
    with pytest.raises(HostOpError, match=r"^Compress at node 'pick' .* input 1 'keep' is only known at run time"):
        capture_onnx(m, {"x": X}, target="CPU")


def test_capture_runs_a_host_op_on_constants_once() -> None:
    cond = np.array([True, False, True])
    m = load_onnx(make([helper.make_node("Compress", ["x", "cond"], ["y"], name="pick", axis=1)], {"x": X}, ["y"],
                       {"cond": cond}))
    cap = capture_onnx(m, {"x": X}, target="CPU")
    assert m.host_nodes == [HostNode("pick", "Compress")]
    x2 = X * 3.0
    np.testing.assert_array_equal(cap({"x": x2})["y"], np.compress(cond, x2, axis=1))


@pytest.fixture
def cases(pytestconfig: pytest.Config) -> Path:
    return node_dir(pytestconfig) / "node"


def test_conformance_results_count_the_cases_through_host_code(cases: Path) -> None:
    nonzero, relu = run_case(cases / "test_nonzero_example"), run_case(cases / "test_relu")
    assert nonzero == CaseResult(None, ("NonZero",)) and relu == CaseResult(None, ())
    failed = CaseResult("output 0: values differ", ("Unique",))
    assert host_code_summary([nonzero, relu, failed]) == "1 of 2 passing cases ran host code (NonZero 1)"
    assert host_code_summary([relu]) == "0 of 1 passing cases ran host code"

    tally = HostCodeTally()
    for name, result, marks in [("test_nonzero_example", nonzero, {}), ("test_relu", relu, {}),
                                ("test_nonzero_example", nonzero, {"opencl": 1})]:
        props = [(CASES_PROPERTY, [(name, result.reason, list(result.host_ops))])]
        tally.pytest_runtest_logreport(pytest.TestReport(f"t::{name}", ("t", 0, name), {"t": 1, **marks}, "passed",
                                                         None, "call", user_properties=props))
    assert tally.summary() == ["onnx conformance (CPU): 1 of 2 passing cases ran host code (NonZero 1)",
                               "onnx conformance (OPENCL): 1 of 1 passing cases ran host code (NonZero 1)"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_conformance_run_prints_the_host_code_count(cases: Path, workers: list[str]) -> None:
    """Also under xdist, as CI runs the suite: there the controller collects no test module."""
    tests = [f"tests/onnx/conformance/test_onnx_node.py::test_node_case[{c}]" for c in ("test_nonzero_example",
                                                                                         "test_relu")]
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, *tests,
            "--onnx-node-dir", str(cases.parent)]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "onnx conformance (CPU): 1 of 2 passing cases ran host code (NonZero 1)" in run.stdout, run.stdout[-2000:]
