"""Flags the CPU runtime adds against known wrong-code bugs of the host's C compiler (targets/cpu_runtime.py
``compiler_workarounds``), and the kernel that found the first one."""

from __future__ import annotations

import cffi
import numpy as np
import pytest

import targets.cpu_runtime as cpu

# the kernel GCC 12 miscompiled with -O3 -march=native on an AVX-512VL host (the ONNX conformance case
# test_attention_4d_attn_mask_4d_causal_expanded): rows past the first divided by the wrong row's sum
MASKED_SOFTMAX = """#include <math.h>
#include <stdint.h>
void masked_div(float* restrict data0, float* restrict data1, float* restrict data2, float* restrict data3) {
  for (int ridx0 = 0; ridx0 < 2; ridx0++) {
    for (int ridx1 = 0; ridx1 < 3; ridx1++) {
      for (int ridx2 = 0; ridx2 < 4; ridx2++) {
        for (int ridx3 = 0; ridx3 < 6; ridx3++) {
          int alu1 = ((((ridx2*6)+(ridx1*24))+(ridx0*72))+ridx3);
          int alu2 = ((ridx2+(ridx1*4))+(ridx0*12));
          float val3 = *(data1+alu2);
          float val4 = *(data2+alu1);
          float val5 = *(data3+alu2);
          *(data0+alu1) = ((val3==(-INFINITY))?0.0f:(val4/val5));
        }
      }
    }
  }
}
"""


def test_the_masked_softmax_division_gcc_12_miscompiled_computes_numpys_values() -> None:
    rng = np.random.default_rng(0)
    row_max = rng.random(24, dtype=np.float32)
    row_max[5] = -np.inf
    e = rng.random(144, dtype=np.float32)
    s = 1 + rng.random(24, dtype=np.float32)
    ffi = cffi.FFI()
    ffi.cdef("void masked_div(float*, float*, float*, float*);")
    lib = ffi.dlopen(str(cpu.compile_shared(MASKED_SOFTMAX)))
    out = np.zeros(144, np.float32)
    lib.masked_div(*(ffi.from_buffer("float[]", a) for a in (out, row_max, e, s)))
    rows = np.repeat(np.arange(24), 6)
    want = np.where(row_max[rows] == -np.inf, np.float32(0), e / s[rows])
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("banner", "isa", "flags", "expected"), [
    ("gcc (Debian 12.2.0-14) 12.2.0", "x86_64:avx2 avx512f avx512vl fma", cpu.CFLAGS, cpu.GCC_AVX512VL_WORKAROUND),
    ("gcc (Debian 12.2.0-14) 12.2.0", "x86_64:avx2 fma", cpu.CFLAGS, ()),
    ("Debian clang version 14.0.6", "x86_64:avx2 avx512f avx512vl fma", cpu.CFLAGS, ()),
    ("gcc (Debian 12.2.0-14) 12.2.0", "x86_64:avx2 avx512f avx512vl", ("-O3", "-shared"), ()),
    ("gcc (Debian 12.2.0-14) 12.2.0", "x86_64:avx2 avx512_fp16 avx512f avx512vl fma", cpu.CFLAGS,
     (*cpu.GCC_AVX512VL_WORKAROUND, *cpu.NATIVE_FP16_WORKAROUND)),
    ("Debian clang version 14.0.6", "x86_64:avx2 avx512_fp16 avx512f avx512vl", cpu.CFLAGS,
     cpu.NATIVE_FP16_WORKAROUND),
    ("gcc (Debian 12.2.0-14) 12.2.0", "x86_64:avx2 avx512_fp16 avx512f avx512vl", ("-O3", "-shared"), ()),
])
def test_workarounds_apply_to_native_code_on_the_hosts_and_compilers_they_name(
        monkeypatch: pytest.MonkeyPatch, banner: str, isa: str, flags: tuple[str, ...],
        expected: tuple[str, ...]) -> None:
    monkeypatch.setattr(cpu, "compiler_identity", lambda cc: banner)
    monkeypatch.setattr(cpu, "host_isa", lambda: isa)
    assert cpu.compiler_workarounds("cc", flags) == expected


# float -> _Float16 -> float, the kernel the C target renders for ``Tensor(x).cast(float16).cast(float32)`` of four
# elements: GCC 12 with native AVX512-FP16 arithmetic returned x unrounded (and elsewhere emitted masked vmovsh that
# binutils 2.40 does not assemble)
HALF_ROUND_TRIP = """
void half_round_trip(float* restrict data0, float* restrict data1) {
  float val1 = *(data1+0);
  *(data0+0) = (float)((_Float16)(val1));
  float val2 = *(data1+1);
  *(data0+1) = (float)((_Float16)(val2));
  float val3 = *(data1+2);
  *(data0+2) = (float)((_Float16)(val3));
  float val4 = *(data1+3);
  *(data0+3) = (float)((_Float16)(val4));
}
"""


def test_a_half_round_trip_rounds_on_this_host() -> None:
    ffi = cffi.FFI()
    ffi.cdef("void half_round_trip(float*, float*);")
    lib = ffi.dlopen(str(cpu.compile_shared(HALF_ROUND_TRIP)))
    x = np.array([1 / 3, 0.1, 65519.0, 1e-6], np.float32)
    out = np.zeros_like(x)
    lib.half_round_trip(ffi.from_buffer("float[]", out), ffi.from_buffer("float[]", x))
    np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))
