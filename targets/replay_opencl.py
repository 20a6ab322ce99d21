"""OpenCL replay: a command buffer recorded once with cl_khr_command_buffer, else an enqueue loop.

Every buffer is created once: inputs, outputs, weights (written once), states, and the arena (one cl_mem, each
arena binding a sub-buffer of it). Every dispatch gets its own cl_kernel with all arguments set up front, so
nothing is set per call. Where the device offers ``cl_khr_command_buffer`` (PoCL does), all dispatches are
recorded once into a command buffer (entry points fetched with clGetExtensionFunctionAddressForPlatform, their
types declared by the one libOpenCL binding, targets/cl_binding.py) and a replay is: write the inputs into the
buffers the recording uses (there is no mutable dispatch to rebind them), one ``clEnqueueCommandBufferKHR``,
read each output straight into a fresh numpy array, ``clFinish``. Without
the extension, or with a single launch (a recording would only add its own completion command), the same
dispatches are enqueued one by one; ``mode`` (``command_buffer`` / ``enqueue_loop``) and ``mode_reason`` say which
and why, and verify and replay print them. A recording that fails is an error, never a quiet fallback. Every call
finishes before it returns, yet a driver may report the recording pending a little longer (PoCL ends that state in
a completion callback): it is recorded for simultaneous use where the device offers that, and otherwise an enqueue
refused as pending is retried until the driver catches up.

Zero-copy inputs: where the device reports CL_DEVICE_HOST_UNIFIED_MEMORY, an input of at least
``HOST_PTR_MIN_BYTES`` whose address is a multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN is bound as a
CL_MEM_USE_HOST_PTR buffer over the caller's memory instead of being written into the replay's own buffer. Such
buffers are kept per set of input addresses (camera buffers come from a small fixed pool, so the same addresses
recur), at most ``HOST_PTR_BINDINGS`` sets, the least recently used released first. Each set has cl_kernels of its
own for the dispatches that read such an input, and with a command buffer its own recording: no kernel's
arguments change after it is made, since PoCL's command buffers read them at enqueue time, and PoCL has no
cl_khr_command_buffer_mutable_dispatch to rebind a recording. Recording costs time per dispatch, for a model of
hundreds of dispatches more than copying a camera frame, so a set is recorded only when it recurs (its first call
copies and says so); an enqueue loop binds a new set at once. Every call maps each such buffer
for writing with CL_MAP_WRITE_INVALIDATE_REGION and unmaps it: the specification's way of telling a driver that
the host changed the memory, a no-op where the device reads host memory directly. ``input_modes`` says for each
input which way the last call took and why a copy was needed.

Small inputs and outputs (below ``HOST_PTR_MIN_BYTES``) on a device with CL_DEVICE_SVM_FINE_GRAIN_BUFFER live in
buffers over fine-grained shared virtual memory: a call copies such an input into that memory before its first
command and such an output out of it after its clFinish, with no write or read command. On PoCL each transfer
command is a round trip to its worker threads, for a model of a few small kernels a large part of a call.

Prewarm: on PoCL, a replay whose kernels this process compiled from scratch starts a helper process
(targets/opencl_prewarm.py, ``prewarm``) compiling their launches from the last backwards while the first call
compiles them forwards; the first call's end stops it and sets ``prewarm`` to None.

Shared states (``share_states_with``): the other replay's cl_mem objects are this replay's state buffers, set as
kernel arguments and recorded into the command buffer like its own; both replays must use one context and queue.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from jit.common.helpers import prod, usable_cores
from targets.base import Buffer, Program, Runtime
from targets.cl_binding import (
    CL_BUFFER_CREATE_TYPE_REGION,
    CL_COMMAND_BUFFER_FLAGS_KHR,
    CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR,
    CL_DEVICE_TYPE_CPU,
    CL_FALSE,
    CL_INVALID_OPERATION,
    CL_MAP_WRITE_INVALIDATE_REGION,
    CL_MEM_READ_ONLY,
    CL_MEM_READ_WRITE,
    CL_MEM_USE_HOST_PTR,
    CL_PROFILING_COMMAND_END,
    CL_PROFILING_COMMAND_START,
    COMMAND_BUFFER_EXT,
    OpenCLError,
    check,
    checked_create,
    libopencl,
)
from targets.cmdbuf import BufferSpec, CommandBuffer, dtype_itemsize, parse_arena
from targets.host_memory import aligned_in_place, huge_page_array
from targets.opencl_ahead import OpenCLAheadBuild
from targets.opencl_bindings import (
    InputBinding,
    release_bindings,
    release_command_buffer,
    release_kernels,
    release_mems,
)
from targets.opencl_prewarm import Launch, Prewarm, prewarm_wanted, start_prewarm
from targets.opencl_runtime import OpenCLRuntime
from targets.opencl_warm import WarmKey, warm_key
from targets.replay import IN_PLACE, AheadBuild, DispatchSpan, Replay, ReplayError
from targets.source_check import OPENCL, check_kernels

# inputs below this many bytes are written: a write of a few bytes costs less than mapping a host-pointer buffer,
# and small arrays are usually fresh each call, so their addresses would never repeat
HOST_PTR_MIN_BYTES = 1 << 16
# sets of input addresses kept bound (with their recorded command buffers): room for two cameras' buffer pools
# that do not advance in step (4 x 4 combinations, say)
HOST_PTR_BINDINGS = 32
# how long an enqueue of a recorded command buffer waits for the driver to report an earlier enqueue of it finished
PENDING_WAIT_S = 1.0
# input address sets remembered from one call (a recording is made when one recurs)
SEEN_ADDRESS_SETS = 4 * HOST_PTR_BINDINGS

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


class OpenCLReplay(Replay):
    """A command buffer of OpenCL C kernels on one OpenCL device (the QCOM profile included)."""

    languages = ("OPENCL", "QCOM")

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime,
                 use_command_buffer: bool | None = None, share_states_with: Replay | None = None) -> None:
        assert isinstance(target, OpenCLRuntime)  # ENGINES maps only OpenCLRuntime and its subclasses here
        super().__init__(cmdbuf, weights, target, share_states_with)
        # package text never steers the driver's compiler: build options are the target's, sources the renderer's
        check_kernels(cmdbuf, OPENCL, {target.build_options})
        self.cl = target
        self.ffi, self.lib = libopencl()
        # the capture's first launches stop here, freeing the driver's compiler for this replay's (opencl_warm.py)
        warmer, target.warmer = target.warmer, None
        warmed = warmer.stop() if warmer is not None else set()
        device_align = target.info.base_addr_align_bytes
        if cmdbuf.arena_bytes and cmdbuf.alignment % max(device_align, 1):
            raise ReplayError(f"cmdbuf.alignment: expected a multiple of the device's {device_align} bytes "
                              f"(sub-buffer origins), got {cmdbuf.alignment}")
        self._programs = target.compile_many([(k.entry, k.source, {"global_size": (1,)}) for k in cmdbuf.kernels])
        self._mems: dict[str, Any] = {}
        self._buffers: dict[str, Buffer] = {}
        self._shared: dict[str, Any] = {}  # binding -> host pointer of the fine-grained SVM under its buffer
        self._allocate(share_states_with)
        self._kernels = self._make_kernels()
        self._launches = [self._launch_args(i) for i in range(self.n_dispatches)]
        self.mode = self._choose_mode(use_command_buffer)
        self.mode_reason = self._mode_reason(use_command_buffer)
        if use_command_buffer and self.mode != "command_buffer":
            raise ReplayError(f"use_command_buffer: expected a device offering {COMMAND_BUFFER_EXT}, got "
                              f"{target.info.name} without it")
        self._khr = khr_functions(target.platform_id) if self.mode == "command_buffer" else {}
        self._command_buffer = self._record(self._launches) if self.mode == "command_buffer" else None
        self._in = [(self._mems[b.binding], b.nbytes) for b in cmdbuf.inputs]
        self._out = [(self._mems[b.binding], b.nbytes) for b in cmdbuf.computed_outputs]
        self._in_shared = [self._shared.get(b.binding) for b in cmdbuf.inputs]
        self._in_names = tuple(self.input_names)
        self._out_shared = [self._shared.get(b.binding) for b in cmdbuf.computed_outputs]
        self._queue1 = self.ffi.new("cl_command_queue[1]", [target.queue])
        self._own = InputBinding([None] * len(self._in), self._launches, [])
        self._own.command_buffer = self._command_buffer
        self._host_bindings: OrderedDict[tuple[Any, ...], InputBinding] = OrderedDict()
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        release_cb = self._khr.get("clReleaseCommandBufferKHR")
        weakref.finalize(self, release_bindings, self.lib, release_cb, self._host_bindings).atexit = False
        info = target.info
        self._host_ptr_refusal = "" if info.host_unified_memory else \
            f"copied: {info.name} reports no CL_DEVICE_HOST_UNIFIED_MEMORY"
        self._host_align = max(info.base_addr_align_bytes, 1)
        # per input, why it is copied whatever its address ("" where it may be bound in place)
        self._always_copied = [self._host_ptr_refusal or (f"copied: {n} bytes, below HOST_PTR_MIN_BYTES = "
                                                          f"{HOST_PTR_MIN_BYTES}" if n < HOST_PTR_MIN_BYTES else "")
                               for _, n in self._in]
        self.reset_own_states()
        self.prewarm = self._start_prewarm(warmed)

    @staticmethod
    def ahead_build(target: Runtime) -> AheadBuild:
        if isinstance(target, OpenCLRuntime) and usable_cores() >= 2:
            return OpenCLAheadBuild(target)
        return AheadBuild()

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        return str(getattr(target, "build_options", ""))

    def has_command_buffer(self) -> bool:
        return COMMAND_BUFFER_EXT in self.cl.info.extensions

    def _choose_mode(self, use_command_buffer: bool | None) -> str:
        """``command_buffer`` where the device offers one, unless turned off or (by default) there is at most one
        launch: a recording of one command only adds its own completion command to each call."""
        if use_command_buffer is False or not self.has_command_buffer():
            return "enqueue_loop"
        if use_command_buffer is None and sum(launch is not None for launch in self._launches) <= 1:
            return "enqueue_loop"
        return "command_buffer"

    def _mode_reason(self, use_command_buffer: bool | None) -> str:
        """Why ``mode`` is what it is (verify and replay print it: the enqueue-loop fallback is never silent)."""
        if self.mode == "command_buffer":
            return f"{COMMAND_BUFFER_EXT} on {self.cl.info.name}: every dispatch recorded once"
        if use_command_buffer is False:
            return "use_command_buffer=False: dispatches enqueued one by one"
        if self.has_command_buffer():
            return "one launch: enqueued directly (a command buffer would add a completion command of its own)"
        return f"fallback: {self.cl.info.name} lacks {COMMAND_BUFFER_EXT}, dispatches enqueued one by one"

    def device_mismatch(self, other: Replay) -> str:
        found = super().device_mismatch(other)
        if found or not isinstance(other, OpenCLReplay):
            return found
        mine, theirs = self.target, other.target  # called before __init__ names them ``cl``
        assert isinstance(mine, OpenCLRuntime) and isinstance(theirs, OpenCLRuntime)
        if theirs.context != mine.context or theirs.queue != mine.queue:
            # buffers belong to one context, and one in-order queue orders the two replays' commands
            return f"expected the OpenCL context and queue of {mine!r}, got those of {theirs!r}"
        return ""

    # --- setup ---------------------------------------------------------------------------------------------
    def _allocate(self, share: Replay | None) -> None:
        cb, t = self.cmdbuf, self.cl
        aliased = {a.binding for a in cb.aliases}  # no dispatch binds them: copied on the host
        # a CPU device binds the weights in place where they start at CL_DEVICE_MEM_BASE_ADDR_ALIGN
        host_weights = aligned_in_place(self.weights, max(t.info.base_addr_align_bytes, 1)) if t.host_pages else {}
        for b in cb.buffers:
            if b.binding in aliased:
                continue
            if b.image is not None:  # read-only: created holding its bytes
                self._buffers[b.binding] = t.allocate_image(*b.image, memoryview(self.weights[int(b.name)]))
            elif b.kind == "state" and b.name in self.shared_states:
                assert isinstance(share, OpenCLReplay)  # device_mismatch refused any other engine
                self._buffers[b.binding] = share.state_buffer(b.name)  # held here too: it lives while we do
            elif b.kind in ("input", "output") and 0 < b.nbytes < HOST_PTR_MIN_BYTES and t.info.svm_fine_grain_buffer:
                self._buffers[b.binding], self._shared[b.binding] = t.allocate_shared(b.nbytes)
            elif b.kind == "weight" and b.nbytes and t.host_pages:
                self._buffers[b.binding] = t.allocate_host(host_weights[int(b.name)], read_only=True)
            elif b.kind in ("input", "output", "state", "weight"):
                self._buffers[b.binding] = t.allocate(b.nbytes)
                if b.kind == "weight" and b.nbytes:
                    t.copyin(self._buffers[b.binding], memoryview(self.weights[int(b.name)]))
            else:
                continue
            self._mems[b.binding] = self._buffers[b.binding].handle
        # a CPU device reads the weights and the arena where the host put them: on huge pages (targets/host_memory.py)
        self._arena = t.allocate_host(huge_page_array(cb.arena_bytes)) if t.host_pages and cb.arena_bytes else \
            t.allocate(cb.arena_bytes)
        subs = []
        for b in cb.of_kind("arena"):
            off, size = parse_arena(b.binding)
            region = self.ffi.new("size_t[2]", [off, size])
            sub = checked_create(f"clCreateSubBuffer({b.binding})", self.lib.clCreateSubBuffer, self._arena.handle,
                                 CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region)
            self._mems[b.binding] = sub
            subs.append(sub)
        weakref.finalize(self, release_mems, self.lib, subs).atexit = False
        for binding in cb.zeroed:  # once: no dispatch writes their zeros (CommandBuffer.zeroed)
            size = parse_arena(binding)[1]
            t.copyin(Buffer(t, size, self._mems[binding]), memoryview(bytes(size)))

    def _make_kernels(self) -> list[Any]:
        """One cl_kernel per dispatch, every argument set now (a kernel object keeps its arguments)."""
        made: list[Any] = []
        weakref.finalize(self, release_kernels, self.lib, made).atexit = False
        for i in range(self.n_dispatches):
            made.append(self._make_kernel(i, self._mems))
        return made

    def _make_kernel(self, i: int, mems: Mapping[str, Any]) -> Any:
        """The cl_kernel of dispatch ``i`` with its buffer arguments the ``mems`` of its bindings. A kernel's
        arguments are never set again once made: PoCL's command buffers read them when enqueued, not when recorded,
        so changing one would change what a recording runs."""
        ffi, lib = self.ffi, self.lib
        d = self.cmdbuf.dispatches[i]
        spec = self.cmdbuf.kernels[d.kernel]
        program = self._programs[d.kernel].handle.program
        k = checked_create(f"clCreateKernel({spec.entry})", lib.clCreateKernel, program, spec.entry.encode())
        try:
            for arg, binding in enumerate(d.bindings):
                check(f"dispatches[{i}] clSetKernelArg({spec.entry}, {arg})",
                      lib.clSetKernelArg(k, arg, ffi.sizeof("cl_mem"), ffi.new("cl_mem*", mems[binding])))
            for j, s in enumerate(d.scalars):
                raw = _scalar_bytes(s.dtype, s.bits)
                check(f"dispatches[{i}] clSetKernelArg({spec.entry}, {len(d.bindings) + j})",
                      lib.clSetKernelArg(k, len(d.bindings) + j, len(raw), ffi.from_buffer(raw)))
        except OpenCLError:
            lib.clReleaseKernel(k)
            raise
        return k

    def _launch_args(self, i: int, kernel: Any = None) -> tuple[Any, int, Any, Any] | None:
        """(kernel, dims, global size, local size or NULL) of dispatch ``i`` (its own kernel unless ``kernel``
        is given); None when it has no work items."""
        d = self.cmdbuf.dispatches[i]
        if prod(d.global_size) == 0:
            return None
        local = self.ffi.new("size_t[]", d.local_size) if d.local_size else self.ffi.NULL
        return self._kernels[i] if kernel is None else kernel, len(d.global_size), \
            self.ffi.new("size_t[]", d.global_size), local

    def _record(self, launches: list[Any], owned: bool = True) -> Any:
        """A command buffer of ``launches`` (one per dispatch); ``owned``: released with the replay (a host-pointer
        binding's own is released with the binding)."""
        ffi, khr = self.ffi, self._khr
        err = ffi.new("cl_int*")
        # simultaneous use where offered: a driver may keep the buffer pending after the clFinish that waited for it
        flags = ffi.new("cl_bitfield[3]", [CL_COMMAND_BUFFER_FLAGS_KHR, CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR, 0]) \
            if self.cl.info.command_buffer_simultaneous_use else ffi.NULL
        cb = khr["clCreateCommandBufferKHR"](1, ffi.new("cl_command_queue[1]", [self.cl.queue]), flags, err)
        if err[0] != 0:
            raise OpenCLError("clCreateCommandBufferKHR", err[0])
        if owned:
            weakref.finalize(self, release_command_buffer, khr["clReleaseCommandBufferKHR"], cb).atexit = False
        for i, launch in enumerate(launches):
            if launch is None:
                continue
            kernel, dims, gsize, lsize = launch
            check(f"clCommandNDRangeKernelKHR(dispatches[{i}])", khr["clCommandNDRangeKernelKHR"](
                cb, ffi.NULL, ffi.NULL, kernel, dims, ffi.NULL, gsize, lsize, 0, ffi.NULL, ffi.NULL, ffi.NULL))
        check("clFinalizeCommandBufferKHR", khr["clFinalizeCommandBufferKHR"](cb))
        self._enqueue_cb = khr["clEnqueueCommandBufferKHR"]
        return cb

    def _start_prewarm(self, warmed: set[WarmKey]) -> Prewarm | None:
        """A helper compiling the launches of kernels this process built from scratch, from the last backwards, while
        the first call compiles them forwards (targets/opencl_prewarm.py); that call stops it. Launches the capture
        ran already (``warmed``) are compiled."""
        cl, cb = self.cl, self.cmdbuf
        fresh = cl.take_fresh_batches(k.source for k in cb.kernels)
        if not fresh or not prewarm_wanted(cl.info.platform, bool(cl.info.device_type & CL_DEVICE_TYPE_CPU)):
            return None
        sources, launches = helper_launches(cb, fresh, warmed)
        prewarm = start_prewarm(cl.index, cl.build_options, sources, launches)
        if prewarm is not None:
            weakref.finalize(self, prewarm.stop).atexit = False
        return prewarm

    # --- running -------------------------------------------------------------------------------------------
    def _host_ptr_reason(self, address: int, n: int) -> str:
        """"" when an input of ``n`` bytes at ``address`` may be bound in place, else ``copied: why``."""
        if self._host_ptr_refusal:
            return self._host_ptr_refusal
        if n < HOST_PTR_MIN_BYTES:
            return f"copied: {n} bytes, below HOST_PTR_MIN_BYTES = {HOST_PTR_MIN_BYTES}"
        if address % self._host_align:
            return f"copied: address not {self._host_align}-byte aligned (CL_DEVICE_MEM_BASE_ADDR_ALIGN; address " \
                   f"% {self._host_align} == {address % self._host_align})"
        return ""

    def _bind_inputs(self, inputs: list[np.ndarray]) -> InputBinding:
        """Write the inputs that are copied, map and unmap those bound in place, and return the binding to run
        with."""
        if not all(self._always_copied):
            return self._bind_by_address(inputs)
        # every input copied whatever its address (a model's small inputs): no address looked at, no binding sought
        modes = self.input_modes
        self._copy_inputs(inputs, [note if (note := modes.get(name, IN_PLACE)) != IN_PLACE else why
                                   for name, why in zip(self._in_names, self._always_copied, strict=True)])
        return self._own

    def _bind_by_address(self, inputs: list[np.ndarray]) -> InputBinding:
        """``_bind_inputs`` where some input may be bound in place: bound where its address allows and recurs."""
        addresses = [a.__array_interface__["data"][0] for a in inputs]
        reasons = []
        for (_, n), address, name in zip(self._in, addresses, self._in_names, strict=True):
            host_note = self.input_modes.get(name, IN_PLACE)
            reasons.append(host_note if host_note != IN_PLACE else self._host_ptr_reason(address, n))
        key = tuple(None if r or not n else (address, n) for r, (_, n), address in zip(reasons, self._in, addresses,
                                                                                       strict=True))
        if any(key) and self._command_buffer is not None and key not in self._host_bindings \
                and not self._seen_before(key):
            # a recording costs more than a copy: only addresses that recur (a camera buffer pool) earn one
            reasons = [r or ("copied: first call at this address (bound in place when it recurs)" if k else "")
                       for r, k in zip(reasons, key, strict=True)]
            key = (None,) * len(key)
        self._copy_inputs(inputs, reasons)
        binding = self._own if not any(key) else self._host_binding(key)
        for mem, (_, n), k in zip(binding.mems, self._in, key, strict=True):
            if mem is not None:
                self._sync_host_ptr(mem, k[0], n)
        return binding

    def _copy_inputs(self, inputs: list[np.ndarray], reasons: list[str]) -> None:
        """Copy each input with a reason to be copied into its buffer (into its shared memory, or by a write), and
        record each input's mode."""
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        for (mem, n), shared, a, name, reason in zip(self._in, self._in_shared, inputs, self._in_names, reasons,
                                                     strict=True):
            if n and reason and shared is not None:  # no command pending: the last call finished
                ffi.memmove(shared, a, n)
            elif n and reason:  # non-blocking: the call's clFinish waits for it before the caller may touch the input
                check("clEnqueueWriteBuffer", lib.clEnqueueWriteBuffer(
                    queue, mem, CL_FALSE, 0, n, ffi.from_buffer(a), 0, ffi.NULL, ffi.NULL))
            self.input_modes[name] = reason or IN_PLACE

    def _seen_before(self, key: tuple[Any, ...]) -> bool:
        """Whether an earlier call came with these input addresses (remembering this one, boundedly)."""
        if key in self._seen:
            del self._seen[key]
            return True
        self._seen[key] = None
        if len(self._seen) > SEEN_ADDRESS_SETS:
            self._seen.popitem(last=False)
        return False

    def _host_binding(self, key: tuple[Any, ...]) -> InputBinding:
        """The binding of this set of input addresses: kept from an earlier call, else made (and the least
        recently used one released when ``HOST_PTR_BINDINGS`` are kept)."""
        found = self._host_bindings.get(key)
        if found is not None:
            self._host_bindings.move_to_end(key)
            return found
        if len(self._host_bindings) >= HOST_PTR_BINDINGS:
            _, old = self._host_bindings.popitem(last=False)
            old.release(self.lib, self._khr.get("clReleaseCommandBufferKHR"))
        binding = InputBinding([], list(self._launches), [])
        try:
            for k in key:
                binding.mems.append(None if k is None else checked_create(
                    "clCreateBuffer(CL_MEM_USE_HOST_PTR)", self.lib.clCreateBuffer, self.cl.context,
                    CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, k[1], self.ffi.cast("void*", k[0])))
            mems = dict(self._mems)
            mems.update((b.binding, m) for b, m in zip(self.cmdbuf.inputs, binding.mems, strict=True) if m is not None)
            for i, d in enumerate(self.cmdbuf.dispatches):  # kernels of its own where a dispatch reads one
                if binding.launches[i] is not None and any(mems[b] is not self._mems[b] for b in d.bindings):
                    binding.kernels.append(self._make_kernel(i, mems))
                    binding.launches[i] = self._launch_args(i, binding.kernels[-1])
            if self.mode == "command_buffer":
                binding.command_buffer = self._record(binding.launches, owned=False)
        except OpenCLError:
            binding.release(self.lib, self._khr.get("clReleaseCommandBufferKHR"))
            raise
        self._host_bindings[key] = binding
        return binding

    def _sync_host_ptr(self, mem: Any, address: int, n: int) -> None:
        """Tell the driver the host wrote the memory under ``mem`` (a no-op on host-unified memory)."""
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        err = ffi.new("cl_int*")
        ptr = lib.clEnqueueMapBuffer(queue, mem, CL_FALSE, CL_MAP_WRITE_INVALIDATE_REGION, 0, n, 0, ffi.NULL,
                                     ffi.NULL, err)
        if err[0] != 0:
            raise OpenCLError("clEnqueueMapBuffer(CL_MEM_USE_HOST_PTR)", err[0])
        check("clEnqueueUnmapMemObject", lib.clEnqueueUnmapMemObject(queue, mem, ptr, 0, ffi.NULL, ffi.NULL))
        if int(ffi.cast("uintptr_t", ptr)) != address:  # the specification promises host_ptr itself
            raise ReplayError(f"clEnqueueMapBuffer: pointer expected the host pointer {address:#x}, got "
                              f"{int(ffi.cast('uintptr_t', ptr)):#x}")

    def _read_outputs(self) -> list[np.ndarray]:
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        outputs = self.new_outputs()
        for (mem, n), shared, a in zip(self._out, self._out_shared, outputs, strict=True):
            if n and shared is None:
                check("clEnqueueReadBuffer", lib.clEnqueueReadBuffer(
                    queue, mem, CL_FALSE, 0, n, ffi.cast("void*", a.__array_interface__["data"][0]), 0, ffi.NULL,
                    ffi.NULL))
        check("clFinish", lib.clFinish(queue))
        for (_, n), shared, a in zip(self._out, self._out_shared, outputs, strict=True):
            if shared is not None:  # finished: the device's writes are visible to the host
                ffi.memmove(a, shared, n)
        if self.prewarm is not None:  # the first call compiled every kernel the helper had not
            self.prewarm.stop()
            self.prewarm = None
        return outputs

    def _submit(self, inputs: list[np.ndarray]) -> None:
        """Bind or write the inputs and enqueue every dispatch (one command-buffer enqueue where recorded)."""
        ffi, lib, queue = self.ffi, self.lib, self.cl.queue
        binding = self._bind_inputs(inputs)
        if binding.command_buffer is not None:
            self._enqueue_recorded(binding.command_buffer)
            return
        enqueue = lib.clEnqueueNDRangeKernel
        for launch in binding.launches:
            if launch is not None:
                code = enqueue(queue, launch[0], launch[1], ffi.NULL, launch[2], launch[3], 0, ffi.NULL, ffi.NULL)
                if code != 0:
                    raise OpenCLError("clEnqueueNDRangeKernel", code)

    def _enqueue_recorded(self, command_buffer: Any) -> None:
        """Enqueue a recorded command buffer. One recorded without simultaneous use stays pending until the driver
        reports its last enqueue finished, which PoCL does from a completion callback that may run after the
        clFinish waiting for it returned: CL_INVALID_OPERATION is retried until then, for up to
        ``PENDING_WAIT_S``."""
        ffi = self.ffi
        code = self._enqueue_cb(1, self._queue1, command_buffer, 0, ffi.NULL, ffi.NULL)
        if code == CL_INVALID_OPERATION and not self.cl.info.command_buffer_simultaneous_use:
            self.lib.clFlush(self.cl.queue)
            deadline = time.perf_counter() + PENDING_WAIT_S
            while code == CL_INVALID_OPERATION and time.perf_counter() < deadline:
                time.sleep(0)
                code = self._enqueue_cb(1, self._queue1, command_buffer, 0, ffi.NULL, ffi.NULL)
        check("clEnqueueCommandBufferKHR", code)

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self._submit(inputs)
        return self._read_outputs()

    def _profile(self, inputs: list[np.ndarray]) -> tuple[list[float], list[np.ndarray]]:
        lib = self.lib
        binding = self._bind_inputs(inputs)
        times = []
        for launch in binding.launches:
            if launch is None:
                times.append(0.0)
                continue
            event = self._enqueue_with_event(launch)
            try:
                check("clWaitForEvents", lib.clWaitForEvents(1, event))
                start, end = self._event_span(event)
                times.append((end - start) * 1e-9)
            finally:
                lib.clReleaseEvent(event[0])
        return times, self._read_outputs()

    def timeline(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> list[DispatchSpan]:
        """Run once as a replay runs, every dispatch enqueued in order and one wait at the end (one by one, not as
        the recorded command buffer, whose commands report no times), and return each dispatch's span on the
        device's clock (dispatches without a kernel left out): what a call spends in kernels and what the driver
        spends between them."""
        arrays, modes = self.checked_inputs({**inputs, **kwargs} if inputs else kwargs)
        with self.lock:
            self.input_modes = dict(zip(self._in_names, modes, strict=True))
            binding = self._bind_inputs(arrays)
            events = []
            try:
                for i, launch in enumerate(binding.launches):
                    if launch is not None:
                        events.append((i, self._enqueue_with_event(launch)))
                self._read_outputs()
                spans = [(i, *self._event_span(event)) for i, event in events]
            finally:
                for _, event in events:
                    self.lib.clReleaseEvent(event[0])
        first = min((start for _, start, _ in spans), default=0)
        names = [self.cmdbuf.kernels[d.kernel].name for d in self.cmdbuf.dispatches]
        return [DispatchSpan(i, names[i], (start - first) * 1e-9, (end - first) * 1e-9) for i, start, end in spans]

    def _enqueue_with_event(self, launch: tuple[Any, ...]) -> Any:
        event = self.ffi.new("cl_event*")
        check("clEnqueueNDRangeKernel", self.lib.clEnqueueNDRangeKernel(
            self.cl.queue, launch[0], launch[1], self.ffi.NULL, launch[2], launch[3], 0, self.ffi.NULL, event))
        return event

    def _event_span(self, event: Any) -> tuple[int, int]:
        """(start, end) of a finished command, in the device clock's nanoseconds."""
        ffi, lib = self.ffi, self.lib
        t = ffi.new("cl_ulong*")
        check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
            event[0], CL_PROFILING_COMMAND_START, ffi.sizeof("cl_ulong"), t, ffi.NULL))
        start = int(t[0])
        check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
            event[0], CL_PROFILING_COMMAND_END, ffi.sizeof("cl_ulong"), t, ffi.NULL))
        return start, int(t[0])

    def time_enqueue(self, inputs: Mapping[str, Any]) -> tuple[float, float]:
        """(seconds to write the inputs and enqueue one replay, seconds until its outputs were read back)."""
        arrays, modes = self.checked_inputs(inputs)
        with self.lock:  # a call's own run, like __call__'s
            self.input_modes = dict(zip(self._in_names, modes, strict=True))
            start = time.perf_counter()
            self._submit(arrays)
            enqueued = time.perf_counter()
            self._read_outputs()
        return enqueued - start, time.perf_counter() - start

    def state_buffer(self, name: str) -> Buffer:
        """The device buffer state ``name`` lives in (its cl_mem is what the kernels bind)."""
        return self._buffers[self.state_spec(name).binding]

    def state_handle(self, name: str) -> int:
        return int(self.ffi.cast("uintptr_t", self._mems[self.state_spec(name).binding]))

    def _read_state(self, spec: BufferSpec, out: np.ndarray) -> None:
        self.cl.copyout(self._buffers[spec.binding], memoryview(out))

    def _write_state(self, spec: BufferSpec, data: np.ndarray) -> None:
        self.cl.copyin(self._buffers[spec.binding], memoryview(data))


def _scalar_bytes(dtype: str, bits: int) -> bytes:
    """The scalar's bits as the kernel argument bytes (little-endian, its dtype's width)."""
    width = dtype_itemsize(dtype, "scalar")
    return (bits & ((1 << (8 * width)) - 1)).to_bytes(width, "little")


def helper_launches(cb: CommandBuffer, fresh: dict[str, str], warmed: set[WarmKey]) -> tuple[list[str], list[Launch]]:
    """The prewarm helper's programs and launches for command buffer ``cb``: one per distinct launch of a kernel
    whose source ``fresh`` maps to the program text built from scratch, with work items and no image argument, that
    the capture did not run already (``warmed``); the bindings the replay zeroes are zeroes there too."""
    sizes = {b.binding: b.nbytes for b in cb.buffers if b.image is None}
    sources: dict[str, int] = {}
    launches: dict[tuple[object, ...], Launch] = {}
    for d in cb.dispatches:
        spec = cb.kernels[d.kernel]
        source = fresh.get(spec.source)
        if source is None or prod(d.global_size) == 0 or any(
                b not in sizes and not b.startswith("arena:") for b in d.bindings) or \
                warm_key(spec.source, d.global_size, d.local_size) in warmed:
            continue  # from the cache, no work items, an image argument, or compiled by the capture
        program = sources.setdefault(source, len(sources))
        nbytes = tuple(sizes[b] if b in sizes else parse_arena(b)[1] for b in d.bindings)
        scalars = tuple(_scalar_bytes(s.dtype, s.bits).hex() for s in d.scalars)
        zeroed = tuple(i for i, b in enumerate(d.bindings) if b in cb.zeroed)
        launch = Launch(program, spec.entry, tuple(d.global_size), tuple(d.local_size or ()), nbytes, scalars,
                        zeroed)
        launches.setdefault((program, spec.entry, launch.global_size, launch.local_size), launch)
    return list(sources), list(launches.values())
