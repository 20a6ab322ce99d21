"""Command-line usage: no abbreviations, "did you mean" for typos, exit codes in every --help, a closed pipe
ends quietly, a file of the wrong kind is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from packager.cli import COMMANDS, EXIT_BROKEN_PIPE, main
from packager.synthetic import tiny_model


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["replay", "x.dpk", "--iter", "5"], "unknown option --iter (did you mean --iters?)"),
    (["package", "m.onnx", "--vehical", "comma3x", "-o", "x.dpk"],
     "unknown option --vehical (did you mean --vehicle?)"),
    (["abi-check", "m.onnx", "--vehicle", "comma3x", "--jsn"], "unknown option --jsn (did you mean --json?)"),
    (["pakage", "m.onnx"], "unknown command 'pakage' (did you mean package?)"),
    (["--vers"], "unknown option --vers (did you mean --version?)"),
])
def test_typos_get_one_line_with_a_suggestion(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("drivepack: error: ") and message in err and "required" not in err


def test_abbreviations_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["inspect", "x.dpk", "--js"], capsys)  # argparse would take it for --json
    assert code == 2 and "unknown option --js" in err and "did you mean --json?" in err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_help_lists_its_exit_codes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([name, "--help"], capsys)
    assert code == 0
    codes = out[out.index("exit codes:"):].splitlines()[1:]
    numbers = [int(line.split()[0]) for line in codes]
    runs_no_check = name in ("inspect", "keygen")
    assert numbers[:2] == [0, 2] if runs_no_check else numbers[:3] == [0, 1, 2]
    assert EXIT_BROKEN_PIPE in numbers and "issue" not in out.lower()
    if name == "abi-diff":
        assert 3 in numbers
    if name == "package":
        assert "ABI does not match" in out and "--allow-abi-mismatch" in out


def test_top_level_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "exit codes:" in out and "141 the output pipe closed early" in out


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`drivepack abi-check ... | head -0`: the reader is gone before anything is written; no traceback, no Errno,
    exit 141 (128 + SIGPIPE, as a shell reports for any tool a closed pipe ends)."""
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), str(model))
    proc = subprocess.Popen([sys.executable, "-m", "packager.cli", "abi-check", str(model), "--vehicle", "pc-cpu",
                             "--role", "vision"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE and err == ""


def test_inspect_of_an_onnx_file_names_it_and_suggests_abi_check(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "vision.onnx"
    onnx.save(tiny_model(), str(model))
    renamed = tmp_path / "renamed.bin"  # named by its bytes too, whatever the file is called
    for path in (model, renamed):
        if path == renamed:
            model.rename(renamed)
        code, out, err = run(["inspect", str(path)], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "an ONNX model, not a package" in err and f"drivepack abi-check {path} --vehicle NAME" in err


def test_keygen_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    key = tmp_path / "k.pem"
    code, out, _ = run(["keygen", "-o", str(key), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["private_key"] == str(key) and doc["public_key"] == f"{key}.pub"
    assert len(doc["fingerprint"]) == 64 and (tmp_path / "k.pem.pub").is_file()
