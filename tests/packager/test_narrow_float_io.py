"""float16, bfloat16 and fp8 model inputs and outputs end to end (issue 23 item 3): package, verify, replay.

The float16 supercombo sample is packaged for pc-cpu and pc-opencl and replayed against onnxruntime's float16
run slice by slice; a small model with bfloat16 / fp8 I/O is packaged for CPU, OPENCL and QCOM.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from abi.infer import infer_abi
from packager.build import BuildOptions, build_package, golden_inputs
from packager.cli import main
from packager.package import load_package
from packager.samples import supercombo_model

# float16 results: onnxruntime rounds every op to float16, drivepack may keep float32 accumulators
F16_TOL = {"rtol": 1e-2, "atol": 1e-2}


@pytest.fixture(scope="module")
def supercombo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("supercombo")
    onnx.save(supercombo_model(), str(d / "supercombo.onnx"))
    return d / "supercombo.onnx"


@pytest.mark.slow
@pytest.mark.parametrize("vehicle, target", [("pc-cpu", None), ("pc-opencl", None), ("comma3x", "QCOM")])
def test_the_float16_supercombo_packages_verifies_and_replays_within_float16_tolerance(
        supercombo: Path, vehicle: str, target: str | None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.dpk"
    assert main(["package", str(supercombo), "--vehicle", vehicle, "-o", str(out), "--golden-sets", "1", "--quiet",
                 *(["--target", target] if target else [])]) == 0
    pkg = load_package(out)
    assert pkg.entries == ("supercombo",)
    abi = pkg.abi
    assert {s.name: s.dtype for s in abi.inputs} == {"img": "uint8", "big_img": "uint8", "features_buffer": "float16",
                                                      "desire_pulse": "float16", "traffic_convention": "float16",
                                                      "action_t": "float16"}
    [output] = abi.outputs
    assert (output.dtype, output.shape) == ("float16", (1, 2576)) and "hidden_state" in output.slice_map()
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "ok" in capsys.readouterr().out
    inputs = golden_inputs(infer_abi(supercombo_model()), 99)
    sess = ort.InferenceSession(str(supercombo), providers=["CPUExecutionProvider"])
    want = sess.run(None, inputs)[0].astype(np.float32).reshape(-1)
    got = pkg.make_replay()(inputs)[output.name]
    assert got.dtype == np.float16 and got.shape == (1, 2576)
    for name, (start, stop) in output.slice_map().items():
        np.testing.assert_allclose(got.astype(np.float32).reshape(-1)[start:stop], want[start:stop], **F16_TOL,
                                   err_msg=name)


def _narrow_io_model(elem: int) -> onnx.ModelProto:
    """x (narrow float) -> float32 -> x * 1.5 + 0.25 -> narrow float y; and a float32 side output."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT, name="up"),
             helper.make_node("Mul", ["xf", "k"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "b"], ["yf"], name="add"),
             helper.make_node("Cast", ["yf"], ["y"], to=elem, name="down")]
    inits = [helper.make_tensor("k", TensorProto.FLOAT, [], [1.5]), helper.make_tensor("b", TensorProto.FLOAT, [],
                                                                                      [0.25])]
    graph = helper.make_graph(nodes, "narrow", [helper.make_tensor_value_info("x", elem, (1, 64))],
                              [helper.make_tensor_value_info("y", elem, (1, 64)),
                               helper.make_tensor_value_info("yf", TensorProto.FLOAT, (1, 64))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


NARROW = {"bfloat16": (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
          "float8_e4m3fn": (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
          "float8_e5m2": (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2)}


@pytest.mark.parametrize("target", ["CPU", "OPENCL", "QCOM"])
@pytest.mark.parametrize("dtype", list(NARROW))
def test_bfloat16_and_fp8_io_package_verify_and_replay(dtype: str, target: str, tmp_path: Path) -> None:
    elem, npd = NARROW[dtype]
    onnx.save(_narrow_io_model(elem), str(tmp_path / "m.onnx"))
    pkg = build_package(tmp_path / "m.onnx", "pc-cpu", tmp_path / "m.dpk",
                        BuildOptions(target=target, golden_sets=1)).package
    assert [s.dtype for s in pkg.abi.inputs] == [dtype] and [o.dtype for o in pkg.abi.outputs] == [dtype, "float32"]
    assert main(["verify", str(tmp_path / "m.dpk")]) == 0
    x = (np.linspace(-3, 3, 64, dtype=np.float32)).astype(npd).reshape(1, 64)
    got = pkg.make_replay()({"x": x})
    assert got["y"].dtype == npd
    want = (x.astype(np.float32) * 1.5 + 0.25)
    np.testing.assert_array_equal(got["yf"], want)  # exact: every value here is representable in float32
    np.testing.assert_array_equal(got["y"].astype(np.float32), want.astype(npd).astype(np.float32))
    with pytest.raises(Exception, match=f"x: dtype expected {dtype}"):
        pkg.make_replay()({"x": x.astype(np.float16)})
