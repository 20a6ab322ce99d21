"""CPU replay: one generated driver per command buffer, 1,000 bit-identical replays, hand-written kernels."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import targets.cpu_runtime as cpu
from jit import Captured, Tensor, capture
from targets.cmdbuf import CommandBuffer
from targets.replay import ReplayError, make_replay
from targets.replay_cpu import CPUReplay, driver_source
from tests.targets.test_cmdbuf import aliased_cmdbuf, scale_cmdbuf

W = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)


def small(x: Tensor) -> dict[str, Tensor]:
    h = (x @ Tensor(W, device=x.device)).relu()
    return {"y": h.softmax(-1), "m": h.max(axis=1)}


def inputs(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32)}


def test_thousand_replays_are_bit_identical_and_inputs_matter() -> None:
    cap = capture(small, inputs(0), target="CPU")
    assert isinstance(cap.replay, CPUReplay)
    first = {k: v.tobytes() for k, v in cap(inputs(0)).items()}
    eager = {k: v.numpy().tobytes() for k, v in small(Tensor(inputs(0)["x"])).items()}
    assert first == eager
    x = inputs(0)
    for _ in range(1000):
        assert {k: v.tobytes() for k, v in cap(x).items()} == first
    other = cap(inputs(1))
    assert all(other[k].tobytes() != first[k] for k in first)


def test_driver_calls_every_dispatch_in_order_in_one_function() -> None:
    cap = capture(small, inputs(0), target="CPU")
    src = cap.replay.source
    body = src.split("void drivepack_run(void **p) {", 1)[1].split("}", 1)[0]
    entries = [cap.cmdbuf.kernels[d.kernel].entry for d in cap.cmdbuf.dispatches]
    calls = [line.strip().split("(", 1)[0] for line in body.strip().splitlines()]
    assert calls == entries and len(calls) == cap.n_dispatches
    assert "p[0] +" in src or cap.cmdbuf.arena_bytes == 0  # arena offsets are constants in the source


def test_driver_compiles_once_per_source() -> None:
    cap = capture(small, inputs(0), target="CPU")
    before = cpu.cc_invocations
    again = make_replay(cap.cmdbuf, cap.weights, "CPU")  # same source: the cached object, no compiler run
    assert cpu.cc_invocations == before
    assert again(inputs(2))["y"].tobytes() == cap(inputs(2))["y"].tobytes()


def test_hand_written_kernel_with_a_scalar_argument() -> None:
    rep = Captured.from_cmdbuf(CommandBuffer.from_bytes(scale_cmdbuf(2.5).to_bytes()), {}, "CPU")
    x = np.array([1, -2, 0.5, 4], np.float32)
    np.testing.assert_array_equal(rep(x=x)["y"], x * np.float32(2.5) * np.float32(2.5))
    assert "((union { uint32_t u; float v; }){ .u = (uint32_t)1075838976ULL }).v" in driver_source(
        rep.cmdbuf, rep.replay.slots)  # 2.5f exactly, by its bits
    assert struct.unpack("<f", struct.pack("<I", 1075838976))[0] == 2.5


def test_an_alias_output_is_a_copy_of_its_source_in_every_kind_of_call() -> None:
    rep = make_replay(aliased_cmdbuf(), {}, "CPU")
    x = np.array([1, -2, 0.5, 4], np.float32)
    want = x * np.float32(2.5) * np.float32(2.5)
    for out in (rep(x=x), rep.run({"x": x}, threads=1)):
        assert list(out) == ["y", "h"]
        np.testing.assert_array_equal(out["y"], want)
        np.testing.assert_array_equal(out["h"], want.reshape(2, 2))
        assert not np.shares_memory(out["y"], out["h"])
    assert [t.kernel for t in rep.profile(x=x)] == ["scale", "scale"]


def test_weights_must_match_the_buffer_table() -> None:
    cap = capture(small, inputs(0), target="CPU")
    with pytest.raises(ReplayError, match=r"weight:0: weights expected an entry for id 0, got none"):
        make_replay(cap.cmdbuf, {}, "CPU")
    short = {i: bytes(w)[:-4] for i, w in cap.weights.items()}
    with pytest.raises(ReplayError, match=r"weight:0: nbytes expected 1024, got 1020"):
        make_replay(cap.cmdbuf, short, "CPU")


def test_opencl_kernels_are_refused_by_the_cpu_engine() -> None:
    doc = scale_cmdbuf()
    cl = CommandBuffer(doc.target, tuple(k.__class__(k.name, k.source, k.entry, "OPENCL") for k in doc.kernels),
                       doc.dispatches, doc.buffers, doc.arena_bytes, doc.alignment)
    with pytest.raises(ReplayError, match="kernel scale: target expected one of \\['CPU'\\] for a CPU replay, got "
                                          "OPENCL"):
        make_replay(cl, {}, "CPU")
