"""benchmarks/bench_package_time.py: the package command line it times works, its stage parse, its cache handling."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import onnx
import pytest

from benchmarks.bench_package_time import Flow, measure, package_cmd, stage_seconds, timed_process
from packager.synthetic import tiny_model

# records the cache path it was given, one line per process
_RECORD = "import os, sys; open(sys.argv[1], 'a').write(os.environ['CACHE_VAR'] + '\\n'); print('7.5')"


@pytest.mark.slow
def test_package_cmd_tunes_then_reads_the_tuning_file(tmp_path: Path) -> None:
    model, tuning = tmp_path / "tiny.onnx", tmp_path / "tiny.tuning.json"
    onnx.save(tiny_model(), str(model))
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path / "cache")}
    anyway = ["--allow-abi-mismatch"]  # the tiny model matches no role of the profile
    timed_process(package_cmd(model, tmp_path / "tune.dpk", tuning, tune=True) + anyway, env)
    assert tuning.exists()
    wall, stdout = timed_process(package_cmd(model, tmp_path / "tiny.dpk", tuning) + anyway, env)
    assert "kernels from tiny.tuning.json, 0 searched" in stdout
    stages = stage_seconds(stdout)
    assert stages is not None and 0 < stages <= wall
    assert (tmp_path / "tiny.dpk").exists()


def test_stage_seconds_sums_the_summary_line() -> None:
    line = "package x.dpk: 1 bytes\n  time per stage: load 0.08 s  capture 56.13 s  golden 0.42 s  write 0.02 s\n"
    assert abs(stage_seconds(line) - 56.65) < 1e-9
    assert stage_seconds("no summary here") is None


def test_measure_keeps_the_warm_cache_and_gives_each_cold_run_a_fresh_one(tmp_path: Path) -> None:
    log = tmp_path / "log"
    flow = Flow("f", [sys.executable, "-c", _RECORD, str(log)], dict(os.environ), "CACHE_VAR", "cache.db",
                lambda out: float(out))
    rows = measure([flow], 2, tmp_path)
    assert [r[1] for r in rows["f"]["warm"] + rows["f"]["cold"]] == [7.5] * 4
    seen = log.read_text().splitlines()
    warm = str(tmp_path / "f-cache-warm" / "cache.db")
    assert seen[0] == warm and seen[1] == warm and seen[3] == warm  # untimed fill, then round 1 and 2 warm
    cold = [seen[2], seen[4]]
    assert cold[0] != cold[1] and warm not in cold
    assert not any(Path(c).parent.exists() for c in cold)  # each cold cache removed after its run
