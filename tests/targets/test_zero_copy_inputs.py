"""Zero-copy camera input: numpy arrays, bytes, bytearray, memoryview and RawBuffer inputs, read in place where the
engine can and copied (and said so in ``input_modes``) where it cannot. The OpenCL cases run on PoCL (host-unified
memory, 128-byte CL_DEVICE_MEM_BASE_ADDR_ALIGN) and never skip."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from jit import Captured, Tensor, capture
from targets.cl_binding import OpenCLError
from targets.opencl_runtime import OpenCLRuntime
from targets.registry import Device
from targets.replay import InputError, RawBuffer
from targets.replay_opencl import HOST_PTR_BINDINGS, HOST_PTR_MIN_BYTES, OpenCLReplay

FRAME = (384, 256)  # uint8, above HOST_PTR_MIN_BYTES
NBYTES = FRAME[0] * FRAME[1]


def rows(frame: Tensor, tfm: Tensor) -> dict[str, Tensor]:
    return {"rows": frame.float().sum(axis=1) * tfm.sum()}


def expected(frame: np.ndarray, tfm: np.ndarray) -> np.ndarray:
    return frame.astype(np.float32).sum(axis=1) * tfm.sum()


def aligned_frame(seed: int, align: int = 4096, skew: int = 0) -> np.ndarray:
    """A frame at ``skew`` bytes past an ``align``-byte boundary (camera buffers are page aligned)."""
    raw = np.empty(NBYTES + align + skew, np.uint8)
    start = (-raw.ctypes.data) % align + skew
    out = raw[start:start + NBYTES].reshape(FRAME)
    out[:] = np.random.default_rng(seed).integers(0, 256, FRAME, dtype=np.uint8)
    return out


TFM = np.linspace(0.5, 1.5, 9, dtype=np.float32).reshape(3, 3)


@pytest.fixture(scope="module", params=["CPU", pytest.param("OPENCL", marks=pytest.mark.opencl)])
def cap(request: pytest.FixtureRequest) -> Captured:
    return capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target=request.param)


def test_every_kind_of_buffer_gives_the_arrays_result(cap: Captured) -> None:
    frame = aligned_frame(0)
    want = cap(frame=frame, tfm=TFM)["rows"]
    np.testing.assert_allclose(want, expected(frame, TFM), rtol=1e-5)
    kinds = {"bytes": frame.tobytes(), "bytearray": bytearray(frame.tobytes()), "memoryview": memoryview(frame),
             "flat memoryview": memoryview(frame.tobytes()), "RawBuffer": RawBuffer(frame.ctypes.data, NBYTES)}
    for kind, value in kinds.items():
        got = cap(frame=value, tfm=memoryview(TFM))["rows"]
        assert got.tobytes() == want.tobytes(), kind


def test_raw_buffer_is_read_where_it_lies(cap: Captured) -> None:
    frame = aligned_frame(1)
    given = RawBuffer(frame.ctypes.data, NBYTES)
    checked = cap.replay.check_inputs({"frame": given, "tfm": TFM})
    assert checked[0].ctypes.data == frame.ctypes.data  # the engine gets the caller's address, not a copy
    first = cap(frame=given, tfm=TFM)["rows"]
    frame[:] = np.random.default_rng(2).integers(0, 256, FRAME, dtype=np.uint8)  # same address, new picture
    second = cap(frame=given, tfm=TFM)["rows"]
    np.testing.assert_allclose(second, expected(frame, TFM), rtol=1e-5)
    assert first.tobytes() != second.tobytes()
    assert cap.replay.input_modes["frame"] == "in place"


def test_wrong_sizes_and_formats_are_refused(cap: Captured) -> None:
    frame = aligned_frame(3)
    cases = {f"frame: nbytes expected {NBYTES}, got {NBYTES - 1}": {"frame": frame.tobytes()[:-1]},
             f"frame: nbytes expected {NBYTES}, got {NBYTES + 1}": {"frame": RawBuffer(frame.ctypes.data, NBYTES + 1)},
             f"frame: nbytes expected {NBYTES}, got {NBYTES // 2}":
                 {"frame": memoryview(frame.reshape(-1))[:NBYTES // 2]},
             "tfm: dtype expected float32, got memoryview format 'd'": {"tfm": memoryview(TFM.astype(np.float64))},
             "frame: address expected a non-zero int, got 0": {"frame": RawBuffer(0, NBYTES)},
             "frame: strides expected C-contiguous memory, got a memoryview of strides (512, 1)":
                 {"frame": memoryview(np.zeros((384, 512), np.uint8)[:, :256])}}
    for message, override in cases.items():
        with pytest.raises(InputError) as e:
            cap({"frame": frame, "tfm": TFM} | override)
        assert str(e.value) == message


def test_misaligned_untyped_memory_is_copied_and_said_so(cap: Captured) -> None:
    frame = aligned_frame(4)
    raw = bytearray(TFM.nbytes + 8)
    start = (-np.frombuffer(raw, np.uint8).ctypes.data) % 4 + 1  # one byte past a 4-byte boundary
    raw[start:start + TFM.nbytes] = TFM.tobytes()
    odd = memoryview(raw)[start:start + TFM.nbytes]
    got = cap(frame=frame, tfm=odd)["rows"]
    assert got.tobytes() == cap(frame=frame, tfm=TFM)["rows"].tobytes()
    cap(frame=frame, tfm=odd)
    assert cap.replay.input_modes["tfm"] == "copied: address not 4-byte aligned (address % 4 == 1)"


def test_cpu_reads_aligned_and_uint8_inputs_in_place() -> None:
    cpu = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="CPU")
    odd_frame = aligned_frame(5, skew=1)  # uint8 needs no alignment: the kernels read bytes
    cpu(frame=odd_frame, tfm=TFM)
    assert cpu.replay.input_modes == {"frame": "in place", "tfm": "in place"}
    cpu(frame=odd_frame.tobytes(), tfm=TFM.tobytes())
    assert cpu.replay.input_modes["frame"] == "in place"


FIRST_CALL = "copied: first call at this address (bound in place when it recurs)"
TFM_MODE = f"copied: 36 bytes, below HOST_PTR_MIN_BYTES = {HOST_PTR_MIN_BYTES}"


@pytest.mark.opencl
@pytest.mark.parametrize("use_command_buffer", [True, False])
def test_opencl_binds_aligned_inputs_in_place_and_copies_the_rest(use_command_buffer: bool) -> None:
    cap = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="OPENCL")
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, Device.runtime("OPENCL"), use_command_buffer=use_command_buffer)
    align = Device.runtime("OPENCL").info.base_addr_align_bytes
    assert Device.runtime("OPENCL").info.host_unified_memory and align == 128
    aligned, odd = aligned_frame(6), aligned_frame(7, skew=align // 2)
    odd_mode = f"copied: address not {align}-byte aligned (CL_DEVICE_MEM_BASE_ADDR_ALIGN; address % {align} == " \
               f"{align // 2})"
    # a recording is made for addresses that recur: the first call at them copies (an enqueue loop binds at once)
    modes = [FIRST_CALL if use_command_buffer else "in place", "in place", "in place"]
    for mode in modes:  # in place and copied calls interleaved: each runs with its own buffers
        np.testing.assert_allclose(rep(frame=aligned, tfm=TFM)["rows"], expected(aligned, TFM), rtol=1e-5)
        assert rep.input_modes == {"frame": mode, "tfm": TFM_MODE}
        np.testing.assert_allclose(rep(frame=odd, tfm=TFM)["rows"], expected(odd, TFM), rtol=1e-5)
        assert rep.input_modes == {"frame": odd_mode, "tfm": TFM_MODE}
    aligned[:] = odd[::-1]  # the same address with new contents: the bound buffer must see them
    np.testing.assert_allclose(rep(frame=aligned, tfm=TFM)["rows"], expected(aligned, TFM), rtol=1e-5)
    np.testing.assert_allclose(rep(frame=RawBuffer(aligned.ctypes.data, NBYTES), tfm=TFM)["rows"],
                               expected(aligned, TFM), rtol=1e-5)
    assert rep.input_modes["frame"] == "in place"
    times = rep.profile(frame=odd, tfm=TFM)  # a profile runs with the copied input's buffers too
    assert len(times) == rep.n_dispatches
    np.testing.assert_allclose(rep(frame=odd, tfm=TFM)["rows"], expected(odd, TFM), rtol=1e-5)


@pytest.mark.opencl
@pytest.mark.parametrize("use_command_buffer", [True, False])
def test_opencl_keeps_a_bounded_set_of_host_pointer_bindings(use_command_buffer: bool) -> None:
    cap = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="OPENCL")
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, Device.runtime("OPENCL"), use_command_buffer=use_command_buffer)
    frames = [aligned_frame(10 + i) for i in range(HOST_PTR_BINDINGS + 3)]
    seen = []
    for _ in range(3):  # more addresses than bindings kept: each is released and made again, results stay right
        for f in frames:
            np.testing.assert_allclose(rep(frame=f, tfm=TFM)["rows"], expected(f, TFM), rtol=1e-5)
            seen.append(rep.input_modes["frame"])
    assert set(seen) == ({"in place", FIRST_CALL} if use_command_buffer else {"in place"})
    assert seen[len(frames):2 * len(frames)] == ["in place"] * len(frames)  # the second round binds every one
    times = rep.profile(frame=frames[0], tfm=TFM)
    assert len(times) == rep.n_dispatches
    np.testing.assert_allclose(rep(frame=frames[1], tfm=TFM)["rows"], expected(frames[1], TFM), rtol=1e-5)


@pytest.mark.opencl
@pytest.mark.usefixtures("no_chains")  # rows' kernels as dispatches of their own, recorded: not one chain, enqueued
def test_opencl_copies_frames_at_addresses_that_never_recur() -> None:
    cap = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="OPENCL")
    assert cap.replay.mode == "command_buffer"
    frames = [aligned_frame(30 + seed) for seed in range(4)]  # all alive: four distinct addresses
    for f in frames:  # a new frame each call: nothing recorded for it, copied, right
        np.testing.assert_allclose(cap(frame=f, tfm=TFM)["rows"], expected(f, TFM), rtol=1e-5)
        assert cap.replay.input_modes["frame"] == FIRST_CALL


@pytest.mark.opencl
def test_opencl_copies_where_the_device_reports_no_host_unified_memory() -> None:
    cap = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="OPENCL")
    discrete = OpenCLRuntime("OPENCL")  # PoCL, described as a device with memory of its own
    discrete.info = dataclasses.replace(discrete.info, host_unified_memory=False)
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, discrete)
    frame = aligned_frame(40)
    for _ in range(2):
        np.testing.assert_allclose(rep(frame=frame, tfm=TFM)["rows"], expected(frame, TFM), rtol=1e-5)
        assert rep.input_modes["frame"] == f"copied: {discrete.info.name} reports no CL_DEVICE_HOST_UNIFIED_MEMORY"


class _CountingLib:
    """libOpenCL as a replay sees it, counting the entry points a call looks up."""

    def __init__(self, lib: object) -> None:
        self.lib, self.calls = lib, Counter()

    def __getattr__(self, name: str) -> object:
        self.calls[name] += 1
        return getattr(self.lib, name)


@pytest.mark.opencl
@pytest.mark.parametrize("svm", [True, False])
@pytest.mark.parametrize("use_command_buffer", [True, False])
def test_opencl_small_inputs_and_outputs_move_without_commands_in_fine_grained_svm(svm: bool,
                                                                                  use_command_buffer: bool) -> None:
    cap = capture(rows, {"frame": np.zeros(FRAME, np.uint8), "tfm": TFM}, target="OPENCL")
    runtime = Device.runtime("OPENCL")
    assert runtime.info.svm_fine_grain_buffer  # PoCL's CPU device: OpenCL 3.0 with fine-grained buffer SVM
    if not svm:  # the same device described as one without it: writes and reads as before
        runtime = OpenCLRuntime("OPENCL")
        runtime.info = dataclasses.replace(runtime.info, svm_fine_grain_buffer=False)
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, runtime, use_command_buffer=use_command_buffer)
    frame = aligned_frame(50)
    rep(frame=frame, tfm=TFM)  # the frame's address recurs from here on: bound in place
    rep.lib = counting = _CountingLib(rep.lib)
    results = []
    for scale in (1.0, -2.0, 0.5):  # new tfm contents every call
        results.append(rep(frame=frame, tfm=TFM * scale)["rows"])
        np.testing.assert_allclose(results[-1], expected(frame, TFM * scale), rtol=1e-5)
        assert rep.input_modes == {"frame": "in place", "tfm": TFM_MODE}
    np.testing.assert_allclose(results[0], expected(frame, TFM), rtol=1e-5)  # outputs are the caller's own arrays
    transfers = counting.calls["clEnqueueWriteBuffer"] + counting.calls["clEnqueueReadBuffer"]
    assert transfers == (0 if svm else 3 * 2)


@pytest.mark.opencl
def test_opencl_shared_memory_is_refused_on_a_device_without_fine_grained_svm() -> None:
    runtime = OpenCLRuntime("OPENCL")
    buf, memory = runtime.allocate_shared(64)
    assert buf.nbytes == 64 and memory != runtime.ffi.NULL
    runtime.info = dataclasses.replace(runtime.info, svm_fine_grain_buffer=False)
    with pytest.raises(OpenCLError, match=r"^clSVMAlloc: a device with CL_DEVICE_SVM_FINE_GRAIN_BUFFER expected, got "):
        runtime.allocate_shared(64)


def scaled(tfm: Tensor, bias: Tensor) -> dict[str, Tensor]:
    return {"out": tfm * 2.0 + bias.sum()}


@pytest.mark.opencl
@pytest.mark.parametrize("use_command_buffer", [True, False])
def test_opencl_with_only_small_inputs_copies_each_call_and_says_why(use_command_buffer: bool) -> None:
    """No input may be bound in place (every one below HOST_PTR_MIN_BYTES): each call copies every input, whatever
    kind of memory it lies in, and ``input_modes`` gives the reason for each."""
    bias = np.arange(4, dtype=np.float32)
    cap = capture(scaled, {"tfm": TFM, "bias": bias}, target="OPENCL")
    rep = OpenCLReplay(cap.cmdbuf, cap.weights, Device.runtime("OPENCL"), use_command_buffer=use_command_buffer)
    bias_mode = f"copied: 16 bytes, below HOST_PTR_MIN_BYTES = {HOST_PTR_MIN_BYTES}"
    raw = bytearray(TFM.nbytes + 8)
    start = (-np.frombuffer(raw, np.uint8).ctypes.data) % 4 + 1
    for seed in range(3):  # new values each call, in the same arrays: nothing of an earlier call is read again
        tfm = np.random.default_rng(seed).standard_normal((3, 3)).astype(np.float32)
        bias[:] = seed
        np.testing.assert_allclose(rep(tfm=tfm, bias=bias)["out"], tfm * 2 + bias.sum(), rtol=1e-6)
        assert rep.input_modes == {"tfm": TFM_MODE, "bias": bias_mode}
        raw[start:start + TFM.nbytes] = tfm.tobytes()
        got = rep(tfm=memoryview(raw)[start:start + TFM.nbytes], bias=RawBuffer(bias.ctypes.data, bias.nbytes))
        np.testing.assert_allclose(got["out"], tfm * 2 + bias.sum(), rtol=1e-6)
        assert rep.input_modes == {"tfm": "copied: address not 4-byte aligned (address % 4 == 1)", "bias": bias_mode}
