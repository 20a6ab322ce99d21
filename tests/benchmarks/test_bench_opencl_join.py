"""benchmarks/bench_opencl_join.py: the join-delay reading and a short real run on the OpenCL device."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bench_opencl_join


def test_a_second_group_that_overlaps_reads_as_its_join_delay() -> None:
    # one group 30 us of which 28 work; two groups 40 us: the second finished 10 us after the first
    assert bench_opencl_join.join_us(2.0, 30.0, 40.0) == pytest.approx(10.0)
    assert bench_opencl_join.join_us(2.0, 30.0, 29.0) == 0.0  # never a negative delay


def test_a_second_group_adding_its_own_work_ran_on_the_same_thread() -> None:
    assert bench_opencl_join.join_us(2.0, 30.0, 58.0) is None
    assert bench_opencl_join.join_us(2.0, 30.0, 30.0 + bench_opencl_join.OVERLAP * 28.0) is None  # the boundary


def test_the_reference_chain_is_the_kernel_arithmetic() -> None:
    x = np.array([0.5, -2.0], np.float32)
    y = bench_opencl_join.expected(x, 3, 2)
    ref = x.astype(np.float64)
    for _ in range(6):
        ref = ref * 0.999 + 1.0
    np.testing.assert_array_equal(y, ref.astype(np.float32))


def test_a_short_run_on_the_device_and_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench_opencl_join.main(["--steps", "0,3000", "--chain", "4", "--rounds", "2", "--json"])
    assert [(r["device"].split(",")[0], r["steps"]) for r in rows] == \
        [("OPENCL", 0), ("OPENCL", 3000), ("CPU target's pool", 0), ("CPU target's pool", 3000)]
    assert all(r["one_group_us"] > 0 and r["two_groups_us"] > 0 and r["empty_us"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "second group started" in out
    assert json.loads(out.strip().splitlines()[-1])["rows"] == rows


def test_the_pool_runner_computes_the_chain() -> None:
    runner = bench_opencl_join.PoolRunner()
    x = np.array([1.5, 3.0], np.float32)
    runner.write(x)
    runner.run(11, 2, 2)
    np.testing.assert_allclose(runner.read(), bench_opencl_join.expected(x, 11, 2), rtol=1e-5)
    runner.run(5, 1, 1)  # one index: the second float is left alone
    y = runner.read()
    np.testing.assert_allclose(y[1], bench_opencl_join.expected(x, 11, 2)[1], rtol=1e-5)
    np.testing.assert_allclose(y[0], bench_opencl_join.expected(x, 27, 1)[0], rtol=1e-5)
