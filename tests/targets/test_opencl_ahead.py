"""A capture's OpenCL programs built on a background thread while it renders the rest (targets/opencl_runtime.py
``build_in_background``, targets/opencl_ahead.py ``OpenCLAheadBuild``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import targets.opencl_ahead as oa
import targets.replay_opencl as ro
from jit import capture
from jit.realize import clear_compiled_kernels
from targets.base import RenderedKernel
from targets.opencl_runtime import OpenCLBuildError, OpenCLRuntime
from targets.registry import Device
from tests.targets.test_opencl import _batch_items, _check_batch

pytestmark = pytest.mark.opencl


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenCLRuntime]:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    clear_compiled_kernels()
    yield Device["OPENCL"]
    clear_compiled_kernels()


def test_kernels_built_in_the_background_are_not_built_again(fresh_cache: OpenCLRuntime) -> None:
    target = fresh_cache
    items = _batch_items(5)
    before = target.build_count
    target.build_in_background(_rendered(items[:3]))
    progs = target.compile_many(items)  # waits for the background build, then builds the two it lacked
    assert target.build_count == before + 2
    _check_batch(target, progs)
    target.build_in_background(_rendered(items))  # all cached: nothing to start
    assert target.compile_many(items) and target.build_count == before + 2


def test_a_failed_background_build_is_reported_by_the_capture_s_own_build(fresh_cache: OpenCLRuntime) -> None:
    bad = ("broken", "__kernel void broken(__global float* a) { a[0] = undeclared; }\n", {"global_size": (1,)})
    fresh_cache.build_in_background(_rendered([bad]))
    with pytest.raises(OpenCLBuildError, match="broken"):
        fresh_cache.compile_many([bad])


def _rendered(items: list) -> list[RenderedKernel]:
    return [RenderedKernel(name, source, meta, (64,)) for name, source, meta in items]


class _Recorder:
    warmer = None

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []
        self.info = SimpleNamespace(platform="test", device_type=0)  # no PoCL: nothing warmed

    def build_in_background(self, items: list[RenderedKernel], built: object = None) -> None:
        self.batches.append([(k.name, k.source) for k in items])


def test_the_ahead_build_starts_a_program_every_batch_of_distinct_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oa, "AHEAD_BATCH", 2)
    runtime = _Recorder()
    ahead = oa.OpenCLAheadBuild(runtime)  # type: ignore[arg-type]
    for name, source in [("a", "A"), ("a", "A"), ("b", "B"), ("c", "C"), ("c", "C2"), ("d", "D")]:
        ahead.add(RenderedKernel(name, source, {}, None))  # a source seen before is not a new kernel; a name must
        # be unique in a program
    assert runtime.batches == [[("a", "A"), ("b", "B")], [("c", "C")], [("c", "C2"), ("d", "D")]]


@pytest.mark.usefixtures("no_chains")
def test_a_capture_builds_in_the_background_and_computes_the_same(fresh_cache: OpenCLRuntime,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Five distinct kernels (four reduces, then the last add): two background programs of two, and the capture's
    own build only the fifth."""
    monkeypatch.setattr(oa, "AHEAD_BATCH", 2)
    monkeypatch.setattr(ro, "usable_cores", lambda: 2)
    started: list[int] = []
    build = fresh_cache.build_in_background
    monkeypatch.setattr(fresh_cache, "build_in_background",
                        lambda items, built=None: started.append(len(items)) or build(items, built))

    def chain(x):
        for i in range(4):  # each step's constant its own: four distinct kernels
            x = (x * (i + 1.5)).max(axis=1, keepdim=True) + x
        return {"y": x}

    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    before = fresh_cache.build_count
    cap = capture(chain, {"x": x}, target="OPENCL")
    assert started == [2, 2] and fresh_cache.build_count == before + 3
    want = x
    for i in range(4):
        want = (want * np.float32(i + 1.5)).max(axis=1, keepdims=True) + want
    np.testing.assert_allclose(cap(x=x)["y"], want, rtol=1e-5)
