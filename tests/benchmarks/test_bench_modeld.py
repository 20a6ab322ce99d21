"""benchmarks/bench_modeld.py: its byte count, bandwidth probe and contention processes. Its peers (OpenCV,
tinygrad) are in the bench extra, which the test install leaves out: the benchmark itself checks that each peer
computes drivepack's step (frames within the rounding-tie allowance, outputs within tolerance) before timing it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from abi.frames import nv12_geometry
from packager import samples
from packager.modeld.capture import step_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_modeld  # noqa: E402

GEOMETRY = {"road": nv12_geometry(1928, 1208), "wide": nv12_geometry(1928, 1208)}
MODELS = [samples.vision_pipeline_model(), samples.policy_pipeline_model()]


def test_frames_differ_allows_rounding_ties_only() -> None:
    want = np.zeros((6, 128, 256), np.uint8)
    got = want.copy()
    got.reshape(-1)[:50] = 1  # 50 of 196608: under 0.05%
    assert bench_modeld.frames_differ("f", got, want) is None
    got.reshape(-1)[:200] = 1
    assert "200 of 196608 pixels differ" in str(bench_modeld.frames_differ("f", got, want))


def test_prepare_bytes_count_samples_queue_shift_and_sampled_frames() -> None:
    plan, _ = step_plan(MODELS, GEOMETRY)
    frame = 6 * 128 * 256
    # per camera: the sampled pixels, 4 queued frames read + 5 written, 2 sampled frames read + written
    assert bench_modeld.prepare_bytes(plan) == 2 * (1 + 4 + 5 + 2 * 2) * frame


def test_memory_bandwidth_is_measured_not_a_constant() -> None:
    rate = bench_modeld.memory_bandwidth(mib=8, runs=1)
    assert 1e8 < rate < 1e13  # bytes/s of a real copy


def test_contention_processes_run_inside_and_are_stopped_after() -> None:
    with bench_modeld.contention(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)


def test_kernel_seconds_sums_one_median_per_dispatch_of_the_prepare_step() -> None:
    from packager.modeld.capture import capture_step
    from packager.modeld.entries import golden_step_inputs

    prep, plan = capture_step(MODELS, GEOMETRY, "CPU", prepare=True)
    feeds = {n: a for n, a in golden_step_inputs(plan, seed=0).items() if n in plan.inputs(prepare=True)}
    times = bench_modeld.kernel_seconds(prep, feeds, repeat=3)
    assert 0 < times.best <= times.median < 10  # seconds: a real run of every dispatch, no call overhead counted
    assert prep.n_dispatches == 6  # per camera: warp, queue shift (in the state itself), sampled frames


def test_the_kernels_are_timed_before_the_bandwidth_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: the probe ran first and the kernels timed after it took twice as long (82% read as 40%)
    calls: list[str] = []
    times = bench_modeld.KernelTimes(1e-4, 1e-4)
    monkeypatch.setattr(bench_modeld, "kernel_seconds", lambda *a: calls.append("kernels") or times)
    monkeypatch.setattr(bench_modeld, "memory_bandwidth", lambda: calls.append("probe") or 4e10)
    kernels, bandwidth = bench_modeld.frame_path_figures({"CPU": None, "OPENCL": None}, {}, 3)  # type: ignore[dict-item]
    assert calls == ["kernels", "kernels", "probe"] and kernels == {"CPU": times, "OPENCL": times} and bandwidth == 4e10
