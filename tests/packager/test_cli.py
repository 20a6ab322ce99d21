"""The drivepack CLI: version, usage errors, and running as a module."""

import subprocess
import sys

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


def test_demo_packages_verifies_and_replays_the_sample_model(capsys: pytest.CaptureFixture[str],
                                                               tmp_path) -> None:
    out_path = tmp_path / "demo.dpk"
    assert main(["demo", "-o", str(out_path)]) == 0
    out, err = capsys.readouterr()
    assert "packaging for pc-cpu" in out and "[verify]" in err
    assert "verify ok: entry vision: 1 golden set(s) on CPU, exact" in out and "latency ms: p50" in out
    assert "    outputs[hidden_state 875:1387] " in out  # the per-slice accuracy report
    assert "hidden_state" in out and "demo ok" in out
    assert out_path.read_bytes()[:4] == b"\x89DPK"


def test_demo_modeld_packages_the_whole_step_and_feeds_it_at_20_hz(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path) -> None:
    out_path = tmp_path / "modeld.dpk"
    assert main(["demo", "--modeld", "-o", str(out_path)]) == 0
    out, _ = capsys.readouterr()
    assert "packaging the modeld step for pc-cpu" in out
    assert "verify ok: entry run@1928x1208" in out and "verify ok: entry prepare@1928x1208" in out
    assert "step 1928x1208 on CPU: 40 frames at 20 Hz" in out and "prepare" in out and "demo ok" in out
    assert load_package(out_path).entries == ("run@1928x1208", "prepare@1928x1208")
