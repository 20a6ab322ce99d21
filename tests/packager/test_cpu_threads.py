"""The CPU thread count per package (``package --cpu-threads``) and per call (``replay.run(inputs, threads=n)``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from jit import capture
from packager.build import BuildOptions, build_package
from packager.errors import PackageError
from packager.package import load_package
from packager.samples import policy_model
from targets.replay import ReplayError
from tests.packager.crafted import rewrite


@pytest.fixture(scope="module")
def policy_pkg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("threads")
    onnx.save(policy_model(), str(d / "policy.onnx"))
    return build_package(d / "policy.onnx", "pc-cpu", d / "p.dpk", BuildOptions(golden_sets=1, cpu_threads=1)).path


def test_the_package_thread_count_is_what_its_replay_uses(policy_pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRIVEPACK_CPU_THREADS", raising=False)
    pkg = load_package(policy_pkg)
    assert pkg.manifest.cpu_threads == 1 and pkg.manifest.raw["settings"]["cpu_threads"] == 1
    assert pkg.make_replay().threads == 1
    monkeypatch.setenv("DRIVEPACK_CPU_THREADS", "2")  # whoever runs it decides last
    assert pkg.make_replay().threads == 2


def test_a_call_may_run_on_other_threads_with_the_same_bits(policy_pkg: Path) -> None:
    pkg = load_package(policy_pkg)
    replay, g = pkg.make_replay(), pkg.golden(0)
    one = replay.run(g.inputs, threads=1)
    two = replay.run(g.inputs, threads=2)
    assert replay.threads == 1  # the replay's own count is back after each call
    for name, want in g.target.items():
        np.testing.assert_array_equal(one[name], want)
        np.testing.assert_array_equal(two[name], want)
    with pytest.raises(ReplayError, match="threads: expected a positive integer, got 0"):
        replay.run(g.inputs, threads=0)
    on_opencl = capture(lambda x: {"y": x + 1}, {"x": np.zeros(4, np.float32)}, target="OPENCL").replay
    with pytest.raises(ReplayError, match="threads: expected a CPU replay"):
        on_opencl.run({"x": np.zeros(4, np.float32)}, threads=2)


def test_a_bad_package_thread_count_is_refused(policy_pkg: Path, tmp_path: Path) -> None:
    bad = rewrite(policy_pkg, tmp_path / "bad.dpk", manifest=lambda m: m["settings"].update(cpu_threads=0))
    with pytest.raises(PackageError, match=r"settings\.cpu_threads: expected an integer in 1\.\.1024, got 0"):
        load_package(bad)
    with pytest.raises(PackageError, match="cpu_threads: expected an integer in 1..1024, got 0"):
        build_package(tmp_path / "none.onnx", "pc-cpu", tmp_path / "x.dpk", BuildOptions(cpu_threads=0))
