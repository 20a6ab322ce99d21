"""A corpus of bad ONNX files, each refused with a one-line OnnxError naming the field: by the Python loader, by
ABI inference, and by ``drivepack package`` / ``abi-check`` (exit 2, one line on stderr, no traceback).

Each bad model is built here (onnx.helper or raw bytes), written next to whatever external data it names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from abi.infer import infer_abi
from jit.common.errors import DrivepackError
from jit.onnx.loader import load_onnx
from jit.onnx.registry import OnnxError
from jit.onnx.validate import MAX_TENSOR_ELEMENTS, checked_model, read_model
from packager.cli import main
from packager.signing import user_signing_key
from packager.synthetic import tiny_model

ROOT = Path(__file__).resolve().parents[2]


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] | None = None, opset: int = 13,
           x_shape: list[int] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape or [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bytes(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


def _external(location: str, offset: int = 0, length: int = 16) -> onnx.ModelProto:
    """x + w, with w's 16 bytes named as external data at ``location``."""
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = w.external_data.add()
        e.key, e.value = k, v
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w], x_shape=[4])


def _weights(d: Path, name: str = "w.bin", size: int = 16) -> None:
    (d / name).write_bytes(np.ones(size // 4, np.float32).tobytes())


def _empty(d: Path) -> bytes:
    return b""


def _truncated(d: Path) -> bytes:
    data = _bytes(tiny_model())
    return data[: len(data) // 2]


def _checker(d: Path) -> bytes:
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")])
    m.ClearField("ir_version")  # only onnx.checker objects to this one
    return _bytes(m)


def _opset(d: Path) -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], opset=99999))


def _arity(d: Path) -> bytes:
    return _bytes(_model([helper.make_node("Add", ["x", "x", "x"], ["y"], name="add3")]))


def _duplicate(d: Path) -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                          helper.make_node("Neg", ["x"], ["y"], name="second")]))


def _cycle(d: Path) -> bytes:
    return _bytes(_model([helper.make_node("Add", ["x", "b"], ["a"], name="n_a"),
                          helper.make_node("Relu", ["a"], ["b"], name="n_b"),
                          helper.make_node("Identity", ["b"], ["y"], name="out")]))


def _huge_input(d: Path) -> bytes:
    return _bytes(_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], x_shape=[1, 2**40]))


def _huge_initializer(d: Path) -> bytes:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20])
    w.raw_data = b"\0" * 16
    return _bytes(_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w]))


def _huge_constant_of_shape(d: Path) -> bytes:
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "shape")
    return _bytes(_model([helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos"),
                          helper.make_node("Add", ["x", "big"], ["y"], name="add")], [shape]))


def _absolute(d: Path) -> bytes:
    _weights(d)
    return _bytes(_external(str(d / "w.bin")))


def _escape(d: Path) -> bytes:
    _weights(d.parent, "outside.bin")
    return _bytes(_external("../outside.bin"))


def _symlink(d: Path) -> bytes:
    _weights(d.parent, "outside.bin")
    (d / "link.bin").symlink_to(d.parent / "outside.bin")
    return _bytes(_external("link.bin"))


def _missing(d: Path) -> bytes:
    return _bytes(_external("nowhere.bin"))


def _out_of_range(d: Path) -> bytes:
    _weights(d)
    return _bytes(_external("w.bin", offset=8, length=16))


def _wrong_length(d: Path) -> bytes:
    _weights(d, size=64)
    return _bytes(_external("w.bin", length=12))


# name -> (builder, fragments the one-line message must contain: the field and what was wrong)
CORPUS: dict[str, tuple[Callable[[Path], bytes], tuple[str, ...]]] = {
    "empty": (_empty, ("empty file (0 bytes)",)),
    "truncated": (_truncated, ("cannot parse ONNX",)),
    "checker": (_checker, ("onnx.checker", "ir_version")),
    "opset": (_opset, ("opset_import[ai.onnx]", "1..28", "got 99999", "ai.onnx.ml 1..5")),
    "arity": (_arity, ("node[0] 'add3' (Add)", "input count expected 2", "got 3")),
    "duplicate_output": (_duplicate, ("node[1] 'second' (Neg)", "output 'y' expected written once", "'first'")),
    "cycle": (_cycle, ("node[0] 'n_a' (Add)", "input 'b'", "written later by graph.node[1] 'n_b'", "cycle")),
    "huge_input": (_huge_input, ("graph.input 'x'", "MAX_TENSOR_ELEMENTS", str(2**40))),
    "huge_initializer": (_huge_initializer, ("graph.initializer 'w'", "dims", "MAX_TENSOR_ELEMENTS")),
    "huge_constant_of_shape": (_huge_constant_of_shape, ("'cos' (ConstantOfShape)", "input 'shape'",
                                                         "MAX_TENSOR_ELEMENTS")),
    "external_absolute": (_absolute, ("initializer 'w'", "external_data location", "absolute path")),
    "external_escape": (_escape, ("initializer 'w'", "external_data location", "'../outside.bin'", "'..'")),
    "external_symlink": (_symlink, ("initializer 'w'", "external_data location", "symlink")),
    "external_missing": (_missing, ("initializer 'w'", "external_data location 'nowhere.bin'", "no such file")),
    "external_out_of_range": (_out_of_range, ("initializer 'w'", "external_data offset+length", "16 bytes",
                                              "got 8+16")),
    "external_wrong_length": (_wrong_length, ("initializer 'w'", "external_data length expected 16", "got 12")),
}


def _write(case: str, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    path = d / f"{case}.onnx"
    path.write_bytes(CORPUS[case][0](d))
    return path


def _assert_message(e: BaseException, case: str) -> None:
    msg = str(e)
    assert "\n" not in msg, msg
    for f in CORPUS[case][1]:
        assert f in msg, (f, msg)


@pytest.mark.parametrize("case", list(CORPUS))
def test_loader_refuses(case: str, tmp_path: Path) -> None:
    path = _write(case, tmp_path)
    with pytest.raises(OnnxError) as e:
        load_onnx(path)
    _assert_message(e.value, case)
    assert str(path) in str(e.value) or "initializer" in str(e.value)


@pytest.mark.parametrize("case", list(CORPUS))
def test_abi_inference_and_packaging_validation_refuse(case: str, tmp_path: Path) -> None:
    path = _write(case, tmp_path)
    with pytest.raises(OnnxError) as e:
        infer_abi(path)
    _assert_message(e.value, case)
    with pytest.raises(OnnxError) as e:  # what packager/build.py loads the model with
        checked_model(path.read_bytes(), path)
    _assert_message(e.value, case)


@pytest.mark.parametrize("case", list(CORPUS))
@pytest.mark.parametrize("command", ["package", "abi-check"])
def test_cli_refuses_with_one_line(case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CONFIG_DIR", str(tmp_path / "config"))  # no key made in the user's home
    user_signing_key()  # made now, so that its one-time note is not part of the error output
    capsys.readouterr()
    path = _write(case, tmp_path)
    argv = [command, str(path), "--vehicle", "pc-cpu"] + (["-o", str(tmp_path / "m.dpk"), "--quiet"]
                                                          if command == "package" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("drivepack: error: ") and "Traceback" not in err, err
    for f in CORPUS[case][1]:
        assert f in err, (f, err)
    assert not (tmp_path / "m.dpk").exists()


def test_cli_process_exits_2_without_traceback(tmp_path: Path) -> None:
    """The same through a real process: what a user sees (the arity case; the others share the path)."""
    path = _write("arity", tmp_path)
    env = {**os.environ, "DRIVEPACK_CONFIG_DIR": str(tmp_path / "config")}
    p = subprocess.run([sys.executable, "-m", "packager.cli", "abi-check", str(path), "--vehicle", "pc-cpu"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr and "input count expected 2" in p.stderr


def test_bytes_and_proto_without_a_directory_may_not_name_external_data(tmp_path: Path) -> None:
    with pytest.raises(OnnxError, match=r"initializer 'w': external_data location 'w.bin' expected a model "
                                        r"loaded from a file"):
        load_onnx(_bytes(_external("w.bin")))


def test_huge_input_is_refused_before_any_allocation(tmp_path: Path) -> None:
    """The limit is the named constant, and a shape just inside it is accepted by validation."""
    ok = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], x_shape=[1, MAX_TENSOR_ELEMENTS])
    path = tmp_path / "ok.onnx"
    path.write_bytes(_bytes(ok))
    read_model(path)
    with pytest.raises(OnnxError, match="MAX_TENSOR_ELEMENTS"):
        path.write_bytes(_bytes(_model([helper.make_node("Relu", ["x"], ["y"])], x_shape=[2, MAX_TENSOR_ELEMENTS])))
        read_model(path)


def test_errors_are_drivepack_errors() -> None:
    assert issubclass(OnnxError, DrivepackError)


@pytest.fixture()
def external_model(tmp_path: Path) -> Path:
    """tiny_model with every weight in ``weights.bin`` next to the model, in a directory that is not the cwd."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    onnx.save_model(tiny_model(), str(d / "tiny.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=64)
    assert (d / "weights.bin").stat().st_size > 10_000
    return d / "tiny.onnx"


def test_external_data_is_read_from_the_model_directory_not_the_cwd(external_model: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "weights.bin").write_bytes(b"\xff" * (external_model.parent / "weights.bin").stat().st_size)  # a decoy
    monkeypatch.chdir(cwd)
    feeds = {"frame": np.arange(128, dtype=np.uint8).reshape(1, 2, 8, 8), "x": np.ones((1, 16), np.float32)}
    want = load_onnx(tiny_model())(feeds)["outputs"].numpy()
    np.testing.assert_array_equal(load_onnx(external_model)(feeds)["outputs"].numpy(), want)
    from_bytes = load_onnx(external_model.read_bytes(), base_dir=external_model.parent)
    np.testing.assert_array_equal(from_bytes(feeds)["outputs"].numpy(), want)
    proto = checked_model(external_model.read_bytes(), external_model)  # packaging: weights inlined from there
    assert not any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)
    np.testing.assert_array_equal(load_onnx(proto)(feeds)["outputs"].numpy(), want)
    assert infer_abi(external_model).to_dict() == infer_abi(tiny_model()).to_dict()


def test_package_with_external_data_from_another_cwd(external_model: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CONFIG_DIR", str(tmp_path / "config"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "tiny.dpk"
    assert main(["package", str(external_model), "--vehicle", "pc-cpu", "-o", str(out), "--quiet",
                 "--allow-abi-mismatch"]) == 0, \
        capsys.readouterr().err
    assert out.stat().st_size > 10_000
