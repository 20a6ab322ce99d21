"""The C dialect's scatter helpers: a store of 16 32-bit lanes, each at its own offset from one pointer.

The CPU renderer (targets/cpu.py ``vector_scatter``) stores a vector whose lanes are not contiguous (channel vectors
into NCHW planes) through one of these instead of lane by lane: AVX-512's scatter is one instruction where GCC takes
the vector apart into 16 extracts and stores, which also doubles the compile time of such a kernel. Compiled where
AVX-512 is missing (a package moved to such a host), the helper stores lane by lane. The package checks accept
exactly these texts (targets/source_check.py before compiling, targets/index_parse.py for the accesses:
``dp_scatter_<dtype>x16(p, i, v)`` writes lane l of v at ``p + i[l]``).
"""

from __future__ import annotations

SCATTER_LANES = 16


def _scatter_helper(dtype: str, ctype: str, builtin: str) -> str:
    fn = f"dp_scatter_{dtype}x{SCATTER_LANES}"
    return (f"#ifndef {fn.upper()}\n#define {fn.upper()}\n"
            f"static inline void {fn}({ctype} *p, dp_int32x16 i, dp_{dtype}x16 v) {{\n"
            f"#if defined(__AVX512F__)\n  {builtin}(p, -1, i, v, 4);\n#else\n"
            f"  for (int l = 0; l < 16; l++) p[i[l]] = v[l];\n#endif\n}}\n#endif")


# by dtype name: the helper's definition
SCATTER_HELPERS = {"float32": _scatter_helper("float32", "float", "__builtin_ia32_scattersiv16sf"),
                   "int32": _scatter_helper("int32", "int", "__builtin_ia32_scattersiv16si")}
# by the helper's name: the bytes of one lane
SCATTER_LANE_BYTES = {f"dp_scatter_{dtype}x{SCATTER_LANES}": 4 for dtype in SCATTER_HELPERS}
