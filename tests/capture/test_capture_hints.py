"""Capture hints (jit/capture_hints.py): an OpenCL capture remembers the cached programs it replays, and the next
capture of the same graph loads them on the runtime's background thread while it schedules; a hint changes no
result, a damaged or foreign hint is ignored, and a target whose programs load cheaply keeps none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jit.capture_hints as hints
import jit.render_cache as rc
import targets.opencl_runtime as ocr
from jit import Device, Tensor, capture
from jit.realize import clear_compiled_kernels

X = np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
W = np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3)


def _model(x: Tensor) -> dict[str, Tensor]:
    return {"y": (x.conv2d(Tensor(W), padding=1).relu() * 0.5).sum(axis=(2, 3)).exp()}


def _hints(folder: Path) -> list[Path]:
    return sorted(folder.glob("hint-*.json"))


def _prefetched(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Records each ``prefetch`` call's keys (and still runs it)."""
    calls: list[list[str]] = []
    real = ocr.OpenCLRuntime.prefetch

    def recording(self: ocr.OpenCLRuntime, keys: list[str]) -> None:
        calls.append(list(keys))
        real(self, keys)
    monkeypatch.setattr(ocr.OpenCLRuntime, "prefetch", recording)
    return calls


def test_a_second_capture_loads_the_programs_the_first_replayed(cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _prefetched(monkeypatch)
    first = capture(_model, {"x": X}, target="OPENCL")
    (hint,) = _hints(cache)
    programs = json.loads(hint.read_text())["programs"]
    target = Device["OPENCL"]
    assert programs == target.program_keys([k.source for k in first.cmdbuf.kernels]) and not calls
    assert all((cache / f"opencl-{p}.cl").exists() or (cache / f"opencl-{p}.bin").exists() for p in programs)
    clear_compiled_kernels()
    second = capture(_model, {"x": X}, target="OPENCL")
    assert calls == [programs]
    assert [k.source for k in second.cmdbuf.kernels] == [k.source for k in first.cmdbuf.kernels]
    np.testing.assert_array_equal(second({"x": X})["y"], first({"x": X})["y"])


def test_the_hint_is_keyed_by_the_graph_not_its_weight_values(cache: Path) -> None:
    target = Device["OPENCL"]
    keys = [hints.graph_key([_model(Tensor(x, device="OPENCL"))["y"].uop], target) for x in (X, X + 1)]
    other = hints.graph_key([(Tensor(X, device="OPENCL") * 2).uop], target)
    assert keys[0] == keys[1] != other and keys[0] is not None


@pytest.mark.parametrize("text", ['{"format": 1, "programs": ["', '{"format": 1, "key": "@", "programs": "ab"}',
                                  '{"format": 1, "key": "@", "programs": ["../../../etc/passwd"]}',
                                  '{"format": 2, "key": "@", "programs": []}', '[1, 2]'])
def test_a_damaged_hint_is_ignored_and_replaced(cache: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    capture(_model, {"x": X}, target="OPENCL")
    (hint,) = _hints(cache)
    good = hint.read_text()
    hint.write_text(text.replace("@", hint.stem.removeprefix("hint-")))
    clear_compiled_kernels()
    calls = _prefetched(monkeypatch)
    capture(_model, {"x": X}, target="OPENCL")
    assert calls == [] and hint.read_text() == good


@pytest.mark.parametrize("key", ["../" + "a" * 61, "A" * 64, "a" * 63, "a" * 64 + "\n", "a" * 64 + "/x"])
def test_a_program_file_is_named_only_by_a_program_key(cache: Path, key: str) -> None:
    assert ocr.program_file("a" * 64, ".cl") == cache / f"opencl-{'a' * 64}.cl"
    assert ocr.program_file(key, ".cl") is None


def test_no_hint_on_a_target_that_loads_programs_cheaply(cache: Path) -> None:
    capture(_model, {"x": X}, target="CPU")
    assert not Device["CPU"].prefetches_programs and not _hints(cache)


def test_no_hint_with_the_render_cache_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rc.ENV, "0")
    capture(_model, {"x": X}, target="OPENCL")
    assert not _hints(cache)
