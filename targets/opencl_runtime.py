"""The OpenCL target's device side: one OpenCL device's context and queue, program builds, buffers, launches.

This is all an OpenCL replay needs; it imports no renderer (the compiler-facing OpenCLTarget in
targets/opencl.py adds rendering on top). Device choice: ``OPENCL`` is device 0, ``OPENCL:1`` device 1, counted
over the platforms whose name contains ``$DRIVEPACK_CL_PLATFORM`` (targets/cl_binding.py). Program binaries are
cached on disk (targets/kernel_cache.py) by source + build options + platform + device + driver version, so a
second process builds nothing; except on a CPU device, whose binary is generic code the driver compiles for that
request alone (PoCL: every kernel again for any work-group size, most of a cold capture, while the first launch
compiles each kernel for its size all the same). There the cache keeps the program's source instead, and a second
process builds that same source again, which the driver's own cache (PoCL's ``POCL_CACHE_DIR``, keyed by the whole
program) answers, its launch-size builds included. Within a process each program built for a cache file is kept
(``KEPT_PROGRAMS``): a capture's replay does not build again what its capture just built, and ``forget_compiled``
(``jit.realize.clear_compiled_kernels``) drops them. ``NOLOCALS=1`` launches with a NULL local size (the driver picks
it).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from jit.common.helpers import NOLOCALS, prod
from targets.base import Buffer, Program, RenderedKernel, Runtime, TargetLimits
from targets.cl_binding import (
    CL_DEVICE_TYPE_CPU,
    CL_FLOAT,
    CL_KERNEL_WORK_GROUP_SIZE,
    CL_MEM_COPY_HOST_PTR,
    CL_MEM_OBJECT_IMAGE2D,
    CL_MEM_READ_ONLY,
    CL_MEM_READ_WRITE,
    CL_MEM_SVM_FINE_GRAIN_BUFFER,
    CL_MEM_USE_HOST_PTR,
    CL_PROFILING_COMMAND_END,
    CL_PROFILING_COMMAND_START,
    CL_PROGRAM_BINARIES,
    CL_PROGRAM_BINARY_SIZES,
    CL_PROGRAM_BUILD_LOG,
    CL_QUEUE_PROFILING_ENABLE,
    CL_RGBA,
    CL_TRUE,
    PLATFORM_ENV,
    OpenCLBuildError,
    OpenCLDeviceError,
    OpenCLError,
    check,
    checked_create,
    info_sizes,
    info_str,
    info_uint,
    libopencl,
    list_devices,
)
from targets.kernel_cache import cache_dir, cached_artifact, publish
from targets.opencl_local_size import GROUPS_PER_COMPUTE_UNIT, PREFERRED_LOCAL_SIZE, group_local_size, valid_local_size
from targets.opencl_warm import DeviceTurns, LaunchWarmer

# kernels whose fresh batch a replay may still take (targets/opencl_prewarm.py); older ones are dropped, so a long
# process compiling many models keeps no more sources than a few models' worth
FRESH_BATCH_KERNELS = 4096
# programs kept built per cache file for later compiles in this process (a capture's replay builds the programs its
# capture just built, each a driver build even where the driver's cache answers it): at most this many, the least
# recently used released first
KEPT_PROGRAMS = 64
_CACHE_KEY = re.compile(r"[0-9a-f]{64}")


def program_file(key: str, ext: str) -> Path | None:
    """The kernel cache's file of the program of ``key`` (``.cl`` or ``.bin``: ``ext``), None for a key that is no
    SHA-256 hex digest as ``_cache_key`` spells it (that could name another file)."""
    return cache_dir() / f"opencl-{key}{ext}" if _CACHE_KEY.fullmatch(key) else None


# element i of an image-held buffer: component i % 4 of texel i / 4, texels row-major (jit.common.dtype.ImageDType).
# The renderer (targets/opencl.py) writes it before kernels that read images; targets/source_check.py accepts it.
IMAGE_HELPER = ("#ifndef DP_READ_IMAGE\n#define DP_READ_IMAGE\n"
                "__constant sampler_t dp_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE |"
                " CLK_FILTER_NEAREST;\n"
                "float dp_read_image(read_only image2d_t img, int i, int width) {\n"
                "  int t = i >> 2, c = i & 3;\n"
                "  float4 v = read_imagef(img, dp_sampler, (int2)(t % width, t / width));\n"
                "  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;\n"
                "}\n#endif")

def _release_mem(lib: Any, handle: Any, live: Counter[str]) -> None:
    lib.clReleaseMemObject(handle)
    live["mem"] -= 1


def _release_host_mem(lib: Any, handle: Any, memory: np.ndarray, live: Counter[str]) -> None:
    # ``memory``, the buffer's storage, is held by this finalizer's arguments until the buffer is released
    lib.clReleaseMemObject(handle)
    live["mem"] -= 1


def _release_shared(lib: Any, context: Any, handle: Any, memory: Any, live: Counter[str]) -> None:
    lib.clReleaseMemObject(handle)  # the buffer first: its storage is the SVM memory
    lib.clSVMFree(context, memory)
    live["mem"] -= 1


def _release_program(lib: Any, kernel: Any, program: Any, live: Counter[str]) -> None:
    lib.clReleaseKernel(kernel)
    lib.clReleaseProgram(program)
    live["kernel"] -= 1
    live["program"] -= 1


def _release_queue(lib: Any, queue: Any, context: Any) -> None:
    lib.clReleaseCommandQueue(queue)
    lib.clReleaseContext(context)


class CLKernel:
    """A kernel and one reference to its program (shared by a batch); both released when this is collected."""

    __slots__ = ("program", "kernel", "max_group", "__weakref__")

    def __init__(self, target: OpenCLRuntime, program: Any, kernel: Any, max_group: int) -> None:
        self.program, self.kernel, self.max_group = program, kernel, max_group
        target.live["kernel"] += 1
        target.live["program"] += 1
        # atexit=False: at interpreter exit the driver may already be tearing down; the process frees it all
        weakref.finalize(self, _release_program, target.lib, kernel, program, target.live).atexit = False


# builds from OpenCL C source in this process (a warm binary cache keeps it at 0)
cl_builds = 0


class OpenCLRuntime(Runtime):
    """One OpenCL device: a context and an in-order, profiling-enabled command queue."""

    name = "OPENCL"

    def __init__(self, device: str = "OPENCL") -> None:
        base, _, idx = device.partition(":")
        self.name = device
        try:
            self.index = int(idx) if idx else 0
        except ValueError:
            raise OpenCLDeviceError(f"device {device!r}: expected OPENCL or OPENCL:<index>", -33) from None
        self.ffi, self.lib = libopencl()
        devices = list_devices()
        if not 0 <= self.index < len(devices):
            found = ", ".join(f"{d.index} = {d.name} ({d.platform})" for _, _, d in devices) or "none"
            where = f" on platforms matching {PLATFORM_ENV}={os.environ[PLATFORM_ENV]!r}" \
                if os.environ.get(PLATFORM_ENV) else ""
            raise OpenCLDeviceError(f"device {device!r}: expected a device index below {len(devices)}{where} "
                                    f"(devices: {found}), got {self.index}", -1)
        self.platform_id, self.device_id, self.info = devices[self.index]
        info = self.info
        self.live: Counter[str] = Counter()
        self.build_count = 0
        # kernel cache key -> the source of the program this process built it in from scratch (its batch), for
        # the replay's prewarm helper (targets/opencl_prewarm.py); kernels loaded from the cache are not here
        self._fresh_batches: dict[str, str] = {}
        self._kept: OrderedDict[Path, Any] = OrderedDict()  # cache file -> its program, built (KEPT_PROGRAMS)
        # programs built on a background thread while a capture renders (``build_in_background``), and the lock
        # that keeps their builds and ``compile_many``'s from updating the cache state at once
        self._builder: ThreadPoolExecutor | None = None
        self._background: list[Future[None]] = []
        # the running capture's first launches (targets/opencl_warm.py), taken and stopped by the replay it makes;
        # they take the device only when this runtime's own builds, launches and copies leave it (``turns``)
        self.warmer: LaunchWarmer | None = None
        self.turns = DeviceTurns()
        self._build_lock = threading.Lock()
        # module docstring: a CPU device's program binary costs more to fetch than the build it saves
        self.cache_binaries = not info.device_type & CL_DEVICE_TYPE_CPU
        dev = self.ffi.new("cl_device_id[1]", [self.device_id])
        self._dev = dev
        self.context = checked_create("clCreateContext", self.lib.clCreateContext, self.ffi.NULL, 1, dev,
                                      self.ffi.NULL, self.ffi.NULL)
        self.queue = checked_create("clCreateCommandQueue", self.lib.clCreateCommandQueue, self.context,
                                    self.device_id, CL_QUEUE_PROFILING_ENABLE)
        weakref.finalize(self, _release_queue, self.lib, self.queue, self.context).atexit = False
        # what the device launches and how its memory is laid out (the compiler side adds its cache facts)
        self.limits = TargetLimits(max_local_size=info.max_work_group_size, max_local_dims=info.max_work_item_sizes,
                                   buffer_alignment=max(info.base_addr_align_bytes, 1),
                                   image2d_max=info.image2d_max if info.image_support else (0, 0))
        self.build_options = ""
        # what local-size selection respects (a profile such as targets/qcom.py narrows these)
        self.max_group, self.max_items = info.max_work_group_size, info.max_work_item_sizes
        self.preferred_local = PREFERRED_LOCAL_SIZE
        self.min_groups = GROUPS_PER_COMPUTE_UNIT * max(info.max_compute_units, 1)

    def __repr__(self) -> str:
        i = self.info
        return f"<{type(self).__name__} {self.name}: {i.name} on {i.platform} {i.driver_version}>"

    # --- compile -------------------------------------------------------------------------------------------
    def _cache_key(self, source: str) -> str:
        i = self.info
        parts = (source, self.build_options, i.platform, i.platform_version, i.name, i.version, i.driver_version)
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _build(self, program: Any, source: str, what: str) -> None:
        code = self.lib.clBuildProgram(program, 1, self._dev, self.build_options.encode(), self.ffi.NULL,
                                       self.ffi.NULL)
        if code != 0:
            log = info_str(self.lib.clGetProgramBuildInfo, program, CL_PROGRAM_BUILD_LOG, self.device_id)
            self.lib.clReleaseProgram(program)
            raise OpenCLBuildError(what, code, log, source)

    def _program_from_binary(self, binary: bytes) -> Any | None:
        """The program built from a cached binary, or None when the driver refuses it (then build from source)."""
        ffi, lib = self.ffi, self.lib
        data = ffi.from_buffer("unsigned char[]", binary)
        status = ffi.new("cl_int*")
        err = ffi.new("cl_int*")
        program = lib.clCreateProgramWithBinary(self.context, 1, self._dev, ffi.new("size_t*", len(binary)),
                                                ffi.new("unsigned char*[1]", [data]), status, err)
        if err[0] != 0 or status[0] != 0:
            if program != ffi.NULL:
                lib.clReleaseProgram(program)
            return None
        try:
            self._build(program, "", "clBuildProgram(binary)")
        except OpenCLBuildError:
            return None
        return program

    @property
    def _cache_ext(self) -> str:
        """What the kernel cache keeps of a built program: its binary, or on a CPU device its source."""
        return ".bin" if self.cache_binaries else ".cl"

    def _program_from_cached_source(self, path: Path) -> Any | None:
        """The program built from a batch source the cache kept for a CPU device (module docstring); None where the
        file is not the source its name hashes (then build from the kernels' own sources)."""
        source = path.read_text(errors="replace")
        if path.name != f"opencl-{self._cache_key(source)}.cl":
            return None
        try:
            return self._program_from_source(source, f"cached batch {path.name}")
        except OpenCLBuildError:
            return None

    def _program_from_source(self, source: str, what: str) -> Any:
        global cl_builds
        ffi = self.ffi
        src = ffi.new("char[]", source.encode())
        program = checked_create("clCreateProgramWithSource", self.lib.clCreateProgramWithSource, self.context, 1,
                                 ffi.new("char*[1]", [src]), ffi.NULL)
        cl_builds += 1
        self.build_count += 1
        self._build(program, source, f"clBuildProgram({what}) on {self.info.name}")
        return program

    def _program_binary(self, program: Any) -> bytes:
        ffi, lib = self.ffi, self.lib
        size = info_sizes(lib.clGetProgramInfo, program, CL_PROGRAM_BINARY_SIZES)[0]
        buf = ffi.new("unsigned char[]", max(size, 1))
        check("clGetProgramInfo(CL_PROGRAM_BINARIES)",
              lib.clGetProgramInfo(program, CL_PROGRAM_BINARIES, ffi.sizeof("void*"),
                                   ffi.new("unsigned char*[1]", [buf]), ffi.NULL))
        return ffi.buffer(buf, size)[:]

    def _build_batch(self, items: list[tuple[str, str]]) -> Any:
        """One program holding every kernel of ``items`` (name, source): one compiler run instead of one per
        kernel (several times faster on PoCL). Published to the cache, its binary or (``cache_binaries`` false)
        its source, with a .ref per kernel."""
        source = "\n".join(src for _, src in items)
        try:
            program = self._program_from_source(source, ", ".join(name for name, _ in items))
        except OpenCLBuildError:
            if len(items) == 1:
                raise
            for name, src in items:  # find the kernel at fault, so the error shows its own source and log
                self.lib.clReleaseProgram(self._program_from_source(src, name))
            raise
        batch_key, ext = self._cache_key(source), self._cache_ext
        self._fresh_batches.update((self._cache_key(src), source) for _, src in items)
        for stale in list(self._fresh_batches)[:-FRESH_BATCH_KERNELS]:  # never replayed (eager kernels): forgotten
            del self._fresh_batches[stale]
        published = cache_dir() / f"opencl-{batch_key}{ext}"
        publish(published, self._program_binary(program) if self.cache_binaries else source)
        self._keep_program(published, program)
        for _, src in items:
            if (key := self._cache_key(src)) != batch_key:
                publish(cache_dir() / f"opencl-{key}.ref", f"opencl-{batch_key}{ext}")
        return program

    def take_fresh_batches(self, kernel_sources: Iterable[str]) -> dict[str, str]:
        """For each of ``kernel_sources`` this process built from scratch and no replay has taken yet: the whole
        source of the program it was built in. Taken once: a second replay of the same kernels finds them compiled
        for its launches by the first (kernels loaded from the cache are never here)."""
        found: dict[str, str] = {}
        for source in kernel_sources:
            if source not in found and (batch := self._fresh_batches.pop(self._cache_key(source), None)) is not None:
                found[source] = batch
        return found

    def build_in_background(self, items: list[RenderedKernel],
                            built: Callable[[list[tuple[Program, RenderedKernel]]], None] | None = None) -> None:
        """Start building ``items`` on a background thread, as ``compile_many`` would (targets/replay_opencl.py
        ``OpenCLAheadBuild``: a capture's kernels while it renders the rest; the driver's compiler runs with the GIL
        released): those the kernel cache lacks as one program, published to the cache; those it holds from their
        cache files (on a CPU device the driver builds the cached source again, answered by its own cache), kept
        for this process. A later ``compile_many`` waits for it and finds them; a failed build is dropped, and
        ``compile_many`` builds those kernels itself and reports the error. ``built`` is called on that thread with
        each built kernel made launchable as ``compile_many`` makes it (targets/opencl_warm.py)."""
        ext = self._cache_ext
        fresh: list[RenderedKernel] = []
        stored: dict[Path, list[RenderedKernel]] = {}
        for k in items:
            path = cached_artifact(f"opencl-{self._cache_key(k.source)}", ext)
            if path is None:
                fresh.append(k)
            elif path.suffix == ext and path not in self._kept:
                stored.setdefault(path, []).append(k)
        if fresh or stored:
            if self._builder is None:
                self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drivepack-opencl-build")
            self._background.append(self._builder.submit(self._build_quietly, fresh, stored, built))

    def _build_quietly(self, fresh: list[RenderedKernel], stored: dict[Path, list[RenderedKernel]],
                       built: Callable[[list[tuple[Program, RenderedKernel]]], None] | None) -> None:
        made: list[tuple[Any, list[RenderedKernel]]] = []
        for path, kernels in stored.items():
            if path in self._kept:
                continue
            try:  # outside the lock, which compile_many would wait for: at worst both build one file
                program = self._program_from_binary(path.read_bytes()) if self.cache_binaries else \
                    self._program_from_cached_source(path)
            except (OSError, OpenCLError):
                continue  # compile_many reads or builds it again and reports what fails
            if program is not None:
                with self._build_lock:
                    self._keep_program(path, program)
                made.append((program, kernels))
        if fresh:
            try:
                with self._build_lock:
                    made.append((self._build_batch([(k.name, k.source) for k in fresh]), fresh))
            except OpenCLError:
                pass
        for program, kernels in made:
            try:
                if built is not None:
                    built([(self._kernel(k.name, k.source, dict(k.meta), program), k) for k in kernels])
            except OpenCLError:
                pass  # the capture's own build makes these kernels again and reports what fails
            finally:
                self.lib.clReleaseProgram(program)  # the kept programs hold a reference of their own

    prefetches_programs = True

    def program_keys(self, sources: Sequence[str]) -> list[str]:
        ext = self._cache_ext
        paths = (cached_artifact(f"opencl-{self._cache_key(source)}", ext) for source in sources)
        return list(dict.fromkeys(p.stem.removeprefix("opencl-") for p in paths if p is not None and p.suffix == ext))

    def prefetch(self, keys: Sequence[str], awaited: bool = False) -> None:
        if self._builder is None:
            self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drivepack-opencl-build")
        paths = (program_file(key, self._cache_ext) for key in keys)
        loading = self._builder.submit(self._build_quietly, [], {p: [] for p in paths if p is not None}, None)
        if awaited:
            self._background.append(loading)

    def compile(self, name: str, source: str, meta: dict[str, Any]) -> Program:
        return self.compile_many([(name, source, meta)])[0]

    def compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        """Kernels from the binary cache where present (background builds finished first); all others built
        together in one program."""
        pending, self._background = self._background, []
        for build in pending:
            build.result()
        with self.turns.wanted(self.warmer is not None), self._build_lock:
            return self._compile_many(items)

    def _compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        keys = [self._cache_key(source) for _, source, _ in items]
        owned: list[Any] = []  # one reference per program made here, dropped once its kernels retain their own
        by_key: dict[str, Any] = {}
        by_file: dict[Path, Any] = {}
        try:
            ext = self._cache_ext
            for key in keys:
                path = cached_artifact(f"opencl-{key}", ext)
                if path is not None and path.suffix != ext:
                    path = None  # a reference written under the other mode
                if path is not None and path not in by_file:
                    program = self._kept.get(path)
                    if program is None:
                        program = self._program_from_binary(path.read_bytes()) if self.cache_binaries else \
                            self._program_from_cached_source(path)
                        if program is not None:
                            owned.append(program)
                            self._keep_program(path, program)
                    else:
                        self._kept.move_to_end(path)
                    by_file[path] = program
                if path is not None and by_file[path] is not None:
                    by_key[key] = by_file[path]
            batches: list[dict[str, str]] = []  # kernel names must be unique within one program
            for (name, source, _), key in zip(items, keys, strict=True):
                if key in by_key or any(b.get(name) == source for b in batches):
                    continue
                batch = next((b for b in batches if name not in b), None)
                if batch is None:
                    batches.append(batch := {})
                batch[name] = source
            for batch in batches:
                program = self._build_batch(list(batch.items()))
                owned.append(program)
                by_key.update((self._cache_key(src), program) for src in batch.values())
            return [self._kernel(name, source, meta, by_key[key])
                    for (name, source, meta), key in zip(items, keys, strict=True)]
        finally:
            for program in owned:
                self.lib.clReleaseProgram(program)

    def _keep_program(self, path: Path, program: Any) -> None:
        """Keep ``program`` (a reference of its own) as the build of cache file ``path`` (``KEPT_PROGRAMS``)."""
        if path in self._kept:
            return
        check("clRetainProgram", self.lib.clRetainProgram(program))
        self._kept[path] = program
        while len(self._kept) > KEPT_PROGRAMS:
            self.lib.clReleaseProgram(self._kept.popitem(last=False)[1])

    def forget_compiled(self) -> None:
        while self._kept:
            self.lib.clReleaseProgram(self._kept.popitem()[1])

    def _kernel(self, name: str, source: str, meta: dict[str, Any], program: Any) -> Program:
        lib = self.lib
        kernel = checked_create(f"clCreateKernel({name})", lib.clCreateKernel, program, name.encode())
        check("clRetainProgram", lib.clRetainProgram(program))  # the kernel's own reference, see CLKernel
        max_group = info_uint(lib.clGetKernelWorkGroupInfo, kernel, CL_KERNEL_WORK_GROUP_SIZE, self.device_id)
        handle = CLKernel(self, program, kernel, max_group)
        global_size = tuple(meta.get("global_size", (1,)))
        group = int(meta.get("group", 0))
        local_size = None if group else valid_local_size(tuple(meta.get("local_request", ())), global_size,
                                                         min(max_group, self.max_group), self.max_items)
        if local_size is None:  # a group reduce's work-group is fixed: one output's group items
            local_size = group_local_size(global_size, group, min(max_group, self.max_group), self.max_items,
                                          self.preferred_local, int(meta.get("min_groups", self.min_groups)))
        return Program(name, source, handle, global_size=global_size, local_size=local_size, meta=meta)

    # --- memory --------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Buffer:
        # a zero-byte cl_mem is CL_INVALID_BUFFER_SIZE: empty tensors get one byte nobody reads
        handle = checked_create("clCreateBuffer", self.lib.clCreateBuffer, self.context, CL_MEM_READ_WRITE,
                                max(nbytes, 1), self.ffi.NULL)
        buf = Buffer(self, nbytes, handle)
        self.live["mem"] += 1
        weakref.finalize(buf, _release_mem, self.lib, handle, self.live).atexit = False
        return buf

    @property
    def host_pages(self) -> bool:
        """Whether this device's global memory is the host's own (a CPU device reporting
        CL_DEVICE_HOST_UNIFIED_MEMORY): a buffer over host memory (``allocate_host``) is then read and written in
        place, on the pages the host chose for it."""
        return bool(self.info.device_type & CL_DEVICE_TYPE_CPU) and self.info.host_unified_memory

    def allocate_host(self, memory: np.ndarray, read_only: bool = False) -> Buffer:
        """A buffer whose storage is ``memory`` (a contiguous array starting at CL_DEVICE_MEM_BASE_ADDR_ALIGN, kept
        alive by the buffer): CL_MEM_USE_HOST_PTR. Only where ``host_pages``; elsewhere a driver may keep a copy
        and synchronize it around every command."""
        if not self.host_pages:
            raise OpenCLError(f"allocate_host on {self.info.name}: a CPU device with CL_DEVICE_HOST_UNIFIED_MEMORY "
                              "expected", -30)
        address = memory.ctypes.data
        if address % max(self.info.base_addr_align_bytes, 1) or not memory.flags.c_contiguous or not memory.nbytes:
            raise ValueError(f"allocate_host: expected a contiguous, non-empty array at a multiple of "
                             f"{self.info.base_addr_align_bytes} bytes, got {memory.nbytes} bytes at {address:#x}")
        flags = (CL_MEM_READ_ONLY if read_only else CL_MEM_READ_WRITE) | CL_MEM_USE_HOST_PTR
        handle = checked_create("clCreateBuffer(CL_MEM_USE_HOST_PTR)", self.lib.clCreateBuffer, self.context, flags,
                                memory.nbytes, self.ffi.cast("void*", address))
        buf = Buffer(self, memory.nbytes, handle)
        self.live["mem"] += 1
        weakref.finalize(buf, _release_host_mem, self.lib, handle, memory, self.live).atexit = False
        return buf

    def allocate_shared(self, nbytes: int) -> tuple[Buffer, Any]:
        """A buffer whose storage is fine-grained SVM, and that memory's host pointer (``void*``): the host may
        write it before a command and read it after the command finished, with no command of its own. Only where
        the device reports CL_DEVICE_SVM_FINE_GRAIN_BUFFER."""
        if not self.info.svm_fine_grain_buffer:
            raise OpenCLError(f"clSVMAlloc: a device with CL_DEVICE_SVM_FINE_GRAIN_BUFFER expected, got "
                              f"{self.info.name}", -59)
        memory = self.lib.clSVMAlloc(self.context, CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, max(nbytes, 1), 0)
        if memory == self.ffi.NULL:
            raise OpenCLError(f"clSVMAlloc({nbytes} bytes, fine-grained) on {self.info.name}: memory expected, "
                              "got NULL", -4)
        try:  # a USE_HOST_PTR buffer over an SVM allocation has that memory as its storage (OpenCL 2.0)
            handle = checked_create("clCreateBuffer(SVM)", self.lib.clCreateBuffer, self.context,
                                    CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, max(nbytes, 1), memory)
        except OpenCLError:
            self.lib.clSVMFree(self.context, memory)
            raise
        buf = Buffer(self, nbytes, handle)
        self.live["mem"] += 1
        weakref.finalize(buf, _release_shared, self.lib, self.context, handle, memory, self.live).atexit = False
        return buf, memory

    def allocate_image(self, height: int, width: int, data: memoryview) -> Buffer:
        """A read-only image2d_t of ``height`` x ``width`` RGBA float texels holding ``data`` (float32 bytes in
        element order, zero-padded to fill the last texels): what an ImageDType kernel parameter reads."""
        size = height * width * 16
        if not self.info.image_support:
            raise OpenCLError(f"clCreateImage on {self.info.name}: CL_DEVICE_IMAGE_SUPPORT expected true, got false",
                              -10)
        if data.nbytes > size or data.nbytes % 4:
            raise ValueError(f"allocate_image: expected at most {size} bytes of float32, got {data.nbytes}")
        host = bytearray(size)
        host[:data.nbytes] = data.cast("B")
        fmt = self.ffi.new("cl_image_format*", [CL_RGBA, CL_FLOAT])
        desc = self.ffi.new("cl_image_desc*", {"image_type": CL_MEM_OBJECT_IMAGE2D, "image_width": width,
                                               "image_height": height})
        handle = checked_create("clCreateImage", self.lib.clCreateImage, self.context,
                                CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, fmt, desc, self.ffi.from_buffer(host))
        buf = Buffer(self, size, handle)
        self.live["mem"] += 1
        weakref.finalize(buf, _release_mem, self.lib, handle, self.live).atexit = False
        return buf

    @staticmethod
    def _check_size(what: str, buf: Buffer, host: memoryview) -> int:
        if host.nbytes != buf.nbytes:  # the CPU target refuses a size mismatch too (numpy assignment)
            raise ValueError(f"{what}: expected {buf.nbytes} host bytes, got {host.nbytes}")
        return buf.nbytes

    def copyin(self, buf: Buffer, data: memoryview) -> None:
        n = self._check_size("copyin", buf, data)
        if n:
            with self.turns.wanted(self.warmer is not None):
                check("clEnqueueWriteBuffer", self.lib.clEnqueueWriteBuffer(
                    self.queue, buf.handle, CL_TRUE, 0, n, self.ffi.from_buffer(data), 0, self.ffi.NULL,
                    self.ffi.NULL))

    def copyout(self, buf: Buffer, out: memoryview) -> None:
        n = self._check_size("copyout", buf, out)
        if n:  # blocking, on the in-order queue: every kernel writing ``buf`` has finished when it returns
            with self.turns.wanted(self.warmer is not None):
                check("clEnqueueReadBuffer", self.lib.clEnqueueReadBuffer(
                    self.queue, buf.handle, CL_TRUE, 0, n, self.ffi.from_buffer(out, require_writable=True), 0,
                    self.ffi.NULL, self.ffi.NULL))

    # --- execution -----------------------------------------------------------------------------------------
    def launch(self, prog: Program, bufs: list[Buffer], wait: bool = False) -> float | None:
        ffi, lib = self.ffi, self.lib
        with self.turns.wanted(self.warmer is not None):
            event = ffi.new("cl_event*") if wait else ffi.NULL
            if not self._enqueue(self.queue, prog, bufs, event):
                return 0.0 if wait else None
            if not wait:
                return None
            try:
                check("clWaitForEvents", lib.clWaitForEvents(1, event))
                t = ffi.new("cl_ulong*")
                check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
                    event[0], CL_PROFILING_COMMAND_START, ffi.sizeof("cl_ulong"), t, ffi.NULL))
                start = t[0]
                check("clGetEventProfilingInfo", lib.clGetEventProfilingInfo(
                    event[0], CL_PROFILING_COMMAND_END, ffi.sizeof("cl_ulong"), t, ffi.NULL))
                return (t[0] - start) * 1e-9
            finally:
                lib.clReleaseEvent(event[0])

    def launch_on(self, queue: Any, prog: Program, bufs: list[Buffer]) -> None:
        """Launch ``prog`` on ``queue``, another queue of this runtime's context, and wait for it; nothing of this
        runtime's own waits for it (targets/opencl_warm.py)."""
        if self._enqueue(queue, prog, bufs, self.ffi.NULL):
            check("clFinish", self.lib.clFinish(queue))

    def _enqueue(self, queue: Any, prog: Program, bufs: list[Buffer], event: Any) -> bool:
        """Bind ``bufs`` and enqueue ``prog`` on ``queue``; False (nothing enqueued) where it has no work items."""
        ffi, lib = self.ffi, self.lib
        k: CLKernel = prog.handle
        for i, b in enumerate(bufs):
            check(f"clSetKernelArg({prog.name}, {i})",
                  lib.clSetKernelArg(k.kernel, i, ffi.sizeof("cl_mem"), ffi.new("cl_mem*", b.handle)))
        gsize = prog.global_size
        if prod(gsize) == 0:
            return False
        local = None if NOLOCALS else prog.local_size
        code = lib.clEnqueueNDRangeKernel(queue, k.kernel, len(gsize), ffi.NULL, ffi.new("size_t[]", gsize),
                                          ffi.new("size_t[]", local) if local else ffi.NULL, 0, ffi.NULL, event)
        if code != 0:
            raise OpenCLError(f"clEnqueueNDRangeKernel({prog.name}, global {gsize}, local {local})", code)
        return True

    def synchronize(self) -> None:
        check("clFinish", self.lib.clFinish(self.queue))
