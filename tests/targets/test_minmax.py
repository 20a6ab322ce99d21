"""The C target's float min/max helpers (targets/minmax.py): both branches compute x86's maxps/minps lanes, the
package checks accept exactly their texts, and the C target emits them only where the host has the instructions."""

from __future__ import annotations

import platform

import cffi
import numpy as np
import pytest

import targets.cpu_runtime as cpu
from targets.cpu import CPU_LANGUAGE, CPU_VECTOR_WIDTH
from targets.minmax import MINMAX_LANES, minmax_helpers
from targets.source_check import C, KernelSourceError, check_source

X86 = platform.machine() in ("x86_64", "AMD64")
HEAD = "#include <math.h>\n#include <stdint.h>\n"
# compiled without the width's instruction set, the helper takes its lane loop (SSE is part of x86-64 itself)
WITHOUT = {8: "-mno-avx", 16: "-mno-avx512f"}


def _source(lanes: int) -> str:
    vt = f"dp_float32x{lanes}"
    helpers = minmax_helpers(lanes)

    def load(p: str) -> str:
        return f"({{ {vt} _v; __builtin_memcpy(&_v, {p}, sizeof(_v)); _v; }})"

    return (HEAD + f"#ifndef DP_FLOAT32X{lanes}_T\n#define DP_FLOAT32X{lanes}_T\ntypedef float {vt} "
            f"__attribute__((vector_size({4 * lanes})));\n#endif\n" + helpers["max"] + "\n" + helpers["min"] + "\n"
            f"void pick(float* restrict data0, float* restrict data1, float* restrict data2) {{\n"
            f"  {vt} a = {load('data1')};\n  {vt} b = {load('data2')};\n"
            f"  {{ {vt} _v = dp_max_float32x{lanes}(a, b); __builtin_memcpy(data0, &_v, sizeof(_v)); }}\n"
            f"  {{ {vt} _v = dp_min_float32x{lanes}(a, b); __builtin_memcpy(data0+{lanes}, &_v, sizeof(_v)); }}\n}}\n")


@pytest.mark.skipif(not X86, reason="x86's maxps/minps built-ins")
@pytest.mark.parametrize(("lanes", "isa"), [(n, isa) for n in MINMAX_LANES for isa in ("native", "without")
                                            if isa == "native" or n in WITHOUT])
def test_both_branches_give_the_ordered_selects_lane_by_lane(lanes: int, isa: str) -> None:
    """``a > b ? a : b`` and ``a < b ? a : b``: ``b`` where either is NaN or both are zeros of either sign."""
    source = _source(lanes)
    check_source(source, "pick", C)
    flags = cpu.CFLAGS if isa == "native" else (*cpu.CFLAGS, WITHOUT[lanes])
    ffi = cffi.FFI()
    ffi.cdef("void pick(float *data0, float *data1, float *data2);")
    lib = ffi.dlopen(str(cpu.compile_shared(source, flags=flags)))
    specials = np.array([np.nan, 1, -0.0, 0.0, 2, np.nan, -np.inf, np.inf], np.float32)
    a = np.resize(specials, lanes)
    b = np.resize(np.array([1, np.nan, 0.0, -0.0, 2, np.nan, np.inf, -3], np.float32), lanes)
    out = np.zeros(2 * lanes, np.float32)
    lib.pick(*(ffi.cast("float*", x.ctypes.data) for x in (out, a, b)))
    with np.errstate(invalid="ignore"):
        want = np.concatenate([np.where(a > b, a, b), np.where(a < b, a, b)])
    np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))


def test_an_edited_helper_is_refused() -> None:
    source = _source(16)
    edited = source.replace("a[l] > b[l] ? a[l] : b[l]", "a[l] > b[l] ? a[l] : a[l+1]", 1)
    assert edited != source
    with pytest.raises(KernelSourceError, match="expected one of the renderer's helpers"):
        check_source(edited, "pick", C)


def test_the_c_target_has_the_helpers_for_its_width_on_x86_only() -> None:
    assert CPU_LANGUAGE.vector_minmax_lanes == CPU_VECTOR_WIDTH
    assert CPU_LANGUAGE.vector_minmax == (minmax_helpers(CPU_VECTOR_WIDTH) if X86 else {})
