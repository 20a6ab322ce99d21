"""The replay command's figures and options: startup, throughput, memory, context and noise warnings in the JSON;
--threads, --min-secs, --rate (fixed rate on a plain package), --inputs, --budget-check, --trace; kernels mapped
to ONNX nodes with GFLOP/s, GB/s and a total row; the device that ran; DEBUG=2 per-dispatch lines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from jit.common.helpers import Context
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager.build import BuildOptions, build_package
from packager.cli import main
from packager.manifest import parse_manifest
from packager.package import load_package
from packager.replay_stats import PROFILE_NOTE, fixed_rate, noise_warnings
from packager.synthetic import tiny_model
from tests.packager.test_format import _rewrite

# the tiny model's kernels: its nodes are unnamed, so each is named OpType:first_output
TINY_NODES = {"r_32_128_k0": ["Cast:f", "Gemm:h", "Mul:fs", "Relu:hr"], "r_16_32_k1": ["Add:outputs", "Gemm:o"]}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run([*argv, "--json"], capsys)
    assert out, err
    return code, json.loads(out)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    return path


@pytest.fixture(scope="module")
def pkg(model: Path) -> Path:
    return build_package(model, "pc-cpu", model.with_name("tiny.dpk"), BuildOptions(golden_sets=2)).path


@pytest.fixture(scope="module")
def qcom_pkg(model: Path) -> Path:
    return build_package(model, "comma3x", model.with_name("tiny_qcom.dpk"), BuildOptions(golden_sets=1)).path


def test_manifest_names_each_kernels_onnx_nodes(pkg: Path) -> None:
    kernels = load_package(pkg).manifest.kernels
    assert {k.name: list(k.onnx_nodes or ()) for k in kernels} == TINY_NODES


def test_named_onnx_nodes_name_the_kernels() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act_0"), helper.make_node("ReduceSum", ["r"], ["s"],
                                                                                    name="sum_1", keepdims=1),
             helper.make_node("Sub", ["r", "s"], ["y"], name="centre_2")]
    m = helper.make_model(helper.make_graph(nodes, "named", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    c = capture_onnx(load_onnx(m, device="CPU"), {"x": np.ones((1, 8), np.float32)}, target="CPU")
    assert c.report is not None and len(c.report.kernel_nodes) == len(c.cmdbuf.kernels)
    named = set().union(*map(set, c.report.kernel_nodes))
    assert named == {"act_0", "sum_1", "centre_2"}


def test_json_has_startup_throughput_memory_context_and_noise(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "5", "--warmup", "2"], capsys)
    assert code == 0 and doc["mode"] == "iters" and doc["iters"] == 5 and doc["inputs"] == "golden set 0"
    assert set(doc["startup_ms"]) == {"load", "compile", "first_inference"}
    assert all(isinstance(v, float) and v > 0 for v in doc["startup_ms"].values())
    assert isinstance(doc["warmup_mean_ms"], float) and doc["warmup_mean_ms"] > 0
    assert isinstance(doc["throughput_ips"], float) and doc["throughput_ips"] > 0
    lat = doc["latency_ms"]
    assert lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"] and lat["stddev"] >= 0
    assert isinstance(doc["memory"]["peak_rss_bytes"], int) and doc["memory"]["peak_rss_bytes"] > 0
    assert doc["memory"]["device_bytes"] is None  # the CPU's buffers are host memory
    ctx = doc["context"]
    assert isinstance(ctx["cpu"], str) and ctx["cpu"] and isinstance(ctx["cores"], int) and ctx["cores"] >= 1
    assert isinstance(ctx["threads"], int) and ctx["opencl"] is None and isinstance(ctx["compiler"], str)
    assert isinstance(ctx["kernel_flags"], list) and ctx["emulated"] is None
    assert len(ctx["load_avg"]) == 3 and doc["device"] == ctx["ran_on"] and doc["device"].startswith("CPU (")
    assert doc["device_profile"] == "CPU" and doc["budget_ms"] == {"mean": 45.0, "max": 50.0}
    assert doc["noise_warnings"] == noise_warnings(5) and len(doc["noise_warnings"]) == 4
    assert doc["kernels"] == [] and doc["kernels_total"] is None and doc["trace"] is None
    code, out, _ = run(["replay", str(pkg), "--iters", "5", "--warmup", "0"], capsys)
    assert code == 0 and "startup ms: load " in out and "first inference" in out and "warm-up mean" not in out
    assert "throughput: " in out and "inferences/s" in out and "memory: peak RSS" in out and "cpu: " in out
    assert "warning: p999 rests on 0.005 sample(s) beyond it (of 5)" in out


def test_noise_warnings_name_percentiles_with_under_100_samples_beyond() -> None:
    assert noise_warnings(100_000) == []
    warned = noise_warnings(1000)
    assert [w.split()[0] for w in warned] == ["p99", "p999"]
    assert warned[1] == "p999 rests on 1 sample(s) beyond it (of 1000): noisy; 100000 iterations give 100"


def test_profile_maps_kernels_to_nodes_with_rates_total_and_the_sync_note(pkg: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "3", "--warmup", "0", "--profile"], capsys)
    assert code == 0
    assert {k["name"]: k["onnx_nodes"] for k in doc["kernels"]} == TINY_NODES
    for k in doc["kernels"]:
        assert isinstance(k["flops"], int) and k["flops"] > 0 and isinstance(k["bytes"], int) and k["bytes"] > 0
        assert isinstance(k["gflops"], float) and k["gflops"] > 0 and isinstance(k["gbs"], float) and k["gbs"] > 0
    total = doc["kernels_total"]
    assert total["name"] == "total" and total["dispatches"] == sum(k["dispatches"] for k in doc["kernels"])
    assert total["ms"] == pytest.approx(sum(k["ms"] for k in doc["kernels"]))
    assert total["flops"] == sum(k["flops"] for k in doc["kernels"])
    assert doc["peaks"]["gflops"] > 0 and doc["peaks"]["gbs"] > 0 and doc["profile_note"] == PROFILE_NOTE
    code, out, _ = run(["replay", str(pkg), "--iters", "3", "--warmup", "0", "--profile"], capsys)
    assert code == 0 and f"note: {PROFILE_NOTE}" in out and "GFLOP/s" in out and "peaks: " in out
    assert "Cast:f, Gemm:h, Mul:fs, Relu:hr" in out and any(line.startswith("total ") for line in out.splitlines())


def test_a_package_without_node_names_shows_question_marks(pkg: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def drop(manifest: dict[str, Any]) -> None:
        for k in manifest["entries"][0]["kernels"]["list"]:
            del k["onnx_nodes"]

    old = _rewrite(pkg, tmp_path / "old.dpk", manifest_edit=drop)
    assert all(k.onnx_nodes is None for k in load_package(old).manifest.kernels)
    code, doc = run_json(["replay", str(old), "--iters", "2", "--warmup", "0", "--profile"], capsys)
    assert code == 0 and [k["onnx_nodes"] for k in doc["kernels"]] == [None, None]
    code, out, _ = run(["replay", str(old), "--iters", "2", "--warmup", "0", "--profile"], capsys)
    rows = [line for line in out.splitlines() if line.startswith("r_")]
    assert len(rows) == 2 and all(row.endswith("  ?") for row in rows)


def test_manifest_refuses_node_names_that_are_not_strings(pkg: Path) -> None:
    from packager.errors import PackageError

    doc = json.loads(json.dumps(load_package(pkg).manifest.raw))
    doc["entries"][0]["kernels"]["list"][0]["onnx_nodes"] = ["Gemm:h", 3]
    with pytest.raises(PackageError, match=r"entries\[tiny\]\.kernels\.list\[0\]\.onnx_nodes: expected a list of "
                                           r"strings, got \['Gemm:h', 3\]"):
        parse_manifest(doc)


def test_trace_is_chrome_json_with_one_event_per_dispatch(pkg: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    code, doc = run_json(["replay", str(pkg), "--iters", "2", "--warmup", "0", "--trace", str(out)], capsys)
    assert code == 0 and doc["trace"] == str(out) and doc["kernels"] == []  # a trace alone prints no profile
    trace = json.loads(out.read_text())
    cb = load_package(pkg).cmdbuf
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(cb.dispatches)
    assert all(e["ph"] in ("X", "M") for e in trace["traceEvents"])
    for i, (e, d) in enumerate(zip(spans, cb.dispatches, strict=True)):
        kernel = cb.kernels[d.kernel].name
        assert e["name"] == kernel and e["args"]["kernel"] == kernel and e["args"]["dispatch"] == i
        assert e["args"]["onnx_nodes"] == TINY_NODES[kernel] and e["cat"] == "dispatch"
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
    assert [e["ts"] for e in spans] == sorted(e["ts"] for e in spans)


def test_trace_into_a_missing_folder_is_a_one_line_error(pkg: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["replay", str(pkg), "--iters", "1", "--trace", str(tmp_path / "no" / "t.json")], capsys)
    assert code == 2 and err.count("\n") == 1 and "No such file or directory" in err


def test_threads_sets_the_cpu_replay_and_is_refused_elsewhere(pkg: Path, qcom_pkg: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "2", "--warmup", "0", "--threads", "1"], capsys)
    assert code == 0 and doc["context"]["threads"] == 1
    code, _, err = run(["replay", str(pkg), "--iters", "2", "--threads", "0"], capsys)
    assert code == 2 and "--threads: expected >= 1, got 0" in err
    code, _, err = run(["replay", str(qcom_pkg), "--iters", "2", "--threads", "2"], capsys)
    assert code == 2 and "threads: expected a CPU replay" in err


def test_min_secs_keeps_timing_past_iters(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "3", "--warmup", "0", "--min-secs", "0.02"], capsys)
    assert code == 0 and doc["mode"] == "min_secs" and doc["min_secs"] == 0.02 and doc["iters"] >= 3
    assert doc["noise_warnings"] == noise_warnings(doc["iters"])
    code, _, err = run(["replay", str(pkg), "--min-secs", "0"], capsys)
    assert code == 2 and "--min-secs: expected > 0, got 0.0" in err


def test_rate_on_a_plain_package_runs_one_inference_per_tick(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "4", "--warmup", "0", "--rate", "400"], capsys)
    assert code == 0 and doc["mode"] == "rate" and doc["rate_hz"] == 400.0 and doc["iters"] == 4
    assert isinstance(doc["late_starts"], int) and 0 <= doc["late_starts"] <= 4
    assert doc["deadline_ms"] == 50.0 and isinstance(doc["deadline_misses"], int)
    code, out, _ = run(["replay", str(pkg), "--iters", "2", "--warmup", "0", "--rate", "400"], capsys)
    assert code == 0 and "2 ticks at 400 Hz" in out and "late starts: " in out
    code, _, err = run(["replay", str(pkg), "--rate", "0"], capsys)
    assert code == 2 and "--rate: expected a finite rate > 0 Hz, got 0.0" in err
    code, _, err = run(["replay", str(pkg), "--rate", "20", "--min-secs", "1"], capsys)
    assert code == 2 and "--min-secs: expected none with --rate" in err


def test_inputs_from_an_npz(pkg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = load_package(pkg).golden(1).inputs
    good = tmp_path / "in.npz"
    np.savez(good, **golden)
    code, doc = run_json(["replay", str(pkg), "--iters", "2", "--warmup", "0", "--inputs", str(good)], capsys)
    assert code == 0 and doc["inputs"] == "in.npz"
    np.savez(tmp_path / "short.npz", frame=golden["frame"])
    np.savez(tmp_path / "wide.npz", frame=golden["frame"], x=np.zeros((1, 17), np.float32))
    np.savez(tmp_path / "obj.npz", frame=np.array([{"a": 1}], dtype=object), x=golden["x"])
    np.save(tmp_path / "one.npy", golden["x"])
    for name, message in (("short.npz", "inputs: names expected ['frame', 'x'], got missing ['x'], unexpected []"),
                          ("wide.npz", "x: shape expected (1, 16), got (1, 17)"),
                          ("obj.npz", "--inputs: expected plain arrays in"),
                          ("one.npy", "--inputs: expected a .npz archive (one array per input name), got a single")):
        code, _, err = run(["replay", str(pkg), "--iters", "1", "--inputs", str(tmp_path / name)], capsys)
        assert code == 2 and message in err and err.count("\n") == 1, (name, err)


def test_budget_check_exits_1_on_deadline_misses(pkg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(pkg), "--iters", "3", "--warmup", "0", "--budget-check"], capsys)
    assert code == (1 if doc["deadline_misses"] else 0)

    def no_budget(manifest: dict[str, Any]) -> None:
        manifest["entries"][0]["budget_max_ms"] = 0  # every replay takes longer than 0 ms

    tight = _rewrite(pkg, tmp_path / "tight.dpk", manifest_edit=no_budget)
    code, out, err = run(["replay", str(tight), "--iters", "3", "--warmup", "0"], capsys)
    assert code == 0 and "3 miss(es) of 3" in out  # without --budget-check misses are reported only
    code, out, err = run(["replay", str(tight), "--iters", "3", "--warmup", "0", "--budget-check"], capsys)
    assert code == 1 and "3 miss(es) of 3" in out
    assert err == "drivepack: check failed: budget: 3 deadline miss(es) of 3 against the vehicle's budget max 0 ms\n"


def test_a_qcom_package_on_a_stand_in_records_what_ran(qcom_pkg: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(["replay", str(qcom_pkg), "--iters", "2", "--warmup", "0", "--profile"], capsys)
    assert code == 0 and doc["device_profile"].startswith("QCOM")
    ctx = doc["context"]
    assert set(ctx["opencl"]) == {"platform", "device", "driver"} and all(isinstance(v, str)
                                                                        for v in ctx["opencl"].values())
    if "adreno" not in ctx["opencl"]["device"].lower():  # a stand-in: the name says what ran and what it emulated
        assert doc["device"] == f"OPENCL ({ctx['opencl']['platform']}: {ctx['opencl']['device']}) emulating " \
                                f"{doc['device_profile']}" and ctx["emulated"] == doc["device_profile"]
    assert ctx["threads"] is None and isinstance(doc["memory"]["device_bytes"], int)
    assert doc["memory"]["device_bytes"] >= load_package(qcom_pkg).cmdbuf.arena_bytes
    assert set(doc["enqueue_ms"]) == set(doc["latency_ms"])
    assert {k["name"]: k["onnx_nodes"] for k in doc["kernels"]} == TINY_NODES


def test_debug2_prints_a_line_per_dispatch_on_every_replay(pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = len(load_package(pkg).cmdbuf.dispatches)
    with Context(DEBUG=2):
        code, out, err = run(["replay", str(pkg), "--iters", "2", "--warmup", "1"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("*** CPU")]
    assert code == 0 and len(lines) == (1 + 1 + 2) * n  # first inference, warm-up, timed
    assert lines[0].split()[2:4] == ["#0", load_package(pkg).cmdbuf.kernels[0].name] and lines[0].endswith(" ms")
    assert "note: DEBUG=2: every replay ran dispatch by dispatch" in out
    code, out, err = run(["replay", str(pkg), "--iters", "2", "--warmup", "1"], capsys)
    assert code == 0 and "*** " not in err and "DEBUG=2" not in out


def test_fixed_rate_counts_ticks_begun_late_after_an_overrun() -> None:
    # each call sleeps 5 periods: every tick after the first is due before the call before it returned
    latencies, late = fixed_rate(lambda: time.sleep(0.005), 1000.0, 4)
    assert len(latencies) == 4 and late >= 3 and all(t >= 0.005 for t in latencies)
    # the lateness accumulates: call i ends >= 5 ms * (i + 1) after the start, its tick was due 1 ms * i after it
    assert latencies[-1] >= 0.017
