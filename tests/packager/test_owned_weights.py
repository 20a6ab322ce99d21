"""A loaded package owns its bytes: overwriting or truncating the file under a live replay changes no output and
kills nothing (the loader reads the file once into its own memory; it never maps the file itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from packager.build import BuildOptions, build_package
from packager.synthetic import tiny_model

ROOT = Path(__file__).resolve().parents[2]

# Runs in its own process so that a SIGBUS (a replay reading a truncated shared mapping) is a failed test, not a
# dead pytest. Prints one line per stage; exits 0 only when every later output equals the first one bit for bit.
_SCRIPT = """
import os, sys
import numpy as np
from packager.package import load_package

path = sys.argv[1]
pkg = load_package(path)
replay = pkg.make_replay()
golden = pkg.golden(0)
rng = np.random.default_rng(3)
inputs = [golden.inputs, {"frame": rng.integers(0, 256, (1, 2, 8, 8), dtype=np.uint8),
                          "x": rng.standard_normal((1, 16)).astype(np.float32)}]
want = [replay(i) for i in inputs]

def same(stage):
    for i, w in zip(inputs, want):
        got = replay(i)
        assert all(got[k].tobytes() == w[k].tobytes() for k in w), f"{stage}: outputs changed"
    g = pkg.golden(0)
    assert all(g.target[k].tobytes() == golden.target[k].tobytes() for k in g.target), f"{stage}: golden changed"
    print(stage, "same", flush=True)

same("loaded")
with open(path, "r+b") as f:  # same size, every weight byte different
    for wid in pkg.weights:
        e = pkg.container.section_entry(f"tiny/weight/{wid}")
        f.seek(e["offset"])
        old = f.read(e["size"])
        f.seek(e["offset"])
        f.write(bytes(b ^ 0xA5 for b in old))
same("overwritten")
os.truncate(path, 1)
same("truncated")
"""


@pytest.fixture(scope="module", params=["pc-cpu", "pc-opencl"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("owned")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    build_package(d / "tiny.onnx", request.param, d / "tiny.dpk", BuildOptions(golden_sets=1))
    return d / "tiny.dpk"


def test_overwriting_then_truncating_the_file_changes_no_output(built: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.dpk"
    victim.write_bytes(built.read_bytes())
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(victim)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: killed by that signal)\n{proc.stdout}" \
                                 f"{proc.stderr[-3000:]}"
    assert proc.stdout.split() == ["loaded", "same", "overwritten", "same", "truncated", "same"]
    assert victim.stat().st_size == 1
