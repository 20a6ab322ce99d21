"""Both sample models (packager/samples.py) capture and replay bit-identically to their eager run, on the CPU
and the OpenCL target, and different input data gives different outputs."""

from __future__ import annotations

import numpy as np
import pytest

from jit import load_onnx
from jit.trace import capture_onnx
from packager.samples import policy_model, sample_inputs, vision_model


@pytest.mark.parametrize("device", ["CPU", pytest.param("OPENCL", marks=pytest.mark.opencl)])
@pytest.mark.parametrize("make", [policy_model, vision_model], ids=["policy", "vision"])
def test_sample_model_replays_bit_identically(make, device: str) -> None:
    proto = make()
    model = load_onnx(proto, device=device)
    seed0, seed1 = sample_inputs(proto, seed=0), sample_inputs(proto, seed=1)
    cap = capture_onnx(model, seed0, target=device)
    assert cap.report.kernels_kept == cap.n_dispatches
    eager = {k: v.numpy() for k, v in model(seed1).items()}
    got = cap(seed1)
    assert got.keys() == eager.keys()
    for k in eager:
        assert got[k].dtype == eager[k].dtype and got[k].shape == eager[k].shape
        assert got[k].tobytes() == eager[k].tobytes(), f"{k}: replay differs from eager"
    other = cap(seed0)
    assert all(not np.array_equal(other[k], got[k]) for k in got)
    if make is vision_model:
        assert cap.report.kernels_pruned > 0
        assert cap.report.arena_bytes <= cap.report.naive_bytes / 2  # the memory target
