"""benchmarks/bench_chains.py: one model's OPENCL capture with teams or chains and without, timed in one process."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "benchmarks")]
import bench_chains  # noqa: E402

from tests.benchmarks.test_bench_zoo import _conv_gemm_model  # noqa: E402


@pytest.mark.opencl
@pytest.mark.parametrize("mode", ["teams", "chains"])
def test_a_small_model_runs_no_more_dispatches_with_teams_or_chains_and_the_same_bytes(tmp_path: Path,
                                                                                         mode: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_gemm_model(), str(path))
    row = bench_chains.compare(str(path), repeat=6, mode=mode)  # raises where the two captures' outputs differ
    # a chain takes this model's small kernels whole; a team takes them too
    assert row["dispatches_with"] <= row["dispatches_without"] if mode == "teams" else \
        row["dispatches_with"] < row["dispatches_without"]
    assert row["ms_with"] > 0 and row["ms_without"] > 0 and row["ratio"] == row["ms_with"] / row["ms_without"]
