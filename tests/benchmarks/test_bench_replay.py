"""benchmarks/bench_replay.py: the thread pool's cost per parallel region, measured for real."""

from __future__ import annotations

import re

import pytest

from benchmarks import bench_replay


def test_the_region_cost_line_prints_both_timings(capsys: pytest.CaptureFixture[str]) -> None:
    bench_replay.bench_regions(regions=50, repeats=3)
    line = capsys.readouterr().out.strip()
    found = re.fullmatch(r"CPU pool: +(\d+) ns per 2-thread region of 8 chunks \(median of 3 runs of 50\) \| "
                         r"the same chunks on the caller alone +(\d+) ns", line)
    assert found, line
    assert int(found[1]) > 0 and int(found[2]) > 0
