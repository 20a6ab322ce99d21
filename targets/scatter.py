"""The scatter helpers: a store of a vector's 32-bit lanes, each at its own offset from one pointer.

The C and OpenCL renderers (their languages' ``vector_scatter``) store a vector whose lanes are not contiguous
(channel vectors into NCHW planes) through one of these instead of lane by lane:

* C (targets/cpu.py), 16 lanes: AVX-512's scatter is one instruction where GCC takes the vector apart into 16
  extracts and stores, which also doubles the compile time of such a kernel. Compiled where AVX-512 is missing (a
  package moved to such a host), the helper stores lane by lane.
* OpenCL on a CPU device (targets/opencl.py), as many lanes as its vectors: one function, never inlined, that
  stores the lanes from two private arrays. Spelled lane by lane, a convolution's epilogue is hundreds of
  extract-and-store statements, on which PoCL's kernel compiler (run when a kernel first launches) spent most of
  its time; a call per vector instead took efficientnet_b0's scattering kernels from 11.0 to 4.2 s of compiling
  and from 2.14 to 2.23 ms of running (each kernel alone, times its dispatches). A GPU keeps the lane-by-lane
  stores (a call and private arrays cost more there).

The package checks accept exactly these texts (targets/source_check.py before compiling, targets/index_parse.py
for the accesses: ``dp_scatter_<dtype>x<lanes>(p, i, v)`` writes lane l of v at ``p + i[l]``,
targets/index_calls.py).
"""

from __future__ import annotations

SCATTER_LANES = 16  # C's helpers
OPENCL_SCATTER_LANES = (4, 8, 16)
_DTYPES = {"float32": ("float", "__builtin_ia32_scattersiv16sf"), "int32": ("int", "__builtin_ia32_scattersiv16si")}


def helper_name(dtype: str, lanes: int) -> str:
    return f"dp_scatter_{dtype}x{lanes}"


def _c_helper(dtype: str) -> str:
    ctype, builtin = _DTYPES[dtype]
    fn = helper_name(dtype, SCATTER_LANES)
    return (f"#ifndef {fn.upper()}\n#define {fn.upper()}\n"
            f"static inline void {fn}({ctype} *p, dp_int32x16 i, dp_{dtype}x16 v) {{\n"
            f"#if defined(__AVX512F__)\n  {builtin}(p, -1, i, v, 4);\n#else\n"
            f"  for (int l = 0; l < 16; l++) p[i[l]] = v[l];\n#endif\n}}\n#endif")


def _opencl_helper(dtype: str, lanes: int) -> str:
    ctype = _DTYPES[dtype][0]
    fn = helper_name(dtype, lanes)
    return (f"#ifndef {fn.upper()}\n#define {fn.upper()}\n"
            f"__attribute__((noinline)) void {fn}(__global {ctype} *p, int{lanes} i, {ctype}{lanes} v) {{\n"
            f"  int at[{lanes}];\n  {ctype} lane[{lanes}];\n  vstore{lanes}(i, 0, at);\n  vstore{lanes}(v, 0, lane);\n"
            f"  #pragma unroll\n  for (int l = 0; l < {lanes}; l++) p[at[l]] = lane[l];\n}}\n#endif")


# by dtype name: the C helper's definition
SCATTER_HELPERS = {dtype: _c_helper(dtype) for dtype in _DTYPES}


def opencl_scatter_helpers(lanes: int) -> dict[str, str]:
    """OpenCL's helpers for vectors of ``lanes`` lanes (one of OPENCL_SCATTER_LANES; none otherwise), by dtype."""
    return {dtype: _opencl_helper(dtype, lanes) for dtype in _DTYPES} if lanes in OPENCL_SCATTER_LANES else {}


# by dialect (targets/source_check.py's names): every helper text a source may define
HELPER_TEXTS = {"C": frozenset(SCATTER_HELPERS.values()),
                "OPENCL": frozenset(t for n in OPENCL_SCATTER_LANES for t in opencl_scatter_helpers(n).values())}
# by helper name: the bytes of one lane and the lane count
SCATTER_CALLS = {helper_name(dtype, n): (4, n) for dtype in _DTYPES for n in {SCATTER_LANES, *OPENCL_SCATTER_LANES}}
