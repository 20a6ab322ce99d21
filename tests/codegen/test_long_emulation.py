"""int64 / uint64 as pairs of 32-bit words, against numpy int64 / uint64 (the oracle), each op three ways:
natively, with EMULATED_DTYPES=long, and on a CPU target whose declared dtypes lack int64.

Every kernel here has the same shape (the edge-case cross product plus hypothesis draws), so each op
compiles once per mode and every hypothesis example only uploads new values."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jit import Context, DType, Tensor, dtypes
from jit.common.errors import CompileError
from jit.realize import compile_uops
from tests.dtype_modes import LONG_MODES, mode

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
EDGES = [0, 1, -1, 2, -2, 7, -7, I64_MIN, I64_MAX, I64_MIN + 1, I64_MAX - 1, 2**31, 2**31 - 1, -(2**31),
         -(2**31) - 1, 2**31 + 1, 2**32, 2**32 - 1, -(2**32), 2**32 + 1, 2**40 + 5, 1 << 62]
COUNTS = [0, 1, 31, 32, 33, 63]
N_DRAWN = 28
EDGE_A = np.array([a for a in EDGES for _ in EDGES], np.int64)  # 484: every pair of edge values
EDGE_B = np.array([b for _ in EDGES for b in EDGES], np.int64)
SHIFT_A = np.array([a for a in EDGES for _ in COUNTS], np.int64)
SHIFT_B = np.array([c for _ in EDGES for c in COUNTS], np.int64)

SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)
int64s = st.one_of(st.sampled_from(EDGES), st.integers(I64_MIN, I64_MAX), st.integers(-(2**33), 2**33))
draws = st.lists(int64s, min_size=N_DRAWN, max_size=N_DRAWN)
counts = st.lists(st.integers(0, 63), min_size=N_DRAWN, max_size=N_DRAWN)


def _wrap(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _py(fn: Callable[[int, int], int]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A numpy oracle from an exact Python-int function, wrapped to int64 as the kernels wrap."""
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.array([_wrap(fn(x, y)) for x, y in zip(a.tolist(), b.tolist(), strict=True)], np.int64)
    return run


def _floor_div(a: int, b: int) -> int:
    return 0 if b == 0 else a // b


def _floor_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a % b


BinOp = tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]
BINARY: dict[str, BinOp] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "idiv_trunc": (lambda a, b: a.idiv(b), _py(_trunc_div)),
    "fmod_trunc": (lambda a, b: a.fmod(b), _py(lambda x, y: 0 if y == 0 else x - _trunc_div(x, y) * y)),
    "floordiv": (lambda a, b: a // b, _py(_floor_div)),
    "mod_floor": (lambda a, b: a % b, _py(_floor_mod)),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "le": (lambda a, b: a <= b, lambda a, b: a <= b),
    "gt": (lambda a, b: a > b, lambda a, b: a > b),
    "ge": (lambda a, b: a >= b, lambda a, b: a >= b),
    "eq": (lambda a, b: a == b, lambda a, b: a == b),
    "ne": (lambda a, b: a != b, lambda a, b: a != b),
    "and": (lambda a, b: a & b, lambda a, b: a & b),
    "or": (lambda a, b: a | b, lambda a, b: a | b),
    "xor": (lambda a, b: a ^ b, lambda a, b: a ^ b),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "where": (lambda a, b: (a < b).where(b, a), lambda a, b: np.where(a < b, b, a)),
}
SHIFTS: dict[str, BinOp] = {
    "shl": (lambda a, n: a << n, lambda a, n: a << n),
    "shr_arithmetic": (lambda a, n: a >> n, lambda a, n: a >> n),
}
UnOp = tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]
UNARY: dict[str, UnOp] = {
    "neg": (lambda a: -a, lambda a: -a),
    "not": (lambda a: ~a, lambda a: ~a),
    "abs": (lambda a: a.abs(), np.abs),
    "to_int32": (lambda a: a.cast(dtypes.int32), lambda a: a.astype(np.int32)),
    "to_int16": (lambda a: a.cast(dtypes.int16), lambda a: a.astype(np.int16)),
    "to_int8": (lambda a: a.cast(dtypes.int8), lambda a: a.astype(np.int8)),
    "to_uint8": (lambda a: a.cast(dtypes.uint8), lambda a: a.astype(np.uint8)),
    "to_uint32": (lambda a: a.cast(dtypes.uint32), lambda a: a.astype(np.uint32)),
    "to_uint64": (lambda a: a.cast(dtypes.uint64), lambda a: a.astype(np.uint64)),
    "to_bool": (lambda a: a.cast(dtypes.bool), lambda a: a.astype(np.bool_)),
    "to_float32": (lambda a: a.cast(dtypes.float32), lambda a: a.astype(np.float32)),
    "to_float64": (lambda a: a.cast(dtypes.float64), lambda a: a.astype(np.float64)),
    "to_float16": (lambda a: a.cast(dtypes.float16), lambda a: a.astype(np.float16)),
    "to_bfloat16": (lambda a: a.cast(dtypes.bfloat16), lambda a: a.astype(dtypes_np("bfloat16"))),
    "bitcast_uint64": (lambda a: a.bitcast(dtypes.uint64), lambda a: a.view(np.uint64)),
    "row_sum": (lambda a: a.reshape(16, 32).sum(1), lambda a: a.reshape(16, 32).sum(1)),
    "row_max": (lambda a: a.reshape(16, 32).max(1), lambda a: a.reshape(16, 32).max(1)),
    "row_min": (lambda a: a.reshape(16, 32).min(1), lambda a: a.reshape(16, 32).min(1)),
    "sum_all": (lambda a: a.sum(), lambda a: a.sum()),
    "cumsum": (lambda a: a.reshape(32, 16).cumsum(1), lambda a: a.reshape(32, 16).cumsum(1)),
}


def dtypes_np(name: str) -> np.dtype:
    from jit.common.dtype import to_numpy
    return to_numpy(dtypes.from_name(name))


def _pad(edge: np.ndarray, drawn: list[int]) -> np.ndarray:
    return np.concatenate([edge, np.array(drawn, np.int64)])


def _compare(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f" or got.dtype == dtypes_np("bfloat16"):
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    else:
        np.testing.assert_array_equal(got, want)


def _run2(m: str, fn: Callable[[Tensor, Tensor], Tensor], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with mode(m):
        return fn(Tensor(a), Tensor(b)).numpy()


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("name", list(BINARY))
@SETTINGS
@given(xs=draws, ys=draws)
def test_binary_int64(name: str, m: str, xs: list[int], ys: list[int]) -> None:
    fn, ref = BINARY[name]
    a, b = _pad(EDGE_A, xs), _pad(EDGE_B, ys)
    _compare(_run2(m, fn, a, b), ref(a, b))


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("name", list(SHIFTS))
@SETTINGS
@given(xs=draws, ns=counts)
def test_shift_int64(name: str, m: str, xs: list[int], ns: list[int]) -> None:
    fn, ref = SHIFTS[name]
    a, n = _pad(SHIFT_A, xs), _pad(SHIFT_B, ns)
    _compare(_run2(m, fn, a, n), ref(a, n))


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("name", list(UNARY))
@SETTINGS
@given(xs=draws)
def test_unary_int64(name: str, m: str, xs: list[int]) -> None:
    fn, ref = UNARY[name]
    a = _pad(EDGE_A, xs)
    with mode(m):
        got = fn(Tensor(a)).numpy()
    with np.errstate(over="ignore"):  # int64 -> float16 overflows to inf, as intended
        want = np.asarray(ref(a))
    _compare(got, want)


# --- conversions into int64 -------------------------------------------------------------------------------
NARROW_IN: dict[str, DType] = {"int32": dtypes.int32, "int16": dtypes.int16, "int8": dtypes.int8,
                               "uint32": dtypes.uint32, "uint8": dtypes.uint8, "bool": dtypes.bool}


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("src", list(NARROW_IN))
@SETTINGS
@given(xs=draws)
def test_extend_to_int64(src: str, m: str, xs: list[int]) -> None:
    """Sign extension from signed sources, zero extension from unsigned ones and bool."""
    a = _pad(EDGE_A, xs).astype(np.dtype(src) if src != "bool" else np.bool_)
    with mode(m):
        got = Tensor(a).cast(dtypes.int64).numpy()
    np.testing.assert_array_equal(got, a.astype(np.int64))


FLOATS = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.0**31, -(2.0**31), 2.0**32 - 256, 2.0**32, -(2.0**32),
                   2.0**40 + 4096, 2.0**62, -(2.0**63), 9.2e18, -9.2e18, 123456.789, -98765.4321], np.float64)
floats = st.lists(st.floats(-9.2e18, 9.2e18, allow_nan=False, width=64), min_size=N_DRAWN, max_size=N_DRAWN)


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("src", ["float32", "float64", "float16"])
@SETTINGS
@given(xs=floats)
def test_float_to_int64_truncates(src: str, m: str, xs: list[float]) -> None:
    with np.errstate(over="ignore"):
        a = np.concatenate([FLOATS, np.array(xs)]).astype(src)
    a = a[np.abs(a.astype(np.float64)) < 2.0**63]
    with mode(m):
        got = Tensor(a).cast(dtypes.int64).numpy()
    np.testing.assert_array_equal(got, a.astype(np.float64).astype(np.int64))


@pytest.mark.parametrize("m", LONG_MODES)
def test_float_to_int64_out_of_range_is_int64_min(m: str) -> None:
    a = np.array([np.nan, np.inf, -np.inf, 2.0**63, -(2.0**64), 1e30, 5.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = a.astype(np.int64)  # x86 and numpy: 0x8000000000000000
    with mode(m):
        got = Tensor(a).cast(dtypes.int64).numpy()
    np.testing.assert_array_equal(got, want)


# --- uint64 ------------------------------------------------------------------------------------------------
U64_EDGES = [0, 1, 2, 7, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1, 2**64 - 2,
             2**40 + 5]
U64_A = np.array([a for a in U64_EDGES for _ in U64_EDGES], np.uint64)
U64_B = np.array([b for _ in U64_EDGES for b in U64_EDGES], np.uint64)
uint64s = st.lists(st.one_of(st.sampled_from(U64_EDGES), st.integers(0, 2**64 - 1)), min_size=N_DRAWN,
                   max_size=N_DRAWN)


def _u_py(fn: Callable[[int, int], int]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.array([fn(x, y) % 2**64 for x, y in zip(a.tolist(), b.tolist(), strict=True)], np.uint64)
    return run


UBINARY: dict[str, BinOp] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a // b, _u_py(lambda x, y: 0 if y == 0 else x // y)),
    "mod": (lambda a, b: a % b, _u_py(lambda x, y: 0 if y == 0 else x % y)),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "shr_logical": (lambda a, b: a >> (b & 63), lambda a, b: a >> (b & np.uint64(63))),
    "to_float32": (lambda a, b: a.cast(dtypes.float32), lambda a, b: a.astype(np.float32)),
    "to_float64": (lambda a, b: a.cast(dtypes.float64), lambda a, b: a.astype(np.float64)),
    "to_int64": (lambda a, b: a.cast(dtypes.int64), lambda a, b: a.astype(np.int64)),
}


@pytest.mark.parametrize("m", LONG_MODES)
@pytest.mark.parametrize("name", list(UBINARY))
@SETTINGS
@given(xs=uint64s, ys=uint64s)
def test_uint64(name: str, m: str, xs: list[int], ys: list[int]) -> None:
    fn, ref = UBINARY[name]
    a = np.concatenate([U64_A, np.array(xs, np.uint64)])
    b = np.concatenate([U64_B, np.array(ys, np.uint64)])
    _compare(_run2(m, fn, a, b), ref(a, b))


# --- known values, layout, limits ---------------------------------------------------------------------
@pytest.mark.parametrize("m", LONG_MODES)
def test_known_values(m: str) -> None:
    with mode(m):
        out = (Tensor(np.array([2**40 + 5, 11], np.int64)) + Tensor(np.array([7, 7], np.int64))).numpy()
    assert out.dtype == np.int64 and out.tolist() == [1099511627788, 18]


@pytest.mark.parametrize("m", ["emulated-long", "no-int64"])
def test_emulated_kernels_use_word_buffers(m: str) -> None:
    with mode(m):
        x = Tensor(np.arange(8, dtype=np.int64)) * 3
        kernel = compile_uops([x.uop])[-1]
    assert "long long" not in kernel.program.source and "unsigned int* restrict data0" in kernel.program.source
    assert kernel.dtype_policy.long_emulated
    params = kernel.lowered.arg.params
    assert [(p.base, p.size) for p in params] == [(dtypes.uint32, 16), (dtypes.uint32, 16)]


def test_native_kernels_keep_int64() -> None:
    kernel = compile_uops([(Tensor(np.arange(8, dtype=np.int64)) * 3).uop])[-1]
    assert "long long" in kernel.program.source and not kernel.dtype_policy.long_emulated


@pytest.mark.parametrize("m", LONG_MODES)
def test_large_sum_uses_byte_pieces(m: str) -> None:
    """A reduction over more than 65537 elements splits the low word into bytes (exact to 16843009)."""
    a = np.random.default_rng(0).integers(I64_MIN // 2**17, I64_MAX // 2**17, 70000, dtype=np.int64)
    with mode(m):
        got = Tensor(a).sum().numpy()
    assert got == a.sum()


@pytest.mark.parametrize("m", LONG_MODES)
def test_pow_and_mixed_expression(m: str) -> None:
    a = np.array([2, -3, 5, 7, 0, 1, 10, -2], np.int64)
    b = np.array([3, 3, 2, 0, 5, 9, 15, 5], np.int64)
    with mode(m):
        p = (Tensor(a) ** Tensor(b)).numpy()
        mixed = ((Tensor(a) * 2**20 + Tensor(b)).cast(dtypes.float32) / 2).cast(dtypes.int64).numpy()
    np.testing.assert_array_equal(p, a ** b)
    np.testing.assert_array_equal(mixed, ((a * 2**20 + b).astype(np.float32) / 2).astype(np.int64))


@pytest.mark.parametrize("m", ["emulated-long", "no-int64"])
def test_uncovered_ops_name_the_op(m: str) -> None:
    with mode(m):
        with pytest.raises(CompileError, match="REDUCE MUL"):
            Tensor(np.arange(1, 9, dtype=np.int64)).prod().numpy()
        with pytest.raises(CompileError, match="BITCAST"):
            Tensor(np.arange(8, dtype=np.int64)).bitcast(dtypes.float64).numpy()


def test_emulated_setting_is_part_of_the_compile_cache() -> None:
    x = Tensor(np.arange(6, dtype=np.int64))
    native = compile_uops([(x + 1).uop])[-1]
    with Context(EMULATED_DTYPES="long"):
        emulated = compile_uops([(x + 1).uop])[-1]
    assert native.program.source != emulated.program.source
    assert compile_uops([(x + 1).uop])[-1] is native
