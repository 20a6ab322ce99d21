"""The package, verify, replay and inspect commands: outputs, JSON schema, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime
import pytest

from packager.cli import main
from packager.container import SIGNATURE_SIZE
from packager.synthetic import tiny_model
from tests.packager.test_format import _rewrite
from tests.packager.test_verify import _nudge


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    return path


@pytest.fixture
def pkg(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "tiny.dpk"
    code, stdout, err = run(["package", str(model), "--vehicle", "pc-cpu", "-o", str(out)], capsys)
    assert code == 0, err
    for stage in ("[load]", "[capture]", "[golden]", "[write]", "[compile]", "[verify]"):
        assert stage in err
    assert "2/2 golden sets" in err and "kernels built" in err
    assert "1 entry: tiny" in stdout and "entry tiny: model tiny.onnx, role None" in stdout
    assert "kernels 2 (pruned 0 of 2 traced)" in stdout and "arena" in stdout and "dtype policy on CPU" in stdout
    assert "time per stage: load" in stdout and f"{out.stat().st_size} bytes" in stdout
    return out


def test_verify_ok_and_json(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["verify", str(pkg)], capsys)
    assert code == 0 and out.startswith("verify ok: entry tiny: 2 golden set(s) on CPU, exact")
    assert "  accuracy per slice vs the onnxruntime " in out and "    outputs[0:16] " in out
    code, out, _ = run(["verify", str(pkg), "--json", "--mode", "tolerance"], capsys)
    doc = json.loads(out)
    [entry] = doc["entries"]
    assert code == 0 and doc["ok"] is True and entry["mode"] == "tolerance" and entry["sets"] == 2
    assert entry["entry"] == "tiny" and entry["reference"]["kind"] == "onnxruntime"
    assert entry["replay_mode"] == "cpu_driver"
    [row] = entry["accuracy"]["slices"]
    assert entry["accuracy"]["reference"] == "onnxruntime" and row["ok"] and row["stop"] == 16


def test_verify_mismatch_exits_1_one_line(pkg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _rewrite(pkg, tmp_path / "bad.dpk", section_edit=_nudge("target"))
    code, out, err = run(["verify", str(bad)], capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("drivepack: check failed: tiny: golden set 1: outputs: expected bit-exact")


def test_corrupt_package_exits_2_one_line_no_traceback(pkg: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    raw = bytearray(pkg.read_bytes())
    raw[-SIGNATURE_SIZE - 1] ^= 0xFF  # the last section's last byte (the signature trailer follows it)
    bad = tmp_path / "corrupt.dpk"
    bad.write_bytes(bytes(raw))
    for cmd in (["verify"], ["replay"], ["inspect"]):
        code, out, err = run([*cmd, str(bad)], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1, (cmd, err)
        assert "sha256 expected" in err and "corrupt section" in err and "Traceback" not in err
    code, _, err = run(["--debug", "verify", str(bad)], capsys)
    assert code == 2 and "Traceback" in err


def test_replay_json_schema(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", str(pkg), "--iters", "20", "--warmup", "2", "--profile", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert set(doc["latency_ms"]) == {"p50", "p90", "p99", "p999", "max", "mean", "stddev"}
    lat = doc["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert doc["iters"] == 20 and doc["warmup"] == 2 and doc["deadline_ms"] == 50.0  # no role matches: model_max
    assert doc["entry"] == "tiny"
    assert doc["deadline_misses"] == 0 and doc["enqueue_ms"] is None  # the CPU replay is synchronous
    assert {k["name"] for k in doc["kernels"]} == {"r_32_128_k0", "r_16_32_k1"}
    assert abs(sum(k["share"] for k in doc["kernels"]) - 1) < 1e-9


def test_replay_text_and_bad_iters(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", str(pkg), "--iters", "5", "--warmup", "0"], capsys)
    assert code == 0 and "latency ms: p50" in out and "deadline 50 ms: 0 miss(es) of 5" in out
    code, _, err = run(["replay", str(pkg), "--iters", "0"], capsys)
    assert code == 2 and "--iters: expected >= 1, got 0" in err


def test_inspect_text_json_dot(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["inspect", str(pkg)], capsys)
    assert code == 0 and "ABI:" in out and "frame" in out and "r_32_128_k0" in out and "command buffer:" in out
    assert "entries (1): tiny" in out and "entry tiny: model tiny.onnx" in out
    assert f"  golden reference: onnxruntime {onnxruntime.__version__}\n" in out  # the reference and its version
    code, out, _ = run(["inspect", str(pkg), "--json"], capsys)
    doc = json.loads(out)
    [entry] = doc["entries"]
    assert doc["manifest"]["format"] == "drivepack-package" and len(entry["command_buffer"]["dispatches"]) == 2
    assert entry["kernels"][0]["flops"] > 0 and entry["kernels"][0]["launches"]
    assert {r["name"] for r in entry["abi"]} == {"frame", "x", "outputs"}
    assert entry["name"] == "tiny" and entry["reference"]["kind"] == "onnxruntime"
    assert entry["reference"]["version"] == onnxruntime.__version__
    code, out, _ = run(["inspect", str(pkg), "--dot"], capsys)
    assert code == 0 and out.startswith('digraph "tiny.dpk" {') and '"tiny/input:frame" -> "tiny/d0";' in out
    assert '"tiny/d1" -> "tiny/output:outputs";' in out and 'subgraph "cluster_tiny"' in out


def test_abi_check_reads_a_package(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["abi-diff", str(pkg), str(pkg)], capsys)
    assert code == 0 and "identical" in out


def test_package_bad_input_exits_2(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["package", str(tmp_path / "none.onnx"), "--vehicle", "pc-cpu", "-o", "x.dpk"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("drivepack:")]  # progress lines come first
    assert code == 2 and len(errors) == 1 and "model: expected a readable .onnx file" in errors[0]
    code, _, err = run(["package", str(model), "--vehicle", "comma9", "-o", str(tmp_path / "x.dpk")], capsys)
    errors = [line for line in err.splitlines() if line.startswith("drivepack:")]
    assert code == 2 and len(errors) == 1 and "comma9" in errors[0] and "Traceback" not in err
