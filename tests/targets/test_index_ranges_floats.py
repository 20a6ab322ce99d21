"""Float intervals of the index-range check (targets/index_floats.py): an access bounded only through a float
clamp that absorbs NaN is accepted with its exact extent, on the CPU renderer's bit-select, OpenCL's select and
a scalar ternary; the same through a clamp that lets NaN through, a one-sided or missing clamp, a stale mask or
an out-of-range conversion is refused."""

from __future__ import annotations

import pytest

from targets.index_floats import add_sub, literal
from targets.index_parse import CType
from targets.index_ranges import IndexRangeError, access_extents, check_extents
from targets.index_values import Floats
from targets.minmax import minmax_helpers

V8 = ("#ifndef DP_FLOAT32X8_T\n#define DP_FLOAT32X8_T\ntypedef float dp_float32x8 __attribute__((vector_size(32)));\n"
      "#endif\n#ifndef DP_INT32X8_T\n#define DP_INT32X8_T\ntypedef int dp_int32x8 __attribute__((vector_size(32)));\n"
      "#endif\n")
# data2 holds the float coordinates, data1 is read at the converted coordinate (lane 3), data0 written
CPU = (V8 + "void k(float* restrict data0, float* restrict data1, float* restrict data2) {\n"
       "  for (int i = 0; i < 4; i++) {\n"
       "    dp_float32x8 x = ({ dp_float32x8 _v; __builtin_memcpy(&_v, data2+(i*8), sizeof(_v)); _v; });\n"
       "    dp_float32x8 r = ((dp_float32x8){rintf(x[0]), rintf(x[1]), rintf(x[2]), rintf(x[3]), rintf(x[4]), "
       "rintf(x[5]), rintf(x[6]), rintf(x[7])});\n"
       "    CLAMP\n"
       "    dp_int32x8 j = CONVERT;\n"
       "    *(data0+i) = *(data1+j[3]);\n  }\n}\n")
CL = ("__kernel void k(__global float* restrict data0, __global float* restrict data1, "
      "__global float* restrict data2) {\n  int g = get_global_id(0);\n"
      "  float8 r = vload8(0, data2+(g*8));\n  CLAMP\n  int8 j = CONVERT;\n  *(data0+g) = *(data1+j.s3);\n}\n")
SCALAR = ("void k(float* restrict data0, float* restrict data1, float* restrict data2) {\n"
          "  for (int i = 0; i < 4; i++) {\n    float r = rintf(*(data2+i));\n    CLAMP\n"
          "    int j = (int)(c1);\n    *(data0+i) = *(data1+j);\n  }\n}\n")


def splat(v: str, t: str = "dp_float32x8") -> str:
    """A vector of eight ``v`` in the CPU renderer's spelling."""
    return f"(({t}){{{', '.join([v] * 8)}}})"


def cl_splat(v: str, t: str = "float8") -> str:
    return f"(({t})({', '.join([v] * 8)}))"


def blend(a: str, b: str, m: str) -> str:
    """The CPU renderer's float select: ``a`` where mask ``m`` (0 or 1 per lane) is 1, else ``b``."""
    return f"((dp_float32x8)(((dp_int32x8){a}&-{m})|((dp_int32x8){b}&({m}-1))))"


def cpu_clamp(lo: str, hi: str, inline: bool = False) -> str:
    """The NaN-absorbing clamp of packager/modeld/warp.py as the CPU renderer writes it: ``lo < r ? r : lo``, then
    ``c0 < hi ? c0 : hi``, each mask in a variable of its own (or spelled inline)."""
    if inline:
        return (f"dp_float32x8 c0 = {blend('r', splat(lo), f'(-({lo}<r))')};\n"
                f"    dp_float32x8 c1 = {blend('c0', splat(hi), f'(-(c0<{hi}))')};")
    return (f"dp_int32x8 m0 = (-({lo}<r));\n    dp_float32x8 c0 = {blend('r', splat(lo), 'm0')};\n"
            f"    dp_int32x8 m1 = (-(c0<{hi}));\n    dp_float32x8 c1 = {blend('c0', splat(hi), 'm1')};")


def cl_clamp(lo: str, hi: str) -> str:
    return (f"int8 m0 = (-({lo}<r));\n  float8 c0 = select({cl_splat(lo)}, r, -m0);\n"
            f"  int8 m1 = (-(c0<{hi}));\n  float8 c1 = select({cl_splat(hi)}, c0, -m1);")


def lanewise(fn: str) -> str:
    """``c1`` replaced by ``fn`` of each of its lanes, as the CPU renderer spells a per-lane math call."""
    return f"\n    c1 = ((dp_float32x8){{{', '.join(f'{fn}(c1[{i}])' for i in range(8))}}});"


CPU_CONVERT = "__builtin_convertvector(c1, dp_int32x8)"
CL_CONVERT = "convert_int8(c1)"
ZF, TF = splat("0.0f"), splat("3.0f")
# Tensor.clip's MAX/MIN as the renderers write them with a NaN-free bound: ``r <= lo ? lo : r`` keeps a NaN r
CPU_NAN_CLIP = (f"dp_float32x8 c0 = {blend(ZF, 'r', '(-(r<=' + ZF + '))')};\n"
                f"    dp_float32x8 c1 = {blend(TF, 'c0', '(-(' + TF + '<=c0))')};")
CL_NAN_CLIP = (f"float8 c0 = select(r, {cl_splat('0.0f')}, -(-(r<={cl_splat('0.0f')})));\n"
               f"  float8 c1 = select(c0, {cl_splat('3.0f')}, -(-({cl_splat('3.0f')}<=c0)));")
# the same kernel with the C target's min/max helpers (targets/minmax.py: ``a > b ? a : b``, ``a < b ? a : b``)
CPU_MINMAX = V8 + minmax_helpers(8)["max"] + "\n" + minmax_helpers(8)["min"] + "\n" + CPU[len(V8):]
MINMAX_CLAMP = f"dp_float32x8 c0 = dp_max_float32x8(r, {ZF});\n    dp_float32x8 c1 = dp_min_float32x8(c0, {TF});"

# (name, source, data1 bytes it reads: None where it must be refused)
CASES = [
    ("cpu clamp by the min/max helpers", CPU_MINMAX.replace("CLAMP", MINMAX_CLAMP).replace("CONVERT", CPU_CONVERT),
     16),
    # max(0, r) is r where 0 > r fails: a NaN r gets through
    ("cpu min/max helpers letting NaN through", CPU_MINMAX.replace("CLAMP", MINMAX_CLAMP.replace(
        f"dp_max_float32x8(r, {ZF})", f"dp_max_float32x8({ZF}, r)")).replace("CONVERT", CPU_CONVERT), None),
    ("cpu min/max helpers, lower clamp only", CPU_MINMAX.replace("CLAMP", MINMAX_CLAMP.replace(
        f"dp_min_float32x8(c0, {TF})", "c0")).replace("CONVERT", CPU_CONVERT), None),
    ("cpu clamp, masks in variables", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f")).replace(
        "CONVERT", CPU_CONVERT), 16),
    ("cpu clamp, masks inline", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f", inline=True)).replace(
        "CONVERT", CPU_CONVERT), 16),
    ("cpu clamp to a fraction truncates", CPU.replace("CLAMP", cpu_clamp("0.0f", "2.75f")).replace(
        "CONVERT", CPU_CONVERT), 12),
    ("cpu clamp that lets NaN through", CPU.replace("CLAMP", CPU_NAN_CLIP).replace("CONVERT", CPU_CONVERT), None),
    ("cpu lower clamp only", CPU.replace("CLAMP", "dp_int32x8 m0 = (-(0.0f<r));\n    dp_float32x8 c1 = " +
                                         blend("r", ZF, "m0") + ";").replace("CONVERT", CPU_CONVERT), None),
    ("cpu unclamped", CPU.replace("CLAMP", "dp_float32x8 c1 = r;").replace("CONVERT", CPU_CONVERT), None),
    ("cpu clamp beyond int", CPU.replace("CLAMP", cpu_clamp("0.0f", "1e+30f")).replace("CONVERT", CPU_CONVERT),
     None),
    ("cpu clamp picking the other side", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f").replace(
        blend("r", ZF, "m0"), blend(ZF, "r", "m0"))).replace("CONVERT", CPU_CONVERT), None),
    # m0 compared the rounded r; r then holds the raw coordinate, which m0 says nothing about
    ("cpu mask stale after its operand changed", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f").replace(
        "dp_float32x8 c0 =", "r = (x-1.0f);\n    dp_float32x8 c0 =")).replace("CONVERT", CPU_CONVERT), None),
    ("cpu mask stale after a branch assigned it", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f").replace(
        "dp_float32x8 c0 =", "if (i < 2) { m0 = (-(r<r)); }\n    dp_float32x8 c0 =")).replace(
        "CONVERT", CPU_CONVERT), None),
    ("cpu vector cast is bits, not a conversion", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.0f")).replace(
        "CONVERT", "((dp_int32x8)(c1))"), None),
    ("opencl clamp", CL.replace("CLAMP", cl_clamp("0.0f", "3.0f")).replace("CONVERT", CL_CONVERT), 16),
    ("opencl clamp rounded to nearest", CL.replace("CLAMP", cl_clamp("0.0f", "2.5f")).replace(
        "CONVERT", "convert_int8_rte(c1)"), 16),
    ("opencl clamp that lets NaN through", CL.replace("CLAMP", CL_NAN_CLIP).replace("CONVERT", CL_CONVERT), None),
    ("opencl unclamped", CL.replace("CLAMP", "float8 c1 = r;").replace("CONVERT", CL_CONVERT), None),
    # the warp's clamp-then-round (packager/modeld/warp.py): the rounding by 2**23 on PoCL, rintf per lane on the CPU
    ("opencl clamp rounded by adds", CL.replace("CLAMP", cl_clamp("0.0f", "2.75f")).replace(
        "CONVERT", "convert_int8(((c1+8388608.0f)-8388608.0f))"), 16),
    ("opencl clamp rounded by adds of an unclamped value", CL.replace("CLAMP", "float8 c1 = r;").replace(
        "CONVERT", "convert_int8(((c1+8388608.0f)-8388608.0f))"), None),
    ("opencl clamp rounded by adds of a product", CL.replace("CLAMP", cl_clamp("0.0f", "3.0f")).replace(
        "CONVERT", "convert_int8(((c1*8388608.0f)-8388608.0f))"), None),
    ("cpu clamp then rintf", CPU.replace("CLAMP", cpu_clamp("0.0f", "2.75f") + lanewise("rintf")).replace(
        "CONVERT", CPU_CONVERT), 16),
    ("cpu clamp then floorf", CPU.replace("CLAMP", cpu_clamp("0.0f", "3.5f") + lanewise("floorf")).replace(
        "CONVERT", CPU_CONVERT), 16),
    ("cpu clamp then expf", CPU.replace("CLAMP", cpu_clamp("0.0f", "1.0f") + lanewise("expf")).replace(
        "CONVERT", CPU_CONVERT), None),
    ("scalar clamp", SCALAR.replace("CLAMP", "float c0 = ((0.0f<r)?r:0.0f);\n    float c1 = ((c0<3.0f)?c0:3.0f);"),
     16),
    ("scalar clamp that lets NaN through", SCALAR.replace(
        "CLAMP", "float c0 = ((r<=0.0f)?0.0f:r);\n    float c1 = ((3.0f<=c0)?3.0f:c0);"), None),
    ("scalar clamp with NaN bound", SCALAR.replace(
        "CLAMP", "float n = NAN;\n    float c0 = ((n<r)?r:n);\n    float c1 = ((c0<3.0f)?c0:3.0f);"), None),
]


@pytest.mark.parametrize(("source", "nbytes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_float_clamped_accesses(source: str, nbytes: int | None) -> None:
    global_size = (1,) if source.startswith(V8) or source.startswith("void") else (4,)
    bindings = [("out", 16, None), ("table", 16, None), ("coords", 128, None)]
    if nbytes is None:
        with pytest.raises(IndexRangeError, match="data1 .table."):
            check_extents(source, "k", global_size, None, bindings, [], "d")
        return
    got = access_extents(source, "k", global_size, None, ())
    assert not isinstance(got, str), got
    assert got.buffers[1] == (0, nbytes)
    check_extents(source, "k", global_size, None, bindings, [], "d")
    short = list(bindings)
    short[1] = ("table", nbytes - 1, None)
    with pytest.raises(IndexRangeError, match=f"expected the {nbytes} bytes"):
        check_extents(source, "k", global_size, None, short, [], "d")


@pytest.mark.parametrize(("text", "suffix", "lo", "hi"), [
    ("1927.0", "f", 1927.0, 1927.0),  # exact
    ("0.1", "f", 0.09999999403953552, 0.10000000149011612),  # the two floats around it
    ("0.1", "", 0.09999999403953552, 0.10000000149011612),  # a double: between the same two
    ("1e+39", "f", 3.4028234663852886e+38, float("inf")),  # beyond float: up to inf
])
def test_float_literals_hold_the_compilers_rounding(text: str, suffix: str, lo: float, hi: float) -> None:
    got = literal(("num", None, suffix, text))
    assert got == Floats(((lo, hi),), CType("float", 4 if suffix else 8))
    assert lo <= float(text) <= hi


def test_float_sums_round_as_their_type() -> None:
    f32, f64 = CType("float", 4), CType("float", 8)
    near = Floats(((0.0, 3.0),), f32)
    c = literal(("num", None, "f", "8388608.0"))
    up = add_sub("+", near, c)
    assert up.lanes == ((8388608.0, 8388611.0),)  # float32 sums of exact integers: exact
    assert add_sub("-", up, c).lanes == ((0.0, 3.0),)
    half = Floats(((0.0, 2.5),), f32)
    assert add_sub("+", half, c).lanes == ((8388608.0, 8388610.0),)  # 8388610.5 rounds to even in float32
    assert add_sub("+", half, Floats(((8388608.0, 8388608.0),), f64)).lanes == ((8388608.0, 8388610.5),)  # double
    assert not isinstance(add_sub("+", Floats(((0.0, float("inf")),), f32), c), Floats)
    assert not isinstance(add_sub("+", Floats(((3e38, 3e38),), f32), Floats(((3e38, 3e38),), f32)), Floats)
