"""benchmarks/bench_zoo.py and zoo_models.py without torch: FLOP count, output check, cold/warm cache, error rows,
busy processes, the zoo's cache naming. The real zoo needs the ``.[bench]`` extra and is not run here."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks import bench_zoo, zoo_models
from benchmarks.bench_core import cross_core_round_trip_ns


def _conv_gemm_model() -> onnx.ModelProto:
    """Conv 3->4 (3x3, padded) on 8x8, Flatten, Gemm 256->10, MatMul 10->5: 6912 + 2560 + 50 multiply-adds."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w", (4, 3, 3, 3)), ("g", (256, 10)), ("m", (10, 5)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"]),
             helper.make_node("Gemm", ["f", "g"], ["h"]),
             helper.make_node("MatMul", ["h", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gflop_counts_conv_gemm_matmul_and_gru_gates() -> None:
    assert bench_zoo.gflop(_conv_gemm_model()) == pytest.approx(2 * (6912 + 2560 + 50) / 1e9)
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (1, 12, 8)), ("R", (1, 12, 4)))]
    graph = helper.make_graph([helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=4)], "gru",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 4])], inits)
    gru = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert bench_zoo.gflop(gru) == pytest.approx(2 * 12 * (8 + 4) / 1e9)  # 3 gates x 4 hidden, input + state


def test_compare_scales_the_tolerance_by_the_largest_reference_value() -> None:
    want = [np.array([100.0, -50.0], np.float32)]
    assert bench_zoo.compare({"y": want[0] + 0.1}, ["y"], want)[2]  # 1e-3 of the logits' scale
    err, rel, ok = bench_zoo.compare({"y": want[0] + 1.0}, ["y"], want)
    assert not ok and err == pytest.approx(1.0) and rel == pytest.approx(0.01)
    assert not bench_zoo.compare({"y": np.zeros(3, np.float32)}, ["y"], want)[2]  # wrong shape


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"targets": ["CPU"], "repeat": 3, "contention": 0, "threads": 2, "realtime": 0,
                                 "warm_process": False, **kw})


def test_bench_model_times_a_matching_model_and_keeps_a_failing_target_as_an_error_row(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_gemm_model(), str(path))
    r = bench_zoo.bench_model("m", str(path), _args(targets=["CPU", "NO_SUCH_DEVICE"]), tmp_path)
    cpu, bad = r.targets["CPU"], r.targets["NO_SUCH_DEVICE"]
    assert cpu.error is None and cpu.p50 and cpu.p50 > 0 and r.ort_p50
    assert cpu.max_rel is not None and cpu.max_rel < 1e-3
    assert cpu.cold_s and cpu.warm_s and any((tmp_path / "m-CPU-cache").iterdir())  # the cold capture filled it
    assert bad.error and bad.p50 is None and "\n" not in bad.error
    assert all(ns is None or 0 < ns < 1e6 for ns in r.cross_core_ns)  # measured around the timed part


def test_a_warm_capture_in_a_new_process_is_timed_there(tmp_path: Path, capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_gemm_model(), str(path))
    monkeypatch.setenv(bench_zoo.CAPTURE_CACHE_ENV, "1")  # the suite turns it off (tests/conftest.py)
    timed: list[tuple[bool, float]] = []
    real = bench_zoo.timed_capture_in_new_process

    def recording(p: str, t: str, capture_cache: bool = True) -> float:
        timed.append((capture_cache, real(p, t, capture_cache)))
        return timed[-1][1]
    monkeypatch.setattr(bench_zoo, "timed_capture_in_new_process", recording)
    result = bench_zoo.bench_model("m", str(path), _args(warm_process=True), tmp_path)
    r = result.targets["CPU"]
    assert r.error is None and r.cold_s and r.warm_s and r.uncached_s
    assert timed == [(True, r.warm_s), (False, r.uncached_s)]
    assert list((tmp_path / "m-CPU-cache").glob("capture-*.json"))  # what the warm captures found
    bench_zoo.print_table([result], _args(warm_process=True))
    out = capsys.readouterr().out
    assert "first call; warm in a new process)" in out and "no cc: with it off (DRIVEPACK_CAPTURE_CACHE=0)" in out
    assert f" {r.warm_s:6.1f} {r.uncached_s:6.1f} " in out
    with pytest.raises(RuntimeError, match="warm capture in a new process: exit 1: .*"):
        bench_zoo.timed_capture_in_new_process(str(tmp_path / "missing.onnx"), "CPU")


@pytest.mark.opencl
@pytest.mark.usefixtures("no_chains")  # the model's kernels are small enough to run as one chain on PoCL
def test_an_opencl_row_splits_a_call_into_its_kernels_and_the_time_between_them(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_gemm_model(), str(path))
    ocl = bench_zoo.bench_model("m", str(path), _args(targets=["OPENCL"]), tmp_path).targets["OPENCL"]
    assert ocl.error is None and ocl.dispatches and ocl.dispatches > 1
    assert ocl.kernel_s and ocl.between_s is not None and 0 < ocl.kernel_s + ocl.between_s < ocl.p50 * 100
    assert "ms in kernels and" in capsys.readouterr().out


def test_table_prints_the_median_share_of_a_call_between_opencl_dispatches(capsys) -> None:
    rows = [bench_zoo.ModelResult(n, gflop=1.0, ort_p50=1e-3, targets={"OPENCL": bench_zoo.TargetResult(
        p50=1e-3, dispatches=d, kernel_s=k, between_s=b)}) for n, d, k, b in
        (("a", 11, 0.9e-3, 0.1e-3), ("b", 21, 0.7e-3, 0.3e-3), ("c", 31, 0.5e-3, 0.5e-3), ("one", 1, 1e-3, 0.0))]
    bench_zoo.print_table(rows, _args(targets=("CPU", "OPENCL")))
    out = capsys.readouterr().out
    assert ("OPENCL time between dispatches (the driver's own, from device timestamps): median 30% of a call's "
            "span, 15.0 us from one dispatch to the next, over 3 models of several dispatches") in out


def test_the_cross_core_round_trip_is_measured_between_two_of_the_process_cores() -> None:
    cores = os.sched_getaffinity(0)
    ns = cross_core_round_trip_ns(2000)
    assert os.sched_getaffinity(0) == cores  # the caller's cores restored
    if len(cores) < 2:
        assert ns is None
    else:
        assert ns is not None and 1 < ns < 1e6
        os.sched_setaffinity(0, {min(cores)})
        try:
            assert cross_core_round_trip_ns(2000) is None  # one core: nothing to measure
        finally:
            os.sched_setaffinity(0, cores)


def test_threads_sets_the_cpu_targets_thread_count_before_it_starts(monkeypatch, capsys) -> None:
    monkeypatch.setenv(bench_zoo.THREADS_ENV, "2")
    monkeypatch.setattr("sys.argv", ["bench_zoo.py", "--threads", "1", "--list"])
    bench_zoo.main()
    assert bench_zoo.os.environ[bench_zoo.THREADS_ENV] == "1" and "resnet18" in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", ["bench_zoo.py", "--threads", "0", "--list"])
    with pytest.raises(SystemExit):
        bench_zoo.main()


def test_table_lists_error_rows_and_the_geometric_mean(capsys) -> None:
    ok = bench_zoo.ModelResult("a", gflop=1.0, ort_p50=0.002,
                               targets={"CPU": bench_zoo.TargetResult(cold_s=1, warm_s=0.5, p50=0.004, max_rel=0.0)})
    failed = bench_zoo.ModelResult("b", gflop=1.0, ort_p50=0.001,
                                   targets={"CPU": bench_zoo.TargetResult(error="DrivepackError: no op Foo")})
    means = bench_zoo.print_table([ok, failed, bench_zoo.ModelResult("c", error="export error: x")], _args())
    out = capsys.readouterr().out
    assert means["CPU"] == pytest.approx(2.0)  # only the model that ran counts
    assert "b CPU: DrivepackError: no op Foo" in out and "c model: export error: x" in out
    assert "geometric mean drivepack CPU / onnxruntime: 2.00x over 1 models" in out


def test_table_prints_small_times_to_the_microsecond_and_opencl_over_cpu_on_small_models(capsys) -> None:
    def both(ocl_dispatches: int) -> dict[str, bench_zoo.TargetResult]:
        return {"CPU": bench_zoo.TargetResult(p50=70e-6, dispatches=2),
                "OPENCL": bench_zoo.TargetResult(p50=119e-6, dispatches=ocl_dispatches)}
    small = bench_zoo.ModelResult("gru", gflop=0.005, ort_p50=120e-6, targets=both(2))
    large = bench_zoo.ModelResult("big", gflop=1.0, ort_p50=2e-3, targets=both(bench_zoo.SMALL_MODEL_DISPATCHES + 1))
    bench_zoo.print_table([small, large], _args(targets=("CPU", "OPENCL")))
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("gru "))
    assert row.split()[2:5] == ["0.070", "0.119", "0.120"]
    assert "OPENCL / CPU on models of at most 20 dispatches: gru 1.70x (2 dispatches)" in out
    assert "big " not in out.split("OPENCL / CPU on models")[1]


def test_contention_times_a_fixed_work_control_with_the_peers_and_prints_the_p99_ratios(tmp_path: Path,
                                                                                        capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_gemm_model(), str(path))
    r = bench_zoo.bench_model("m", str(path), _args(contention=1, repeat=10), tmp_path)
    cpu = r.targets["CPU"]
    assert cpu.p50 and cpu.p99 and r.control_p50 and r.control_p99 and r.control_p99 >= r.control_p50
    bench_zoo.print_table([r], _args(contention=1))
    lines = capsys.readouterr().out.splitlines()
    head, row = next(i for i in lines if i.startswith("model")), next(i for i in lines if i.startswith("m "))
    assert "CPU 99/50" in head and "ctl 99/50" in head
    assert f"{cpu.p99 / cpu.p50:.2f}x" in row and f"{r.control_p99 / r.control_p50:.2f}x" in row
    quiet = bench_zoo.bench_model("m", str(path), _args(), tmp_path)
    assert quiet.control_p50 is None and quiet.control_p99 is None  # no control on a quiet machine


def test_fixed_work_repeats_one_amount_of_work_sized_to_the_time_asked() -> None:
    short, long = bench_zoo.fixed_work(0.0005), bench_zoo.fixed_work(0.005)

    def best(fn) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)
    assert 3 < best(long) / best(short) < 30  # ten times the work, timed on a noisy machine


def test_fixed_work_blocks_follow_the_profile_from_each_pause_on() -> None:
    work = bench_zoo.fixed_work_blocks([0.002, 0.0001, 0.0002], pause_s=0.2)
    assert [work() for _ in range(5)] == [0, 1, 2, 2, 2]  # back to back: the profile, then its last length
    time.sleep(0.25)
    assert [work() for _ in range(2)] == [0, 1]  # a pause starts a block again


def test_block_profile_is_the_median_call_at_each_place_of_a_block() -> None:
    calls = {"a": 0}

    def a() -> None:
        calls["a"] += 1
        time.sleep(0.004 if (calls["a"] - 2) % bench_zoo.BLOCK_CALLS == 0 else 0)  # the first of each block

    profile = bench_zoo.block_profile({"a": a, "b": lambda: None}, "a", blocks=3)
    assert calls["a"] == 1 + 3 * bench_zoo.BLOCK_CALLS and len(profile) == bench_zoo.BLOCK_CALLS
    assert profile[0] >= 0.004 and max(profile[1:]) < 0.004


def test_busy_processes_run_inside_the_block_and_are_stopped_after() -> None:
    with bench_zoo.busy_processes(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)


def test_table_says_when_every_peer_ran_real_time(capsys) -> None:
    bench_zoo.print_table([], _args(realtime=10))
    assert "every peer's threads SCHED_FIFO 10" in capsys.readouterr().out


def test_busy_processes_stay_fair_under_a_realtime_benchmark() -> None:
    """--realtime: the busy processes, started by a SCHED_FIFO thread, reset themselves to SCHED_OTHER (a real-time
    busy loop would own its core)."""
    import subprocess
    import sys
    proc = subprocess.Popen(["chrt", "-f", "5", sys.executable, "-c",
                             bench_zoo.BUSY.replace("while True: pass", "print(os.sched_getscheduler(0))")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    if proc.returncode and "Operation not permitted" in err:
        pytest.skip(f"the OS refuses SCHED_FIFO to this process: {err.strip()}")
    assert proc.returncode == 0, err
    assert out.split() == [str(os.SCHED_OTHER)]


def test_realtime_sets_this_thread_and_says_when_the_os_refuses(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(bench_zoo.os, "sched_setscheduler", lambda *a: calls.append(a))
    bench_zoo.go_realtime(7)
    assert calls == [(0, os.SCHED_FIFO, os.sched_param(7))]

    def refuse(*_a: object) -> None:
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(bench_zoo.os, "sched_setscheduler", refuse)
    with pytest.raises(SystemExit, match=r"--realtime: SCHED_FIFO priority 7 refused .*Operation not permitted"):
        bench_zoo.go_realtime(7)
    monkeypatch.setattr("sys.argv", ["bench_zoo.py", "--realtime", "100", "--list"])
    with pytest.raises(SystemExit):
        bench_zoo.main()


def test_interleaved_samples_drop_the_warm_up_calls() -> None:
    samples = bench_zoo.interleaved_samples({"a": lambda: None, "b": lambda: None}, repeat=7, warmup=2)
    assert [len(s) for s in samples.values()] == [7, 7]


def test_zoo_is_cached_by_name_and_versions_outside_the_repo(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DRIVEPACK_ZOO_DIR", str(tmp_path))
    required = {"efficientnet_b2_op", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x0_5", "resnet18",
                "transformer", "gru", "efficientnet_b0"}
    assert required <= set(zoo_models.ZOO)
    assert dict(zoo_models.ZOO["efficientnet_b2_op"].inputs)["x"] == zoo_models.OPENPILOT_SHAPE
    path = zoo_models.model_path("gru")
    assert path.parent == tmp_path and "torch" in path.name and f"r{zoo_models.RECIPE}" in path.name
    for name in ("gru", "resnet18"):
        zoo_models.model_path(name).write_bytes(b"")
    assert zoo_models.ensure(["gru", "resnet18"]) == {n: str(zoo_models.model_path(n)) for n in ("gru", "resnet18")}
