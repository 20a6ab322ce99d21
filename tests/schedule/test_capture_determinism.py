"""A capture is the same command buffer in every process: kernels are cached by source hash, so a schedule that
changed with the addresses of its nodes (UOps hash by identity, and a set of them iterates in address order)
recompiled on every warm start and made packages of one model differ from build to build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import hashlib, sys
junk = [object() for _ in range(int(sys.argv[1]))]  # other addresses for every node built after
from jit import capture_onnx, load_onnx
from packager.samples import vision_model, sample_inputs
m = vision_model()
cap = capture_onnx(load_onnx(m, device="CPU"), sample_inputs(m), target="CPU")
print(hashlib.sha256(cap.cmdbuf.to_bytes()).hexdigest())
"""


@pytest.mark.slow
def test_the_sample_model_captures_to_the_same_bytes_in_three_processes() -> None:
    digests = set()
    for seed, junk in (("0", 0), ("1", 977), ("2", 20011)):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", SCRIPT, str(junk)], capture_output=True, text=True, env=env,
                             cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.strip())
    assert len(digests) == 1
