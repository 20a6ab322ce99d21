"""pytest-benchmark suite: replay the sample models' packages on each target.

    python3 -m pytest benchmarks/bench_samples.py -p no:cacheprovider [--benchmark-json out.json]

Each case packages a sample model (vision, policy) for a target (CPU via pc-cpu, OPENCL via pc-opencl when an
OpenCL device exists), loads the package back and benchmarks one replay of its golden set 0, checking once that
the replay reproduces the golden output bit for bit. The kernels are plain loop nests until the optimizer
lands, so the vision model takes about a second per replay on the CPU: rounds are few.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from packager.build import BuildOptions, build_package
from packager.package import Package, load_package
from packager.samples import SAMPLES

VEHICLES = {"CPU": "pc-cpu", "OPENCL": "pc-opencl"}


def _has_opencl() -> bool:
    try:
        from targets.registry import Device

        Device["OPENCL"]
        return True
    except Exception:  # no libOpenCL or no device: the OPENCL cases are skipped
        return False


@pytest.fixture(scope="module")
def packages() -> dict[tuple[str, str], Path]:
    """(sample, device) -> its package file, built once per module run."""
    return {}


def _package(cache: dict, tmp: Path, sample: str, device: str) -> Package:
    key = (sample, device)
    if key not in cache:
        model = tmp / f"{sample}.onnx"
        onnx.save(SAMPLES[sample](), str(model))
        cache[key] = build_package(model, VEHICLES[device], tmp / f"{sample}-{device}.dpk",
                                   BuildOptions(golden_sets=1)).path
    return load_package(cache[key])


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_replay_sample(benchmark, packages: dict, tmp_path_factory: pytest.TempPathFactory, sample: str,
                       device: str) -> None:
    if device == "OPENCL" and not _has_opencl():
        pytest.skip("no OpenCL device")
    pkg = _package(packages, tmp_path_factory.mktemp(sample), sample, device)
    replay = pkg.make_replay()
    golden = pkg.golden(0)
    out = replay(golden.inputs)
    assert all(np.array_equal(out[k], golden.target[k]) for k in golden.target)
    rounds = 3 if sample == "vision" else 20
    benchmark.extra_info["dispatches"] = replay.n_dispatches
    benchmark.pedantic(replay, args=(golden.inputs,), rounds=rounds, warmup_rounds=1)
