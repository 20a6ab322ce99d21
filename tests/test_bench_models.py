"""benchmarks/bench_models.py: its model preparation (the light resnet50 peers get random weights) and timing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_models  # noqa: E402


def test_light_resnet50_weights_are_random_not_one_repeated_value() -> None:
    """Regression: the wheel's light model makes every weight with ConstantOfShape (one value repeated), which a
    constant-folding peer turns into almost no work; the issue's peers ran random weights."""
    proto, feeds = bench_models.load_case("resnet50")
    assert not [n for n in proto.graph.node if n.op_type == "ConstantOfShape"]
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    conv1 = weights["gpu_0/conv1_w_0"]
    assert conv1.shape == (64, 3, 7, 7) and np.unique(conv1).size > 1000
    assert (weights["gpu_0/res_conv1_bn_riv_0"] > 0).all()  # BatchNorm variances stay positive
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (probs,) = session.run(None, feeds)
    assert probs.shape == (1, 1000) and np.isfinite(probs).all() and abs(float(probs.sum()) - 1) < 1e-3
    again, _ = bench_models.load_case("resnet50")
    assert again.SerializeToString() == proto.SerializeToString()  # seeded: every run measures the same model


def test_interleaved_medians_alternate_blocks_and_time_each_call() -> None:
    from benchmarks.bench_core import interleaved_medians
    calls: list[str] = []
    medians = interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeat=7,
                                  warmup=2, block=3)
    assert set(medians) == {"a", "b"} and all(m >= 0 for m in medians.values())
    timed = calls[4:]  # after two warm-up calls of each
    assert calls[:4] == ["a", "a", "b", "b"] and timed.count("a") == timed.count("b") == 7
    assert "".join(timed) == "aaabbbaaabbbab"
