"""OpenCL replay on PoCL: recorded cl_khr_command_buffer vs enqueue loop, 1,000 bit-identical replays, states,
scalar arguments, the QCOM profile. These tests never skip: a machine without an OpenCL device fails them."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from jit import Captured, Tensor, capture
from targets.cl_binding import (
    CL_DEVICE_TYPE_GPU,
    CL_MEM_FLAGS,
    CL_MEM_HOST_PTR,
    CL_MEM_USE_HOST_PTR,
    COMMAND_BUFFER_EXT,
    check,
)
from targets.cmdbuf import BufferSpec, CommandBuffer, Dispatch, KernelSpec, Scalar
from targets.host_memory import HUGE_PAGE_BYTES, huge_page_array
from targets.opencl_runtime import OpenCLError, OpenCLRuntime
from targets.registry import Device
from targets.replay import InputError, make_replay
from targets.replay_opencl import OpenCLReplay, khr_functions
from tests.capture.test_capture import shift_history
from tests.helpers import mapping_flags
from tests.targets.test_replay_cpu import inputs, small

pytestmark = pytest.mark.opencl


def as_bytes(out: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in out.items()}


@pytest.fixture(scope="module")
def cap() -> Captured:
    """``small``'s kernels, each a dispatch of its own (on a CPU device they would run as one team)."""
    target = Device["OPENCL"]
    limits = target.chain_limits, target.team_limits
    target.chain_limits = target.team_limits = None
    try:
        return capture(small, inputs(0), target="OPENCL")
    finally:
        target.chain_limits, target.team_limits = limits


def test_pocl_offers_command_buffers_and_replay_records_one(cap: Captured) -> None:
    target = Device["OPENCL"]
    assert COMMAND_BUFFER_EXT in target.info.extensions
    assert set(khr_functions(target.platform_id)) >= {"clCreateCommandBufferKHR", "clEnqueueCommandBufferKHR"}
    assert isinstance(cap.replay, OpenCLReplay) and cap.replay.mode == "command_buffer"


def test_thousand_command_buffer_replays_are_bit_identical_to_eager(cap: Captured) -> None:
    eager = {k: v.numpy().tobytes() for k, v in small(Tensor(inputs(0)["x"], device="OPENCL")).items()}
    x = inputs(0)
    for _ in range(1000):
        assert as_bytes(cap(x)) == eager
    other = as_bytes(cap(inputs(1)))
    assert all(other[k] != eager[k] for k in eager)


@pytest.mark.parametrize("simultaneous_use", [True, False])
def test_a_command_buffer_is_enqueued_again_while_its_last_enqueue_is_pending(cap: Captured,
                                                                              simultaneous_use: bool) -> None:
    """Regression: PoCL returns a command buffer to executable from a completion callback that may run after the
    clFinish waiting for it returned, and the next call's enqueue failed with CL_INVALID_OPERATION (once in CI). Two
    enqueues with no wait between them hold that window open: the buffer is recorded for simultaneous use where the
    device offers it, and a device without it has the second enqueue wait for the first."""
    runtime = OpenCLRuntime("OPENCL")
    assert runtime.info.command_buffer_simultaneous_use  # PoCL's CPU device offers it
    runtime.info = dataclasses.replace(runtime.info, command_buffer_simultaneous_use=simultaneous_use)
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, runtime, use_command_buffer=True)
    arrays, _ = rep.checked_inputs(inputs(1))
    want = [v.tobytes() for v in cap(inputs(1)).values()]
    for _ in range(20):  # a call's two halves, the enqueue twice: no public call leaves a recording pending
        rep._submit(arrays)
        rep._submit(arrays)
        assert [a.tobytes() for a in rep._read_outputs()] == want


def test_a_single_launch_is_enqueued_directly_unless_a_recording_is_asked_for() -> None:
    x = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    one = capture(lambda x: {"y": x * 2.0 + 1.0}, x, target="OPENCL")
    assert one.n_dispatches == 1 and isinstance(one.replay, OpenCLReplay)
    assert one.replay.mode == "enqueue_loop" and one.replay.mode_reason.startswith("one launch: enqueued directly")
    recorded = OpenCLReplay(one.cmdbuf, one.weights, Device["OPENCL"], use_command_buffer=True)
    assert recorded.mode == "command_buffer"
    for _ in range(3):
        assert as_bytes(recorded(x)) == as_bytes(one(x)) == {"y": (x["x"] * 2.0 + 1.0).tobytes()}


def test_enqueue_loop_matches_the_command_buffer(cap: Captured) -> None:
    loop = OpenCLReplay(cap.cmdbuf, cap.weights, Device["OPENCL"], use_command_buffer=False)
    assert loop.mode == "enqueue_loop"
    for seed in range(3):
        assert as_bytes(loop(inputs(seed))) == as_bytes(cap(inputs(seed)))


def test_profile_and_enqueue_timing(cap: Captured) -> None:
    times = cap.profile(inputs(0))
    assert len(times) == cap.n_dispatches and all(t.seconds >= 0 for t in times)
    enqueue, done = cap.replay.time_enqueue(inputs(0))
    assert 0 <= enqueue <= done


def test_timeline_gives_each_dispatch_its_span_on_one_clock_in_order(cap: Captured) -> None:
    spans = cap.replay.timeline(inputs(1))
    names = [cap.cmdbuf.kernels[d.kernel].name for d in cap.cmdbuf.dispatches]
    assert len(spans) >= 2 and [s.kernel for s in spans] == [names[s.index] for s in spans]
    assert [s.index for s in spans] == sorted({s.index for s in spans})
    assert spans[0].start == 0.0
    for one, after in zip(spans, spans[1:], strict=False):  # one in-order queue: a span ends before the next starts
        assert one.start <= one.end <= after.start
    assert spans[-1].end < 10.0  # seconds, not the device clock's nanoseconds
    assert as_bytes(cap(inputs(2))) != as_bytes(cap(inputs(1)))  # the replay still computes after it
    with pytest.raises(InputError, match="x"):
        cap.replay.timeline({"x": np.zeros((3, 16), np.float32)})


def test_state_ring_buffer_on_opencl() -> None:
    init = np.arange(15, dtype=np.float32).reshape(5, 3)
    gpu = capture(shift_history, {"x": np.zeros(3, np.float32)}, target="OPENCL", state={"history": init})
    host = capture(shift_history, {"x": np.zeros(3, np.float32)}, target="CPU", state={"history": init})
    for step in range(6):
        x = np.full(3, step - 2.5, np.float32)
        assert as_bytes(gpu(x=x)) == as_bytes(host(x=x))
        np.testing.assert_array_equal(gpu.read_state("history"), host.read_state("history"))
    gpu.reset_state()
    np.testing.assert_array_equal(gpu.read_state("history"), init)


def test_hand_written_kernel_with_a_scalar_argument_from_bytes() -> None:
    src = "__kernel void scale(__global float* data0, __global const float* data1, float s) {\n" \
          "  int i = get_global_id(0); data0[i] = data1[i] * s;\n}\n"
    bits = struct.unpack("<I", struct.pack("<f", -1.5))[0]
    target = Device["OPENCL"]
    cb = CommandBuffer(
        target="OPENCL", kernels=(KernelSpec("scale", src, "scale", "OPENCL", target.build_options),),
        dispatches=(Dispatch(0, (4,), (2,), ("arena:0+16", "input:x"), (Scalar("float32", bits),)),
                    Dispatch(0, (4,), None, ("output:y", "arena:0+16"), (Scalar("float32", bits),))),
        buffers=(BufferSpec("input:x", "float32", (4,), 16), BufferSpec("output:y", "float32", (4,), 16),
                 BufferSpec("arena:0+16", "uint8", (16,), 16)), arena_bytes=128, alignment=128)
    rep = make_replay(CommandBuffer.from_bytes(cb.to_bytes()), {}, target)
    x = np.array([1, 2, -3, 0.25], np.float32)
    np.testing.assert_array_equal(rep(x=x)["y"], x * np.float32(2.25))


def test_qcom_profile_replays_through_the_opencl_engine() -> None:
    qcom = capture(small, inputs(0), target="QCOM")
    assert isinstance(qcom.replay, OpenCLReplay) and qcom.cmdbuf.alignment == 128
    eager = {k: v.numpy().tobytes() for k, v in small(Tensor(inputs(2)["x"], device="QCOM")).items()}
    assert as_bytes(qcom(inputs(2))) == eager


def host_memory_of(target: OpenCLRuntime, handle: object) -> int:
    """The host memory a buffer is stored in (CL_MEM_HOST_PTR) where it was made with CL_MEM_USE_HOST_PTR, else 0."""
    ffi, lib = target.ffi, target.lib
    flags, ptr = ffi.new("cl_bitfield*"), ffi.new("void**")
    check("clGetMemObjectInfo", lib.clGetMemObjectInfo(handle, CL_MEM_FLAGS, ffi.sizeof("cl_bitfield"), flags,
                                                          ffi.NULL))
    check("clGetMemObjectInfo", lib.clGetMemObjectInfo(handle, CL_MEM_HOST_PTR, ffi.sizeof("void*"), ptr, ffi.NULL))
    return int(ffi.cast("uintptr_t", ptr[0])) if flags[0] & CL_MEM_USE_HOST_PTR else 0


def test_a_cpu_device_reads_the_weights_and_arena_where_the_host_put_them_on_huge_pages(cap: Captured) -> None:
    target = Device["OPENCL"]
    assert target.host_pages  # PoCL: a CPU device with host-unified memory
    replay = cap.replay
    for b in cap.cmdbuf.weights:  # the capture's packed weights themselves: no copy
        assert host_memory_of(target, replay._buffers[b.binding].handle) == cap.weights[int(b.name)].ctypes.data  # noqa: SLF001
    arena = host_memory_of(target, replay._arena.handle)  # noqa: SLF001 - the buffer every dispatch's sub-buffer is in
    assert arena % HUGE_PAGE_BYTES == 0  # a huge_page_array (advised from a huge page on: this one is smaller)
    assert ("hg" in mapping_flags(arena)) == (cap.cmdbuf.arena_bytes >= HUGE_PAGE_BYTES)


def test_weights_off_the_device_alignment_are_copied_together_and_replay_alike(cap: Captured) -> None:
    target = Device["OPENCL"]
    shifted = {}
    for wid, w in cap.weights.items():  # each one byte past an aligned start
        raw = np.empty(w.nbytes + 1 + target.info.base_addr_align_bytes, np.uint8)
        start = (-raw.ctypes.data) % target.info.base_addr_align_bytes + 1
        shifted[wid] = raw[start:start + w.nbytes]
        shifted[wid][:] = w
    replay = OpenCLReplay(cap.cmdbuf, shifted, target)
    for b in cap.cmdbuf.weights:
        address = host_memory_of(target, replay._buffers[b.binding].handle)  # noqa: SLF001
        assert address % target.info.base_addr_align_bytes == 0 and address != shifted[int(b.name)].ctypes.data
    for seed in range(2):
        assert as_bytes(replay(inputs(seed))) == as_bytes(cap(inputs(seed)))


def test_host_memory_is_refused_off_a_cpu_device_or_the_base_alignment(cap: Captured) -> None:
    target = OpenCLRuntime()
    with pytest.raises(ValueError, match="allocate_host: expected a contiguous, non-empty array at a multiple of"):
        target.allocate_host(np.zeros(600, np.uint8)[1:])
    target.info = dataclasses.replace(target.info, device_type=CL_DEVICE_TYPE_GPU)
    assert not target.host_pages
    with pytest.raises(OpenCLError, match="a CPU device with CL_DEVICE_HOST_UNIFIED_MEMORY expected"):
        target.allocate_host(huge_page_array(256))
    replay = OpenCLReplay(cap.cmdbuf, cap.weights, target)  # a GPU's buffers: its own memory, the weights copied in
    assert all(host_memory_of(target, replay._buffers[b.binding].handle) == 0 for b in cap.cmdbuf.weights)  # noqa: SLF001
    assert as_bytes(replay(inputs(1))) == as_bytes(cap(inputs(1)))
