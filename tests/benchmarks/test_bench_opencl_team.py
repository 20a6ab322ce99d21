"""benchmarks/bench_opencl_team.py: the reference layers and short real runs of both ways on the OpenCL device."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bench_opencl_team


def test_the_reference_reads_each_units_neighbour_from_the_layer_before() -> None:
    x = np.arange(bench_opencl_team.UNITS, dtype=np.float32)
    np.testing.assert_array_equal(bench_opencl_team.expected(x, 1, 0), np.roll(x, -1))
    y = bench_opencl_team.expected(x, 2, 1)
    ref = np.roll(np.roll(x.astype(np.float64), -1) * 0.999 + 1.0, -1) * 0.999 + 1.0
    np.testing.assert_array_equal(y, ref.astype(np.float32))


def test_the_team_kernel_leaves_its_counters_for_the_next_launch() -> None:
    """Launched again and again, with any number of groups, each launch computes every layer: the last group out
    reset the counters the next launch claims from."""
    runner = bench_opencl_team.TeamRunner(max_layers=7)
    try:
        x = np.linspace(-1.0, 1.0, bench_opencl_team.UNITS, dtype=np.float32)
        for layers, groups, chunk in ((7, 2, 8), (5, 1, 8), (7, 3, 5), (4, 2, 64)):
            runner.write(x)
            runner.team_launch(layers, 9, groups, chunk)
            np.testing.assert_allclose(runner.read(layers), bench_opencl_team.expected(x, layers, 9), rtol=1e-5)
    finally:
        runner.release()


def test_a_short_run_prints_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench_opencl_team.main(["--steps", "0,40", "--layers", "6", "--rounds", "2", "--json"])
    assert [r["steps"] for r in rows] == [0, 40]
    assert all(r[key] > 0 for r in rows for key in ("dispatch1_us", "dispatchn_us", "team1_us", "teamn_us"))
    out = capsys.readouterr().out
    assert "team / dispatches" in out
    assert json.loads(out.strip().splitlines()[-1])["rows"] == rows
