"""OpenCL replay: a command buffer recorded once with cl_khr_command_buffer, else an enqueue loop.

Every buffer is created once: inputs, outputs, weights (written once), states, and the arena (one cl_mem, each
arena binding a sub-buffer of it). Every dispatch gets its own cl_kernel with all arguments set up front, so
nothing is set per call. Where the device offers ``cl_khr_command_buffer`` (PoCL does), all dispatches are
recorded once into a command buffer (entry points fetched with clGetExtensionFunctionAddressForPlatform, their
types declared by the one libOpenCL binding, targets/cl_binding.py) and a replay is: write the inputs into the
buffers the recording uses (there is no mutable dispatch to rebind them), one ``clEnqueueCommandBufferKHR``,
read each output straight into a fresh numpy array, ``clFinish``. Without
the extension the same dispatches are enqueued one by one; ``mode`` (``command_buffer`` / ``enqueue_loop``) and
``mode_reason`` say which and why, and verify and replay print them. A recording that fails is an error, never a
quiet fallback. Every call finishes before it returns, so the
command buffer (recorded without simultaneous use) is never pending when it is enqueued again.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from jit.common.helpers import prod
from targets.base import Buffer, Program, Runtime
from targets.cl_binding import (
    CL_BUFFER_CREATE_TYPE_REGION,
    CL_FALSE,
    CL_MEM_READ_WRITE,
    CL_PROFILING_COMMAND_END,
    CL_PROFILING_COMMAND_START,
    COMMAND_BUFFER_EXT,
    OpenCLError,
    check,
    checked_create,
    libopencl,
)
from targets.cmdbuf import BufferSpec, CommandBuffer, dtype_itemsize, parse_arena
from targets.opencl_runtime import OpenCLRuntime
from targets.replay import Replay, ReplayError
from targets.source_check import OPENCL, check_kernels

_KHR_FUNCTIONS = ("clCreateCommandBufferKHR", "clCommandNDRangeKernelKHR", "clFinalizeCommandBufferKHR",
                  "clEnqueueCommandBufferKHR", "clReleaseCommandBufferKHR")


def khr_functions(platform: Any) -> dict[str, Any]:
    """The cl_khr_command_buffer entry points of ``platform``; ReplayError naming one the driver lacks."""
    ffi, lib = libopencl()
    out = {}
    for name in _KHR_FUNCTIONS:
        address = lib.clGetExtensionFunctionAddressForPlatform(platform, name.encode())
        if address == ffi.NULL:
            raise ReplayError(f"{COMMAND_BUFFER_EXT}: entry point {name} expected from the platform, got NULL")
        out[name] = ffi.cast(f"{name}_fn", address)
    return out


def _release_kernels(lib: Any, kernels: list[Any]) -> None:
    for k in kernels:
        lib.clReleaseKernel(k)


def _release_command_buffer(release: Any, cb: Any) -> None:
    release(cb)


def _release_mems(lib: Any, mems: list[Any]) -> None:
    for m in mems:
        lib.clReleaseMemObject(m)


class OpenCLReplay(Replay):
    """A command buffer of OpenCL C kernels on one OpenCL device (the QCOM profile included)."""

    languages = ("OPENCL", "QCOM")

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime,
                 use_command_buffer: bool | None = None) -> None:
        super().__init__(cmdbuf, weights, target)
        assert isinstance(target, OpenCLRuntime)  # ENGINES maps only OpenCLRuntime and its subclasses here
        # package text never steers the driver's compiler: build options are the target's, sources the renderer's
        check_kernels(cmdbuf, OPENCL, {target.build_options})
        self.cl = target
        self.ffi, self.lib = libopencl()
        device_align = target.info.base_addr_align_bytes
        if cmdbuf.arena_bytes and cmdbuf.alignment % max(device_align, 1):
            raise ReplayError(f"cmdbuf.alignment: expected a multiple of the device's {device_align} bytes "
                              f"(sub-buffer origins), got {cmdbuf.alignment}")
        self._programs = target.compile_many([(k.entry, k.source, {"global_size": (1,)}) for k in cmdbuf.kernels])
        self._mems: dict[str, Any] = {}
        self._buffers: dict[str, Buffer] = {}
        self._allocate()
        self._kernels = self._make_kernels()
        self.mode = "command_buffer" if use_command_buffer is not False and self.has_command_buffer() else \
            "enqueue_loop"
        self.mode_reason = self._mode_reason(use_command_buffer)
        if use_command_buffer and self.mode != "command_buffer":
            raise ReplayError(f"use_command_buffer: expected a device offering {COMMAND_BUFFER_EXT}, got "
                              f"{target.info.name} without it")
        self._launches = [self._launch_args(i) for i in range(self.n_dispatches)]
        self._command_buffer = self._record() if self.mode == "command_buffer" else None
        self._in = [(self._mems[b.binding], b.nbytes) for b in cmdbuf.inputs]
        self._out = [(self._mems[b.binding], b.nbytes) for b in cmdbuf.outputs]
        self._queue1 = self.ffi.new("cl_command_queue[1]", [target.queue])
        self.reset_state()

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        return str(getattr(target, "build_options", ""))

    def has_command_buffer(self) -> bool:
        return COMMAND_BUFFER_EXT in self.cl.info.extensions

    def _mode_reason(self, use_command_buffer: bool | None) -> str:
        """Why ``mode`` is what it is (verify and replay print it: the enqueue-loop fallback is never silent)."""
        if self.mode == "command_buffer":
            return f"{COMMAND_BUFFER_EXT} on {self.cl.info.name}: every dispatch recorded once"
        if use_command_buffer is False:
            return "use_command_buffer=False: dispatches enqueued one by one"
        return f"fallback: {self.cl.info.name} lacks {COMMAND_BUFFER_EXT}, dispatches enqueued one by one"

    # --- setup ---------------------------------------------------------------------------------------------
    def _allocate(self) -> None:
        cb, t = self.cmdbuf, self.cl
        for b in cb.buffers:
            if b.image is not None:  # read-only: created holding its bytes
                self._buffers[b.binding] = t.allocate_image(*b.image, memoryview(self.weights[int(b.name)]))
            elif b.kind in ("input", "output", "state", "weight"):
                self._buffers[b.binding] = t.allocate(b.nbytes)
                if b.kind == "weight" and b.nbytes:
                    t.copyin(self._buffers[b.binding], memoryview(self.weights[int(b.name)]))
            else:
                continue
            self._mems[b.binding] = self._buffers[b.binding].handle
        self._arena = t.allocate(cb.arena_bytes)
        subs = []
        for b in cb.of_kind("arena"):
            off, size = parse_arena(b.binding)
            region = self.ffi.new("size_t[2]", [off, size])
            sub = checked_create(f"clCreateSubBuffer({b.binding})", self.lib.clCreateSubBuffer, self._arena.handle,
                                 CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region)
            self._mems[b.binding] = sub
            subs.append(sub)
        weakref.finalize(self, _release_mems, self.lib, subs).atexit = False

    def _make_kernels(self) -> list[Any]:
        """One cl_kernel per dispatch, every argument set now (a kernel object keeps its arguments)."""
        ffi, lib = self.ffi, self.lib
        made: list[Any] = []
        weakref.finalize(self, _release_kernels, lib, made).atexit = False
        for i, d in enumerate(self.cmdbuf.dispatches):
            spec = self.cmdbuf.kernels[d.kernel]
            program = self._programs[d.kernel].handle.program
            k = checked_create(f"clCreateKernel({spec.entry})", lib.clCreateKernel, program, spec.entry.encode())
            made.append(k)
            for arg, binding in enumerate(d.bindings):
                check(f"dispatches[{i}] clSetKernelArg({spec.entry}, {arg})",
                      lib.clSetKernelArg(k, arg, ffi.sizeof("cl_mem"), ffi.new("cl_mem*", self._mems[binding])))
            for j, s in enumerate(d.scalars):
                raw = _scalar_bytes(s.dtype, s.bits)
                check(f"dispatches[{i}] clSetKernelArg({spec.entry}, {len(d.bindings) + j})",
                      lib.clSetKernelArg(k, len(d.bindings) + j, len(raw), ffi.from_buffer(raw)))
        return made

    def _launch_args(self, i: int) -> tuple[Any, int, Any, Any] | None:
        """(kernel, dims, global size, local size or NULL) of dispatch ``i``; None when it has no work items."""
        d = self.cmdbuf.dispatches[i]
        if prod(d.global_size) == 0:
            return None
        local = self.ffi.new("size_t[]", d.local_size) if d.local_size else self.ffi.NULL
        return self._kernels[i], len(d.global_size), self.ffi.new("size_t[]", d.global_size), local

    def _record(self) -> Any:
        ffi, khr = self.ffi, khr_functions(self.cl.platform_id)
        err = ffi.new("cl_int*")
        cb = khr["clCreateCommandBufferKHR"](1, ffi.new("cl_command_queue[1]", [self.cl.queue]), ffi.NULL, err)
        if err[0] != 0:
            raise OpenCLError("clCreateCommandBufferKHR", err[0])
        weakref.finalize(self, _release_command_buffer, khr["clReleaseCommandBufferKHR"], cb).atexit = False
        for i, launch in enumerate(self._launches):
            if launch is None:
                continue
            kernel, dims, gsize, lsize = launch
            check(f"clCommandNDRangeKernelKHR(dispatches[{i}])", khr["clCommandNDRangeKernelKHR"](
                cb, ffi.NULL, ffi.NULL, kernel, dims, ffi.NULL, gsize, lsize, 0, ffi.NULL, ffi.NULL, ffi.NULL))
        check("clFinalizeCommandBufferKHR", khr["clFinalizeCommandBufferKHR"](cb))
        self._enqueue_cb = khr["clEnqueueCommandBufferKHR"]
        return cb

    # --- running -------------------------------------------------------------------------------------------
    def _write_inputs(self, inputs: list[np.ndarray]) -> None:
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        for (mem, n), a in zip(self._in, inputs, strict=True):
            if n:  # non-blocking: the call's clFinish waits for it before the caller may touch ``a`` again
                check("clEnqueueWriteBuffer", lib.clEnqueueWriteBuffer(
                    queue, mem, CL_FALSE, 0, n, ffi.cast("void*", a.__array_interface__["data"][0]), 0, ffi.NULL,
                    ffi.NULL))

    def _read_outputs(self) -> list[np.ndarray]:
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        outputs = self.new_outputs()
        for (mem, n), a in zip(self._out, outputs, strict=True):
            if n:
                check("clEnqueueReadBuffer", lib.clEnqueueReadBuffer(
                    queue, mem, CL_FALSE, 0, n, ffi.cast("void*", a.__array_interface__["data"][0]), 0, ffi.NULL,
                    ffi.NULL))
        check("clFinish", lib.clFinish(queue))
        return outputs

    def _submit(self, inputs: list[np.ndarray]) -> None:
        """Write the inputs and enqueue every dispatch (one command-buffer enqueue where recorded)."""
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        self._write_inputs(inputs)
        if self._command_buffer is not None:
            check("clEnqueueCommandBufferKHR", self._enqueue_cb(1, self._queue1, self._command_buffer, 0, ffi.NULL,
                                                                ffi.NULL))
            return
        enqueue = lib.clEnqueueNDRangeKernel
        for launch in self._launches:
            if launch is not None:
                code = enqueue(queue, launch[0], launch[1], ffi.NULL, launch[2], launch[3], 0, ffi.NULL, ffi.NULL)
                if code != 0:
                    raise OpenCLError("clEnqueueNDRangeKernel", code)

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self._submit(inputs)
        return self._read_outputs()

    def _profile(self, inputs: list[np.ndarray]) -> list[float]:
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        self._write_inputs(inputs)
        times = []
        t = ffi.new("cl_ulong*")
        for launch in self._launches:
            if launch is None:
                times.append(0.0)
                continue
            event = ffi.new("cl_event*")
            check("clEnqueueNDRangeKernel", lib.clEnqueueNDRangeKernel(
                queue, launch[0], launch[1], ffi.NULL, launch[2], launch[3], 0, ffi.NULL, event))
            try:
                check("clWaitForEvents", lib.clWaitForEvents(1, event))
                check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
                    event[0], CL_PROFILING_COMMAND_START, ffi.sizeof("cl_ulong"), t, ffi.NULL))
                start = t[0]
                check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
                    event[0], CL_PROFILING_COMMAND_END, ffi.sizeof("cl_ulong"), t, ffi.NULL))
                times.append((t[0] - start) * 1e-9)
            finally:
                lib.clReleaseEvent(event[0])
        self._read_outputs()
        return times

    def time_enqueue(self, inputs: Mapping[str, Any]) -> tuple[float, float]:
        """(seconds to write the inputs and enqueue one replay, seconds until its outputs were read back)."""
        arrays = self.check_inputs(inputs)
        with self.lock:  # a call's own run, like __call__'s
            start = time.perf_counter()
            self._submit(arrays)
            enqueued = time.perf_counter()
            self._read_outputs()
        return enqueued - start, time.perf_counter() - start

    def _read_state(self, spec: BufferSpec, out: np.ndarray) -> None:
        self.cl.copyout(self._buffers[spec.binding], memoryview(out))

    def _write_state(self, spec: BufferSpec, data: np.ndarray) -> None:
        self.cl.copyin(self._buffers[spec.binding], memoryview(data))


def _scalar_bytes(dtype: str, bits: int) -> bytes:
    """The scalar's bits as the kernel argument bytes (little-endian, its dtype's width)."""
    width = dtype_itemsize(dtype, "scalar")
    return (bits & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
