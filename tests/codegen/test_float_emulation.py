"""float16, bfloat16 and fp8 (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz): conversions bit-exact with numpy (float16)
and ml_dtypes (the others) for every bit pattern and a dense float32 sample, native float16 vs emulated,
float32 compute in the emulated formats, bit-exact copies, bitcasts, and the known values."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest

from jit import Context, DType, Tensor, dtypes
from jit.common.dtype import to_numpy
from jit.realize import compile_uops
from tests.dtype_modes import HALF_MODES, mode

NARROW: tuple[DType, ...] = (dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3fn, dtypes.fp8e5m2,
                             dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
# (dtype, mode): float16 natively, by EMULATED_DTYPES and on a target without it; the others are always emulated
CASES = [(dtypes.float16, m) for m in HALF_MODES] + [(d, "native") for d in NARROW[1:]]
IDS = [f"{d.name}-{m}" for d, m in CASES]


def storage(d: DType) -> type:
    return np.uint8 if d.itemsize == 1 else np.uint16


def all_patterns(d: DType) -> np.ndarray:
    """Every bit pattern of ``d``, as an array of ``d``."""
    return np.arange(2 ** (8 * d.itemsize), dtype=storage(d)).view(to_numpy(d))


def dense_float32() -> np.ndarray:
    """Every float16 and bfloat16 value and its neighbours (ties, half-ulps), every float32 exponent with
    mantissa patterns around the narrow formats' rounding points, and random bit patterns; both signs."""
    rng = np.random.default_rng(0)
    half = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    bf = np.arange(65536, dtype=np.uint32) << 16
    parts: list[np.ndarray] = [rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)]
    for base in (half, bf):
        parts += [base + k for k in (1, 0x800, 0xFFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001)]
        parts += [base - 1]
    exps = np.arange(256, dtype=np.uint32) << 23
    parts += [exps | m for m in (0, 1, 0x7FFFFF, 0x400000, 0x100000, 0x080000, 0x040000, 0x180000, 0x0C0000,
                                 0x0A0000, 0x060000, 0x020000, 0x020001, 0x01FFFF, 0x000FFF)]
    u = np.concatenate(parts).astype(np.uint32) & np.uint32(0x7FFFFFFF)
    return np.concatenate([u, u | np.uint32(0x80000000)]).view(np.float32)


DENSE = dense_float32()


def assert_bits(got: np.ndarray, want: np.ndarray, *, nan_bits: bool = True) -> None:
    """Equal bit patterns; with ``nan_bits=False`` NaNs need only agree on being NaN (hardware may quiet them)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    ui = np.dtype(f"u{got.dtype.itemsize}")
    gb, wb = got.view(ui), want.view(ui)
    if not nan_bits:
        with np.errstate(invalid="ignore"):
            gnan, wnan = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
        np.testing.assert_array_equal(gnan, wnan)
        gb, wb = gb[~wnan], wb[~wnan]
    bad = np.nonzero(gb != wb)[0]
    examples = [(hex(int(g)), hex(int(w))) for g, w in zip(gb[bad[:4]], wb[bad[:4]], strict=True)]
    assert len(bad) == 0, f"{len(bad)} patterns differ, e.g. (got, want) {examples}"


@pytest.fixture
def in_mode(request: pytest.FixtureRequest) -> Iterator[DType]:
    d, m = request.param
    with mode(m):
        yield d


def exact_nans(*ds: DType) -> bool:
    """False when a conversion runs natively in float16 hardware, which quiets signaling NaNs (numpy keeps
    them); every emulated conversion matches numpy / ml_dtypes NaN bits exactly."""
    from jit import Device
    from jit.codegen.passes.dtype_policy import parse_emulated
    from jit.common.helpers import EMULATED_DTYPES

    native_half = dtypes.float16 in Device["CPU"].supported_dtypes() and \
        dtypes.float16 not in parse_emulated(str(EMULATED_DTYPES.value))
    return not (native_half and dtypes.float16 in ds)


# --- exhaustive and dense conversion tables ---------------------------------------------------------------
@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_every_pattern_to_float32(in_mode: DType) -> None:
    d = in_mode
    x = all_patterns(d)
    got = Tensor(x).cast(dtypes.float32).numpy()
    assert_bits(got, x.astype(np.float32), nan_bits=exact_nans(d))


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_dense_float32_to_narrow(in_mode: DType) -> None:
    """Round to nearest even; subnormals kept; overflow, inf and NaN per format; matches numpy / ml_dtypes."""
    d = in_mode
    with np.errstate(over="ignore", invalid="ignore"):
        want = DENSE.astype(to_numpy(d))
    got = Tensor(DENSE).cast(d).numpy()
    assert_bits(got, want, nan_bits=exact_nans(d))


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_float64_to_narrow(in_mode: DType) -> None:
    """float16 rounds once from float64 (as numpy); the ml_dtypes formats go through float32 (as ml_dtypes)."""
    d = in_mode
    rng = np.random.default_rng(1)
    x = rng.standard_normal(50_000) * np.exp2(rng.integers(-40, 20, 50_000))
    ties = 1 + 2.0 ** -11 + np.exp2(-np.arange(25.0, 53.0))  # double-rounding traps for float16
    x = np.concatenate([x, ties, -ties, [0.0, -0.0, np.inf, -np.inf, 1e300, -1e300, 65520.0, 65519.99999]])
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(to_numpy(d))
    assert_bits(Tensor(x).cast(d).numpy(), want)


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_integers_to_narrow(in_mode: DType) -> None:
    d = in_mode
    rng = np.random.default_rng(2)
    i32 = np.concatenate([rng.integers(-(2**31), 2**31, 20_000).astype(np.int32),
                          np.array([0, 1, -1, 65519, 65520, -65520, 448, 464, 465, (1 << 30) + (1 << 22) + 1],
                                   np.int32)])
    i64 = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 20_000, dtype=np.int64),
                          np.array([(1 << 62) + (1 << 54) + 1, 2**40 + 5, -1], np.int64)])
    u8 = np.arange(256, dtype=np.uint8)
    for arr in (i32, i64, u8, u8.astype(np.bool_)):
        with np.errstate(over="ignore", invalid="ignore"):
            want = arr.astype(to_numpy(d))
        assert_bits(Tensor(arr).cast(d).numpy(), want)


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_narrow_to_integers_and_float64(in_mode: DType) -> None:
    d = in_mode
    x = all_patterns(d)
    finite = x[np.isfinite(x.astype(np.float32))]
    for target, npd in ((dtypes.int32, np.int32), (dtypes.int8, np.int8), (dtypes.uint8, np.uint8)):
        lim = np.iinfo(npd)
        v = finite[(finite.astype(np.float64) > lim.min - 1) & (finite.astype(np.float64) < lim.max + 1)]
        np.testing.assert_array_equal(Tensor(v).cast(target).numpy(), v.astype(npd))
    np.testing.assert_array_equal(Tensor(x).cast(dtypes.bool).numpy(), x.astype(np.float32) != 0)
    with np.errstate(invalid="ignore"):
        want64 = x.astype(np.float64)
    # float32 -> float64 is the CPU's own conversion, which quiets signaling NaNs: compare NaN-ness there
    assert_bits(Tensor(x).cast(dtypes.float64).numpy(), want64, nan_bits=False)


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_narrow_to_narrow(in_mode: DType) -> None:
    """Between two narrow formats the value goes through float32 (exact) and rounds once."""
    d = in_mode
    x = all_patterns(d)
    for other in NARROW:
        if other == d:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(np.float32).astype(to_numpy(other))
        assert_bits(Tensor(x).cast(other).numpy(), want, nan_bits=exact_nans(d, other))


# --- compute, copies, bitcasts ----------------------------------------------------------------------------
@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_single_ops_compute_in_float32_and_round_once(in_mode: DType) -> None:
    """One op on two narrow values equals numpy / ml_dtypes computing in float32 and rounding the result."""
    d = in_mode
    x = all_patterns(d)
    a = x[np.isfinite(x.astype(np.float32))]
    b = np.random.default_rng(3).permutation(a)
    npd = to_numpy(d)
    for fn in (lambda p, q: p + q, lambda p, q: p - q, lambda p, q: p * q, lambda p, q: p / q):
        with np.errstate(all="ignore"):
            want = fn(a.astype(np.float32), b.astype(np.float32)).astype(npd)
        assert_bits(fn(Tensor(a), Tensor(b)).numpy(), want, nan_bits=exact_nans(d))
    with np.errstate(all="ignore"):
        want_max = np.maximum(a.astype(np.float32), b.astype(np.float32)).astype(npd)
        want_sqrt = np.sqrt(np.abs(a.astype(np.float32))).astype(npd)
    assert_bits(Tensor(a).maximum(Tensor(b)).numpy(), want_max, nan_bits=exact_nans(d))
    assert_bits(Tensor(a).abs().sqrt().numpy(), want_sqrt, nan_bits=exact_nans(d))
    np.testing.assert_array_equal((Tensor(a) < Tensor(b)).numpy(), a.astype(np.float32) < b.astype(np.float32))


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_sum_accumulates_in_float32(in_mode: DType) -> None:
    d = in_mode
    v = np.tile(np.array([1.0, 2.0, -1.5, 0.5, 3.0, -2.0, 0.25, 4.0], np.float32), 64).astype(to_numpy(d))
    got = Tensor(v).reshape(8, 64).sum(1).numpy()
    want = v.astype(np.float32).reshape(8, 64).sum(1).astype(to_numpy(d))
    assert got.dtype == to_numpy(d)
    assert_bits(got, want)


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_copies_and_movement_keep_bits(in_mode: DType) -> None:
    """Permute, pad and gather of narrow buffers move bits: NaN payloads and -0 survive."""
    d = in_mode
    x = all_patterns(d)
    n = x.size
    bits: np.ndarray = x.view(storage(d))
    got = Tensor(x).reshape(-1, 16).permute(1, 0).pad(((1, 1), (0, 0))).numpy()
    want = np.pad(bits.reshape(-1, 16).T, ((1, 1), (0, 0)))
    np.testing.assert_array_equal(got.view(storage(d)), want)
    idx = np.random.default_rng(4).integers(0, n, 1000).astype(np.int32)
    np.testing.assert_array_equal(Tensor(x)[Tensor(idx)].numpy().view(storage(d)), bits[idx])


@pytest.mark.parametrize("in_mode", CASES, ids=IDS, indirect=True)
def test_bitcasts_are_exact(in_mode: DType) -> None:
    d = in_mode
    x = all_patterns(d)
    signed = dtypes.int8 if d.itemsize == 1 else dtypes.int16
    ints = x.view(to_numpy(signed))
    np.testing.assert_array_equal(Tensor(x).bitcast(signed).numpy(), ints)
    got = Tensor(ints).bitcast(d).numpy()
    np.testing.assert_array_equal(got.view(storage(d)), x.view(storage(d)))


# --- known values and the emulated kernel's shape ---------------------------------------------------------
@pytest.mark.parametrize("m", ["native", "bf16-setting"])
def test_bfloat16_known_values(m: str) -> None:
    with Context(EMULATED_DTYPES="bf16" if m == "bf16-setting" else ""):
        t = Tensor(np.array([10000, -1, -1000, -10000, 20], np.float32)).cast(dtypes.bfloat16)
        assert t.cast(dtypes.float32).tolist() == [9984, -1, -1000, -9984, 20]
        assert t.numpy().dtype == ml_dtypes.bfloat16
        assert Tensor(np.array([1.5, -2.0], np.float32)).cast(dtypes.bfloat16).cast(dtypes.float32).tolist() == \
            [1.5, -2.0]
        assert Tensor(np.array([1.5, -2.0], ml_dtypes.bfloat16)).cast(dtypes.float32).tolist() == [1.5, -2.0]


@pytest.mark.parametrize("d", NARROW, ids=[d.name for d in NARROW])
def test_fused_round_trip_rounds(d: DType) -> None:
    x = np.array([1 / 3, 0.1, 100.7, -3.3, 1e-3, 7e-5], np.float32)
    want = x.astype(to_numpy(d)).astype(np.float32)
    with Context(EMULATED_DTYPES="half"):
        np.testing.assert_array_equal(Tensor(x).cast(d).cast(dtypes.float32).numpy(), want)


@pytest.mark.parametrize("d", NARROW, ids=[d.name for d in NARROW])
def test_emulated_kernels_store_bits(d: DType) -> None:
    with Context(EMULATED_DTYPES="half"):
        t = Tensor(np.arange(8, dtype=np.float32)).cast(d) * 2
        kernel = compile_uops([t.uop])[-1]
    src = kernel.program.source
    ctype = "unsigned char" if d.itemsize == 1 else "unsigned short"
    assert f"{ctype}* restrict data0" in src and "_Float16" not in src and "__bf16" not in src
    assert d in kernel.dtype_policy.float_emulated


def test_native_float16_stays_native() -> None:
    kernel = compile_uops([(Tensor(np.arange(8, dtype=np.float16)) * 2).uop])[-1]
    assert "_Float16" in kernel.program.source and not kernel.dtype_policy.float_emulated


def test_debug2_names_the_emulated_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with Context(DEBUG=2):
        (Tensor(np.arange(5, dtype=np.float32)).cast(dtypes.fp8e4m3fn).cast(dtypes.float32) + 1).numpy()
    out = capsys.readouterr().out
    assert out.count("emulating fp8e4m3fn as float32 over uint8 bits (unsupported by target CPU)") == 1


# (1 << 30) + (1 << 22) + 1 lies just above a bfloat16 tie that float32 cannot see: an int -> float32 -> bfloat16
# cast rounds twice (down, 0x4e80) where a correctly rounded one rounds up (0x4e81), as ml_dtypes does.
ROUND_UP_CASES = [(np.int32, (1 << 30) + (1 << 22) + 1, 0x4E81), (np.int32, -((1 << 30) + (1 << 22) + 1), 0xCE81),
                  (np.uint32, (1 << 31) + (1 << 23) + 1, 0x4F01), (np.int64, (1 << 62) + (1 << 54) + 1, 0x5E81),
                  (np.uint64, (1 << 63) + (1 << 55) + 1, 0x5F01), (np.int64, (1 << 30) + (1 << 22), 0x4E80)]


@pytest.mark.parametrize("emulated", ["", "long"])
@pytest.mark.parametrize(("npd", "value", "bits"), ROUND_UP_CASES)
def test_int_to_bfloat16_rounds_once(npd: type, value: int, bits: int, emulated: str) -> None:
    x = np.array([value, 7, -3 if np.dtype(npd).kind == "i" else 3], dtype=npd)
    assert int(x.astype(ml_dtypes.bfloat16).view(np.uint16)[0]) == bits  # the reference agrees
    with Context(EMULATED_DTYPES=emulated):
        got = Tensor(x).cast(dtypes.bfloat16).numpy()
    assert_bits(got, x.astype(ml_dtypes.bfloat16))
