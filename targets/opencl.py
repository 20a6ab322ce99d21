"""The OpenCL target's compiler side: kernels rendered to OpenCL C by the shared C-style renderer.

The device side (device choice, program builds and their binary cache, buffers, launches) is
targets/opencl_runtime.py, over the libOpenCL binding in targets/cl_binding.py; a replay uses it alone.
OpenCLTarget adds the OpenCL C flavour per device, the dtypes declared from the device's extensions (cl_khr_fp16,
cl_khr_fp64), the optimizer's defaults and ``render``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from jit.codegen.opt.options import WIDE_VECTOR_OPTS, OptOptions
from jit.codegen.stats import kernel_stats, shared_input
from jit.common.dtype import DType, dtypes
from jit.common.helpers import prod
from jit.ir.uop import Ops, UOp
from targets.base import DEFAULT_L2, CacheLevel, ChainLimits, Target, TargetLimits, TeamLimits
from targets.cl_binding import CL_DEVICE_TYPE_GPU, CLDeviceInfo
from targets.cpu_caches import cache_level, cpu_caches
from targets.cpu_fma import halved_wide_fma, wide_vectors_pay
from targets.cstyle.chains import render_chain, render_team
from targets.cstyle.language import CStyleLanguage
from targets.cstyle.walk import global_launch_size, global_ranges, group_range, render_kernel
from targets.opencl_local_size import group_local_size, sharing_local_size
from targets.opencl_runtime import IMAGE_HELPER, OpenCLRuntime
from targets.opencl_warm import ZEROED_ARGS
from targets.scatter import opencl_scatter_helpers

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
    unroll_hint="#pragma unroll",
    bitcast_fmt="as_{dst_t}(({src_t})({x}))",
    image_param="read_only image2d_t",
    image_helper=IMAGE_HELPER,
    image_read="dp_read_image({buf}, {idx}, {width})",
    # float4 is the native vector of the embedded GPUs this targets (Adreno, Mali); vload/vstore take any alignment
    vector_width=4,
    vector_type="{t}{n}",
    vector_load="vload{n}(0, {ptr})",
    vector_store="vstore{n}({val}, 0, {ptr});",
    vector_word_load="as_{vt}(vload{w}(0, (__global const uint*)({ptr})))",
    vector_word_store="vstore{w}(as_uint{w}({val}), 0, (__global uint*)({ptr}));",
    vector_lane="{x}.s{hexi}",
    vector_ctor="(({vt})({lanes}))",
    vector_splat="(({vt})({x}))",
    lane_shuffle=True,
    # vector relational ops give -1/0 lanes; select() takes each lane's mask from its most significant bit
    vector_compare="(-({a}{op}{b}))",
    vector_select="select({b}, {a}, -{c})",
    vector_reinterpret="as_{vt}({x})",
    vector_convert="convert_{vt}({x})",
)

# work-groups per compute unit for a CPU device's large kernels (``LARGE_KERNEL_FLOPS`` and more), four times the
# usual: PoCL's threads take a kernel's groups in halving chunks, so smaller groups even out the threads' shares where
# the work is long enough; small kernels lost more to the extra groups than they gained
LARGE_KERNEL_GROUPS_PER_UNIT = 16
LARGE_KERNEL_FLOPS = 10_000_000
# stores per work-item from which a CPU device's loop-free kernel launches one work-item per group (a Winograd
# transform's tile of 36 or 81 vectors): PoCL wraps a group's work-items in loops and compiled those bodies two to
# four times as long as the body alone, and one such work-item is already plenty of work per group
TILE_STORES = 16
# bytes of its largest input a CPU device's work-item reads per byte it stores (``SharedInput.reuse``) from which a
# work-group shares that input where the group's output outgrows the host's L2, or gets fewer groups for an input
# that outgrows it (``OpenCLTarget._cpu_device_group``): a group's items write rows apart, and where those rows stream
# past the L2 with few reads shared (a 1x1 conv widening 16 channels to 96, a 3-channel stem) the store streams cost
# more than the shared reads save
MIN_SHARED_REUSE = 4
HOST_L2 = cpu_caches().l2  # a CPU device is the host
# a CPU device's kernels small enough to run as one chain (jit/schedule/chains.py): PoCL's driver threads hand each
# command to the next through a lock and wake from a condition variable, which costs more than such a kernel's work
# (benchmarks/bench_opencl_join.py), while one work-item runs a chain's kernels back to back
CPU_DEVICE_CHAINS = ChainLimits(kernel_flops=1 << 17, kernel_bytes=1 << 17, chain_flops=1 << 19)
# and where its threads can spin: consecutive kernels run as one team (jit/schedule/chains.py ``team_kernels``), a
# dispatch of one work-group per thread for up to 16 kernels; PoCL compiles a team's kernel as one function, in time
# that grows faster than its size, so a kernel of more flops than this (whose dispatch costs it little) stays apart;
# four chunks per thread even out a member's share where a thread starts late (benchmarks/bench_chains.py)
CPU_DEVICE_TEAMS = TeamLimits(members=16, min_members=2, chunks=4, kernel_flops=1 << 24)
# a vector store on a CPU device (``device_language``)
CPU_DEVICE_VECTOR_STORE = "{{ {vt} _v = {val}; __builtin_memcpy({ptr}, &_v, sizeof(_v)); }}"
CPU_DEVICE_VECTOR_LOAD = "({{ {vt} _v; __builtin_memcpy(&_v, {ptr}, sizeof(_v)); _v; }})"


# work-items sharing one output's reduce on a GPU (jit/codegen/opt/group.py): half a wave on most GPUs, and within every
# device's minimum work-group size of 64 the OpenCL specification allows
GPU_GROUP_REDUCE = 32
GPU_OPTS = OptOptions(group_reduce=GPU_GROUP_REDUCE, unroll_hints=True, hoist_base_pointers=True)
# a CPU device's compiler (PoCL's LLVM) also spills live accumulators inside the next reduce loop. Unroll hints
# there only where a loop's trips share loads: on every short loop PoCL took 2.5-3.5x as long to compile the hinted
# kernels (efficientnet_b0's eight: 5.2-6.7 s against 1.9-2.0 s, its stem conv alone 2.7-3.7 s) and most ran no
# faster; a channel tile over a conv's taps loads each input once for all of them only unrolled
# (jit/codegen/opt/hints.py)
CPU_DEVICE_OPTS = OptOptions(hoist_base_pointers=True, park_accumulators=True, unroll_shared_loads=True)
# a CPU device of 16-lane vectors on a machine where they pay (targets/cpu_fma.py): the CPU target's
# tiles there (the 8-lane tiles' caps, counted in elements, leave too few 16-lane accumulators to keep the FMAs busy),
# but strided convs keep their row tiles: across channels PoCL ran the vision sample's 64-wide ones slower
WIDE_CPU_DEVICE_OPTS = replace(WIDE_VECTOR_OPTS, hoist_base_pointers=True, park_accumulators=True,
                               unroll_shared_loads=True, strided_channel_trips=0)


def opencl_vector_width(info: CLDeviceInfo) -> int:
    """Float lanes of a tile row's vectors on this device: its preferred float vector width (PoCL on AVX2: 8) as
    a power of two in 4..16; float4 where it prefers less (GPUs report 1: their vectors are float4 loads)."""
    preferred = info.preferred_vector_width_float
    return 1 << (min(max(preferred, 4), 16).bit_length() - 1)


# dtypes every full-profile OpenCL device computes in; half and double depend on extensions
_BASE_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.float32})
_INT64_DTYPES: frozenset[DType] = frozenset({dtypes.int64, dtypes.uint64})


def global_mem_cache(info: CLDeviceInfo) -> CacheLevel:
    """The device's global memory cache as the optimizer's ``TargetLimits.l2``: its size and line as the driver
    reports them (OpenCL does not say the associativity: ``DEFAULT_L2``'s), ``DEFAULT_L2`` where it reports none."""
    return cache_level(info.global_mem_cache_size, DEFAULT_L2.ways, info.global_mem_cacheline_size) or DEFAULT_L2


def device_language(info: CLDeviceInfo) -> CStyleLanguage:
    """OpenCL C as this device's compiler takes it best."""
    # the pragmas are only needed by OpenCL C 1.0/1.1 compilers, harmless elsewhere; emitted per device so the
    # renderer itself stays device-independent
    pragmas = tuple(f"#pragma OPENCL EXTENSION {ext} : enable" for ext in ("cl_khr_fp64", "cl_khr_fp16")
                    if ext in info.extensions)
    # a CPU device's work-items are loops too; a GPU wants one work-item per element
    cpu_device = not info.device_type & CL_DEVICE_TYPE_GPU
    lanes = opencl_vector_width(info)
    # a CPU device's rint(floatN), exp(floatN), erf(floatN) and rounding conversions are library code (PoCL's), a
    # GPU's a few instructions; and its compiler takes a scatter helper's call far faster than lane-by-lane stores
    # (targets/scatter.py). Its vloadN and vstoreN are library code too (a float16 stored as three pieces of 16, 16
    # and 32 bytes; loads its compiler reassembled element by element, slowly): a vector copied by memcpy is one
    # unaligned load or store, as on the C target
    cpu_vectors = {"vector_store": CPU_DEVICE_VECTOR_STORE, "vector_load": CPU_DEVICE_VECTOR_LOAD} if cpu_device else {}
    return replace(OPENCL_LANGUAGE, headers=pragmas, vector_width=lanes, peel_launched_rows=cpu_device,
                   vector_rint=not cpu_device, vector_exp=not cpu_device, **cpu_vectors,
                   vector_scatter=opencl_scatter_helpers(lanes) if cpu_device else {}, vector_scatter_lanes=lanes)


def is_store_tile(sink: UOp) -> bool:
    """Whether a kernel has no loop but its launch and stores at least ``TILE_STORES`` values per work-item."""
    stores = 0
    for u in sink.toposort():
        if u.op is Ops.RANGE and u.arg[1] not in ("global", "vector"):  # a vector range is its lanes, no loop
            return False
        stores += u.op is Ops.STORE
    return stores >= TILE_STORES


class OpenCLTarget(OpenCLRuntime, Target):
    """The OpenCL runtime plus rendering: OpenCL C for this device, its declared dtypes and optimizer defaults."""

    def __init__(self, device: str = "OPENCL") -> None:
        super().__init__(device)
        info = self.info
        self.limits = TargetLimits(max_local_size=info.max_work_group_size,
                                   max_local_dims=info.max_work_item_sizes,
                                   buffer_alignment=max(info.base_addr_align_bytes, 1),
                                   image2d_max=info.image2d_max if info.image_support else (0, 0),
                                   l2=global_mem_cache(info))
        self.language = device_language(info)
        # the optimizer's defaults for this device (jit/codegen/opt): a GPU shares long reduces across work-groups,
        # a CPU device's compiler wants its accumulators parked, and its 16-lane vectors the CPU target's wide tiles
        # where they pay (a CPU device is the host: targets/cpu_fma.py probes it); Winograd's choice goes by the
        # host's multiply-add units as on the CPU target (jit/frontend/winograd.py)
        self.large_kernel_groups = 0  # a GPU's groups follow GROUPS_PER_COMPUTE_UNIT only
        # a CPU device's work-groups gather the items that read the same input (opencl_local_size.py)
        self.cpu_device = not info.device_type & CL_DEVICE_TYPE_GPU
        if info.device_type & CL_DEVICE_TYPE_GPU:
            self.default_opts = GPU_OPTS
        else:
            wide = wide_vectors_pay(self.language.vector_width)
            self.default_opts = WIDE_CPU_DEVICE_OPTS if wide else CPU_DEVICE_OPTS
            self.halved_wide_fma = halved_wide_fma(self.language.vector_width)
            self.large_kernel_groups = LARGE_KERNEL_GROUPS_PER_UNIT * max(info.max_compute_units, 1)
            self.chain_limits = CPU_DEVICE_CHAINS
            self.team_limits = CPU_DEVICE_TEAMS

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

    # --- render -------------------------------------------------------------------------------------------
    def _cpu_device_group(self, sink: UOp, global_size: tuple[int, ...], min_groups: int) -> tuple[int, ...] | None:
        """A CPU device's work-group along the launch dimensions whose items read the same input
        (``sharing_local_size``), or None for the plain choice. None where the group's items would write an output
        larger than the host's L2 with little of that input shared (``MIN_SHARED_REUSE``). Where no such group leaves
        ``min_groups`` work-groups, an input larger than the L2 still gets one leaving an even share of at least two
        groups per compute unit, unless its sharers already run one after another (PoCL deals a thread consecutive
        groups, dimension 0 fastest): otherwise each thread streams it from memory once per group."""
        ranges = global_ranges(sink)[:self.language.global_dims][::-1]  # launch dimension d: ranges[d]
        inp = shared_input(sink, ranges)
        if inp.reuse < MIN_SHARED_REUSE and inp.stored_nbytes > HOST_L2.size:
            return None
        shared = sharing_local_size(global_size, inp.along, self.max_group, self.max_items, self.preferred_local,
                                    min_groups)
        first = next((d for d, g in enumerate(global_size) if g > 1), 0)
        if shared is not None or inp.nbytes <= HOST_L2.size or inp.reuse < MIN_SHARED_REUSE or \
                (first < len(inp.along) and inp.along[first]):
            return shared
        units = max(self.info.max_compute_units, 1)
        fewer = sharing_local_size(global_size, inp.along, self.max_group, self.max_items, self.preferred_local,
                                   2 * units)
        return fewer if fewer is not None and prod(global_size) // prod(fewer) % units == 0 else None

    def render(self, name: str, sink: UOp) -> tuple[str, dict[str, Any]]:
        self.check_dtypes(name, sink)
        global_size = global_launch_size(self.language, sink)
        group = int(g.src[0].arg) if (g := group_range(sink)) is not None else 0
        meta: dict[str, Any] = {"global_size": global_size, "group": group}
        if self.large_kernel_groups and kernel_stats(sink).flops >= LARGE_KERNEL_FLOPS:
            meta["min_groups"] = self.large_kernel_groups
        min_groups = meta.get("min_groups", self.min_groups)
        shared = self._cpu_device_group(sink, global_size, min_groups) if self.cpu_device and not group else None
        if self.cpu_device and not group and shared is None and is_store_tile(sink):
            shared = tuple(1 for _ in global_size)
        if shared is not None:  # asked of the runtime, which otherwise chooses the plain way again
            meta["local_size"] = meta["local_request"] = shared
        else:
            meta["local_size"] = group_local_size(global_size, group, self.max_group, self.max_items,
                                                  self.preferred_local, min_groups)
        if requested := getattr(getattr(sink.arg, "opts", None), "local_size", ()):  # tuned (jit/codegen/opt/search.py)
            meta["local_request"] = tuple(requested)
        return render_kernel(self.language, name, sink), meta

    def render_chain(self, name: str, parts: Sequence[tuple[UOp, tuple[int, ...]]],
                     params: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """The chain as one work-item (a CPU device runs it on one thread, back to back)."""
        for sink, _ in parts:
            self.check_dtypes(name, sink)
        one = (1,)
        return render_chain(replace(self.language, global_dims=0), name, parts, params), \
            {"global_size": one, "group": 0, "local_size": one, "local_request": one}

    def render_team(self, name: str, parts: Sequence[tuple[UOp, tuple[int, ...]]], params: Sequence[Any],
                    counters: int) -> tuple[str, dict[str, Any]]:
        """The team as one one-item work-group per compute unit (a CPU device runs each on a thread of its own)."""
        for sink, _ in parts:
            self.check_dtypes(name, sink)
        chunks = (self.team_limits or CPU_DEVICE_TEAMS).chunks
        lang = replace(self.language, global_dims=0, parallel_range=True)
        one, units = (1,), (max(self.info.max_compute_units, 1),)
        return render_team(lang, name, parts, params, counters, chunks * units[0]), \
            {"global_size": units, "group": 0, "local_size": one, "local_request": one, ZEROED_ARGS: (counters,)}
