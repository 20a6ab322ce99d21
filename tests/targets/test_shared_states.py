"""Two captured functions sharing device state (the modeld ``run`` and ``prepare`` share the frame queues): one
buffer bound by both replays, updates of each seen by the other, mismatched specs and devices refused, one lock.
The OpenCL cases run on PoCL and never skip: a machine without an OpenCL device fails them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from jit import Captured, Tensor, capture
from targets.cl_binding import libopencl
from targets.opencl_runtime import OpenCLRuntime
from targets.registry import Device
from targets.replay import Replay, ReplayError, make_replay
from targets.replay_opencl import OpenCLReplay
from tests.capture.test_capture import shift_history

TARGETS = ["CPU", pytest.param("OPENCL", marks=pytest.mark.opencl)]
INIT = np.arange(15, dtype=np.float32).reshape(5, 3)


def bump(y: Tensor, history: Tensor, count: Tensor) -> dict[str, Tensor]:
    """Adds ``y`` to every row of the shared history; ``count`` is a state only this function has."""
    return {"history": history + y.reshape(1, 3), "count": count + 1.0, "total": history.sum(0) + count}


def captured_pair(target: str, history: np.ndarray = INIT) -> tuple[Captured, Captured]:
    a = capture(shift_history, {"x": np.zeros(3, np.float32)}, target=target, state={"history": INIT})
    b = capture(bump, {"y": np.zeros(3, np.float32)}, target=target,
                state={"history": history, "count": np.zeros(3, np.float32)})
    return a, b


@pytest.fixture(scope="module", params=TARGETS)
def pair(request: pytest.FixtureRequest) -> tuple[Captured, Replay]:
    a, b = captured_pair(request.param)
    return a, make_replay(b.cmdbuf, b.weights, request.param, share_states_with=a.replay)


def test_calls_of_either_see_the_others_updates(pair: tuple[Captured, Replay]) -> None:
    a, b = pair
    a.reset_state()
    b.reset_state()
    hist, count = INIT.copy(), np.zeros(3, np.float32)
    weights = np.arange(1, 6, dtype=np.float32).reshape(5, 1)
    for step in range(4):  # A, B, A, B, ...: each call reads what the other one wrote last
        x = np.full(3, step + 100, np.float32)
        np.testing.assert_array_equal(a(x=x)["weighted"], (hist * weights).sum(0))
        hist = np.concatenate([hist[1:], x.reshape(1, 3)])
        y = np.full(3, step + 0.5, np.float32)
        np.testing.assert_array_equal(b(y=y)["total"], hist.sum(0) + count)
        hist, count = hist + y, count + 1
        np.testing.assert_array_equal(a.read_state("history"), hist)
        np.testing.assert_array_equal(b.read_state("history"), hist)
    np.testing.assert_array_equal(b.read_state("count"), count)


def test_one_buffer_and_one_lock(pair: tuple[Captured, Replay]) -> None:
    a, b = pair
    assert b.shared_states == frozenset({"history"}) and a.replay.shared_states == frozenset()
    handle = a.replay.state_handle("history")
    assert b.state_handle("history") == handle and b.state_handle("count") != handle
    for _ in range(3):  # the buffer the kernels bind never moves: no call copies the state anywhere
        a(x=np.ones(3, np.float32))
        b(y=np.ones(3, np.float32))
        assert a.replay.state_handle("history") == b.state_handle("history") == handle
    assert b.lock is a.replay.lock
    if isinstance(b, OpenCLReplay):  # the kernels' cl_mem arguments are the shared object itself
        ffi, _ = libopencl()
        assert handle == int(ffi.cast("uintptr_t", a.replay.state_buffer("history").handle))


def test_reset_through_either_resets_the_shared_buffer(pair: tuple[Captured, Replay]) -> None:
    a, b = pair
    b(y=np.ones(3, np.float32))
    b.reset_state()
    np.testing.assert_array_equal(a.read_state("history"), INIT)
    a(x=np.ones(3, np.float32))
    a.reset_state()
    np.testing.assert_array_equal(b.read_state("history"), INIT)


@pytest.mark.parametrize("target", TARGETS)
def test_building_a_sharer_leaves_the_shared_state_as_it_is(target: str) -> None:
    a, b = captured_pair(target)
    a(x=np.full(3, 7, np.float32))
    before = a.read_state("history")
    assert not np.array_equal(before, INIT)
    other = make_replay(b.cmdbuf, b.weights, target, share_states_with=a.replay)
    np.testing.assert_array_equal(other.read_state("history"), before)
    np.testing.assert_array_equal(other.read_state("count"), np.zeros(3, np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_mismatched_state_specs_are_refused(target: str) -> None:
    a = capture(shift_history, {"x": np.zeros(3, np.float32)}, target=target, state={"history": INIT})
    cases = {"shape expected (5, 3) (the shared replay's), got (4, 3)": np.zeros((4, 3), np.float32),
             "dtype expected float32 (the shared replay's), got int32": np.zeros((5, 3), np.int32),
             "init expected the shared replay's initial bytes, got other bytes": INIT + 1}
    for message, history in cases.items():
        b = capture(bump, {"y": np.zeros(3, history.dtype)}, target=target,
                    state={"history": history, "count": np.zeros(3, np.float32)})
        with pytest.raises(ReplayError) as e:
            make_replay(b.cmdbuf, b.weights, target, share_states_with=a.replay)
        assert str(e.value) == f"state history: {message}"


def test_another_engine_is_refused() -> None:
    a_cpu, _ = captured_pair("CPU")
    _, b_cl = captured_pair("OPENCL")
    with pytest.raises(ReplayError, match=r"^share_states_with: device expected engine OpenCLReplay on OPENCL, got "
                                          r"CPUReplay on CPU$"):
        make_replay(b_cl.cmdbuf, b_cl.weights, "OPENCL", share_states_with=a_cpu.replay)
    with pytest.raises(ReplayError, match=r"^share_states_with: expected a Replay, got Captured$"):
        make_replay(b_cl.cmdbuf, b_cl.weights, "OPENCL", share_states_with=a_cpu)  # type: ignore[arg-type]


@pytest.mark.opencl
def test_another_opencl_context_is_refused() -> None:
    a, b = captured_pair("OPENCL")
    elsewhere = OpenCLRuntime("OPENCL")  # the same device, its own context and queue
    assert elsewhere.context != Device.runtime("OPENCL").context
    with pytest.raises(ReplayError, match=r"^share_states_with: device expected the OpenCL context and queue of "):
        make_replay(b.cmdbuf, b.weights, elsewhere, share_states_with=a.replay)


@pytest.mark.opencl
def test_an_enqueue_loop_binds_the_shared_buffers_too() -> None:
    a, b = captured_pair("OPENCL")
    loop = OpenCLReplay(b.cmdbuf, b.weights, Device.runtime("OPENCL"), use_command_buffer=False,
                        share_states_with=a.replay)
    assert loop.mode == "enqueue_loop" and loop.state_handle("history") == a.replay.state_handle("history")
    a(x=np.full(3, 2, np.float32))
    loop(y=np.full(3, 1, np.float32))
    want = np.concatenate([INIT[1:], np.full((1, 3), 2, np.float32)]) + 1
    np.testing.assert_array_equal(a.read_state("history"), want)


def test_a_forked_child_keeps_one_lock_for_sharing_replays() -> None:
    a, b = captured_pair("CPU")
    other = make_replay(b.cmdbuf, b.weights, "CPU", share_states_with=a.replay)
    pid = os.fork()
    if pid == 0:  # the child: fresh locks, still one for both, and both still usable
        ok = other.lock is a.replay.lock and not other.lock.locked()
        ok = ok and a(x=np.ones(3, np.float32))["weighted"].shape == (3,)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
