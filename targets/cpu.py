"""The CPU target's compiler side: kernels rendered to C by the shared C-style renderer.

Compiling, loading (cffi), buffers and launches are the device side's (targets/cpu_runtime.py, which a replay
uses alone); CPUTarget adds the C flavour, the declared dtypes and ``render``.
"""

from __future__ import annotations

import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

from jit.codegen.opt.options import DEFAULT_OPTS, WIDE_VECTOR_OPTS, OptOptions
from jit.common.dtype import DType, dtypes
from jit.ir.uop import UOp
from targets.base import Target, TargetLimits
from targets.cpu_caches import cpu_caches
from targets.cpu_fma import halved_wide_fma, wide_vectors_pay
from targets.cpu_runtime import CPURuntime
from targets.cstyle.language import CStyleLanguage
from targets.cstyle.walk import render_kernel_info
from targets.minmax import minmax_helpers
from targets.scatter import SCATTER_HELPERS, SCATTER_LANES


def _host_vector_width() -> int:
    """Float32 lanes of the host's widest vector registers (kernels are compiled with -march=native)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 4
    return 16 if " avx512f" in flags else 8 if " avx" in flags else 4


CPU_VECTOR_WIDTH = _host_vector_width()
HOST_CACHES = cpu_caches()  # kernels are compiled for this machine (-march=native): sized for its caches too

CPU_LANGUAGE = CStyleLanguage(
    headers=("#include <math.h>", "#include <stdint.h>"),
    type_names={dtypes.bool: "_Bool", dtypes.float16: "_Float16"},
    # parallel kernels take their loop range as parameters; the launcher splits it over the thread pool
    # (targets/cpu_pool.py): no OpenMP, no team barrier waiting for a thread the OS did not schedule
    parallel_range=True,
    # GCC vector extensions; loads and stores go through memcpy, which compiles to one unaligned vector move
    vector_width=CPU_VECTOR_WIDTH,
    vector_math=False,
    vector_type="dp_{name}x{n}",
    vector_typedef="typedef {t} {vt} __attribute__((vector_size({nbytes})));",
    vector_load="({{ {vt} _v; __builtin_memcpy(&_v, {ptr}, sizeof(_v)); _v; }})",
    vector_store="{{ {vt} _v = {val}; __builtin_memcpy({ptr}, &_v, sizeof(_v)); }}",
    vector_shuffle="__builtin_shuffle({a}, {b}, ({it}){{{mask}}})",
    # GCC's vector comparisons give -1/0 lanes; a select is a bitwise blend by the 0/1 lanes' all-ones masks
    vector_compare="(-({a}{op}{b}))",
    vector_select="(({vt})((({it}){a}&-{c})|(({it}){b}&({c}-1))))",
    vector_reinterpret="(({vt})({x}))",
    vector_convert="__builtin_convertvector({x}, {vt})",
    widen_stepwise=True,
    vector_scatter=SCATTER_HELPERS if CPU_VECTOR_WIDTH == SCATTER_LANES else {},
    vector_scatter_lanes=SCATTER_LANES,
    vector_minmax=minmax_helpers(CPU_VECTOR_WIDTH) if platform.machine() in ("x86_64", "AMD64") else {},
    vector_minmax_lanes=CPU_VECTOR_WIDTH,
    prefetch="__builtin_prefetch({p}, 0, 3)",
)
CPU_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
    dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64})


class CPUTarget(CPURuntime, Target):
    """The CPU runtime plus rendering: kernels in C with GCC vector extensions, split over the thread pool."""

    name = "CPU"
    # the caches the optimizer sizes loops by: what the OS says about this machine's (targets/cpu_caches.py)
    limits = TargetLimits(max_local_size=1, buffer_alignment=64, l1=HOST_CACHES.l1, l2=HOST_CACHES.l2)
    language = CPU_LANGUAGE

    def __init__(self, threads: int | None = None) -> None:
        super().__init__(threads)
        # the optimizer's defaults: WIDE_VECTOR_OPTS where this machine's 16-lane vectors pay (targets/cpu_fma.py
        # probes its FMA throughput once per machine); a C compiler takes prefetch requests (``prefetch``)
        opts = WIDE_VECTOR_OPTS if wide_vectors_pay(CPU_VECTOR_WIDTH) else DEFAULT_OPTS
        self.default_opts: OptOptions = replace(opts, prefetch_next_slices=True)
        self.halved_wide_fma = halved_wide_fma(CPU_VECTOR_WIDTH)

    def supported_dtypes(self) -> frozenset[DType]:
        """C with GCC/Clang: every integer width, _Float16, float and double. bfloat16 and the fp8 formats have
        no arithmetic type here, so the pipeline always emulates them (float32 compute over integer bits)."""
        return CPU_DTYPES

    def render(self, name: str, sink: UOp) -> tuple[str, dict[str, Any]]:
        self.check_dtypes(name, sink)
        rendered = render_kernel_info(self.language, name, sink)
        if rendered.parallel:  # the launch covers [0, trips) of its range parameters
            return rendered.source, {"global_size": (rendered.trips,), "local_size": None, "parallel": True}
        return rendered.source, {"global_size": (1,), "local_size": None}
