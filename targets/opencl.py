"""The OpenCL target: kernels rendered to OpenCL C by the shared C-style renderer, run through libOpenCL.

libOpenCL is bound with cffi in ABI mode (``dlopen``), so no C compiler is needed to load it. Device choice:
``DEV=OPENCL`` is device 0, ``OPENCL:1`` device 1, counted over the platforms whose name contains
``$DRIVEPACK_CL_PLATFORM`` (all platforms when unset). Supported dtypes come from the device's extensions
(cl_khr_fp16, cl_khr_fp64). Program binaries are cached on disk (same folder as the CPU target's objects) by
source + build options + platform + device + driver version, so a second process builds nothing.
``NOLOCALS=1`` launches with a NULL local size (the driver picks it).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections import Counter
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import cffi

from jit.codegen.opt.options import DEFAULT_OPTS, OptOptions
from jit.common.dtype import DType, dtypes
from jit.common.errors import CompileError, DrivepackError
from jit.common.helpers import NOLOCALS, prod
from jit.ir.uop import UOp
from targets.base import Buffer, Program, Target, TargetLimits
from targets.cpu import cache_dir, cached_artifact, publish
from targets.cstyle import CStyleLanguage, global_launch_size, group_range, render_kernel
from targets.registry import DeviceError

# the platform name substring that restricts device discovery (e.g. "Portable" for PoCL)
PLATFORM_ENV = "DRIVEPACK_CL_PLATFORM"
# work-group size aimed for when the device allows more: large enough to fill a GPU wave, small enough that
# register pressure does not bite; the device and kernel limits still cap it
PREFERRED_LOCAL_SIZE = 256
GROUPS_PER_COMPUTE_UNIT = 4  # enough work-groups per compute unit that an uneven split costs little

OPENCL_LANGUAGE = CStyleLanguage(
    kernel_prefix="__kernel void",
    buffer_prefix="__global ",
    # bool is not allowed in kernel arguments: bool buffers (and values, which are only ever 0 or 1) are uchar
    type_names={dtypes.bool: "uchar", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int",
                dtypes.int64: "long", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint",
                dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"},
    f32_math_suffix="",  # OpenCL C overloads exp/log/... on float; expf does not exist
    global_dims=3,
    global_index_fn="get_global_id",
    local_index_fn="get_local_id",
    local_array="__local {t} {name}[{n}];",
    local_barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    hoist_base_pointers=True,
    unroll_hint="#pragma unroll",
    bitcast_fmt="as_{dst_t}(({src_t})({x}))",
    image_param="read_only image2d_t",
    # element i of an image-held buffer: component i % 4 of texel i / 4, texels row-major (jit.common.dtype.ImageDType)
    image_helper="#ifndef DP_READ_IMAGE\n#define DP_READ_IMAGE\n"
                 "__constant sampler_t dp_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE |"
                 " CLK_FILTER_NEAREST;\n"
                 "float dp_read_image(read_only image2d_t img, int i, int width) {\n"
                 "  int t = i >> 2, c = i & 3;\n"
                 "  float4 v = read_imagef(img, dp_sampler, (int2)(t % width, t / width));\n"
                 "  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;\n"
                 "}\n#endif",
    image_read="dp_read_image({buf}, {idx}, {width})",
    # float4 is the native vector of the embedded GPUs this targets (Adreno, Mali); vload/vstore take any alignment
    vector_width=4,
    vector_type="{t}{n}",
    vector_load="vload{n}(0, {ptr})",
    vector_store="vstore{n}({val}, 0, {ptr});",
    vector_lane="{x}.s{hexi}",
    vector_ctor="(({vt})({lanes}))",
    vector_shuffle="shuffle2({a}, {b}, ({ut})({mask}))",
    # vector relational ops give -1/0 lanes; select() takes each lane's mask from its most significant bit
    vector_compare="(-({a}{op}{b}))",
    vector_select="select({b}, {a}, -{c})",
    vector_reinterpret="as_{vt}({x})",
    vector_convert="convert_{vt}({x})",
)


# work-items sharing one output's reduce on a GPU (jit/codegen/opt/group.py): half a wave on most GPUs, and within every
# device's minimum work-group size of 64 the OpenCL specification allows
GPU_GROUP_REDUCE = 32
GPU_OPTS = OptOptions(group_reduce=GPU_GROUP_REDUCE)


def opencl_vector_width(info: CLDeviceInfo) -> int:
    """Float lanes of a tile row's vectors on this device: its preferred float vector width (PoCL on AVX2: 8) as
    a power of two in 4..16; float4 where it prefers less (GPUs report 1: their vectors are float4 loads)."""
    preferred = info.preferred_vector_width_float
    return 1 << (min(max(preferred, 4), 16).bit_length() - 1)


# dtypes every full-profile OpenCL device computes in; half and double depend on extensions
_BASE_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.float32})
_INT64_DTYPES: frozenset[DType] = frozenset({dtypes.int64, dtypes.uint64})

# --- the libOpenCL binding -----------------------------------------------------------------------------------

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
cl_int clReleaseMemObject(cl_mem);
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
cl_mem clCreateImage(cl_context, cl_bitfield, const cl_image_format*, const cl_image_desc*, void*, cl_int*);
"""

CL_TRUE = 1
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_PLATFORM_VERSION, CL_PLATFORM_NAME = 0x0901, 0x0902
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1004, 0x1005
CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT = 0x1002, 0x100A
CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT = 0x1011, 0x1012
CL_DEVICE_IMAGE_SUPPORT, CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_GLOBAL_MEM_SIZE = 0x1016, 0x1019, 0x101F
CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_PROFILE, CL_DEVICE_VERSION = 0x102B, 0x102D, 0x102E, 0x102F
CL_DEVICE_EXTENSIONS = 0x1030
CL_DEVICE_TYPE, CL_DEVICE_TYPE_GPU = 0x1000, 1 << 2
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE, CL_MEM_READ_ONLY, CL_MEM_COPY_HOST_PTR = 1 << 0, 1 << 2, 1 << 5
CL_RGBA, CL_FLOAT, CL_MEM_OBJECT_IMAGE2D = 0x10B5, 0x10DE, 0x10F1
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_KERNEL_WORK_GROUP_SIZE = 0x11B0
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283

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
def _cl() -> tuple[cffi.FFI, Any]:
    """The cffi binding of libOpenCL (loaded once per process)."""
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


def _checked_create(what: str, fn: Any, *args: Any) -> Any:
    """Call a clCreate* function (status returned through the last argument)."""
    ffi, _ = _cl()
    err = ffi.new("cl_int*")
    handle = fn(*args, err)
    if err[0] != 0:
        raise OpenCLError(what, err[0])
    return handle


def _info_bytes(fn: Any, obj: Any, param: int, *extra: Any) -> bytes:
    """The raw bytes of a clGet*Info query (two calls: the size, then the data)."""
    ffi, _ = _cl()
    size = ffi.new("size_t*")
    check(f"{fn.__name__}({param:#x})", fn(obj, *extra, param, 0, ffi.NULL, size))
    buf = ffi.new("char[]", max(size[0], 1))
    check(f"{fn.__name__}({param:#x})", fn(obj, *extra, param, size[0], buf, ffi.NULL))
    return ffi.buffer(buf, size[0])[:]


def _info_str(fn: Any, obj: Any, param: int, *extra: Any) -> str:
    return _info_bytes(fn, obj, param, *extra).rstrip(b"\0").decode(errors="replace").strip()


def _info_uint(fn: Any, obj: Any, param: int, *extra: Any) -> int:
    return int.from_bytes(_info_bytes(fn, obj, param, *extra), "little")


def _info_sizes(fn: Any, obj: Any, param: int) -> tuple[int, ...]:
    raw, step = _info_bytes(fn, obj, param), _cl()[0].sizeof("size_t")
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


def _platforms() -> list[tuple[Any, str]]:
    ffi, lib = _cl()
    n = ffi.new("cl_uint*")
    code = lib.clGetPlatformIDs(0, ffi.NULL, n)
    if code == -1001 or n[0] == 0:  # the ICD loader's way of saying that no driver is installed
        return []
    check("clGetPlatformIDs", code)
    ids = ffi.new("cl_platform_id[]", n[0])
    check("clGetPlatformIDs", lib.clGetPlatformIDs(n[0], ids, ffi.NULL))
    return [(ids[i], _info_str(lib.clGetPlatformInfo, ids[i], CL_PLATFORM_NAME)) for i in range(n[0])]


def _device_info(index: int, platform: Any, platform_name: str, dev: Any) -> CLDeviceInfo:
    _, lib = _cl()
    q = lib.clGetDeviceInfo
    return CLDeviceInfo(
        index=index, platform=platform_name,
        platform_version=_info_str(lib.clGetPlatformInfo, platform, CL_PLATFORM_VERSION),
        name=_info_str(q, dev, CL_DEVICE_NAME), version=_info_str(q, dev, CL_DEVICE_VERSION),
        driver_version=_info_str(q, dev, CL_DRIVER_VERSION), profile=_info_str(q, dev, CL_DEVICE_PROFILE),
        extensions=frozenset(_info_str(q, dev, CL_DEVICE_EXTENSIONS).split()),
        max_work_group_size=_info_uint(q, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE),
        max_work_item_sizes=_info_sizes(q, dev, CL_DEVICE_MAX_WORK_ITEM_SIZES),
        base_addr_align_bytes=_info_uint(q, dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN) // 8,
        global_mem_size=_info_uint(q, dev, CL_DEVICE_GLOBAL_MEM_SIZE),
        image_support=bool(_info_uint(q, dev, CL_DEVICE_IMAGE_SUPPORT)),
        image2d_max=(_info_uint(q, dev, CL_DEVICE_IMAGE2D_MAX_HEIGHT), _info_uint(q, dev, CL_DEVICE_IMAGE2D_MAX_WIDTH)),
        preferred_vector_width_float=_info_uint(q, dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT),
        max_compute_units=_info_uint(q, dev, CL_DEVICE_MAX_COMPUTE_UNITS),
        device_type=_info_uint(q, dev, CL_DEVICE_TYPE))


def list_devices() -> list[tuple[Any, Any, CLDeviceInfo]]:
    """(platform id, device id, info) for every device, numbered across the platforms ``$DRIVEPACK_CL_PLATFORM``
    selects (a case-insensitive substring of the platform name; every platform when unset)."""
    ffi, lib = _cl()
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


def choose_local_size(global_size: tuple[int, ...], max_group: int, max_items: tuple[int, ...],
                      preferred: int = PREFERRED_LOCAL_SIZE, min_groups: int = 1) -> tuple[int, ...]:
    """A local size that divides ``global_size`` (OpenCL 1.2 needs uniform work-groups), stays within the
    per-dimension limits ``max_items`` and, in product, within ``min(max_group, preferred)``; dimension 0 (the
    innermost, contiguous in memory) is filled first. The budget halves while that leaves fewer than
    ``min_groups`` work-groups (a register-tiled kernel launches few items: 3 groups on 2 compute units leave
    one idle for a third of the time)."""
    budget = max(1, min(max_group, preferred))
    while True:
        local, left = [], budget
        for dim, g in enumerate(global_size):
            cap = min(left, max_items[dim] if dim < len(max_items) else 1, g)
            size = next(d for d in range(max(cap, 1), 0, -1) if g % d == 0)
            local.append(size)
            left //= size
        if budget == 1 or prod(global_size) // prod(local) >= min_groups:
            return tuple(local)
        budget //= 2


def group_local_size(global_size: tuple[int, ...], group: int, max_group: int, max_items: tuple[int, ...],
                     preferred: int = PREFERRED_LOCAL_SIZE, min_groups: int = 1) -> tuple[int, ...]:
    """``choose_local_size``, or for a kernel sharing reduces over dimension 0 (jit/codegen/opt/group.py) exactly one
    output's ``group`` work-items per work-group: the local array holding their partials is indexed by the local
    id of dimension 0 alone."""
    if group <= 1:
        return choose_local_size(global_size, max_group, max_items, preferred, min_groups)
    if group > min(max_group, max_items[0] if max_items else 1):
        raise CompileError(f"group reduce: {group} work-items expected within the work-group limits "
                          f"(max {max_group}, dimension 0 max {max_items[0] if max_items else 1})")
    return (group, *(1,) * (len(global_size) - 1))


def valid_local_size(local: tuple[int, ...], global_size: tuple[int, ...], max_group: int,
                     max_items: tuple[int, ...]) -> tuple[int, ...] | None:
    """``local`` when it is a launchable work-group size for ``global_size`` (one entry per dimension, each
    dividing its global extent and within ``max_items``, product within ``max_group``), else None."""
    if len(local) != len(global_size) or prod(local) > max_group:
        return None
    for dim, (lo, g) in enumerate(zip(local, global_size, strict=True)):
        if lo < 1 or g % lo or lo > (max_items[dim] if dim < len(max_items) else 1):
            return None
    return local


def _release_mem(lib: Any, handle: Any, live: Counter[str]) -> None:
    lib.clReleaseMemObject(handle)
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

    def __init__(self, target: OpenCLTarget, program: Any, kernel: Any, max_group: int) -> None:
        self.program, self.kernel, self.max_group = program, kernel, max_group
        target.live["kernel"] += 1
        target.live["program"] += 1
        # atexit=False: at interpreter exit the driver may already be tearing down; the process frees it all
        weakref.finalize(self, _release_program, target.lib, kernel, program, target.live).atexit = False


# builds from OpenCL C source in this process (a warm binary cache keeps it at 0)
cl_builds = 0


class OpenCLTarget(Target):
    """One OpenCL device: a context and an in-order, profiling-enabled command queue."""

    name = "OPENCL"

    def __init__(self, device: str = "OPENCL") -> None:
        base, _, idx = device.partition(":")
        self.name = device
        try:
            self.index = int(idx) if idx else 0
        except ValueError:
            raise OpenCLDeviceError(f"device {device!r}: expected OPENCL or OPENCL:<index>", -33) from None
        self.ffi, self.lib = _cl()
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
        dev = self.ffi.new("cl_device_id[1]", [self.device_id])
        self._dev = dev
        self.context = _checked_create("clCreateContext", self.lib.clCreateContext, self.ffi.NULL, 1, dev,
                                       self.ffi.NULL, self.ffi.NULL)
        self.queue = _checked_create("clCreateCommandQueue", self.lib.clCreateCommandQueue, self.context,
                                     self.device_id, CL_QUEUE_PROFILING_ENABLE)
        weakref.finalize(self, _release_queue, self.lib, self.queue, self.context).atexit = False
        self.limits = TargetLimits(max_local_size=info.max_work_group_size,
                                   max_local_dims=info.max_work_item_sizes,
                                   buffer_alignment=max(info.base_addr_align_bytes, 1),
                                   image2d_max=info.image2d_max if info.image_support else (0, 0))
        # the pragmas are only needed by OpenCL C 1.0/1.1 compilers, harmless elsewhere; emitted per device so the
        # renderer itself stays device-independent
        pragmas = tuple(f"#pragma OPENCL EXTENSION {ext} : enable" for ext in ("cl_khr_fp64", "cl_khr_fp16")
                        if ext in info.extensions)
        # a CPU device's compiler spills live accumulators inside the next reduce loop, and its work-items are
        # loops too; a GPU keeps accumulators in registers and wants one work-item per element
        cpu_device = not info.device_type & CL_DEVICE_TYPE_GPU
        self.language = replace(OPENCL_LANGUAGE, headers=pragmas, vector_width=opencl_vector_width(info),
                                park_accumulators=cpu_device, peel_launched_rows=cpu_device)
        self.build_options = ""
        # what local-size selection respects (a profile such as targets/qcom.py narrows these)
        self.max_group, self.max_items = info.max_work_group_size, info.max_work_item_sizes
        self.preferred_local = PREFERRED_LOCAL_SIZE
        self.min_groups = GROUPS_PER_COMPUTE_UNIT * max(info.max_compute_units, 1)
        # the optimizer's defaults for this device (jit/codegen/opt): a GPU shares long reduces across work-groups
        self.default_opts = GPU_OPTS if info.device_type & CL_DEVICE_TYPE_GPU else DEFAULT_OPTS

    def __repr__(self) -> str:
        return f"<OpenCLTarget {self.name}: {self.info.name} on {self.info.platform} {self.info.driver_version}>"

    # --- declared capabilities -----------------------------------------------------------------------------
    def supported_dtypes(self) -> frozenset[DType]:
        """Integers up to 32 bits and float32 always; 64-bit integers unless an embedded profile lacks
        cles_khr_int64; float16 with cl_khr_fp16, float64 with cl_khr_fp64; bfloat16 and fp8 never (emulated)."""
        ext, out = self.info.extensions, set(_BASE_DTYPES)
        if "EMBEDDED" not in self.info.profile or "cles_khr_int64" in ext:
            out |= _INT64_DTYPES
        if "cl_khr_fp16" in ext:
            out.add(dtypes.float16)
        if "cl_khr_fp64" in ext:
            out.add(dtypes.float64)
        return frozenset(out)

    # --- render and compile --------------------------------------------------------------------------------
    def render(self, name: str, sink: UOp) -> tuple[str, dict[str, Any]]:
        self.check_dtypes(name, sink)
        global_size = global_launch_size(self.language, sink)
        group = int(g.src[0].arg) if (g := group_range(sink)) is not None else 0
        local_size = group_local_size(global_size, group, self.max_group, self.max_items, self.preferred_local,
                                      self.min_groups)
        meta: dict[str, Any] = {"global_size": global_size, "local_size": local_size, "group": group}
        if requested := getattr(getattr(sink.arg, "opts", None), "local_size", ()):  # tuned (jit/codegen/opt/search.py)
            meta["local_request"] = tuple(requested)
        return render_kernel(self.language, name, sink), meta

    def _cache_key(self, source: str) -> str:
        i = self.info
        parts = (source, self.build_options, i.platform, i.platform_version, i.name, i.version, i.driver_version)
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _build(self, program: Any, source: str, what: str) -> None:
        code = self.lib.clBuildProgram(program, 1, self._dev, self.build_options.encode(), self.ffi.NULL,
                                       self.ffi.NULL)
        if code != 0:
            log = _info_str(self.lib.clGetProgramBuildInfo, program, CL_PROGRAM_BUILD_LOG, self.device_id)
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

    def _program_from_source(self, source: str, what: str) -> Any:
        global cl_builds
        ffi = self.ffi
        src = ffi.new("char[]", source.encode())
        program = _checked_create("clCreateProgramWithSource", self.lib.clCreateProgramWithSource, self.context, 1,
                                  ffi.new("char*[1]", [src]), ffi.NULL)
        cl_builds += 1
        self.build_count += 1
        self._build(program, source, f"clBuildProgram({what}) on {self.info.name}")
        return program

    def _program_binary(self, program: Any) -> bytes:
        ffi, lib = self.ffi, self.lib
        size = _info_sizes(lib.clGetProgramInfo, program, CL_PROGRAM_BINARY_SIZES)[0]
        buf = ffi.new("unsigned char[]", max(size, 1))
        check("clGetProgramInfo(CL_PROGRAM_BINARIES)",
              lib.clGetProgramInfo(program, CL_PROGRAM_BINARIES, ffi.sizeof("void*"),
                                   ffi.new("unsigned char*[1]", [buf]), ffi.NULL))
        return ffi.buffer(buf, size)[:]

    def _build_batch(self, items: list[tuple[str, str]]) -> Any:
        """One program holding every kernel of ``items`` (name, source): one compiler run instead of one per
        kernel (several times faster on PoCL). Published to the cache with a .ref per kernel."""
        source = "\n".join(src for _, src in items)
        try:
            program = self._program_from_source(source, ", ".join(name for name, _ in items))
        except OpenCLBuildError:
            if len(items) == 1:
                raise
            for name, src in items:  # find the kernel at fault, so the error shows its own source and log
                self.lib.clReleaseProgram(self._program_from_source(src, name))
            raise
        batch_key = self._cache_key(source)
        publish(cache_dir() / f"opencl-{batch_key}.bin", self._program_binary(program))
        for _, src in items:
            if (key := self._cache_key(src)) != batch_key:
                publish(cache_dir() / f"opencl-{key}.ref", f"opencl-{batch_key}.bin")
        return program

    def compile(self, name: str, source: str, meta: dict[str, Any]) -> Program:
        return self.compile_many([(name, source, meta)])[0]

    def compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        """Kernels from the binary cache where present; all others built together in one program."""
        keys = [self._cache_key(source) for _, source, _ in items]
        owned: list[Any] = []  # one reference per program made here, dropped once its kernels retain their own
        by_key: dict[str, Any] = {}
        by_file: dict[Path, Any] = {}
        try:
            for key in keys:
                path = cached_artifact(f"opencl-{key}", ".bin")
                if path is not None and path not in by_file:
                    by_file[path] = self._program_from_binary(path.read_bytes())
                    if by_file[path] is not None:
                        owned.append(by_file[path])
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

    def _kernel(self, name: str, source: str, meta: dict[str, Any], program: Any) -> Program:
        lib = self.lib
        kernel = _checked_create(f"clCreateKernel({name})", lib.clCreateKernel, program, name.encode())
        check("clRetainProgram", lib.clRetainProgram(program))  # the kernel's own reference, see CLKernel
        max_group = _info_uint(lib.clGetKernelWorkGroupInfo, kernel, CL_KERNEL_WORK_GROUP_SIZE, self.device_id)
        handle = CLKernel(self, program, kernel, max_group)
        global_size = tuple(meta.get("global_size", (1,)))
        group = int(meta.get("group", 0))
        local_size = None if group else valid_local_size(tuple(meta.get("local_request", ())), global_size,
                                                         min(max_group, self.max_group), self.max_items)
        if local_size is None:  # a group reduce's work-group is fixed: one output's group items
            local_size = group_local_size(global_size, group, min(max_group, self.max_group), self.max_items,
                                          self.preferred_local, self.min_groups)
        return Program(name, source, handle, global_size=global_size, local_size=local_size, meta=meta)

    # --- memory --------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Buffer:
        # a zero-byte cl_mem is CL_INVALID_BUFFER_SIZE: empty tensors get one byte nobody reads
        handle = _checked_create("clCreateBuffer", self.lib.clCreateBuffer, self.context, CL_MEM_READ_WRITE,
                                 max(nbytes, 1), self.ffi.NULL)
        buf = Buffer(self, nbytes, handle)
        self.live["mem"] += 1
        weakref.finalize(buf, _release_mem, self.lib, handle, self.live).atexit = False
        return buf

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
        handle = _checked_create("clCreateImage", self.lib.clCreateImage, self.context,
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
            check("clEnqueueWriteBuffer", self.lib.clEnqueueWriteBuffer(
                self.queue, buf.handle, CL_TRUE, 0, n, self.ffi.from_buffer(data), 0, self.ffi.NULL, self.ffi.NULL))

    def copyout(self, buf: Buffer, out: memoryview) -> None:
        n = self._check_size("copyout", buf, out)
        if n:  # blocking, on the in-order queue: every kernel writing ``buf`` has finished when it returns
            check("clEnqueueReadBuffer", self.lib.clEnqueueReadBuffer(
                self.queue, buf.handle, CL_TRUE, 0, n, self.ffi.from_buffer(out, require_writable=True), 0,
                self.ffi.NULL, self.ffi.NULL))

    # --- execution -----------------------------------------------------------------------------------------
    def launch(self, prog: Program, bufs: list[Buffer], wait: bool = False) -> float | None:
        ffi, lib = self.ffi, self.lib
        k: CLKernel = prog.handle
        for i, b in enumerate(bufs):
            check(f"clSetKernelArg({prog.name}, {i})",
                  lib.clSetKernelArg(k.kernel, i, ffi.sizeof("cl_mem"), ffi.new("cl_mem*", b.handle)))
        gsize = prog.global_size
        if prod(gsize) == 0:
            return 0.0 if wait else None
        local = None if NOLOCALS else prog.local_size
        event = ffi.new("cl_event*") if wait else ffi.NULL
        code = lib.clEnqueueNDRangeKernel(self.queue, k.kernel, len(gsize), ffi.NULL, ffi.new("size_t[]", gsize),
                                          ffi.new("size_t[]", local) if local else ffi.NULL, 0, ffi.NULL, event)
        if code != 0:
            raise OpenCLError(f"clEnqueueNDRangeKernel({prog.name}, global {gsize}, local {local})", code)
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

    def synchronize(self) -> None:
        check("clFinish", self.lib.clFinish(self.queue))
