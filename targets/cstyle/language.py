"""What a C dialect spells and declares: the ``CStyleLanguage`` a target gives the renderer, and constants.

Targets differ only in this declaration (type names, qualifiers, how global indices are obtained, math function
spelling, vector types); the walk over the graph (targets/cstyle/walk.py) is one piece of code. The language holds
spellings only: what code to write is the optimizer's decision (jit/codegen/opt), made in the kernel graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from jit.common.dtype import DType, dtypes
from jit.ir.uop import Ops

INFIX: dict[Ops, str] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPEQ: "==",
                         Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
# float math functions (the float64 spelling: float32 adds ``f32_math_suffix``)
FLOAT_FN: dict[Ops, str] = {Ops.EXP: "exp", Ops.LOG: "log", Ops.SQRT: "sqrt", Ops.SIN: "sin", Ops.COS: "cos",
                            Ops.TAN: "tan", Ops.TANH: "tanh", Ops.ERF: "erf", Ops.TRUNC: "trunc",
                            Ops.FLOOR: "floor", Ops.CEIL: "ceil", Ops.RINT: "rint", Ops.ABS: "fabs"}


# an inlined expression nesting deeper than this gets a variable: a fused chain of hundreds of ops would otherwise
# be one expression as deep as the chain, past what a package's reader (targets/index_parse.py) accepts
MAX_INLINE_DEPTH = 24


def paren_depth(text: str) -> int:
    """The deepest nesting of parentheses in ``text``."""
    depth = deepest = 0
    for ch in text:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest


@dataclass(frozen=True)
class CStyleLanguage:
    """What one C dialect spells differently."""

    kernel_prefix: str = "void"
    buffer_prefix: str = ""
    restrict: str = "restrict"
    headers: tuple[str, ...] = ()
    type_names: dict[DType, str] = field(default_factory=dict)
    float_suffix: dict[DType, str] = field(default_factory=lambda: {dtypes.float32: "f"})
    # math on float32 uses C's f-suffixed names (expf); OpenCL overloads the plain names
    f32_math_suffix: str = "f"
    # how many outer global ranges become hardware indices (0 on a CPU: all become loops)
    global_dims: int = 0
    global_index_fn: str = "get_global_id"
    # work-group local memory (jit/codegen/opt/group.py): the local id function (its dimension 0 is a group reduce's),
    # a local array declaration of ``n`` elements of type ``t``, and the barrier that makes its writes visible to
    # the group; "" = none (a kernel with a "group" range is refused)
    local_index_fn: str = ""
    local_array: str = ""
    local_barrier: str = ""
    bitcast_fmt: str = "({{ {src_t} _s = ({x}); {dst_t} _d; __builtin_memcpy(&_d, &_s, sizeof(_d)); _d; }})"
    # integer POW: "double" computes (T)pow((double)a, (double)b) (C with fp64); "loop" calls a helper doing
    # exponentiation by squaring in the unsigned type (exact, wraps; for targets without fp64)
    int_pow: str = "double"
    # CPU threads: the pragma that splits the outermost output loops over a thread team ("" = single-threaded;
    # ``{collapse}`` is filled in), the definitions it needs (emitted once per compiled file), the work (loop
    # iterations of the whole kernel) below which a thread team costs more than it saves, and the fewest
    # iterations the collapsed loops must have. The thread count itself is not in the source: the target sets
    # it at load time, so one compiled kernel serves any count.
    parallel_for: str = ""
    parallel_setup: str = ""
    # instead of a pragma: the kernel takes the half-open range of its (flattened) parallel loops as its last two
    # parameters, ``int dp_lo, int dp_hi``, and whoever launches it splits [0, n) over threads (targets/cpu_pool.py)
    parallel_range: bool = False
    parallel_min_work: int = 1 << 15
    parallel_min_trips: int = 8
    # weights in images (jit/codegen/passes/images.py): how a parameter of ImageDType is declared, the helper
    # definitions that read one float of it, and the read itself ({buf}, {idx}, {width}); "" = no images
    image_param: str = ""
    image_helper: str = ""
    image_read: str = ""
    # vector types (codegen/opt/vectorize.py): float32 lanes of the widest vector the optimizer may ask for (0 = none);
    # the name of ``n`` lanes of scalar type ``t`` (``name``: the dtype's name), the definition that name needs
    # (emitted once per file; "" = built in), a load/store of ``n`` contiguous elements at ``ptr`` (any
    # alignment), lane ``i`` of vector ``x`` (``hexi``: i in hex), and a vector built from its ``lanes``
    vector_width: int = 0
    vector_type: str = ""
    vector_typedef: str = ""
    vector_load: str = ""
    vector_store: str = ""
    # the same for a vector of 8- or 16-bit lanes whose first element is at a multiple of 4 bytes (its offset proven
    # so; every buffer starts aligned), as ``w`` 32-bit words: a load of ``w`` words reinterpreted as ``vt``, a store
    # of ``val`` reinterpreted as ``w`` words; "" = as the other vectors. PoCL spells a uchar16 vload16 as sixteen
    # byte loads, a uint4 load as one
    vector_word_load: str = ""
    vector_word_store: str = ""
    # a store of vector ``val`` at its lanes' own int32 offsets ``idx`` from ``buf`` (a plane per lane: channel
    # vectors stored into an NCHW output), by dtype name: the definition of a helper ``dp_scatter_<dtype>x<n>(buf,
    # idx, val)`` for vectors of ``vector_scatter_lanes`` lanes, emitted once per file; none = lane by lane
    vector_scatter: dict[str, str] = field(default_factory=dict)
    vector_scatter_lanes: int = 0
    vector_lane: str = "{x}[{i}]"
    # lanes of two vectors a, b picked by ``mask`` (indices into a's lanes then b's); ``it``/``ut``: the signed /
    # unsigned int vector types of as many lanes as wide as a's; "" = no shuffle function: where ``lane_shuffle``,
    # the picked lanes are a ``vector_ctor`` of ``vector_lane``s (OpenCL's swizzles, which a compiler sees as one
    # constant shuffle: PoCL's shuffle2 is library code, lane by lane), else strided loads are gathered
    vector_shuffle: str = ""
    lane_shuffle: bool = False
    vector_ctor: str = "(({vt}){{{lanes}}})"
    # one value in every lane (""= a ``vector_ctor`` of it lane by lane: GCC's compound literal zeroes missing lanes):
    # OpenCL's one-value literal keeps a 16-lane constant one value long, for the device's compiler and the checks
    vector_splat: str = ""
    # a comparison ``a op b`` of 32-bit lanes as 0/1 int32 lanes, and lanes of a where int32 lanes c are 1, else of
    # b (``vt``: a's vector type, ``it``: the int32 vector of as many lanes); "" = lane by lane. A select computed
    # lane by lane keeps every accumulator of a tile live across per-lane code: GCC spilled one of a conv's eight
    # accumulators in its reduce loop for a ReLU epilogue (43 vs 66 GFLOP/s)
    vector_compare: str = ""
    vector_select: str = ""
    # by op (max, min): the definition of a helper ``dp_<op>_float32x<n>(a, b)`` computing ``a > b ? a : b`` (``a <
    # b ? a : b``) lane by lane for float32 vectors of ``vector_minmax_lanes`` lanes in one instruction
    # (targets/minmax.py), emitted once per file; none = compare and select
    vector_minmax: dict[str, str] = field(default_factory=dict)
    vector_minmax_lanes: int = 0
    # vector ``x`` as vector type ``vt``: its bits (``vector_reinterpret``, same size) or its lanes' values converted
    # as C casts convert them (``vector_convert``, same lane count); "" = lane by lane
    vector_reinterpret: str = ""
    vector_convert: str = ""
    # whether the math functions (``FLOAT_FN``: exp, rint, ...) take a vector, lane by lane (OpenCL's overloads do;
    # C's expf takes one float): without, they are called once per lane, and the codegen pipeline computes float32
    # exp and erf on vector lanes as arithmetic (jit/codegen/passes/vector_exp.py). A call per lane is a scalar
    # library call per lane: PoCL's warp spent most of its time in eight rint calls per float8
    vector_math: bool = True
    # whether a vector rint is as fast as the rest of the vector arithmetic: without, the codegen pipeline computes
    # float32 rint on vector lanes from adds (jit/codegen/passes/vector_rint.py)
    vector_rint: bool = True
    # whether the vector exp and erf that ``vector_math`` offers are as fast as the codegen pipeline's own
    # arithmetic for them (jit/codegen/passes/vector_exp.py): without, that arithmetic is used anyway. PoCL's float16
    # erf took longer than the multiply-adds of the 1x1 conv whose GELU epilogue it was
    vector_exp: bool = True
    # a request that the line at pointer ``p`` be fetched into the caches for a read soon (jit/codegen/opt/prefetch.py
    # places them); "" = none, the request is dropped
    prefetch: str = ""
    # conversions from 8- or 16-bit lanes to 32-bit ones widen one step at a time (8 -> 16 -> 32 bits, then to
    # float): GCC 12 compiles a direct uint8x8 -> float32x8 convert (and the byte shuffle before it) lane by lane,
    # eight scalar converts per vector; through uint16x8 and int32x8 it is two zero-extends and one vcvtdq2ps
    # (vision's uint8 input copy: 302 -> 204 us on one core). Every step is exact, so the value is the C cast's
    widen_stepwise: bool = False
    # the device runs a work-item's own loops as cheaply as launched dimensions (a CPU device): an elementwise
    # kernel's padded row is peeled into a vector loop inside one work-item, as on the C target, instead of one
    # work-item per element (PoCL: vision's pad copies 0.107 -> 0.03 ms)
    peel_launched_rows: bool = False
    # the line asking the compiler to unroll the next loop, put before the loops the optimizer marks
    # (jit/codegen/opt/hints.py); "" = none
    unroll_hint: str = ""
    # the declaration of the park array ``name`` of ``n`` values of type ``t`` that accumulators wait in
    # (jit/codegen/opt/park.py); volatile, so that the compiler stores and reloads them exactly where written
    park_array: str = "volatile {t} {name}[{n}];"

    def type_name(self, d: DType) -> str:
        return self.type_names.get(d, d.cname)


def render_const(lang: CStyleLanguage, value: object, d: DType) -> str:
    if d.is_bool:
        return "1" if value else "0"
    if d.is_float:
        v = float(value)  # type: ignore[arg-type]
        ctype = lang.type_name(d)
        if math.isnan(v):
            text = "NAN"
        elif math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            # repr is the shortest text that round-trips; the value is already rounded to d
            text = repr(v) + lang.float_suffix.get(d, "")
            if v < 0:
                text = f"({text})"  # so that x - (-1.0f) never reads as x--1.0f
        return text if d in (dtypes.float32, dtypes.float64) else f"(({ctype}){text})"
    iv = int(value)  # type: ignore[call-overload]
    if d.is_unsigned:
        return f"{iv}u" if d.bits <= 32 else f"{iv}ull"
    if d.bits == 64:
        return f"({iv + 1}ll-1)" if iv == d.min else f"{iv}ll"
    if iv == d.min:
        return f"(({lang.type_name(d)})({iv + 1}-1))"
    return str(iv) if d.bits == 32 else f"(({lang.type_name(d)}){iv})"
