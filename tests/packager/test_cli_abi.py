"""`drivepack abi-check` and `drivepack abi-diff`: tables, JSON, exit codes 0 / 1 / 2 (/ 3), one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from abi.infer import infer_abi
from abi.load import save_abi
from abi.vehicle import VEHICLES_DIR
from packager.cli import main
from packager.samples import policy_model, vision_model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    paths = {"vision": d / "vision.onnx", "policy": d / "policy.onnx"}
    onnx.save(vision_model(), paths["vision"])
    onnx.save(policy_model(), paths["policy"])
    return paths


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("drivepack: error: "), err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.parametrize("vehicle", ["comma3x", "comma3", "pc-cpu", "pc-opencl"])
@pytest.mark.parametrize("role", ["vision", "policy"])
def test_samples_check_clean(models: dict[str, Path], vehicle: str, role: str,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["abi-check", str(models[role]), "--vehicle", vehicle], capsys)
    assert code == 0, out + err
    header = out.splitlines()[1].split()
    assert header == ["input", "expected", "provided", "verdict"]
    assert f"role {role}" in out and out.rstrip().endswith("abi-check: ok")


def test_json_report(models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["abi-check", str(models["policy"]), "--vehicle", "comma3x", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["role"] == "policy" and report["vehicle"] == "comma3x"
    assert {r["input"] for r in report["rows"]} >= {"features_buffer", "prev_desired_curv", "output outputs[plan]"}
    assert all(set(r) == {"input", "io", "name", "field", "slice", "expected", "provided", "expected_text",
                          "provided_text", "verdict"} for r in report["rows"])
    rows = {r["input"]: r for r in report["rows"]}
    whole = rows["features_buffer"]  # a whole input: both sides as objects, the table's text next to them
    assert whole["io"] == "input" and whole["field"] is None and whole["expected"]["shape"] == [1, 25, 512]
    assert whole["expected"]["byte_size"] == 25 * 512 * 4 and whole["expected"]["history"]["length"] == 25
    assert whole["provided"] == whole["expected"] and isinstance(whole["expected_text"], str)
    plan = rows["output outputs[plan]"]
    assert (plan["io"], plan["name"], plan["slice"]) == ("output", "outputs", "plan")
    assert plan["expected"]["stop"] - plan["expected"]["start"] == plan["expected"]["length"] == \
        plan["provided"]["length"]


def test_stale_package_abi_vs_newer_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Field failure: an ABI shipped with an older model no longer matches the runtime in a newer profile."""
    old = infer_abi(policy_model()).to_dict()
    old["inputs"] = [i for i in old["inputs"] if i["name"] != "lateral_control_params"]   # older model: no such input
    old["inputs"][0]["shape"], old["inputs"][0]["byte_size"] = [1, 24, 512], 24 * 512 * 4  # and a shorter history
    old["inputs"][0]["strides"], old["inputs"][0]["history"]["length"] = [24 * 512 * 4, 2048, 4], 24
    path = tmp_path / "policy_v1.abi.json"
    path.write_text(json.dumps(old))
    code, out, _ = run(["abi-check", str(path), "--vehicle", "comma3x", "--json"], capsys)
    assert code == 1
    rows = {r["input"]: r for r in json.loads(out)["rows"]}
    assert rows["lateral_control_params"]["verdict"] == "EXTRA"
    assert rows["features_buffer.shape"]["verdict"] == "MISMATCH"
    length = rows["features_buffer.history.length"]
    assert (length["name"], length["field"], length["expected"], length["provided"]) == \
        ("features_buffer", "history.length", 24, 25)
    assert rows["features_buffer.shape"]["expected"] == [1, 24, 512] and rows["lateral_control_params"]["expected"] \
        is None and rows["lateral_control_params"]["provided"]["dtype"] == "float32"
    code, out, _ = run(["abi-check", str(path), "--vehicle", "comma3x"], capsys)
    assert code == 1 and "MISMATCH" in out and "abi-check: " in out and "mismatches" in out


def test_history_drift_in_profile(models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same-size buffer, history declared 24 by the runtime, trained with 25: caught by meaning, not shape."""
    text = (VEHICLES_DIR / "comma3x.yaml").read_text()
    old = "        history: {length: 25, skip: 4, order: oldest_first}"
    assert old in text
    drifted = tmp_path / "comma3x.yaml"
    drifted.write_text(text.replace(old, old.replace("length: 25", "length: 24"), 1))
    code, out, _ = run(["abi-check", str(models["policy"]), "--vehicle", str(drifted), "--json"], capsys)
    assert code == 1
    bad = [r for r in json.loads(out)["rows"] if r["verdict"] != "ok"]
    assert [(r["input"], r["expected"], r["provided"]) for r in bad] == [("features_buffer.history.length", 25, 24)]
    assert [(r["expected_text"], r["provided_text"]) for r in bad] == [("25", "24")]


def test_profile_overrides_declare_model_meaning(models: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text = (VEHICLES_DIR / "pc-cpu.yaml").read_text()
    old = "  policy:\n    budget_ms: {mean: 5, max: 5}\n"
    assert old in text
    over = old + "    model_overrides:\n      desire: {history: {skip: 2}}\n"
    path = tmp_path / "pc-cpu.yaml"
    path.write_text(text.replace(old, over))
    code, out, _ = run(["abi-check", str(models["policy"]), "--vehicle", str(path), "--json"], capsys)
    bad = [r for r in json.loads(out)["rows"] if r["verdict"] != "ok"]
    assert code == 1
    assert [(r["input"], r["expected"], r["provided"]) for r in bad] == [("desire.history.skip", 2, 4)]


def test_wrong_role_is_a_mismatch(models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["abi-check", str(models["vision"]), "--vehicle", "comma3x", "--role", "dmonitoring"], capsys)
    assert code == 1 and "MISSING" in out and "EXTRA" in out


@pytest.mark.parametrize("argv, fragments", [
    (["abi-check", "{vision}"], ["--vehicle"]),
    (["abi-check", "{vision}", "--vehicle", "comma9"], ["comma9", "comma3x"]),
    (["abi-check", "nope.onnx", "--vehicle", "comma3x"], ["nope.onnx", "no such file"]),
    (["abi-check", "{dpk}", "--vehicle", "comma3x"], ["not a trusted drivepack package", "truncated"]),
    (["abi-check", "{bad_onnx}", "--vehicle", "comma3x"], ["not a readable ONNX model"]),
    (["abi-check", "{bad_yaml}", "--vehicle", "{bad_yaml}"], ["bad.yaml:2", "invalid YAML"]),
    (["abi-check", "{bad_json}", "--vehicle", "comma3x"], ["version expected 2, got 7"]),
    (["abi-check", "{vision}", "--vehicle", "comma3x", "--role", "steering"], ["steering"]),
    (["abi-diff", "{vision}"], ["new"]),
    (["abi-diff", "{vision}", "{dpk}"], ["not a trusted drivepack package", "truncated"]),
])
def test_bad_usage_or_file_exits_2(models: dict[str, Path], tmp_path: Path, argv: list[str], fragments: list[str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    files = {"vision": str(models["vision"]), "dpk": str(tmp_path / "m.dpk"), "bad_onnx": str(tmp_path / "b.onnx"),
             "bad_yaml": str(tmp_path / "bad.yaml"), "bad_json": str(tmp_path / "v.abi.json")}
    Path(files["dpk"]).write_bytes(b"DPK")
    Path(files["bad_onnx"]).write_bytes(b"\xff\x00garbage")
    Path(files["bad_yaml"]).write_text("schema: [\n")
    Path(files["bad_json"]).write_text(json.dumps({"schema": "drivepack.abi", "version": 7, "inputs": [],
                                                   "outputs": []}))
    code, out, err = run([a.format(**files) for a in argv], capsys)
    assert code == 2 and out == ""
    assert_one_line_error(err, *fragments)


def test_abi_diff_exit_codes(models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vision = str(models["vision"])
    code, out, _ = run(["abi-diff", vision, vision], capsys)
    assert code == 0 and "identical" in out
    abi = infer_abi(vision_model())
    d = abi.to_dict()
    d["outputs"][0]["slices"]["extra"] = [0, 3]
    compatible = tmp_path / "compatible.abi.json"
    compatible.write_text(json.dumps(d))
    code, out, _ = run(["abi-diff", vision, str(compatible)], capsys)
    assert code == 3 and "compatible" in out and "outputs[extra]" in out
    d["inputs"][1]["camera"]["skip"] = 2
    breaking = tmp_path / "breaking.abi.json"
    breaking.write_text(json.dumps(d))
    code, out, _ = run(["abi-diff", vision, str(breaking), "--json"], capsys)
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "breaking"
    assert {(c["kind"], c["name"], c["field"], c["severity"]) for c in report["changes"]} == {
        ("added", "outputs[extra]", "slice", "compatible"),
        ("meaning", "big_input_imgs", "camera.skip", "breaking")}


def test_abi_json_round_trip_through_save(models: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policy.abi.json"
    save_abi(infer_abi(policy_model()), path)
    code, _, _ = run(["abi-diff", str(models["policy"]), str(path)], capsys)
    assert code == 0
    code, _, _ = run(["abi-check", str(path), "--vehicle", "comma3x"], capsys)
    assert code == 0
