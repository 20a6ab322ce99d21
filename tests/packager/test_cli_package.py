"""The package, verify, replay and inspect commands: outputs, JSON schema, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from packager.cli import main
from packager.container import SIGNATURE_SIZE
from packager.synthetic import tiny_model
from tests.packager.test_format import _rewrite
from tests.packager.test_verify import _nudge


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def problems(err: str) -> list[str]:
    """stderr without the one-time note that the user's signing key was made (the first build in a config)."""
    return [line for line in err.splitlines() if not line.startswith("drivepack: created your signing key")]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    return path


@pytest.fixture
def pkg(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "tiny.dpk"
    # tiny's inputs match no role of pc-cpu: packaged only on request, and the problem is printed
    code, stdout, err = run(["package", str(model), "--vehicle", "pc-cpu", "-o", str(out), "--allow-abi-mismatch"],
                            capsys)
    assert code == 0, err
    assert "[load] abi warning: no role of pc-cpu matches the model's inputs" in err
    for stage in ("[load]", "[capture]", "[golden]", "[write]", "[compile]", "[verify]"):
        assert stage in err
    assert "2/2 golden sets" in err and "kernels built" in err
    assert "1 entry: tiny" in stdout and "entry tiny: model tiny.onnx, role None" in stdout
    assert "    abi-check: not ok, packaged anyway: no role of pc-cpu matches the model's inputs" in stdout
    assert "kernels: 2 kernels traced: 0 pruned (folded into weights), 2 dispatched, running 2 distinct kernels" \
        in stdout and "arena" in stdout and "dtype policy on CPU" in stdout
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
    assert code == 0 and "latency ms: p50" in out and "deadline 50 ms" in out and "0 miss(es) of 5" in out
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
    assert entry["kernel_counts"] == {"traced": 2, "pruned": 0, "dispatches": 2, "kept": 2}
    code, out, err = run(["inspect", str(pkg), "--dot"], capsys)
    assert code == 0 and out.startswith('digraph "tiny.dpk" {') and '"tiny/input:frame" -> "tiny/d0";' in out
    assert err == f"render with: drivepack inspect {pkg} --dot | dot -Tsvg -o tiny.svg\n"  # stdout stays the graph
    assert '"tiny/d1" -> "tiny/output:outputs";' in out and 'subgraph "cluster_tiny"' in out


def test_abi_check_reads_a_package(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["abi-diff", str(pkg), str(pkg)], capsys)
    assert code == 0 and "identical" in out


def test_package_bad_input_exits_2(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["package", str(tmp_path / "none.onnx"), "--vehicle", "pc-cpu", "-o", "x.dpk"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("drivepack: error:")]  # progress comes first
    assert code == 2 and len(errors) == 1 and "model: expected a readable .onnx file" in errors[0]
    code, _, err = run(["package", str(model), "--vehicle", "comma9", "-o", str(tmp_path / "x.dpk")], capsys)
    assert code == 2 and err.count("\n") == 1 and "comma9" in err and "Traceback" not in err
    assert "<top>" not in err and "[load]" not in err  # refused before any model is read


def test_package_refuses_a_model_that_matches_no_role(model: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.dpk"
    code, stdout, err = run(["package", str(model), "--vehicle", "pc-cpu", "-o", str(out), "--quiet"], capsys)
    assert code == 1 and stdout == "" and not out.exists()
    lines = problems(err)  # --quiet: no progress, but the refusal and what the roles take
    assert len(lines) == 2 and lines[0].startswith(f"{model} on pc-cpu: no role of pc-cpu matches") and \
        "vision (input_imgs, big_input_imgs)" in lines[0]
    assert lines[1].startswith("drivepack: check failed: abi: ") and "--allow-abi-mismatch" in lines[1]


def test_package_refuses_an_abi_mismatch_with_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A policy model for a profile whose runtime keeps 24 history samples where the model was trained with 25."""
    from abi.vehicle import VEHICLES_DIR
    from packager.samples import policy_model

    text = (VEHICLES_DIR / "pc-cpu.yaml").read_text()
    old = "history: {length: 25, skip: 4, order: oldest_first}"
    assert old in text
    drifted = tmp_path / "pc-cpu.yaml"  # a profile is named like its file
    drifted.write_text(text.replace(old, old.replace("length: 25", "length: 24"), 1))
    policy = tmp_path / "policy.onnx"
    onnx.save(policy_model(), str(policy))
    code, stdout, err = run(["package", str(policy), "--vehicle", str(drifted), "-o", str(tmp_path / "p.dpk"),
                             "--quiet"], capsys)
    assert code == 1 and stdout == "" and not (tmp_path / "p.dpk").exists()
    lines = problems(err)
    assert lines[0].startswith(f"{policy} on pc-cpu") and "role policy" in lines[0]
    assert lines[1].split() == ["input", "expected", "provided", "verdict"]
    assert any(line.split() == ["features_buffer.history.length", "25", "24", "MISMATCH"] for line in lines)
    assert lines[-1].startswith(f"drivepack: check failed: abi: {policy}: expected an ABI matching role 'policy', "
                                "got features_buffer.history.length: MISMATCH: expected 25, provided 24")


def test_package_json(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "j.dpk"
    code, stdout, err = run(["package", str(model), "--vehicle", "pc-cpu", "-o", str(out), "--allow-abi-mismatch",
                             "--json", "--quiet"], capsys)
    assert code == 0
    assert problems(err) == ["[load] abi warning: no role of pc-cpu matches the model's inputs ['frame', 'x']"]
    doc = json.loads(stdout)
    assert doc["path"] == str(out) and doc["size"] == out.stat().st_size and doc["vehicle"] == "pc-cpu"
    [entry] = doc["entries"]
    assert entry["name"] == "tiny" and entry["role"] is None and entry["model"]["name"] == "tiny.onnx"
    assert entry["kernels"] == {"traced": 2, "pruned": 0, "dispatches": 2, "kept": 2}
    assert entry["abi_check"]["ok"] is False and entry["abi_check"]["rows"] == []
    assert entry["abi_check"]["problems"] == doc["abi_warnings"] and isinstance(entry["arena_bytes"], int)
    assert set(doc["times_s"]) == {"load", "capture", "golden", "write", "compile", "verify"}
    assert all(isinstance(t, float) for t in doc["times_s"].values()) and doc["tuning"] is None


def test_inspect_into_a_closed_pipe_ends_quietly(pkg: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "packager.cli", "inspect", str(pkg), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


def test_package_checks_the_role_given_with_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from packager.samples import policy_model

    policy = tmp_path / "policy.onnx"
    onnx.save(policy_model(), str(policy))
    argv = ["package", str(policy), "--vehicle", "pc-cpu", "-o", str(tmp_path / "p.dpk"), "--quiet"]
    code, _, err = run([*argv, "--role", "vision"], capsys)
    lines = problems(err)
    assert code == 1 and "role vision (--role;" in lines[0] and lines[-2].startswith("abi-check: ")
    assert lines[-1].startswith(f"drivepack: check failed: abi: {policy}: expected an ABI matching role 'vision'")
    code, _, err = run([*argv, "--role", "steering"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--role: expected one of vision, policy" in err
    assert "got 'steering'" in err and not (tmp_path / "p.dpk").exists()


def test_an_output_viewing_another_is_packaged_as_an_alias(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two outputs of one value (a GRU's Y and Y_h): the package's command buffer names the second an alias of the
    first, verify compares both with the reference, and inspect shows it in all three forms."""
    graph = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["y"]), helper.make_node("Reshape", ["y", "shape"], ["y_h"])], "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8]),
         helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [1, 8])])
    model_path, out = tmp_path / "views.onnx", tmp_path / "views.dpk"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model_path))
    code, _, err = run(["package", str(model_path), "--vehicle", "pc-cpu", "-o", str(out), "--allow-abi-mismatch"],
                       capsys)
    assert code == 0, err
    code, text, _ = run(["verify", str(out)], capsys)
    assert code == 0 and "    y[0:8] " in text and "    y_h[0:8] " in text
    code, text, _ = run(["inspect", str(out)], capsys)
    assert "alias (copied by the replay)             output:y_h = output:y" in text
    code, text, _ = run(["inspect", str(out), "--json"], capsys)
    [entry] = json.loads(text)["entries"]
    assert entry["command_buffer"]["aliases"] == [{"binding": "output:y_h", "source": "output:y"}]
    assert len(entry["command_buffer"]["dispatches"]) == 1
    code, text, _ = run(["inspect", str(out), "--dot"], capsys)
    assert '"views/output:y" -> "views/output:y_h" [style=dashed, label=alias];' in text


@pytest.mark.opencl
def test_inspect_draws_every_buffer_a_chain_writes(model: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """On PoCL tiny's small kernels run as one chain (jit/schedule/chains.py): its dispatch writes each member's output,
    and the graph has an edge to each of them."""
    out = tmp_path / "tiny.dpk"
    code, _, err = run(["package", str(model), "--vehicle", "pc-opencl", "-o", str(out), "--allow-abi-mismatch"],
                       capsys)
    assert code == 0, err
    code, text, _ = run(["inspect", str(out), "--json"], capsys)
    [entry] = json.loads(text)["entries"]
    dispatches = entry["command_buffer"]["dispatches"]
    assert all(d["writes"] >= 1 for d in dispatches)
    [(i, chain)] = [(i, d) for i, d in enumerate(dispatches) if d["writes"] > 1]
    code, text, _ = run(["inspect", str(out), "--dot"], capsys)
    written, read = chain["bindings"][:chain["writes"]], chain["bindings"][chain["writes"]:]
    assert code == 0 and all(f'"tiny/d{i}" -> "tiny/{b}";' in text for b in written)
    assert all(f'"tiny/{b}" -> "tiny/d{i}";' in text for b in read)
