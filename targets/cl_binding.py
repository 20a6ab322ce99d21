"""The libOpenCL binding (device side), shared by the OpenCL target and the OpenCL replay.

libOpenCL is bound once per process with cffi in ABI mode (``dlopen``), so no C compiler is needed to load it;
``$DRIVEPACK_OPENCL_LIB`` names another library to try first. The declarations cover what the target and the
replay call, sub-buffers and cl_khr_command_buffer's entry-point types included. ``list_devices`` numbers the
devices across the platforms whose name contains ``$DRIVEPACK_CL_PLATFORM`` (all platforms when unset).

Before the library loads, ``POCL_AFFINITY`` defaults to 1 where the process may run on every core (a value the
caller set is kept): PoCL's CPU driver then pins worker thread i to core i. Unpinned, Linux wakes both workers on the
waking core and takes dozens of launches to spread them, so a replay's first tens of milliseconds ran its kernels on
one core (benchmarks/bench_modeld.py). A process kept to some cores (``taskset``) is left unpinned: PoCL would pin its
workers to cores 0, 1, ... whatever the process was given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Any

import cffi

from jit.common.errors import CompileError, DeviceError, DrivepackError
from jit.common.helpers import usable_cores

# the platform name substring that restricts device discovery (e.g. "Portable" for PoCL)
PLATFORM_ENV = "DRIVEPACK_CL_PLATFORM"
# PoCL's switch that pins its CPU driver's worker threads, read when the library initialises its devices
POCL_AFFINITY_ENV = "POCL_AFFINITY"

_CDEF = """
typedef int32_t cl_int; typedef uint32_t cl_uint; typedef uint64_t cl_ulong; typedef cl_ulong cl_bitfield;
typedef cl_uint cl_bool; typedef intptr_t cl_context_properties;
typedef struct _cl_platform_id* cl_platform_id; typedef struct _cl_device_id* cl_device_id;
typedef struct _cl_context* cl_context; typedef struct _cl_command_queue* cl_command_queue;
typedef struct _cl_mem* cl_mem; typedef struct _cl_program* cl_program; typedef struct _cl_kernel* cl_kernel;
typedef struct _cl_event* cl_event;
cl_int clGetPlatformIDs(cl_uint, cl_platform_id*, cl_uint*);
cl_int clGetPlatformInfo(cl_platform_id, cl_uint, size_t, void*, size_t*);
cl_int clGetDeviceIDs(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
cl_int clGetDeviceInfo(cl_device_id, cl_uint, size_t, void*, size_t*);
cl_context clCreateContext(const cl_context_properties*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
cl_int clReleaseContext(cl_context);
cl_command_queue clCreateCommandQueue(cl_context, cl_device_id, cl_bitfield, cl_int*);
cl_int clReleaseCommandQueue(cl_command_queue);
cl_int clFinish(cl_command_queue);
cl_int clFlush(cl_command_queue);
cl_mem clCreateBuffer(cl_context, cl_bitfield, size_t, void*, cl_int*);
void* clSVMAlloc(cl_context, cl_bitfield, size_t, cl_uint);
void clSVMFree(cl_context, void*);
cl_int clReleaseMemObject(cl_mem);
cl_int clGetMemObjectInfo(cl_mem, cl_uint, size_t, void*, size_t*);
cl_int clEnqueueWriteBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint,
                            const cl_event*, cl_event*);
cl_int clEnqueueReadBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint,
                           const cl_event*, cl_event*);
cl_program clCreateProgramWithSource(cl_context, cl_uint, const char**, const size_t*, cl_int*);
cl_program clCreateProgramWithBinary(cl_context, cl_uint, const cl_device_id*, const size_t*,
                                     const unsigned char**, cl_int*, cl_int*);
cl_int clBuildProgram(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
cl_int clGetProgramBuildInfo(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
cl_int clGetProgramInfo(cl_program, cl_uint, size_t, void*, size_t*);
cl_int clReleaseProgram(cl_program);
cl_int clRetainProgram(cl_program);
cl_kernel clCreateKernel(cl_program, const char*, cl_int*);
cl_int clReleaseKernel(cl_kernel);
cl_int clSetKernelArg(cl_kernel, cl_uint, size_t, const void*);
cl_int clGetKernelWorkGroupInfo(cl_kernel, cl_device_id, cl_uint, size_t, void*, size_t*);
cl_int clEnqueueNDRangeKernel(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*,
                              cl_uint, const cl_event*, cl_event*);
cl_int clWaitForEvents(cl_uint, const cl_event*);
cl_int clGetEventProfilingInfo(cl_event, cl_uint, size_t, void*, size_t*);
cl_int clReleaseEvent(cl_event);
typedef struct { cl_uint image_channel_order; cl_uint image_channel_data_type; } cl_image_format;
typedef struct { cl_uint image_type; size_t image_width; size_t image_height; size_t image_depth;
                 size_t image_array_size; size_t image_row_pitch; size_t image_slice_pitch; cl_uint num_mip_levels;
                 cl_uint num_samples; cl_mem buffer; } cl_image_desc;
void* clEnqueueMapBuffer(cl_command_queue, cl_mem, cl_bool, cl_bitfield, size_t, size_t, cl_uint, const cl_event*,
                         cl_event*, cl_int*);
cl_int clEnqueueUnmapMemObject(cl_command_queue, cl_mem, void*, cl_uint, const cl_event*, cl_event*);
cl_mem clCreateImage(cl_context, cl_bitfield, const cl_image_format*, const cl_image_desc*, void*, cl_int*);
// sub-buffers, and the types of the cl_khr_command_buffer 0.9.x entry points (fetched per platform with
// clGetExtensionFunctionAddressForPlatform: targets/replay_opencl.py)
typedef struct _cl_command_buffer_khr* cl_command_buffer_khr;
typedef cl_uint cl_sync_point_khr;
typedef struct _cl_mutable_command_khr* cl_mutable_command_khr;
void* clGetExtensionFunctionAddressForPlatform(cl_platform_id, const char*);
cl_mem clCreateSubBuffer(cl_mem, cl_bitfield, cl_uint, const void*, cl_int*);
typedef cl_command_buffer_khr (*clCreateCommandBufferKHR_fn)(cl_uint, const cl_command_queue*, const cl_bitfield*,
                                                              cl_int*);
typedef cl_int (*clCommandNDRangeKernelKHR_fn)(cl_command_buffer_khr, cl_command_queue, const cl_bitfield*,
                                               cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*,
                                               cl_uint, const cl_sync_point_khr*, cl_sync_point_khr*,
                                               cl_mutable_command_khr*);
typedef cl_int (*clFinalizeCommandBufferKHR_fn)(cl_command_buffer_khr);
typedef cl_int (*clEnqueueCommandBufferKHR_fn)(cl_uint, cl_command_queue*, cl_command_buffer_khr, cl_uint,
                                               const cl_event*, cl_event*);
typedef cl_int (*clReleaseCommandBufferKHR_fn)(cl_command_buffer_khr);
"""

CL_FALSE, CL_TRUE = 0, 1
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_PLATFORM_VERSION, CL_PLATFORM_NAME = 0x0901, 0x0902
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1004, 0x1005
CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT = 0x1002, 0x100A
CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT = 0x1011, 0x1012
CL_DEVICE_IMAGE_SUPPORT, CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_GLOBAL_MEM_SIZE = 0x1016, 0x1019, 0x101F
CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE = 0x101D, 0x101E
CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_PROFILE, CL_DEVICE_VERSION = 0x102B, 0x102D, 0x102E, 0x102F
CL_DEVICE_EXTENSIONS, CL_DEVICE_HOST_UNIFIED_MEMORY = 0x1030, 0x1035
CL_DEVICE_TYPE, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU = 0x1000, 1 << 1, 1 << 2
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE, CL_MEM_READ_ONLY, CL_MEM_USE_HOST_PTR, CL_MEM_COPY_HOST_PTR = 1 << 0, 1 << 2, 1 << 3, 1 << 5
CL_DEVICE_SVM_CAPABILITIES, CL_DEVICE_SVM_FINE_GRAIN_BUFFER, CL_MEM_SVM_FINE_GRAIN_BUFFER = 0x1053, 1 << 1, 1 << 10
CL_MAP_WRITE_INVALIDATE_REGION = 1 << 2
CL_MEM_FLAGS, CL_MEM_HOST_PTR = 0x1101, 0x1103
CL_RGBA, CL_FLOAT, CL_MEM_OBJECT_IMAGE2D = 0x10B5, 0x10DE, 0x10F1
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_KERNEL_WORK_GROUP_SIZE = 0x11B0
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
COMMAND_BUFFER_EXT = "cl_khr_command_buffer"
CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR = 0x12A9, 1 << 2
CL_COMMAND_BUFFER_FLAGS_KHR, CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR = 0x1293, 1 << 0
CL_INVALID_OPERATION = -59

CL_ERROR_NAMES: dict[int, str] = {
    0: "CL_SUCCESS", -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
    -7: "CL_PROFILING_INFO_NOT_AVAILABLE", -8: "CL_MEM_COPY_OVERLAP", -9: "CL_IMAGE_FORMAT_MISMATCH",
    -10: "CL_IMAGE_FORMAT_NOT_SUPPORTED", -11: "CL_BUILD_PROGRAM_FAILURE", -12: "CL_MAP_FAILURE",
    -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET", -14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
    -15: "CL_COMPILE_PROGRAM_FAILURE", -16: "CL_LINKER_NOT_AVAILABLE", -17: "CL_LINK_PROGRAM_FAILURE",
    -18: "CL_DEVICE_PARTITION_FAILED", -19: "CL_KERNEL_ARG_INFO_NOT_AVAILABLE",
    -30: "CL_INVALID_VALUE", -31: "CL_INVALID_DEVICE_TYPE", -32: "CL_INVALID_PLATFORM", -33: "CL_INVALID_DEVICE",
    -34: "CL_INVALID_CONTEXT", -35: "CL_INVALID_QUEUE_PROPERTIES", -36: "CL_INVALID_COMMAND_QUEUE",
    -37: "CL_INVALID_HOST_PTR", -38: "CL_INVALID_MEM_OBJECT", -39: "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR",
    -40: "CL_INVALID_IMAGE_SIZE", -41: "CL_INVALID_SAMPLER", -42: "CL_INVALID_BINARY",
    -43: "CL_INVALID_BUILD_OPTIONS", -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE",
    -46: "CL_INVALID_KERNEL_NAME", -47: "CL_INVALID_KERNEL_DEFINITION", -48: "CL_INVALID_KERNEL",
    -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE",
    -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE",
    -55: "CL_INVALID_WORK_ITEM_SIZE", -56: "CL_INVALID_GLOBAL_OFFSET", -57: "CL_INVALID_EVENT_WAIT_LIST",
    -58: "CL_INVALID_EVENT", -59: "CL_INVALID_OPERATION", -60: "CL_INVALID_GL_OBJECT",
    -61: "CL_INVALID_BUFFER_SIZE", -62: "CL_INVALID_MIP_LEVEL", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
    -64: "CL_INVALID_PROPERTY", -65: "CL_INVALID_IMAGE_DESCRIPTOR", -66: "CL_INVALID_COMPILER_OPTIONS",
    -67: "CL_INVALID_LINKER_OPTIONS", -68: "CL_INVALID_DEVICE_PARTITION_COUNT", -69: "CL_INVALID_PIPE_SIZE",
    -70: "CL_INVALID_DEVICE_QUEUE", -71: "CL_INVALID_SPEC_ID", -72: "CL_MAX_SIZE_RESTRICTION_EXCEEDED",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR", -1138: "CL_INVALID_COMMAND_BUFFER_KHR",
    -1139: "CL_INVALID_SYNC_POINT_WAIT_LIST_KHR", -1140: "CL_INCOMPATIBLE_COMMAND_QUEUE_KHR",
}


def error_name(code: int) -> str:
    return CL_ERROR_NAMES.get(code, f"CL_UNKNOWN_ERROR({code})")


class OpenCLError(DrivepackError, RuntimeError):
    """An OpenCL call that failed; ``code`` is the OpenCL status and ``code_name`` its name."""

    def __init__(self, what: str, code: int, detail: str = "") -> None:
        self.code, self.code_name = code, error_name(code)
        super().__init__(f"{what}: {self.code_name} ({code}){detail}")


class OpenCLBuildError(OpenCLError, CompileError):
    """A program that failed to build; ``build_log`` holds the OpenCL C compiler's output."""

    def __init__(self, what: str, code: int, build_log: str, source: str) -> None:
        self.build_log, self.source = build_log, source
        super().__init__(what, code, f"\n--- build log ---\n{build_log.rstrip()}\n--- source ---\n{source}")


class OpenCLDeviceError(OpenCLError, DeviceError):
    """No libOpenCL, no platform, or no device at the requested index."""


@cache
def libopencl() -> tuple[cffi.FFI, Any]:
    """The cffi binding of libOpenCL (loaded once per process)."""
    if POCL_AFFINITY_ENV not in os.environ and usable_cores() == (os.cpu_count() or 1):
        os.environ[POCL_AFFINITY_ENV] = "1"
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    names = [os.environ["DRIVEPACK_OPENCL_LIB"]] if os.environ.get("DRIVEPACK_OPENCL_LIB") else []
    for lib_name in [*names, "libOpenCL.so.1", "libOpenCL.so"]:
        try:
            return ffi, ffi.dlopen(lib_name)
        except OSError:
            continue
    raise OpenCLDeviceError("OPENCL: expected libOpenCL.so.1 (Debian: ocl-icd-libopencl1 plus an ICD such as "
                            "pocl-opencl-icd), found none", -1)


def check(what: str, code: int) -> None:
    if code != 0:
        raise OpenCLError(what, code)


def checked_create(what: str, fn: Any, *args: Any) -> Any:
    """Call a clCreate* function (status returned through the last argument); OpenCLError when it fails."""
    ffi, _ = libopencl()
    err = ffi.new("cl_int*")
    handle = fn(*args, err)
    if err[0] != 0:
        raise OpenCLError(what, err[0])
    return handle


def info_bytes(fn: Any, obj: Any, param: int, *extra: Any) -> bytes:
    """The raw bytes of a clGet*Info query (two calls: the size, then the data)."""
    ffi, _ = libopencl()
    size = ffi.new("size_t*")
    check(f"{fn.__name__}({param:#x})", fn(obj, *extra, param, 0, ffi.NULL, size))
    buf = ffi.new("char[]", max(size[0], 1))
    check(f"{fn.__name__}({param:#x})", fn(obj, *extra, param, size[0], buf, ffi.NULL))
    return ffi.buffer(buf, size[0])[:]


def info_str(fn: Any, obj: Any, param: int, *extra: Any) -> str:
    return info_bytes(fn, obj, param, *extra).rstrip(b"\0").decode(errors="replace").strip()


def info_uint(fn: Any, obj: Any, param: int, *extra: Any) -> int:
    return int.from_bytes(info_bytes(fn, obj, param, *extra), "little")


def info_sizes(fn: Any, obj: Any, param: int) -> tuple[int, ...]:
    raw, step = info_bytes(fn, obj, param), libopencl()[0].sizeof("size_t")
    return tuple(int.from_bytes(raw[i:i + step], "little") for i in range(0, len(raw), step))


@dataclass(frozen=True)
class CLDeviceInfo:
    """What drivepack needs to know about one OpenCL device."""

    index: int
    platform: str
    platform_version: str
    name: str
    version: str
    driver_version: str
    profile: str
    extensions: frozenset[str]
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    base_addr_align_bytes: int
    global_mem_size: int
    image_support: bool
    image2d_max: tuple[int, int]  # (height, width) in pixels
    preferred_vector_width_float: int = 4
    max_compute_units: int = 1
    device_type: int = 0  # CL_DEVICE_TYPE bits
    global_mem_cache_size: int = 0  # bytes; 0: the driver reports no global memory cache
    global_mem_cacheline_size: int = 0
    # CL_DEVICE_HOST_UNIFIED_MEMORY: device and host share memory, so a CL_MEM_USE_HOST_PTR buffer is read in place
    host_unified_memory: bool = False
    # CL_DEVICE_SVM_FINE_GRAIN_BUFFER (OpenCL 2.0+): the host may read and write clSVMAlloc'd memory between commands
    # without a map, a write or a read command
    svm_fine_grain_buffer: bool = False
    # CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR: a recorded command buffer may be enqueued again while an
    # earlier enqueue of it is pending
    command_buffer_simultaneous_use: bool = False


def _platforms() -> list[tuple[Any, str]]:
    ffi, lib = libopencl()
    n = ffi.new("cl_uint*")
    code = lib.clGetPlatformIDs(0, ffi.NULL, n)
    if code == -1001 or n[0] == 0:  # the ICD loader's way of saying that no driver is installed
        return []
    check("clGetPlatformIDs", code)
    ids = ffi.new("cl_platform_id[]", n[0])
    check("clGetPlatformIDs", lib.clGetPlatformIDs(n[0], ids, ffi.NULL))
    return [(ids[i], info_str(lib.clGetPlatformInfo, ids[i], CL_PLATFORM_NAME)) for i in range(n[0])]


def _device_info(index: int, platform: Any, platform_name: str, dev: Any) -> CLDeviceInfo:
    _, lib = libopencl()
    q = lib.clGetDeviceInfo
    return CLDeviceInfo(
        index=index, platform=platform_name,
        platform_version=info_str(lib.clGetPlatformInfo, platform, CL_PLATFORM_VERSION),
        name=info_str(q, dev, CL_DEVICE_NAME), version=info_str(q, dev, CL_DEVICE_VERSION),
        driver_version=info_str(q, dev, CL_DRIVER_VERSION), profile=info_str(q, dev, CL_DEVICE_PROFILE),
        extensions=frozenset(info_str(q, dev, CL_DEVICE_EXTENSIONS).split()),
        max_work_group_size=info_uint(q, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE),
        max_work_item_sizes=info_sizes(q, dev, CL_DEVICE_MAX_WORK_ITEM_SIZES),
        base_addr_align_bytes=info_uint(q, dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN) // 8,
        global_mem_size=info_uint(q, dev, CL_DEVICE_GLOBAL_MEM_SIZE),
        image_support=bool(info_uint(q, dev, CL_DEVICE_IMAGE_SUPPORT)),
        image2d_max=(info_uint(q, dev, CL_DEVICE_IMAGE2D_MAX_HEIGHT), info_uint(q, dev, CL_DEVICE_IMAGE2D_MAX_WIDTH)),
        preferred_vector_width_float=info_uint(q, dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT),
        max_compute_units=info_uint(q, dev, CL_DEVICE_MAX_COMPUTE_UNITS),
        device_type=info_uint(q, dev, CL_DEVICE_TYPE),
        global_mem_cache_size=info_uint(q, dev, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE),
        global_mem_cacheline_size=info_uint(q, dev, CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE),
        host_unified_memory=bool(info_uint(q, dev, CL_DEVICE_HOST_UNIFIED_MEMORY)),
        svm_fine_grain_buffer=bool(_svm_capabilities(dev) & CL_DEVICE_SVM_FINE_GRAIN_BUFFER),
        command_buffer_simultaneous_use=bool(
            _command_buffer_capabilities(dev) & CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR))


def _command_buffer_capabilities(dev: Any) -> int:
    """CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, 0 where the device lacks cl_khr_command_buffer (the query is
    CL_INVALID_VALUE there)."""
    ffi, lib = libopencl()
    bits = ffi.new("cl_ulong*")
    if lib.clGetDeviceInfo(dev, CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, ffi.sizeof("cl_ulong"), bits, ffi.NULL):
        return 0
    return int(bits[0])


def _svm_capabilities(dev: Any) -> int:
    """CL_DEVICE_SVM_CAPABILITIES, 0 where the device predates OpenCL 2.0 (the query is CL_INVALID_VALUE there) or
    the ICD loader exports no clSVMAlloc (one older than OpenCL 2.0)."""
    ffi, lib = libopencl()
    if not all(hasattr(lib, name) for name in ("clSVMAlloc", "clSVMFree")):  # symbols resolve on first access
        return 0
    bits = ffi.new("cl_ulong*")
    if lib.clGetDeviceInfo(dev, CL_DEVICE_SVM_CAPABILITIES, ffi.sizeof("cl_ulong"), bits, ffi.NULL) != 0:
        return 0
    return int(bits[0])


def list_devices() -> list[tuple[Any, Any, CLDeviceInfo]]:
    """(platform id, device id, info) for every device, numbered across the platforms ``$DRIVEPACK_CL_PLATFORM``
    selects (a case-insensitive substring of the platform name; every platform when unset)."""
    ffi, lib = libopencl()
    want = os.environ.get(PLATFORM_ENV, "").lower()
    out: list[tuple[Any, Any, CLDeviceInfo]] = []
    for platform, pname in _platforms():
        if want and want not in pname.lower():
            continue
        n = ffi.new("cl_uint*")
        if lib.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, ffi.NULL, n) != 0 or n[0] == 0:
            continue  # CL_DEVICE_NOT_FOUND: a platform with no device is not an error here
        ids = ffi.new("cl_device_id[]", n[0])
        check("clGetDeviceIDs", lib.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n[0], ids, ffi.NULL))
        out.extend((platform, ids[i], _device_info(len(out) + i, platform, pname, ids[i])) for i in range(n[0]))
    return out
