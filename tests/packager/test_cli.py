"""The drivepack CLI: version, usage errors, and running as a module."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from packager import __version__
from packager.cli import main
from packager.package import load_package


def test_version_prints_and_returns_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"drivepack {__version__}"
    assert __version__ == "0.1.0"


@pytest.mark.parametrize("argv", [["no-such-command"], [], ["--no-such-flag"]])
def test_usage_error_is_one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("drivepack: error: ")
    assert "Traceback" not in captured.err


def test_unknown_command_is_named_in_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err


def test_module_help_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "packager.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: drivepack")
    assert "--version" in proc.stdout
    assert proc.stderr == ""


def test_demo_writes_its_files_here_and_prints_the_next_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the demo writes into the current directory
    assert main(["demo"]) == 0
    out, err = capsys.readouterr()
    assert "packaging the sample vision model for pc-cpu" in out and "[verify]" in err
    assert "verify ok: entry vision: 1 golden set(s) on CPU, exact" in out and "latency ms: p50" in out
    assert "    outputs[hidden_state 875:1387] " in out  # the per-slice accuracy report
    assert "hidden_state" in out and "demo ok" in out
    assert (tmp_path / "sample_vision.onnx").stat().st_size > 0
    pkg_path = Path("sample_vision.dpk")
    assert (tmp_path / pkg_path).read_bytes()[:4] == b"\x89DPK"
    nxt = out[out.index("next:\n"):].splitlines()[1:]
    assert [line.strip() for line in nxt] == [f"drivepack inspect {pkg_path}", f"drivepack replay {pkg_path} --profile",
                                              f"drivepack verify {pkg_path}"]
    # one definition of the kernel numbers: the build's progress, its summary and inspect print the same line
    counts = load_package(tmp_path / pkg_path).entry("vision").manifest.kernel_counts
    assert counts.pruned > 0 and counts.traced == counts.pruned + counts.dispatches and counts.kept < counts.dispatches
    line = f"kernels: {counts.text()}"
    assert f"[capture] vision: {counts.text()}; " in err and f"    {line}\n" in out
    assert main(["inspect", str(pkg_path)]) == 0
    assert f"  {line}\n" in capsys.readouterr().out
    pkg = load_package(tmp_path / pkg_path)
    assert counts.dispatches == len(pkg.entry("vision").cmdbuf.dispatches)
    assert counts.kept == len(pkg.entry("vision").cmdbuf.kernels)


def test_demo_out_dir_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--out", "d", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout is the JSON document alone; progress stays on stderr
    assert "[capture]" in err and sorted(p.name for p in (tmp_path / "d").iterdir()) == ["sample_vision.dpk",
                                                                                            "sample_vision.onnx"]
    assert doc["ok"] is True and doc["models"] == [str(Path("d") / "sample_vision.onnx")]
    pkg = doc["package"]
    assert pkg["path"] == str(Path("d") / "sample_vision.dpk")
    assert pkg["size"] == (tmp_path / pkg["path"]).stat().st_size
    [entry] = pkg["entries"]
    assert entry["role"] == "vision" and entry["abi_check"]["ok"] is True
    assert all(isinstance(v, int) for v in entry["kernels"].values()) and entry["kernels"]["pruned"] > 0
    assert entry["abi_check"]["rows"] and all(isinstance(r, dict) and r["verdict"] == "ok"
                                              for r in entry["abi_check"]["rows"])
    assert set(pkg["times_s"]) >= {"load", "capture", "golden", "write", "compile", "verify"}
    assert all(isinstance(v, float) for v in pkg["times_s"].values())
    assert doc["verify"]["ok"] is True and doc["replay"]["iters"] == 3 and isinstance(doc["seconds"], float)
    assert doc["outputs"]["hidden_state"]["start"] == 875 and len(doc["outputs"]["hidden_state"]["first"]) == 3
    assert doc["next"][0] == f"drivepack inspect {Path('d') / 'sample_vision.dpk'}"


def test_demo_modeld_packages_the_whole_step_and_feeds_it_at_20_hz(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out_path = tmp_path / "modeld.dpk"
    assert main(["demo", "--modeld", "-o", str(out_path)]) == 0
    out, _ = capsys.readouterr()
    assert "packaging the modeld step for pc-cpu" in out
    assert "verify ok: entry run@1928x1208" in out and "verify ok: entry prepare@1928x1208" in out
    assert "step 1928x1208 on CPU" in out and "40 frames at 20 Hz" in out and "prepare" in out and "demo ok" in out
    assert load_package(out_path).entries == ("run@1928x1208", "prepare@1928x1208")
    assert (tmp_path / "sample_vision_pipeline.onnx").is_file() and (tmp_path / "sample_policy_pipeline.onnx").is_file()
    assert f"drivepack replay {out_path} --rate 20" in out


def test_a_second_demo_replays_its_capture_from_the_capture_cache_and_packages_the_same(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DRIVEPACK_CAPTURE_CACHE", "1")  # the suite turns it off (tests/conftest.py)
    packages = []
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        assert main(["demo"]) == 0
        err = capsys.readouterr().err
        assert ("replayed from the capture cache" in err) == (run == "second")
        packages.append(load_package(Path("sample_vision.dpk")).entry("vision"))
    assert packages[0].cmdbuf == packages[1].cmdbuf
