"""benchmarks/bench_models.py: its model preparation (the light resnet50 peers get random weights) and timing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_models  # noqa: E402


@pytest.mark.slow
def test_light_resnet50_weights_are_random_not_one_repeated_value() -> None:
    """Regression: the wheel's light model makes every weight with ConstantOfShape (one value repeated), which a
    constant-folding peer turns into almost no work; the issue's peers ran random weights."""
    proto, feeds = bench_models.load_case("resnet50")
    assert not [n for n in proto.graph.node if n.op_type == "ConstantOfShape"]
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    conv1 = weights["gpu_0/conv1_w_0"]
    assert conv1.shape == (64, 3, 7, 7) and np.unique(conv1).size > 1000
    assert (weights["gpu_0/res_conv1_bn_riv_0"] > 0).all()  # BatchNorm variances stay positive
    onnx.checker.check_model(proto)  # regression: new initializers in an IR 3 model failed the loader's checker
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


def test_settle_waits_out_a_thread_still_spinning_after_a_call() -> None:
    # regression: onnxruntime's pool spins 40-50 ms after a run, the fixed 50 ms pause between blocks ended inside
    # that spin, and the next peer's block shared the cores with it
    import threading
    import time

    from benchmarks.bench_core import other_threads_cpu_ns, settle
    assert other_threads_cpu_ns() is not None  # Linux: CI's machines are
    quiet = settle(0.01)
    assert 0.01 <= quiet < 0.1

    spin_ended = []

    def spin() -> None:
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass
        spin_ended.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    # a window longer than a scheduler slice: on CI's two busy cores the spinner can be off the CPU for a few
    # milliseconds (regression: settle's default 5 ms window ended 3 ms before the spinner did there)
    started = time.perf_counter()
    waited = settle(0.01, window=0.03)
    spinner.join()
    assert started + waited >= spin_ended[0] and waited < 0.25 + 0.05  # until the spinner stopped, never past the cap


def _conv_case(channels: int, size: int) -> tuple:
    """A one-conv ONNX model (3x3, padded), its inputs, and the base names of the kernels its CPU replay runs."""
    from onnx import TensorProto, helper

    from jit import capture_onnx, load_onnx
    rng = np.random.default_rng(0)
    shape = [1, channels, size, size]
    w = numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    run = capture_onnx(load_onnx(proto, device="CPU"), feeds, target="CPU")
    return proto, feeds, {bench_models.base_name(k.name) for k in run.cmdbuf.kernels}


def test_layer_table_lists_only_kernels_the_replay_runs(capsys) -> None:
    """Regression: Winograd's weight transform (r_36_..., weight-only work a capture folds) topped resnet50's
    table at 4.7 GFLOP/s although no replay runs it."""
    proto, feeds, replayed = _conv_case(32, 14)
    assert any(n.startswith("r_36_") for n in replayed)  # the Winograd GEMM runs in the replay
    bench_models.layer_table("tiny", proto, feeds, 10, bench_models.FmaPeak(lambda: 80.0), replayed)
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed and all(bench_models.base_name(n) in replayed for n in listed)
    assert any(n.startswith("r_36_") for n in listed)
    assert bench_models.base_name("r_64_56_56_6n2") == "r_64_56_56_6"


def test_fma_peak_is_the_best_probe_of_the_run_and_the_table_probes_again(capsys) -> None:
    """Regression: a run probed the peak once, in a slow moment (55.1 GFLOP/s, 76-80 usual), and its layer table
    read 112-118% of peak. The peak is now the best probe of the run, and the table probes beside its kernels."""
    rates = iter([55.0, 60.0, 50.0] + [80.0] * 100)
    peak = bench_models.FmaPeak(lambda: next(rates))
    assert peak.measure() == 60.0
    proto, feeds, replayed = _conv_case(16, 8)
    bench_models.layer_table("tiny", proto, feeds, 10, peak, replayed)
    assert peak.best == 80.0
    assert "FMA peak 80.0 GFLOP/s" in capsys.readouterr().out


def test_fma_probe_measures_this_machine(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # fma_probe sets it for libgomp: restored after the test
    rate = bench_models.fma_probe(1)()
    assert 0.1 < rate < 10_000  # GFLOP/s: a real run of the FMA kernel, not a constant


# the tinygrad worker's protocol, spoken by a numpy stand-in: outputs are the inputs doubled (or not, when
# STALE is set: a replay that keeps returning its first outputs)
_FAKE_PEER = """
import json, os, sys
import numpy as np
inputs = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
first = [2 * v for v in inputs.values()]
np.savez(sys.argv[3], *first)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "call":
        print("ok", flush=True)
    elif line.strip() == "other":
        other = {k: np.load(v) for k, v in json.loads(sys.argv[4]).items()}
        np.savez(sys.argv[5], *(first if os.environ.get("STALE") else [2 * v for v in other.values()]))
        break
"""


@pytest.mark.parametrize("stale", [False, True])
def test_tinygrad_peer_answers_calls_and_is_checked_on_other_inputs(tmp_path, stale: bool) -> None:
    x, y = np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32)[::-1].copy()
    env = {**os.environ, **({"STALE": "1"} if stale else {})}
    peer = bench_models.TinygradPeer("CPU", tmp_path / "m.onnx", {"x": x}, tmp_path, {"x": y}, env, _FAKE_PEER)
    for _ in range(3):
        peer.call()
    assert peer.outputs_match([2 * x], [2 * y]) is not stale


def test_a_tinygrad_peer_that_fails_to_start_says_why(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="no model here"):
        bench_models.TinygradPeer("CL", tmp_path / "m.onnx", {}, tmp_path, {}, dict(os.environ),
                                  "raise SystemExit('no model here')")
