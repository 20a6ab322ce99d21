"""Dtype lowering: weak-type commit rules (a table of expression -> committed dtypes, checked numerically),
the pass order of full_rewrite_to_sink, the per-kernel dtype policy and its report, EMULATED_DTYPES parsing,
DEBUG=2 output, and index narrowing. numpy is only the oracle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from jit import Context, DType, GroupOp, Ops, Tensor, UOp, dtypes, graph_rewrite
from jit.codegen.passes.cast_const import pm_cast_const
from jit.codegen.passes.commit_weak import pm_commit_weak
from jit.codegen.passes.dtype_policy import DTypePolicy, aggregate_policies, decide_policy, parse_emulated
from jit.codegen.passes.lower_weak import pm_lower_weak
from jit.codegen.pipeline import commit_dtypes
from jit.common.dtype import PtrDType
from jit.common.errors import CompileError, DTypeError
from jit.ir.uop import toposort
from jit.realize import compile_uops, dtype_policy_report, schedule_dtype_policy
from jit.schedule.lower import KernelInfo, lower_kernel
from targets.cpu import CPU_DTYPES
from tests.dtype_modes import CPUNoInt64, CPUWithout, cpu_target, mode

D = dtypes
F16, F32, F64 = D.float16, D.float32, D.float64
I8, I32, I64 = D.int8, D.int32, D.int64


# --- helpers --------------------------------------------------------------------------------------------
def value_dtypes(t: Tensor) -> dict[str, set[str]]:
    """op name -> dtypes of the value nodes (not index arithmetic) in the last kernel computing ``t``."""
    kernel = compile_uops([t.uop])[-1].lowered
    out: dict[str, set[str]] = {}
    seen: set[UOp] = set()
    stack = [s.src[1] for s in kernel.src if s.op is Ops.STORE]
    while stack:
        u = stack.pop()
        if u in seen or u.op in (Ops.INDEX, Ops.RANGE):
            continue
        seen.add(u)
        if u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST, Ops.REDUCE):
            assert isinstance(u.dtype, DType)
            out.setdefault(u.op.name, set()).add(u.dtype.name)
        stack.extend(u.src)
    return out


@dataclass
class Inputs:
    """Fresh device tensors for one table row (rows must not share realized subgraphs)."""

    c: Tensor
    x8: Tensor
    u8: Tensor
    f32: Tensor
    f16: Tensor
    f64: Tensor
    i32: Tensor
    i64: Tensor

    @staticmethod
    def make() -> Inputs:
        c = np.array([True, False, True, False, True, False])
        f = np.array([1.7, -2.5, 0.1, 3.0, -0.4, 100.25])
        return Inputs(Tensor(c), Tensor(np.array([1, -2, 3, 100, -128, 127], np.int8)),
                      Tensor(np.array([1, 2, 3, 200, 0, 255], np.uint8)), Tensor(f.astype(np.float32)),
                      Tensor(f.astype(np.float16)), Tensor(f), Tensor(np.array([5, -6, 7, 2**31 - 1, -(2**31), 0],
                                                                                np.int32)),
                      Tensor(np.array([2**40 + 5, -3, 11, 2**62, -(2**62), 0], np.int64)))


C = np.array([True, False, True, False, True, False])
X8 = np.array([1, -2, 3, 100, -128, 127], np.int8)
U8 = np.array([1, 2, 3, 200, 0, 255], np.uint8)
FV = np.array([1.7, -2.5, 0.1, 3.0, -0.4, 100.25])
F32V, F16V = FV.astype(np.float32), FV.astype(np.float16)
I32V = np.array([5, -6, 7, 2**31 - 1, -(2**31), 0], np.int32)
I64V = np.array([2**40 + 5, -3, 11, 2**62, -(2**62), 0], np.int64)
W12 = np.where(C, 1, 2).astype(np.int32)
W15 = np.where(C, np.float32(1.5), np.float32(2.5)).astype(np.float32)


def _shared(i: Inputs) -> Tensor:
    w = i.c.where(1.5, 2.5)
    return w.cast(F16).cast(F64) + w.cast(F64)


def _weak_cmp_with_f64_user(i: Inputs) -> Tensor:
    w = i.c.where(1.5, 2.5)
    return (w < i.c.where(2.0, 1.0)).where(w.cast(F64), 0.0)


@dataclass
class Ulp1:
    """An expected float result that may differ by one ulp (libm transcendental functions)."""

    values: np.ndarray


# (name, expression, {op: committed dtype of every value node with that op}, result dtype, expected values)
Row = tuple[str, Callable[[Inputs], Tensor], dict[str, set[str]], DType, Any]
WEAK_TABLE: list[Row] = [
    # concrete operands fix the width at the frontend already: nothing weak reaches the kernel
    ("f32 + 1", lambda i: i.f32 + 1, {"ADD": {"float32"}}, F32, F32V + np.float32(1)),
    ("int8 + 3", lambda i: i.x8 + 3, {"ADD": {"int8"}}, I8, X8 + np.int8(3)),
    ("f16 * 0.5", lambda i: i.f16 * 0.5, {"MUL": {"float16"}}, F16, F16V * np.float16(0.5)),
    ("int64 + 5", lambda i: i.i64 + 5, {"ADD": {"int64"}}, I64, I64V + 5),
    ("int32 * 2", lambda i: i.i32 * 2, {"MUL": {"int32"}}, I32, I32V * np.int32(2)),
    ("f64 + 0.1 keeps the scalar's float64 precision", lambda i: i.f64 + 0.1, {"ADD": {"float64"}}, F64, FV + 0.1),
    ("f16 + 0.1 rounds the scalar to float16", lambda i: i.f16 + 0.1, {"ADD": {"float16"}}, F16,
     F16V + np.float16(0.1)),
    # a weak expression takes the width its consumer (here the float32 output buffer) needs
    ("int8 + 0.5 (weak float) -> float32", lambda i: i.x8 + 0.5, {"ADD": {"float32"}, "CAST": {"float32"}},
     D.weakfloat, X8.astype(np.float32) + np.float32(0.5)),
    ("uint8 * 2.5", lambda i: i.u8 * 2.5, {"MUL": {"float32"}, "CAST": {"float32"}}, D.weakfloat,
     U8.astype(np.float32) * np.float32(2.5)),
    ("bool + 1 (weak int) -> int32", lambda i: i.c + 1, {"ADD": {"int32"}, "CAST": {"int32"}}, D.weakint,
     C.astype(np.int32) + 1),
    ("bool + 1.5 -> float32", lambda i: i.c + 1.5, {"ADD": {"float32"}, "CAST": {"float32"}}, D.weakfloat,
     C.astype(np.float32) + np.float32(1.5)),
    # an explicit CAST is a lower bound on the computing width
    ("(int8 + 0.5).cast(f16): computed in float32, rounded once", lambda i: (i.x8 + 0.5).cast(F16),
     {"ADD": {"float32"}, "CAST": {"float32", "float16"}}, F16, (X8.astype(np.float32) + 0.5).astype(np.float16)),
    ("(int8 + 0.5).cast(f64): computed in float64", lambda i: (i.x8 + 0.5).cast(F64),
     {"ADD": {"float64"}, "CAST": {"float64"}}, F64, X8.astype(np.float64) + 0.5),
    ("(f32 * 0.5).cast(f16): float32 compute, one rounding", lambda i: (i.f32 * 0.5).cast(F16),
     {"MUL": {"float32"}, "CAST": {"float16"}}, F16, (F32V * np.float32(0.5)).astype(np.float16)),
    ("(bool + 1).cast(int64): computed in int64", lambda i: (i.c + 1).cast(I64),
     {"ADD": {"int64"}, "CAST": {"int64"}}, I64, C.astype(np.int64) + 1),
    ("(bool + 1).cast(int16): computed in int32, then narrowed", lambda i: (i.c + 1).cast(D.int16),
     {"ADD": {"int32"}, "CAST": {"int32", "int16"}}, D.int16, (C.astype(np.int32) + 1).astype(np.int16)),
    ("where(c, 2**20, 1)**2 .cast(int64) does not overflow",
     lambda i: (i.c.where(2**20, 1) * i.c.where(2**20, 1)).cast(I64),
     {"MUL": {"int64"}, "WHERE": {"int64"}}, I64, np.where(C, 2**40, 1).astype(np.int64)),
    ("where(c, 1, 2).cast(int8): int32 compute", lambda i: i.c.where(1, 2).cast(I8),
     {"WHERE": {"int32"}, "CAST": {"int8"}}, I8, W12.astype(np.int8)),
    ("where(c, 1, 2).cast(int64)", lambda i: i.c.where(1, 2).cast(I64), {"WHERE": {"int64"}}, I64,
     W12.astype(np.int64)),
    ("where(c, 1.5, 2.5).cast(f64)", lambda i: i.c.where(1.5, 2.5).cast(F64), {"WHERE": {"float64"}}, F64,
     np.where(C, 1.5, 2.5)),
    # a CAST across kinds fixes no width: the source keeps its kind's default
    ("where(c, 1, 2).cast(f16): int32 then convert", lambda i: i.c.where(1, 2).cast(F16),
     {"WHERE": {"int32"}, "CAST": {"float16"}}, F16, W12.astype(np.float16)),
    ("where(c, 1.5, 2.5).cast(int32): float32 then convert", lambda i: i.c.where(1.5, 2.5).cast(I32),
     {"WHERE": {"float32"}, "CAST": {"int32"}}, I32, W15.astype(np.int32)),
    ("(int8 * 0.5).cast(int8): float -> int conversion kept", lambda i: (i.x8 * 0.5).cast(I8),
     {"MUL": {"float32"}, "CAST": {"float32", "int8"}}, I8, (X8.astype(np.float32) * 0.5).astype(np.int8)),
    # float -> weakint is a real conversion, never dropped
    ("f32.cast(weakint) + 1", lambda i: i.f32.cast(D.weakint) + 1, {"CAST": {"int32"}, "ADD": {"int32"}},
     D.weakint, F32V.astype(np.int32) + 1),
    ("f32.cast(weakint).cast(f32) truncates", lambda i: i.f32.cast(D.weakint).cast(F32),
     {"CAST": {"int32", "float32"}}, F32, F32V.astype(np.int32).astype(np.float32)),
    # all-weak expressions stay weak until the end, then take int32 / float32
    ("where(c, 1, 2)", lambda i: i.c.where(1, 2), {"WHERE": {"int32"}}, D.weakint, W12),
    ("where(c, 1.5, 2)", lambda i: i.c.where(1.5, 2), {"WHERE": {"float32"}}, D.weakfloat,
     np.where(C, 1.5, 2.0).astype(np.float32)),
    ("where(c, 1, 5) < 3: weak comparison in int32", lambda i: i.c.where(1, 5) < 3,
     {"WHERE": {"int32"}, "CMPLT": {"bool"}}, D.bool, np.where(C, 1, 5) < 3),
    ("where(c, 1, 2).exp(): weak int -> weak float", lambda i: i.c.where(1, 2).exp(),
     {"WHERE": {"int32"}, "CAST": {"float32"}, "EXP": {"float32"}}, D.weakfloat,
     Ulp1(np.exp(W12.astype(np.float64)).astype(np.float32))),
    # divided by 3: a power of two would become an exact multiply (jit/codegen/passes/symbolic.py)
    ("where(c, 1, 2) / 3", lambda i: i.c.where(1, 2) / 3,
     {"WHERE": {"int32"}, "CAST": {"float32"}, "FDIV": {"float32"}}, D.weakfloat, W12.astype(np.float32) / 3),
    ("where(c, 1, 2).sum()", lambda i: i.c.where(1, 2).sum(), {"WHERE": {"int32"}, "REDUCE": {"int32"}},
     D.weakint, np.int32(W12.sum())),
    # a weak source shared by consumers takes their least upper bound
    ("where(c, 1, 2) + int8: int32 where, int8 add", lambda i: i.c.where(1, 2) + i.x8,
     {"WHERE": {"int32"}, "CAST": {"int8"}, "ADD": {"int8"}}, I8, W12.astype(np.int8) + X8),
    ("uint8 + where(c, 300, 1): 300 survives to the cast", lambda i: i.u8 + i.c.where(300, 1),
     {"WHERE": {"int32"}, "CAST": {"uint8"}, "ADD": {"uint8"}}, D.uint8,
     U8 + np.where(C, 300, 1).astype(np.int32).astype(np.uint8)),
    ("where(c, 1.5, 2.5) + f16", lambda i: i.c.where(1.5, 2.5) + i.f16,
     {"WHERE": {"float32"}, "CAST": {"float16"}, "ADD": {"float16"}}, F16, W15.astype(np.float16) + F16V),
    ("where(c, 1.5, 2.5) + f64", lambda i: i.c.where(1.5, 2.5) + i.f64, {"WHERE": {"float64"}, "ADD": {"float64"}},
     F64, np.where(C, 1.5, 2.5) + FV),
    ("w.cast(f16).cast(f64) + w.cast(f64): one float64 w", _shared,
     {"WHERE": {"float64"}, "CAST": {"float16", "float64"}, "ADD": {"float64"}}, F64,
     np.where(C, 1.5, 2.5).astype(np.float16).astype(np.float64) + np.where(C, 1.5, 2.5)),
    ("weak comparison operands share the float64 one needs", _weak_cmp_with_f64_user,
     {"WHERE": {"float64"}, "CMPLT": {"bool"}}, F64, np.where(np.where(C, 1.5, 2.5) < np.where(C, 2.0, 1.0),
                                                               np.where(C, 1.5, 2.5), 0.0)),
    # the condition of a WHERE does not take part in unifying branch widths
    ("where(weak cond, f16, f16): the condition stays float32",
     lambda i: (i.c.where(1.5, 2.5) > 2.0).where(i.f16, i.f16 * 2),
     {"WHERE": {"float16", "float32"}, "CMPLT": {"bool"}, "MUL": {"float16"}}, F16,
     np.where(W15 > 2.0, F16V, F16V * np.float16(2))),
    ("where(weak cond, f64, 0.0)", lambda i: (i.c.where(1, 5) < 3).where(i.f64, 0.0),
     {"WHERE": {"float64", "int32"}, "CMPLT": {"bool"}}, F64, np.where(np.where(C, 1, 5) < 3, FV, 0.0)),
    # a fused cast pair is kept: it rounds
    ("f32.cast(f16).cast(f32) rounds", lambda i: i.f32.cast(F16).cast(F32), {"CAST": {"float16", "float32"}}, F32,
     F32V.astype(np.float16).astype(np.float32)),
]


@pytest.mark.parametrize("row", WEAK_TABLE, ids=[r[0] for r in WEAK_TABLE])
def test_weak_commit_table(row: Row) -> None:
    _, build, want_dtypes, result_dtype, expected = row
    t = build(Inputs.make())
    assert t.dtype == result_dtype
    assert value_dtypes(t) == want_dtypes
    got = t.numpy()
    exp = np.asarray(expected.values if isinstance(expected, Ulp1) else expected)
    assert got.dtype == exp.dtype
    if isinstance(expected, Ulp1):
        np.testing.assert_array_max_ulp(got, exp, maxulp=1)
    else:
        np.testing.assert_array_equal(got, exp)


def test_weak_table_is_at_least_thirty_rows() -> None:
    assert len(WEAK_TABLE) >= 30


def test_no_weak_dtype_reaches_the_renderer() -> None:
    i = Inputs.make()
    exprs = [build(i) for _, build, *_ in WEAK_TABLE]
    for kernel in compile_uops([t.uop for t in exprs]):
        for u in toposort([kernel.lowered]):
            d = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
            assert not (isinstance(d, DType) and d.weak), (kernel.name, u.op)


# --- pass-level rules on synthetic kernel graphs -------------------------------------------------------
def _sink(value: UOp, out: DType) -> UOp:
    g = UOp(Ops.DEFINE_GLOBAL, PtrDType(out, 1), (), 0)
    store = UOp(Ops.STORE, D.void, (UOp(Ops.INDEX, g.dtype, (g, UOp.const(I32, 0))), value))
    return UOp(Ops.SINK, D.void, (store,), KernelInfo((g.dtype,)))  # type: ignore[arg-type]


def _loaded(d: DType, param: int = 1) -> UOp:
    g = UOp(Ops.DEFINE_GLOBAL, PtrDType(d, 1), (), param)
    return UOp(Ops.LOAD, d, (UOp(Ops.INDEX, g.dtype, (g, UOp.const(I32, 0))),))


def test_commit_leaves_all_weak_expressions_weak() -> None:
    """No consumer fixes a width: commit_weak declines; lower_weak then gives the default."""
    c = _loaded(D.bool)
    w = UOp(Ops.WHERE, D.weakint, (c, UOp.const(D.weakint, 1), UOp.const(D.weakint, 5)))
    cmp = UOp(Ops.CMPLT, D.bool, (w, UOp.const(D.weakint, 3)))
    sink = _sink(cmp, D.bool)
    assert graph_rewrite(sink, pm_commit_weak) is sink
    lowered = graph_rewrite(sink, pm_lower_weak)
    assert {u.dtype for u in toposort([lowered]) if u.op in (Ops.WHERE, Ops.CONST) and u.dtype != I32} <= {D.bool}


def test_commit_float_to_weakint_cast_is_a_conversion() -> None:
    x = _loaded(F32)
    cast = UOp(Ops.CAST, D.weakint, (x,))
    out = commit_dtypes(_sink(cast, I32))
    casts = [u for u in toposort([out]) if u.op is Ops.CAST]
    assert [(u.src[0].dtype, u.dtype) for u in casts] == [(F32, I32)]


def test_final_commit_handles_bare_constants() -> None:
    """A weak CONST whose consumer fixes no width (a decomposition could leave one) gets its default."""
    bare = UOp(Ops.CAST, F32, (UOp.const(D.weakint, 7),))
    out = graph_rewrite(_sink(bare, F32), pm_cast_const)
    consts = [u for u in toposort([out]) if u.op is Ops.CONST and u.arg == 7]
    assert [u.dtype for u in consts] == [I32]
    out64 = graph_rewrite(_sink(UOp(Ops.CAST, I64, (UOp.const(D.weakint, 7),)), I64), pm_cast_const)
    assert [u.dtype for u in toposort([out64]) if u.op is Ops.CONST and u.arg == 7] == [I64]  # the cast's floor


def test_weak_constant_per_consumer() -> None:
    """One weak CONST used at two widths is re-made per consumer, not forced through a cast."""
    a, b = _loaded(F16, 1), _loaded(F64, 2)
    half = UOp.const(D.weakfloat, 0.1)
    value = UOp(Ops.ADD, F64, (UOp(Ops.CAST, F64, (UOp(Ops.MUL, F16, (a, half)),)), UOp(Ops.MUL, F64, (b, half))))
    out = commit_dtypes(_sink(value, F64))
    consts = sorted((u.dtype.name, u.arg) for u in toposort([out]) if u.op is Ops.CONST and u.dtype != I32)
    assert consts == [("float16", float(np.float16(0.1))), ("float64", 0.1)]


def test_symbolic_never_folds_a_weak_node_before_commit() -> None:
    """`weak 2**20 * weak 2**20` cast to int64 is computed in int64 (a weak fold would wrap at 32 bits)."""
    c = Tensor(np.array([True, True, False, True, False]))
    big = c.where(2**20, 2**20) * c.where(2**20, 2**20)  # both branches equal: folds to a CONST
    np.testing.assert_array_equal(big.cast(I64).numpy(), np.full(5, 2**40, np.int64))


# --- pipeline order ---------------------------------------------------------------------------------------
def test_pipeline_documents_its_order() -> None:
    import jit.codegen.pipeline as pl
    doc = pl.__doc__ or ""
    stages = ["commit_weak", "lower_weak", "float_emulation", "long_decomp", "cast_const", "unroll"]
    positions = [doc.index(s) for s in stages]
    assert positions == sorted(positions)
    source = open(pl.__file__).read()
    assert "No symbolic here, on purpose" in source  # the stage-2 comment explains why


def test_fused_half_round_trip_is_not_simplified() -> None:
    x = np.array([1 / 3, 0.1, 65519.0, 1e-6], np.float32)
    want = x.astype(np.float16).astype(np.float32)
    for m in ("native", "emulated-half", "no-float16"):
        with mode(m):
            t = Tensor(x).cast(F16).cast(F32)
            np.testing.assert_array_equal(t.numpy(), want)


# --- dtype policy ---------------------------------------------------------------------------------------
def test_parse_emulated_names() -> None:
    assert parse_emulated("long, HALF,bf16") == frozenset({I64, F16, D.bfloat16})
    assert parse_emulated("ulong,float8_e4m3fn,fp8e5m2fnuz") == frozenset({D.uint64, D.fp8e4m3fn, D.fp8e5m2fnuz})
    assert parse_emulated("") == frozenset()
    with pytest.raises(DTypeError, match="EMULATED_DTYPES.*'float32'"):
        parse_emulated("long,float32")
    with pytest.raises(DTypeError, match="'nope'"):
        parse_emulated("nope")


def test_policy_reasons_and_pairing() -> None:
    sink = _sink(UOp(Ops.CAST, D.uint64, (_loaded(I64),)), D.uint64)
    native = decide_policy(sink, "CPU", CPU_DTYPES, "")
    assert native.emulated == () and set(native.native) == {I64, D.uint64, I32}
    by_setting = decide_policy(sink, "CPU", CPU_DTYPES, "long")
    assert dict(by_setting.emulated) == {I64: "EMULATED_DTYPES",
                                         D.uint64: "shares the 2×32-bit word layout with int64/uint64"}
    by_target = decide_policy(sink, "T", CPU_DTYPES - {I64}, "")
    assert dict(by_target.emulated)[I64] == "unsupported by target T"
    assert by_target.debug_lines() == ["emulating long as 2×int32 (shares the 2×32-bit word layout with "
                                       "int64/uint64; unsupported by target T)"]


def test_policy_refuses_what_it_cannot_emulate() -> None:
    sink = _sink(_loaded(F64), F64)
    with pytest.raises(CompileError, match="float64 is not supported by target NOF64"):
        decide_policy(sink, "NOF64", CPU_DTYPES - {F64}, "")
    with pytest.raises(CompileError, match="needs.*uint32"):
        decide_policy(_sink(_loaded(I64), I64), "NOU32", CPU_DTYPES - {I64, D.uint32}, "")


def test_target_without_float64_refuses_it_with_a_clear_error() -> None:
    class NoF64(CPUWithout):
        name = "CPU_NO_FLOAT64"
        missing = frozenset({F64})

    with cpu_target(NoF64()), pytest.raises(CompileError, match="float64 is not supported by target CPU_NO_FLOAT64"):
        (Tensor(np.array([1.0, 2.0])) * 2).numpy()


def test_policy_per_kernel_does_not_leak() -> None:
    """A kernel with int64 emulated, then one without: the second reports nothing emulated."""
    with Context(EMULATED_DTYPES="long"):
        a = Tensor(np.array([1, 2, 3, 4, 5], np.int64)) * 3
        b = Tensor(np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)) + 1
        k_long, k_float = compile_uops([a.uop])[-1], compile_uops([b.uop])[-1]
    assert dict(k_long.dtype_policy.emulated) == {I64: "EMULATED_DTYPES"}
    assert k_float.dtype_policy.emulated == () and F32 in k_float.dtype_policy.native
    assert "unsigned int*" in k_long.program.source and "long long" not in k_long.program.source


def test_debug2_prints_emulating_long_once_per_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    with Context(EMULATED_DTYPES="long", DEBUG=2):
        x = Tensor(np.array([2**40 + 5, 11, 3, -4, 9], np.int64))
        y = ((x * 7) + x).contiguous() - 2  # two kernels
        y.numpy()
        y.numpy()  # already computed and compiled: prints nothing new
        z = Tensor(np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)) * 5  # no int64: no line
        z.numpy()
    out = capsys.readouterr().out
    assert out.count("emulating long as 2×int32") == 2
    assert "emulating long as 2×int32 (EMULATED_DTYPES)" in out


def test_debug2_names_target_reason(capsys: pytest.CaptureFixture[str]) -> None:
    with cpu_target(CPUNoInt64()), Context(DEBUG=2):
        (Tensor(np.array([1, 2, 3, 4, 5], np.int64)) + 7).numpy()
    out = capsys.readouterr().out
    assert out.count("emulating long as 2×int32 (unsupported by target CPU_NO_INT64)") == 1


def test_model_report_aggregates_kernels() -> None:
    with Context(EMULATED_DTYPES="long"):
        x = Tensor(np.array([1, 2, 3, 4, 5], np.int64))
        f = Tensor(np.array([0.5, 1.5, 2.5, 3.5, 4.5], np.float32)).cast(D.bfloat16)
        y = (x * 2).contiguous().cast(F32) + f.cast(F32)
        report = schedule_dtype_policy([y.uop])
    assert set(report.emulated_in) == {"int64", "bfloat16"}
    assert report.reasons["int64"] == ["EMULATED_DTYPES"]
    assert report.reasons["bfloat16"] == ["unsupported by target CPU"]
    assert "float32" in report.native_in
    assert "bfloat16" in report.summary() and report.as_dict()["target"] == "CPU"
    kernels = compile_uops([y.uop])
    assert dtype_policy_report(kernels).as_dict() == aggregate_policies(
        (k.name, k.dtype_policy) for k in kernels).as_dict()


def test_policy_as_dict() -> None:
    policy = DTypePolicy("CPU", (F32,), ((D.bfloat16, "unsupported by target CPU"),))
    assert policy.as_dict() == {"target": "CPU", "native": ["float32"],
                                "emulated": {"bfloat16": "unsupported by target CPU"}}


def test_renderer_refuses_undeclared_dtypes() -> None:
    sink = _sink(_loaded(I64), I64)
    with pytest.raises(CompileError, match="int64.*CPU_NO_INT64 renderer"):
        CPUNoInt64().render("k", sink)


# --- index narrowing ------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", ["native", "emulated-long", "no-int64"])
def test_gather_clamps_wide_indices_before_narrowing(m: str) -> None:
    data = np.arange(10, 20, dtype=np.float32)
    idx = np.array([0, 3, -1, -10, 2**32 + 1, -(2**32) - 1, 2**40, 9, 10, -11], np.int64)
    want = data[np.clip(np.where(idx < 0, idx + 10, idx), 0, 9)]
    with mode(m):
        got = Tensor(data)[Tensor(idx)].numpy()
    np.testing.assert_array_equal(got, want)


def test_gather_with_uint32_indices_clamps() -> None:
    data = np.arange(5, dtype=np.int32)
    idx = np.array([0, 4, 5, 2**31, 2**32 - 1], np.uint32)
    np.testing.assert_array_equal(Tensor(data)[Tensor(idx)].numpy(), np.array([0, 4, 4, 4, 4], np.int32))


def test_lowering_refuses_buffers_beyond_int32_indexing() -> None:
    big = UOp(Ops.BUFFER, D.uint8, (), (10**9, "CPU", 2**31))  # never allocated: lowering refuses first
    out = UOp(Ops.BUFFER, D.uint8, (), (10**9 + 1, "CPU", 2**31))
    with pytest.raises(CompileError, match="int32 indexing"):
        lower_kernel(big, out)
