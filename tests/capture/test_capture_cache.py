"""The capture cache (jit/capture_cache.py): a capture of a graph captured before, with the same constants, target
and settings, replays the stored command buffer and weights without scheduling; anything else misses, and a
damaged entry is a miss that the next capture replaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import jit.capture_cache as cc
import jit.trace as trace
import targets.opencl_runtime as ocr
from jit import Device, Tensor, capture, capture_onnx, load_onnx
from jit.common.helpers import Context
from jit.onnx.loader import OnnxModel
from jit.realize import clear_compiled_kernels

ROOT = Path(__file__).resolve().parents[2]
X = np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
W = np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3)


@pytest.fixture
def on(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cc.ENV, "1")
    monkeypatch.delenv(cc.BUDGET_ENV, raising=False)
    return cache


def _model(weights: np.ndarray = W) -> Callable[..., dict[str, Tensor]]:
    def model(x: Tensor) -> dict[str, Tensor]:
        h = x.conv2d(Tensor(weights), padding=1).relu()
        return {"y": (h * 0.5).sum(axis=(2, 3)).exp(), "h": h}
    return model


def _reference(weights: np.ndarray = W, x: np.ndarray = X) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = np.zeros((1, 4, 8, 8), np.float32)
    for i in range(3):
        for j in range(3):
            h += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 8, j:j + 8], weights[:, :, i, j])
    return np.exp((np.maximum(h, 0) * 0.5).sum(axis=(2, 3)))


def _scheduled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the captures that scheduled (a hit schedules nothing)."""
    calls: list[int] = []
    real = trace.create_schedule

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(trace, "create_schedule", counting)
    return calls


def _files(folder: Path, pattern: str) -> list[Path]:
    """The cache files matching ``pattern`` once this process's stores are written (they run on a thread)."""
    cc.wait_stored()
    return sorted(folder.glob(pattern))


def _entries(folder: Path) -> list[Path]:
    return _files(folder, "capture-*.json")


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_second_capture_replays_the_first_without_scheduling(on: Path, monkeypatch: pytest.MonkeyPatch,
                                                               target: str) -> None:
    scheduled = _scheduled(monkeypatch)
    first = capture(_model(), {"x": X}, target=target)
    assert len(scheduled) == 1 and len(_entries(on)) == 1
    clear_compiled_kernels()
    second = capture(_model(), {"x": X}, target=target)
    assert len(scheduled) == 1
    assert second.cmdbuf.to_bytes() == first.cmdbuf.to_bytes() and second.report == first.report
    assert (first.cache_hit, second.cache_hit) == (False, True) and first.cache_key == second.cache_key
    assert first.weights.keys() == second.weights.keys()
    for wid, w in first.weights.items():
        np.testing.assert_array_equal(second.weights[wid], w)
        assert not second.weights[wid].flags.writeable
    for x in (X, -2 * X):
        out = second({"x": x})
        np.testing.assert_allclose(out["y"], _reference(x=x), rtol=1e-5)
        np.testing.assert_array_equal(out["h"], first({"x": x})["h"])


def test_other_weights_shape_settings_or_target_miss(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduled = _scheduled(monkeypatch)
    capture(_model(), {"x": X}, target="CPU")
    other = W[::-1].copy()
    run = capture(_model(other), {"x": X}, target="CPU")
    np.testing.assert_allclose(run({"x": X})["y"], _reference(other), rtol=1e-5)
    capture(_model(), {"x": np.zeros((1, 3, 8, 9), np.float32)}, target="CPU")
    with Context(NOOPT=1):
        capture(_model(), {"x": X}, target="CPU")
    capture(_model(), {"x": X}, target="CPU", fold_weights=False)
    capture(_model(), {"x": X}, target="OPENCL")
    assert len(scheduled) == 6 and len(_entries(on)) == 6
    capture(_model(other), {"x": X}, target="CPU")
    assert len(scheduled) == 6


def test_a_state_and_its_initial_value_are_part_of_the_key(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def step(x: Tensor, total: Tensor) -> dict[str, Tensor]:
        new = total + x
        return {"total": new, "y": new * 2}
    scheduled = _scheduled(monkeypatch)
    x = np.ones(4, np.float32)
    for init in (np.zeros(4, np.float32), np.zeros(4, np.float32), np.arange(4, dtype=np.float32)):
        run = capture(step, {"x": x}, target="CPU", state={"total": init})
        np.testing.assert_array_equal(run(x=x)["y"], 2 * (init + 1))
        np.testing.assert_array_equal(run(x=x)["y"], 2 * (init + 2))
        run.reset_state()
        np.testing.assert_array_equal(run.read_state("total"), init)
    assert len(scheduled) == 2


def _damage_blob(folder: Path) -> None:
    (blob,) = _files(folder, "capture-*.bin")
    data = bytearray(blob.read_bytes())
    data[5] ^= 1
    blob.write_bytes(bytes(data))


def _wrong_target(folder: Path) -> None:
    (doc,) = _entries(folder)
    entry = json.loads(doc.read_text())
    entry["cmdbuf"]["target"] = "OPENCL"
    doc.write_text(json.dumps(entry))


def _short_weight(folder: Path) -> None:
    (doc,) = _entries(folder)
    entry = json.loads(doc.read_text())
    entry["weights"][0][2] -= 4
    doc.write_text(json.dumps(entry))


def _bad_offset(folder: Path) -> None:
    (doc,) = _entries(folder)
    entry = json.loads(doc.read_text())
    entry["weights"][0][1] = 1 << 40
    doc.write_text(json.dumps(entry))


@pytest.mark.parametrize("damage", [
    _damage_blob, _wrong_target, _bad_offset, _short_weight,
    lambda folder: _files(folder, "capture-*.bin")[0].unlink(),
    lambda folder: _entries(folder)[0].write_text("{not json"),
    lambda folder: _entries(folder)[0].write_text(_entries(folder)[0].read_text().replace('"dispatches"', '"x"')),
], ids=["flipped-weight-byte", "other-target", "offset-past-the-end", "weight-size-not-the-cmdbufs",
        "no-weights-file", "not-json", "bad-cmdbuf"])
def test_a_damaged_entry_is_a_miss_and_replaced(on: Path, monkeypatch: pytest.MonkeyPatch,
                                                damage: Callable[[Path], None]) -> None:
    first = capture(_model(), {"x": X}, target="CPU")
    damage(on)
    scheduled = _scheduled(monkeypatch)
    again = capture(_model(), {"x": X}, target="CPU")
    assert len(scheduled) == 1
    np.testing.assert_array_equal(again({"x": X})["y"], first({"x": X})["y"])
    capture(_model(), {"x": X}, target="CPU")  # the entry the miss stored back
    assert len(scheduled) == 1


def test_off_stores_nothing(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cc.ENV, "0")
    capture(_model(), {"x": X}, target="CPU")
    assert not _files(on, "capture-*")


def test_the_least_recently_used_entries_go_past_the_budget(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def dense(scale: float) -> Callable[..., dict[str, Tensor]]:  # 1.5 MiB of weights
        w = np.linspace(-1, 1, 192 * 2048, dtype=np.float32).reshape(192, 2048) * scale
        return lambda x: {"y": x.reshape(1, 192) @ Tensor(w)}
    scheduled = _scheduled(monkeypatch)
    monkeypatch.setenv(cc.BUDGET_ENV, "4")
    for scale in (1, 2):
        capture(dense(scale), {"x": X}, target="CPU")
    assert len(_files(on, "capture-*.bin")) == 2
    capture(dense(1), {"x": X}, target="CPU")  # a hit: now the most recently used
    monkeypatch.setenv(cc.BUDGET_ENV, "2")
    capture(dense(3), {"x": X}, target="CPU")  # over the budget: scale 2's, then scale 1's entry go
    assert len(scheduled) == 3 and len(_files(on, "capture-*.bin")) == 1 and len(_entries(on)) == 1
    capture(dense(3), {"x": X}, target="CPU")
    assert len(scheduled) == 3
    monkeypatch.setenv(cc.BUDGET_ENV, "0")  # keeps nothing, not even what it just stored
    capture(dense(4), {"x": X}, target="CPU")
    assert not _files(on, "capture-*")
    monkeypatch.setenv(cc.BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match=f"{cc.BUDGET_ENV}: expected a number of MiB, got 'lots'"):
        cc.budget_bytes()


_CAPTURE = """
import json
import numpy as np
import jit.trace as trace
from jit import Tensor, capture
scheduled = []
real = trace.create_schedule
trace.create_schedule = lambda *a, **k: scheduled.append(1) or real(*a, **k)
def model(x):
    w = Tensor(np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3))
    return {"y": (x.conv2d(w, padding=1).relu() * 0.5).sum(axis=(2, 3))}
x = np.linspace(0, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
run = capture(model, {"x": x}, target="CPU")
print(json.dumps({"scheduled": len(scheduled), "cmdbuf": run.cmdbuf.to_bytes().decode(),
                  "y": run({"x": x})["y"].tobytes().hex()}))
"""


def test_a_new_process_replays_what_an_earlier_one_stored(tmp_path: Path) -> None:
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT), cc.ENV: "1"}
    cold, warm = (json.loads(subprocess.run([sys.executable, "-c", _CAPTURE], env=env, capture_output=True,
                                            text=True, check=True).stdout) for _ in range(2))
    assert (cold["scheduled"], warm["scheduled"]) == (1, 0)
    assert cold["cmdbuf"] == warm["cmdbuf"] and cold["y"] == warm["y"]


def _onnx_bytes(bias: float = 1.0) -> bytes:
    """x (1, 4) -> Gather(x, NonZero(mask)) + bias: the NonZero on a constant runs on the host at capture."""
    mask = onnx.numpy_helper.from_array(np.array([0, 1, 0, 1], np.float32), "mask")
    b = onnx.numpy_helper.from_array(np.array([bias], np.float32), "b")
    shape = onnx.numpy_helper.from_array(np.array([-1], np.int64), "shape")
    nodes = [onnx.helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
             onnx.helper.make_node("Reshape", ["nz", "shape"], ["idx"], name="flat"),
             onnx.helper.make_node("Gather", ["x", "idx"], ["g"], axis=1, name="gather"),
             onnx.helper.make_node("Add", ["g", "b"], ["y"], name="add")]
    graph = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])], [mask, b, shape])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]).SerializeToString()


def _traced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of any OnnxModel (a capture traces by calling it once)."""
    calls: list[int] = []
    real = OnnxModel.__call__

    def counting(self: OnnxModel, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(OnnxModel, "__call__", counting)
    return calls


XS = np.arange(4, dtype=np.float32).reshape(1, 4)


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_model_captured_before_is_replayed_without_tracing(on: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path, target: str) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_onnx_bytes())
    traced = _traced(monkeypatch)
    first_model = load_onnx(path, device=target)
    first = capture_onnx(first_model, {"x": XS}, target=target)
    assert [(h.node, h.op) for h in first_model.host_nodes] == [("nonzero", "NonZero")]
    clear_compiled_kernels()
    for again in (load_onnx(path, device=target), load_onnx(_onnx_bytes(), device=target)):
        second = capture_onnx(again, {"x": XS}, target=target)
        assert again.host_nodes == first_model.host_nodes
        assert second.cmdbuf.to_bytes() == first.cmdbuf.to_bytes() and second.cache_key == first.cache_key
        np.testing.assert_array_equal(second({"x": XS})["y"], [[2.0, 4.0]])
    assert len(traced) == 1 and len(_files(on, "model-capture-*.json")) == 1


def test_a_model_with_other_bytes_inputs_or_settings_is_traced(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traced = _traced(monkeypatch)
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="CPU")
    run = capture_onnx(load_onnx(_onnx_bytes(bias=5.0)), {"x": XS}, target="CPU")
    np.testing.assert_array_equal(run({"x": XS})["y"], [[6.0, 8.0]])
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS.astype(np.float16)}, target="CPU")
    capture_onnx(load_onnx(_onnx_bytes(), float16=True), {"x": XS}, target="CPU")
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="OPENCL")
    monkeypatch.setattr(cc, "_builders_fingerprint", lambda: ("edited", 0.0))  # an edited graph builder
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="CPU")
    assert len(traced) == 6
    # a ModelProto has no bytes to key it by: traced, then served by its traced graph's key
    scheduled = _scheduled(monkeypatch)
    capture_onnx(load_onnx(onnx.load_from_string(_onnx_bytes())), {"x": XS}, target="CPU")
    assert len(traced) == 7 and not scheduled


def _not_a_digest(folder: Path) -> None:
    """The alias names a complete entry stored under a name that is no SHA-256 digest (a file name could then
    name any path): refused, though the entry itself would check out."""
    (alias,) = _files(folder, "model-capture-*.json")
    doc = json.loads(alias.read_text())
    (entry,) = _entries(folder)
    stored = json.loads(entry.read_text())
    (folder / "capture-mine.json").write_text(json.dumps(stored | {"key": "mine"}))
    (folder / "capture-mine.bin").write_bytes(entry.with_suffix(".bin").read_bytes())
    assert cc.load("mine", "CPU") is not None
    alias.write_text(json.dumps(doc | {"capture": "mine"}))


@pytest.mark.parametrize("damage", [
    lambda folder: [blob.unlink() for blob in _files(folder, "capture-*.bin")],
    _not_a_digest,
    lambda folder: _files(folder, "model-capture-*.json")[0].write_text("[]"),
], ids=["capture-gone", "names-no-digest", "not-an-entry"])
def test_a_model_entry_that_does_not_check_out_is_traced_again(on: Path, monkeypatch: pytest.MonkeyPatch,
                                                               damage: Callable[[Path], None]) -> None:
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="CPU")
    damage(on)
    traced = _traced(monkeypatch)
    run = capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="CPU")
    assert len(traced) == 1
    np.testing.assert_array_equal(run({"x": XS})["y"], [[2.0, 4.0]])


def test_an_opencl_model_hit_loads_its_programs_before_its_entry(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="OPENCL")
    clear_compiled_kernels()
    calls: list[tuple[list[str], bool]] = []
    real = ocr.OpenCLRuntime.prefetch

    def recording(self: ocr.OpenCLRuntime, keys: list[str], awaited: bool = False) -> None:
        calls.append((list(keys), awaited))
        real(self, keys, awaited)
    monkeypatch.setattr(ocr.OpenCLRuntime, "prefetch", recording)
    capture_onnx(load_onnx(_onnx_bytes()), {"x": XS}, target="OPENCL")
    target = Device["OPENCL"]
    assert calls == [(list(dict.fromkeys(target.program_keys([k.source for k in first.cmdbuf.kernels]))), True)]


def _held_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The capture cache's writes wait until the returned event is set."""
    release = threading.Event()
    real = cc._write_entry

    def held(*args: object) -> None:
        assert release.wait(30)
        real(*args)
    monkeypatch.setattr(cc, "_write_entry", held)
    return release


def test_a_capture_returns_while_its_entry_is_written_and_a_lookup_waits_for_it(
        on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = _held_writes(monkeypatch)
    scheduled = _scheduled(monkeypatch)
    capture(_model(), {"x": X}, target="CPU")
    assert not list(on.glob("capture-*"))  # still held
    threading.Timer(0.2, release.set).start()
    second = capture(_model(), {"x": X}, target="CPU")  # its lookup waited for the write, then hit
    assert len(scheduled) == 1 and len(_entries(on)) == 1
    np.testing.assert_allclose(second({"x": X})["y"], _reference(), rtol=1e-5)


def test_an_entry_goes_to_the_folder_of_the_capture_that_stored_it(on: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: the writer thread read $DRIVEPACK_CACHE when it ran, so a write still pending when a test (or a
    # caller) moved the cache elsewhere landed in the new folder
    release = _held_writes(monkeypatch)
    capture(_model(), {"x": X}, target="CPU")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.setenv("DRIVEPACK_CACHE", str(elsewhere))
    release.set()
    assert len(_entries(on)) == 1 and len(_files(on, "capture-*.bin")) == 1
    assert not list(elsewhere.iterdir())


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_entries_are_written_at_the_lowest_priority(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the writer's hashing and copying must not take a core from the replay's first calls, which time its dispatches
    seen: list[int] = []
    real = cc._write_entry

    def recording(*args: object) -> None:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        real(*args)
    monkeypatch.setattr(cc, "_write_entry", recording)
    capture(_model(), {"x": X}, target="CPU")
    cc.wait_stored()
    assert seen == [max(cc.WRITER_NICENESS, os.getpriority(os.PRIO_PROCESS, 0))]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != cc.WRITER_NICENESS  # the caller's is its own
