"""The index-range check (targets/index_ranges.py): crafted kernels in bounds, one past the end, gated, as vectors,
clamped by selects, at negative offsets and unboundable are told apart; every kernel the renderers emit is bounded
by its own launch and refused with one byte less."""

from __future__ import annotations

import re
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from abi.frames import nv12_geometry
from jit import DrivepackError, Tensor, capture
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager import samples
from packager.modeld.warp import model_frame
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer, Dispatch, KernelSpec
from targets.index_parse import IMAGE_READ_SHAPE, MAX_DEPTH
from targets.index_ranges import IndexRangeError, access_extents, check_extents
from targets.opencl_runtime import IMAGE_HELPER
from targets.scatter import SCATTER_HELPERS, opencl_scatter_helpers
from tests.conftest import DEFAULT_NODE_DIR
from tests.onnx.conformance.conformance import load_case
from tests.targets.test_source_check import ONNX_SAMPLE_STEP, SAMPLES

C = "void k(float* restrict data0, float* restrict data1) {\n  for (int i = 0; i < 4; i++) {\n    BODY\n  }\n}\n"
CL = ("__kernel void k(__global float* restrict data0, __global float* restrict data1) {\n"
      "  int g = get_global_id(0);\n  BODY\n}\n")
V8 = "#ifndef DP_FLOAT32X8_T\n#define DP_FLOAT32X8_T\ntypedef float dp_float32x8 __attribute__((vector_size(32)));\n" \
     "#endif\n"
GROUP = ("__kernel void k(__global float* restrict data0, __global float* restrict data1) {\n"
         "  __local float part[32];\n  int l = get_local_id(0);\n  part[l] = *(data1+l);\n"
         "  barrier(CLK_LOCAL_MEM_FENCE);\n  if (l == 0) *(data0+0) = part[31];\n}\n")
I8 = "#ifndef DP_INT32X8_T\n#define DP_INT32X8_T\ntypedef int dp_int32x8 __attribute__((vector_size(32)));\n#endif\n"
ZERO8 = "((dp_int32x8){0, 0, 0, 0, 0, 0, 0, 0})"
I16, F16 = (f"#ifndef DP_{t.upper()}X16_T\n#define DP_{t.upper()}X16_T\ntypedef {c} dp_{t}x16 "
            "__attribute__((vector_size(64)));\n#endif\n" for t, c in (("int32", "int"), ("float32", "float")))
# a team's claim of chunks of 8 iterations, its done count and its wait (targets/cstyle/chains.py render_team)
TEAM = ("__kernel void k(__global float* restrict data0, __global int* restrict data1) {\n"
        "  for (int t = 0; t < 4; t++) {\n    int c = CLAIM;\n    int lo = min(c * 2, 8);\n"
        "    int hi = min(lo + 2, 8);\n    for (int i = lo; i < hi; i++) *(data0+i) = 1.0f;\n"
        "    atomic_add(data1 + 1, hi - lo);\n  }\n  WAIT\n}\n")


def team(claim: str = "min(max(atomic_inc(data1 + 0), 0), 4)", wait: str = "while (atomic_add(data1 + 1, 0) < 8) {}"
         ) -> str:
    return TEAM.replace("CLAIM", claim).replace("WAIT", wait)


ZERO8F = "((dp_float32x8){0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f})"


def top8(n: int, f: str = "") -> str:
    return f"((dp_{'float' if f else 'int'}32x8){{{', '.join([f'{n}{f}'] * 8)}}})"


def bit_select(a: str, b: str, m: str, t: str = "dp_int32x8") -> str:
    """The CPU renderer's select(m, a, b) on vectors, ``m`` 0 or 1 per lane (as its WHERE / clamp writes it)."""
    return f"(({t})(((dp_int32x8){a}&-{m})|((dp_int32x8){b}&({m}-1))))"


def gather(n: int, mask_lo: str = "", mask_hi: str = "") -> str:
    """A CPU GATHER of data1 by an index loaded from data2, clamped to 0 .. n-1 by bit-selects: ``max`` then
    ``min``, as the renderer clamps a GATHER's index (masks replaceable, to break the idiom)."""
    lo = mask_lo or f"(-({ZERO8}<v))"
    hi = mask_hi or f"(-(a<{top8(n - 1)}))"
    return (V8 + I8 + "void k(float* restrict data0, float* restrict data1, int* restrict data2) {\n"
            "  for (int i = 0; i < 4; i++) {\n"
            "    dp_int32x8 v = ({ dp_int32x8 _v; __builtin_memcpy(&_v, data2+(i*8), sizeof(_v)); _v; });\n"
            f"    dp_int32x8 a = {bit_select('v', ZERO8, lo)};\n"
            f"    dp_int32x8 b = {bit_select('a', top8(n - 1), hi)};\n"
            "    *(data0+i) = *(data1+b[7]);\n  }\n}\n")


def float_clamp(x: str, k: str, above: bool) -> str:
    """The CPU renderer's float max(x, k) (``above``) or min(x, k) on vectors: NaN kept (``x != x`` selects x)."""
    cmp = f"({k}<{x})" if above else f"({x}<{k})"
    return bit_select(x, k, f"((-{cmp})|(-({x}!={x})))", "dp_float32x8")


# the CPU warp's sampling: a float coordinate clamped to 0 .. 1343, converted; NaN passes a float clamp (and
# converts to INT_MIN): the index is bounded by the integer clamp after it, or not at all
FLOAT_THEN_INT = (V8 + I8 + "void k(float* restrict data0, float* restrict data1, float* restrict data2) {\n"
                  "  for (int i = 0; i < 4; i++) {\n"
                  "    dp_float32x8 x = ({ dp_float32x8 _v; __builtin_memcpy(&_v, data2+(i*8), sizeof(_v)); _v; });\n"
                  "    dp_float32x8 r = ((dp_float32x8){rintf(x[0]), rintf(x[1]), rintf(x[2]), rintf(x[3]), "
                  "rintf(x[4]), rintf(x[5]), rintf(x[6]), rintf(x[7])});\n"
                  f"    dp_float32x8 c0 = {float_clamp('r', ZERO8F, True)};\n"
                  f"    dp_float32x8 c1 = {float_clamp('c0', top8(3, '.0f'), False)};\n"
                  "    dp_int32x8 j = __builtin_convertvector(c1, dp_int32x8);\n"
                  "    INDEX\n    *(data0+i) = *(data1+b[3]);\n  }\n}\n")
# OpenCL's select(0, v, -(-(0 < v))) is max(v, 0): the padding of a conv's window (index -1 read as 0)
CL_PAD = ("__kernel void k(__global float* restrict data0, __global ushort* restrict data1) {\n"
          "  int g = get_global_id(0);\n  int8 lane = ((int8)(0, 1, 2, 3, 4, 5, 6, 7));\n"
          "  int8 a = ((lane+g)+-1);\n  int8 z = ((int8)(0, 0, 0, 0, 0, 0, 0, 0));\n  int8 b = MAX;\n"
          "  ushort4 v = ((ushort4)(*(data1+b.s0), *(data1+b.s1), *(data1+b.s6), *(data1+b.s7)));\n"
          "  *(data0+g) = (float)(v.s0);\n}\n")
# a uchar16 moved as four uint words (targets/opencl.py's vector_word_load/store): 16 bytes per access, not 4
CL_WORDS = ("__kernel void k(__global uchar* restrict data0, __global uchar* restrict data1) {\n"
            "  int g = get_global_id(0);\n"
            "  uchar16 v = as_uchar16(vload4(0, (__global const uint*)(data1+(g*16))));\n"
            "  vstore4(as_uint4(v), 0, (__global uint*)(data0+(g*16)));\n}\n")
IMAGE = ("__kernel void k(__global float* restrict data0, read_only image2d_t data1) {\n  int g = get_global_id(0);\n"
         "  *(data0+g) = dp_read_image(data1, g, 2);\n}\n")


def c(body: str) -> str:
    return C.replace("BODY", body)


def scatter(stride: int, helper: str = SCATTER_HELPERS["float32"]) -> str:
    """A kernel storing 16 lanes ``stride`` floats apart through the scatter helper (targets/scatter.py)."""
    lanes, ones = ", ".join(str(n * stride) for n in range(16)), ", ".join(["1.0f"] * 16)
    return (I16 + F16 + helper + "\nvoid k(float* restrict data0, float* restrict data1) {\n"
            f"  dp_scatter_float32x16(data0, ((dp_int32x16){{{lanes}}}), ((dp_float32x16){{{ones}}}));\n}}\n")


def cl(body: str) -> str:
    return CL.replace("BODY", body)


def cl_scatter(stride: int, lanes: int = 8, helper: str | None = None) -> str:
    """An OpenCL kernel storing ``lanes`` lanes ``stride`` floats apart through its scatter helper."""
    helper = helper if helper is not None else opencl_scatter_helpers(lanes)["float32"]
    offsets = ", ".join(str(n * stride) for n in range(lanes))
    return (helper + "\n__kernel void k(__global float* restrict data0, __global float* restrict data1) {\n"
            f"  dp_scatter_float32x{lanes}(data0, ((int{lanes})({offsets})), ((float{lanes})(1.0f)));\n}}\n")


# (name, source, global size, local size, (data0 bytes, data1 bytes, ...), None (in bounds) or what the refusal says)
CASES = [
    ("in bounds", c("data0[i] = data1[i];"), (1,), None, (16, 16), None),
    ("one past the end", c("data0[i] = data1[i+1];"), (1,), None, (16, 16), "data1 (b1) expected the 20 bytes"),
    ("store one past the end", c("*(data0+(i+1)) = 0.0f;"), (1,), None, (16, 16), "data0 (b0) expected the 20 bytes"),
    ("negative index", c("*(data0+i) = *(data1+(i+-1));"), (1,), None, (16, 16), "from byte 0 on, got byte -4"),
    ("gated by a ternary", c("data0[i] = (i<3)?data1[i+1]:0.0f;"), (1,), None, (16, 16), None),
    ("gated index", c("data0[i] = data1[(i<3)?(i+1):0];"), (1,), None, (16, 16), None),
    ("gated by if", c("if (i < 3) *(data0+i) = *(data1+(i+1));"), (1,), None, (16, 16), None),
    ("prefetch in bounds",
     c("if ((i<3)) __builtin_prefetch(data1+(((i+1)<3)?(i+1):3), 0, 3);\n    data0[i] = data1[i];"), (1,), None,
     (16, 16), None),
    ("prefetch one past the end", c("__builtin_prefetch(data1+(i+1), 0, 3);\n    data0[i] = data1[i];"), (1,), None,
     (16, 16), "data1 (b1) expected the 17 bytes"),
    ("prefetch for a write", c("__builtin_prefetch(data1+i, 1, 3);\n    data0[i] = data1[i];"), (1,), None,
     (16, 16), "expected __builtin_prefetch(pointer, 0, 3)"),
    ("gated the wrong way", c("if (i > 0) *(data0+i) = *(data1+(i+1));"), (1,), None, (16, 16), "the 20 bytes"),
    ("clamped", c("int a = (i+-1);\n    int b = ((a>0)?a:0);\n    *(data0+i) = *(data1+((b<2)?b:2));"), (1,), None,
     (16, 12), None),
    ("clamped too late", c("int a = (i+1);\n    int b = ((a<4)?a:4);\n    *(data0+i) = *(data1+b);"), (1,), None,
     (16, 16), "the 20 bytes"),
    ("vector load", V8 + c("dp_float32x8 v = ({ dp_float32x8 _v; __builtin_memcpy(&_v, data1+(i*2), sizeof(_v)); "
                           "_v; });\n    *(data0+i) = v[7];"), (1,), None, (16, 38), "the 56 bytes"),
    ("vector store", V8 + c("{ dp_float32x8 _v = ((dp_float32x8){0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}); "
                            "__builtin_memcpy(data0+(i*8), &_v, sizeof(_v)); }"), (1,), None, (128, 0), None),
    ("memcpy past a local", V8 + c("float f;\n    __builtin_memcpy(&f, data1+i, 32);"), (1,), None, (16, 64),
     "at most the 4 bytes of f"),
    ("modulo", c("*(data0+(i%2)) = *(data1+((i*5)%4));"), (1,), None, (8, 16), None),
    ("shift and mask", c("*(data0+(i>>1)) = *(data1+((i<<2)&3));"), (1,), None, (8, 16), None),
    ("unsigned wrap", c("*(data0+i) = *(data1+(unsigned int)(i+-1));"), (1,), None, (16, 16), "expected the"),
    ("loop-carried index", c("int j = 0;\n    for (int r = 0; r < 2; r++) { j = (j+1); }\n    *(data0+j) = 0.0f;"),
     (1,), None, (16, 16), "expected accesses from byte 0 on"),
    ("index loaded from memory", "void k(float* restrict data0, int* restrict data1) {\n  for (int i = 0; i < 4; i++) "
     "*(data0+*(data1+i)) = 0.0f;\n}\n", (1,), None, (16, 16), "expected accesses from byte 0 on"),
    ("pointer stepped in a loop", c("float* p = data1;\n    for (int r = 0; r < 2; r++) { p = (p+1); }\n"
                                    "    *(data0+i) = *(p);"), (1,), None, (16, 16), "data1 bounded, got a pointer"),
    ("pointer to an unknown call", c("*(data0+i) = sneak(data1);"), (1,), None, (16, 16), "address passed to sneak"),
    ("unknown call", c("*(data0+i) = sneak(i);"), (1,), None, (16, 16), "got sneak("),
    ("assignment in a branch", c("int j = 0;\n    *(data0+i) = (i<2)?((float)(j = 9)):0.0f;\n    "
                                 "*(data1+j) = 0.0f;"), (1,), None, (16, 16), "inside one branch of a ternary"),
    ("narrow loop variable", c("for (signed char r = 0; r < 4; r++) *(data0+r) = 0.0f;"), (1,), None, (16, 16),
     "expected a loop over an int variable"),
    ("bound grown by the body", c("int n = 2;\n    for (int r = 0; r < n; r++) { n = (n+1); *(data0+r) = 0.0f; }"),
     (1,), None, (16, 16), "expected the"),
    ("compared as unsigned", c("int j = (i+-1);\n    if (j < 3u) *(data0+i) = 0.0f; else *(data0+j) = 0.0f;"),
     (1,), None, (16, 16), "from byte 0 on, got byte -4"),
    ("shadowed local array", c("float a[8];\n    { float a[1]; a[0] = 0.0f; }\n    a[7] = 0.0f;"), (1,), None,
     (16, 16), None),
    ("local array overrun in a loop", c("float a[4];\n    a[(i+1)] = 0.0f;"), (1,), None, (16, 16),
     "accesses to a within its 16 bytes, got bytes 4..19"),
    ("access hidden in a fence", cl("barrier(*(data1+100));"), (1,), None, (16, 16), "barrier of fence flags"),
    ("helper reaching memory", "float peek(int i) {\n  return *((float*)(long)i);\n}\n" + c("data0[i] = peek(i);"),
     (1,), None, (16, 16), "helpers before the kernel to handle values only"),
    ("macro", "#define data1 (data1+64)\n" + c("data0[i] = data1[i];"), (1,), None, (16, 16),
     "expected no preprocessor line but"),
    ("typedef wider than its name", V8.replace("vector_size(32)", "vector_size(64)") + c("data0[i] = 0.0f;"), (1,),
     None, (16, 16), "expected vector typedef dp_float32x8 of the lanes its name says"),
    ("inline assembly", c("__asm__ volatile (nop);"), (1,), None, (16, 16), "no inline assembly"),
    ("work-items in bounds", cl("*(data0+g) = *(data1+g);"), (4,), None, (16, 16), None),
    ("one work-item too many", cl("*(data0+g) = *(data1+g);"), (5,), None, (16, 16), "data0 (b0) expected the 20"),
    ("work-items gated", cl("if (g < 4) *(data0+g) = *(data1+g);"), (8,), None, (16, 16), None),
    ("opencl vector", cl("float4 v = vload4(0, data1+(g*4));\n  vstore4(v, 0, data0+(g*4));"), (4,), None,
     (64, 60), "data1 (b1) expected the 64"),
    ("opencl vector stored by memcpy", cl("{ float16 _v = vload16(0, data1+g); __builtin_memcpy(data0+(g+3), &_v, "
                                          "sizeof(_v)); }"), (2,), None, (80, 68), None),
    ("opencl vector stored by memcpy past the end", cl("{ float16 _v = vload16(0, data1+g); __builtin_memcpy("
                                                       "data0+(g+3), &_v, sizeof(_v)); }"), (2,), None, (76, 68),
     "data0 (b0) expected the 80 bytes"),
    ("opencl vector loaded by memcpy", cl("{ float16 _v = ({ float16 _l; __builtin_memcpy(&_l, data1+(g+3), "
                                          "sizeof(_l)); _l; }); vstore16(_v, 0, data0+g); }"), (2,), None, (68, 80),
     None),
    ("opencl vector loaded by memcpy past the end", cl("{ float16 _v = ({ float16 _l; __builtin_memcpy(&_l, "
                                                       "data1+(g+3), sizeof(_l)); _l; }); vstore16(_v, 0, data0+g); }"),
     (2,), None, (68, 76), "data1 (b1) expected the 80 bytes"),
    ("opencl byte vector as words", CL_WORDS, (4,), None, (64, 64), None),
    ("opencl byte vector as words past the end", CL_WORDS, (4,), None, (64, 60), "data1 (b1) expected the 64"),
    ("past the launch's dimensions", cl("*(data0+get_global_id(1)) = 0.0f;"), (4,), None, (4, 0), None),
    ("bit-select clamp", gather(4), (1,), None, (16, 16, 128), None),
    ("bit-select clamp one past the end", gather(5), (1,), None, (16, 16, 128), "data1 (b1) expected the 20 bytes"),
    ("bit-select mask not 0 or 1", gather(4, mask_lo="(v&3)"), (1,), None, (16, 16, 128), "from byte 0 on"),
    ("bit-select masks not complementary", gather(4).replace(f"((-({ZERO8}<v))-1)", f"((-({ZERO8}<=v))-1)"), (1,),
     None, (16, 16, 128), "from byte 0 on"),
    ("bit-select narrows only the variable compared", gather(4).replace("(dp_int32x8)v&", "(dp_int32x8)(v+1)&"),
     (1,), None, (16, 16, 128), "from byte 0 on"),
    ("float clamp passes NaN", FLOAT_THEN_INT.replace("INDEX", "dp_int32x8 b = j;"), (1,), None, (16, 16, 128),
     "from byte 0 on"),
    ("float clamp then integer clamp", FLOAT_THEN_INT.replace(
        "INDEX", f"dp_int32x8 a = {bit_select('j', ZERO8, f'(-({ZERO8}<j))')};\n"
                 f"    dp_int32x8 b = {bit_select('a', top8(3), f'(-(a<{top8(3)}))')};"), (1,), None, (16, 16, 128),
     None),
    ("opencl select clamp", CL_PAD.replace("MAX", "select(z, a, -(-(z<a)))"), (4,), None, (16, 20), None),
    ("opencl select clamp one past the end", CL_PAD.replace("MAX", "select(z, a, -(-(z<a)))"), (4,), None,
     (16, 18), "data1 (b1) expected the 20 bytes"),
    ("opencl select the wrong way", CL_PAD.replace("MAX", "select(a, z, -(-(z<a)))"), (4,), None, (16, 20),
     "from byte 0 on, got byte -2"),
    ("opencl select by a top bit never set", CL_PAD.replace("MAX", "select(z, a, -(z<a))"), (4,), None, (16, 20),
     "from byte 0 on, got byte -2"),
    ("scatter in bounds", scatter(3), (1,), None, (184, 0), None),
    ("scatter one past the end", scatter(3), (1,), None, (180, 0), "data0 (b0) expected the 184 bytes"),
    ("OpenCL scatter in bounds", cl_scatter(3), (1,), None, (88, 0), None),
    ("OpenCL scatter one past the end", cl_scatter(3), (1,), None, (84, 0), "data0 (b0) expected the 88 bytes"),
    ("OpenCL scatter of 16 lanes", cl_scatter(2, 16), (1,), None, (124, 0), None),
    ("OpenCL scatter helper changed",
     cl_scatter(3, helper=opencl_scatter_helpers(8)["float32"].replace("p[at[l]]", "p[at[l] + 1]")), (1,), None,
     (88, 0), "expected helpers before the kernel to handle values only"),
    ("scatter helper changed", scatter(3, SCATTER_HELPERS["float32"].replace("l < 16", "l < 17")), (1,), None,
     (184, 0), "expected no preprocessor line but"),
    ("team claims in bounds", team(), (2,), (1,), (32, 8), None),
    ("team counter past the end", team(wait="while (atomic_add(data1 + 2, 0) < 8) {}"), (2,), (1,), (32, 8),
     "data1 (b1) expected the 12 bytes"),
    ("team claim unclamped", team(claim="atomic_inc(data1 + 0)"), (2,), (1,), (32, 8), "data0 (b0) expected"),
    ("team wait with a body", team(wait="while (atomic_add(data1 + 1, 0) < 8) { *(data0+9) = 0.0f; }"), (2,),
     (1,), (32, 8), "expected '}'"),
    ("atomic on a float", team(wait="atomic_inc(data0 + 0);"), (2,), (1,), (32, 8),
     "expected atomic_inc of an int pointer"),
    ("local array in bounds", GROUP, (32,), (32,), (4, 128), None),
    ("local array overrun", GROUP, (64,), (64,), (4, 256), "accesses to part within its 128 bytes"),
]


@pytest.mark.parametrize(("source", "global_size", "local_size", "sizes", "refusal"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_crafted_kernels(source: str, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                         sizes: tuple[int, ...], refusal: str | None) -> None:
    bindings = [(f"b{i}", n, None) for i, n in enumerate(sizes)]
    if refusal is None:
        check_extents(source, "k", global_size, local_size, bindings, [], "dispatches[3] (kernel k)")
        return
    with pytest.raises(IndexRangeError) as e:
        check_extents(source, "k", global_size, local_size, bindings, [], "dispatches[3] (kernel k)")
    msg = str(e.value)
    assert msg.startswith("dispatches[3] (kernel k): ") and refusal in msg and "\n" not in msg, msg


def test_the_loop_bound_may_be_a_scalar_argument() -> None:
    source = "void k(float* restrict data0, int n) {\n  for (int i = 0; i < n; i++) *(data0+i) = 0.0f;\n}\n"
    check_extents(source, "k", (1,), None, [("b0", 16, None)], [("int32", 4)], "d")
    with pytest.raises(IndexRangeError, match=r"d: data0 \(b0\) expected the 20 bytes the kernel accesses, got a "
                                              r"binding of 16 bytes"):
        check_extents(source, "k", (1,), None, [("b0", 16, None)], [("int32", 5)], "d")


def test_image_reads_are_bounded_by_the_image() -> None:
    ok = [("b0", 32, None), ("weight:0", 32, (1, 2))]
    check_extents(IMAGE, "k", (8,), None, ok, [], "d")  # 8 floats: 2 texels of 4
    with pytest.raises(IndexRangeError, match=r"data1 \(weight:0\) expected the 48 bytes the kernel reads, got an "
                                              r"image of 32 bytes"):
        check_extents(IMAGE, "k", (9,), None, [("b0", 36, None), ok[1]], [], "d")
    with pytest.raises(IndexRangeError, match=r"expected reads with the image's row width 4, got \[2\]"):
        check_extents(IMAGE, "k", (8,), None, [ok[0], ("weight:0", 64, (1, 4))], [], "d")


def test_the_image_helper_is_the_one_the_check_assumes() -> None:
    """targets/index_calls.py reads dp_read_image(img, i, width) as texel i >> 2 at (t % width, t / width)."""
    assert all(part in IMAGE_HELPER for part in IMAGE_READ_SHAPE)
    with pytest.raises(IndexRangeError, match="the renderer's helper"):
        check_extents(IMAGE.replace("__kernel", IMAGE_HELPER.replace("t % width, t / width", "i, 0") + "\n__kernel"),
                      "k", (8,), None, [("b0", 32, None), ("weight:0", 32, (1, 2))], [], "d")
    check_extents(IMAGE.replace("__kernel", IMAGE_HELPER + "\n__kernel"), "k", (8,), None,
                  [("b0", 32, None), ("weight:0", 32, (1, 2))], [], "d")


def test_nesting_past_the_limit_is_refused_not_crashed() -> None:
    deep = c(f"*(data0+i) = *(data1+{'(' * (MAX_DEPTH + 5)}i{')' * (MAX_DEPTH + 5)});")
    with pytest.raises(IndexRangeError, match="nested at most"):
        check_extents(deep, "k", (1,), None, [("b0", 16, None), ("b1", 16, None)], [], "d")
    check_extents(c(f"*(data0+i) = *(data1+{'(' * 30}i{')' * 30});"), "k", (1,), None,
                  [("b0", 16, None), ("b1", 16, None)], [], "d")


@pytest.mark.parametrize("stmt", ["*(data0+i) = @;", "*(data0+i) = *(data1+i) $ 1;", "*(data0+i) = `x`;"])
def test_a_character_outside_the_grammar_is_named(stmt: str) -> None:
    bad = next(ch for ch in stmt if ch in "@$`")
    with pytest.raises(IndexRangeError, match=re.escape(f"unexpected character '{bad}'")):
        check_extents(c(stmt), "k", (1,), None, [("b0", 16, None), ("b1", 16, None)], [], "d")


def test_chained_assignments_are_followed() -> None:
    check_extents(c("float a, b; a = b = *(data1+i); *(data0+i) = a;"), "k", (1,), None,
                  [("b0", 16, None), ("b1", 16, None)], [], "d")
    with pytest.raises(IndexRangeError):
        check_extents(c("float* p; float* q; p = q = data0 + 4; *(p+i) = 1.0f;"), "k", (1,), None,
                      [("b0", 16, None), ("b1", 16, None)], [], "d")


def test_a_command_buffer_is_refused_at_construction() -> None:
    def cmdbuf(n: int) -> CommandBuffer:
        src = "#include <math.h>\n#include <stdint.h>\n" + c("data0[i] = data1[i];").replace("i < 4", f"i < {n}")
        return CommandBuffer(
            target="CPU", kernels=(KernelSpec("k", src, "k", "CPU"),),
            dispatches=(Dispatch(0, (1,), None, ("output:y", "input:x")),),
            buffers=(BufferSpec("input:x", "float32", (4,), 16), BufferSpec("output:y", "float32", (4,), 16)),
            arena_bytes=0, alignment=64)

    cmdbuf(4)
    with pytest.raises(CmdbufError, match=r"^dispatches\[0\] \(kernel k\): data0 \(output:y\) expected the 20 bytes "):
        cmdbuf(5)
    # a kernel no dispatch launches is built into the same file as the others: its text is checked too
    ok = cmdbuf(4)
    spare = KernelSpec("spare", "#define alu1 (alu1+64)\n" + ok.kernels[0].source.replace("void k(", "void spare("),
                       "spare", "CPU")
    with pytest.raises(CmdbufError, match=r"^kernel spare: source expected in the grammar .* no preprocessor line"):
        replace(ok, kernels=(*ok.kernels, spare))


# --- every kernel the renderers emit is bounded by its own launch ----------------------------------------------

def check_all(cmdbuf: CommandBuffer, where: str) -> int:
    """Every dispatch of ``cmdbuf`` within its bindings, and refused once any accessed buffer is a byte short (the
    check is not vacuous); returns the number of kernels checked (a chain's each: one per buffer it writes)."""
    table = {b.binding: b for b in cmdbuf.buffers}
    for i, d in enumerate(cmdbuf.dispatches):
        k = cmdbuf.kernels[d.kernel]
        scalars = [(s.dtype, s.bits) for s in d.scalars]
        bindings = [(b, table[b].nbytes, table[b].image) for b in d.bindings]
        name = f"{where} dispatches[{i}] (kernel {k.name})"
        check_extents(k.source, k.entry, d.global_size, d.local_size, bindings, scalars, name)
        got = access_extents(k.source, k.entry, d.global_size, d.local_size, tuple(scalars))
        assert not isinstance(got, str), got
        assert got.buffers or got.images, name
        for j, (_, hi) in got.buffers.items():
            short = list(bindings)
            short[j] = (bindings[j][0], hi - 1, None)
            with pytest.raises(IndexRangeError, match=rf"data{j} .*expected the {hi} bytes"):
                check_extents(k.source, k.entry, d.global_size, d.local_size, short, scalars, name)
        for j, (_, hi, _) in got.images.items():
            binding, nbytes, (_, width) = bindings[j]
            rows = (hi >> 2) // width  # the rows below the last one read
            if rows:
                short = list(bindings)
                short[j] = (binding, nbytes, (rows, width))
                with pytest.raises(IndexRangeError, match=rf"data{j} .*got an image of {rows * width * 16} bytes"):
                    check_extents(k.source, k.entry, d.global_size, d.local_size, short, scalars, name)
    return sum(d.writes for d in cmdbuf.dispatches)


@pytest.mark.parametrize("device", ["CPU", "OPENCL", "QCOM", "QCOM:images"])
@pytest.mark.parametrize("model", list(SAMPLES))
def test_every_kernel_of_the_sample_models_is_bounded(model: str, device: str) -> None:
    m = SAMPLES[model]()
    run = capture_onnx(load_onnx(m, device=device), samples.sample_inputs(m), target=device)
    assert check_all(run.cmdbuf, f"{model} {device}") >= len(run.cmdbuf.kernels) > 0
    if device == "QCOM:images" and model != "policy-float16":  # images hold float32 weights only
        assert any(b.image for b in run.cmdbuf.buffers)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_kernels_with_overlapped_rows_are_bounded(device: str) -> None:
    """Rows no vector divides, as whole vectors whose last one starts at ``min(t * u, n - u)``
    (jit/codegen/opt/overlap.py): a 55-wide max pool and a 1x1 conv over 13x13."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((40, 24, 1, 1)).astype(np.float32)

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": x.max_pool2d(3, 2).conv2d(Tensor(weights, device=device))}
    cap = capture(model, {"x": rng.standard_normal((1, 24, 27, 27)).astype(np.float32)}, target=device)
    # the pool's 13-wide rows in tiles of 8: the last starts at min(8 * t, 13 - 8)
    assert any("<5)?" in k.source for k in cap.cmdbuf.kernels)
    assert check_all(cap.cmdbuf, f"overlap {device}") >= len(cap.cmdbuf.kernels) > 0


@pytest.mark.parametrize("device", ["CPU", "OPENCL", "QCOM"])
def test_every_kernel_of_the_warp_is_bounded(device: str) -> None:
    """The modeld warp: float coordinates clamped by selects, then a GATHER of the frame by a clamped index."""
    g = nv12_geometry(1344, 760)
    cap = capture(lambda frame, tfm: {"img": model_frame(frame, tfm, g)},
                  {"frame": np.zeros(g.size, np.uint8), "tfm": np.eye(3, dtype=np.float32)}, target=device)
    assert check_all(cap.cmdbuf, f"warp {device}") >= len(cap.cmdbuf.kernels) > 0


@pytest.mark.slow
@pytest.mark.parametrize("device", ["CPU", "OPENCL", "QCOM"])
def test_every_kernel_of_the_supercombo_sample_is_bounded(device: str) -> None:
    """The float16 supercombo sample: padded convolutions, whose window is clamped by a select."""
    m = samples.supercombo_model()
    run = capture_onnx(load_onnx(m, device=device), samples.sample_inputs(m), target=device)
    assert check_all(run.cmdbuf, f"supercombo {device}") >= len(run.cmdbuf.kernels) > 0


def test_the_integer_power_helper_is_bounded() -> None:
    """QCOM renders integer POW through a prelude helper (value parameters only), which the check lets through."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(-100, 100, (6, 9)).astype(np.int32), rng.integers(1, 9, (6, 9)).astype(np.int32)
    cap = capture(lambda x, y: {"out": (x % 7) ** (y % 6)}, {"x": x, "y": y}, target="QCOM")
    assert any("dp_ipow_" in k.source for k in cap.cmdbuf.kernels)
    assert check_all(cap.cmdbuf, "ipow") >= 1


@pytest.mark.slow
@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_every_kernel_of_onnx_node_cases_is_bounded(device: str, pytestconfig: pytest.Config) -> None:
    given = pytestconfig.getoption("--onnx-node-dir")
    root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
    checked = 0
    for case in sorted(root.iterdir())[::ONNX_SAMPLE_STEP]:
        model, sets = load_case(case)
        try:
            run = capture_onnx(load_onnx(model, device=device), sets[0][0], target=device)
        except DrivepackError:  # a case drivepack does not capture (unsupported op or dtype): nothing rendered
            continue
        checked += check_all(run.cmdbuf, case.name)
    assert checked >= 80, f"only {checked} dispatches checked"


def test_scalar_bits_are_read_as_the_parameter_type() -> None:
    source = "void k(float* restrict data0, int n) {\n  *(data0+n) = 0.0f;\n}\n"
    minus_one = struct.unpack("<I", struct.pack("<i", -1))[0]
    with pytest.raises(IndexRangeError, match="from byte 0 on, got byte -4"):
        check_extents(source, "k", (1,), None, [("b0", 16, None)], [("int32", minus_one)], "d")
    with pytest.raises(IndexRangeError, match="from byte 0 on"):  # bits of another width: any value
        check_extents(source, "k", (1,), None, [("b0", 16, None)], [("int64", 1)], "d")
    check_extents(source, "k", (1,), None, [("b0", 16, None)], [("int32", 3)], "d")
