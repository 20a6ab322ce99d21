"""Data types: the scalar/pointer dtypes, weak types for Python scalars, and the promotion lattice.

The lattice follows JAX's: Python scalars are *weak* (``weakint``/``weakfloat``) and adopt the width of
the concrete operand they meet, so ``int8_tensor + 3`` stays int8 while ``int8_tensor + 0.5`` is a weak
float that a later concrete float (or the compiler's commit pass) fixes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Final

import ml_dtypes
import numpy as np

from jit.common.errors import DTypeError


@dataclass(frozen=True, eq=True)
class DType:
    """A scalar element type. ``kind`` is one of 'b' (bool), 'i' (signed), 'u' (unsigned), 'f' (float)."""

    name: str
    itemsize: int
    kind: str
    cname: str
    weak: bool = False
    # float layout (exponent bits, mantissa bits); (0, 0) for non-floats
    exp_bits: int = 0
    mant_bits: int = 0

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    def __lt__(self, other: DType) -> bool:  # for deterministic sorting only
        return self.name < other.name

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    def ptr(self, size: int = -1) -> PtrDType:
        return PtrDType(self, size)

    @property
    def scalar(self) -> DType:
        return self

    @property
    def min(self) -> int | float | bool:
        return dtype_min(self)

    @property
    def max(self) -> int | float | bool:
        return dtype_max(self)


@dataclass(frozen=True, eq=True)
class PtrDType:
    """A pointer to ``size`` elements of ``base`` in global memory (size -1 = unknown)."""

    base: DType
    size: int = -1

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size})"

    @property
    def name(self) -> str:
        return f"{self.base.name}*"

    @property
    def itemsize(self) -> int:
        return self.base.itemsize

    is_float = False
    is_int = False
    is_bool = False
    weak = False


@dataclass(frozen=True, eq=True)
class ImageDType(PtrDType):
    """A read-only 2-D image of RGBA float texels holding ``size`` elements of ``base`` (float32) in order:
    element i is component i % 4 of texel i // 4, and texel t sits at (x, y) = (t % width, t // width)."""

    height: int = 1
    width: int = 1

    def __repr__(self) -> str:
        return f"{self.base!r}.image({self.height}, {self.width})"

    @property
    def name(self) -> str:
        return f"image2d<{self.base.name}>[{self.height}x{self.width}]"


def image_shape(elements: int, max_hw: tuple[int, int]) -> tuple[int, int] | None:
    """(height, width) in texels of the narrowest-fitting image for ``elements`` floats (4 per texel), rows as
    wide as ``max_hw`` allows; None when it does not fit."""
    texels = max(1, -(-elements // 4))
    width = min(texels, max_hw[1])
    height = -(-texels // width)
    return (height, width) if height <= max_hw[0] else None


AnyDType = DType | PtrDType


def _int(name: str, size: int, signed: bool, cname: str) -> DType:
    return DType(name, size, "i" if signed else "u", cname)


def _float(name: str, size: int, exp: int, mant: int, cname: str) -> DType:
    return DType(name, size, "f", cname, exp_bits=exp, mant_bits=mant)


class dtypes:  # noqa: N801 - namespace named like the reference API
    """Namespace of every dtype drivepack knows."""

    void: Final = DType("void", 0, "v", "void")
    bool: Final = DType("bool", 1, "b", "_Bool")
    int8: Final = _int("int8", 1, True, "signed char")
    int16: Final = _int("int16", 2, True, "short")
    int32: Final = _int("int32", 4, True, "int")
    int64: Final = _int("int64", 8, True, "long long")
    uint8: Final = _int("uint8", 1, False, "unsigned char")
    uint16: Final = _int("uint16", 2, False, "unsigned short")
    uint32: Final = _int("uint32", 4, False, "unsigned int")
    uint64: Final = _int("uint64", 8, False, "unsigned long long")
    float16: Final = _float("float16", 2, 5, 10, "half")
    bfloat16: Final = _float("bfloat16", 2, 8, 7, "__bf16")
    float32: Final = _float("float32", 4, 8, 23, "float")
    float64: Final = _float("float64", 8, 11, 52, "double")
    fp8e4m3fn: Final = _float("fp8e4m3fn", 1, 4, 3, "unsigned char")
    fp8e5m2: Final = _float("fp8e5m2", 1, 5, 2, "unsigned char")
    fp8e4m3fnuz: Final = _float("fp8e4m3fnuz", 1, 4, 3, "unsigned char")
    fp8e5m2fnuz: Final = _float("fp8e5m2fnuz", 1, 5, 2, "unsigned char")
    # weak types: the type of a Python scalar before it meets a concrete operand
    weakint: Final = DType("weakint", 4, "i", "int", weak=True)
    weakfloat: Final = DType("weakfloat", 4, "f", "float", weak=True, exp_bits=8, mant_bits=23)

    # aliases
    int: Final = int32
    long: Final = int64
    uint: Final = uint32
    ulong: Final = uint64
    half: Final = float16
    float: Final = float32
    double: Final = float64
    uchar: Final = uint8
    char: Final = int8
    short: Final = int16

    default_int: Final = int32
    default_float: Final = float32

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype of a Python scalar: bool stays bool, int is weakint, float is weakfloat."""
        if isinstance(x, (bool, np.bool_)):
            return dtypes.bool
        if isinstance(x, np.generic):
            return from_numpy(x.dtype)
        if isinstance(x, int):
            return dtypes.weakint
        if isinstance(x, float):
            return dtypes.weakfloat
        raise DTypeError(f"scalar: type expected bool, int or float, got {type(x).__name__}")

    @staticmethod
    def from_name(name: str) -> DType:
        dt = DTYPES_BY_NAME.get(name.lower())
        if dt is None:
            raise DTypeError(f"dtype: expected one of {sorted(DTYPES_BY_NAME)}, got {name!r}")
        return dt


FP8_DTYPES: Final = (dtypes.fp8e4m3fn, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
FLOAT_DTYPES: Final = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, *FP8_DTYPES)
INT_DTYPES: Final = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                     dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
ALL_DTYPES: Final = (dtypes.bool, *INT_DTYPES, *FLOAT_DTYPES)

DTYPES_BY_NAME: Final[dict[str, DType]] = {d.name: d for d in ALL_DTYPES} | {
    "int": dtypes.int32, "long": dtypes.int64, "uint": dtypes.uint32, "ulong": dtypes.uint64,
    "half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64, "bf16": dtypes.bfloat16,
    "uchar": dtypes.uint8, "char": dtypes.int8, "short": dtypes.int16, "ushort": dtypes.uint16,
    # the numpy (ml_dtypes) spellings, which ABI records use
    "float8_e4m3fn": dtypes.fp8e4m3fn, "float8_e5m2": dtypes.fp8e5m2, "float8_e4m3fnuz": dtypes.fp8e4m3fnuz,
    "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
}

# --- promotion lattice -------------------------------------------------------------------------------
# Edges point from a type to the types it may widen into (JAX's lattice, plus fp8 below float16).
_PROMO: Final[dict[DType, tuple[DType, ...]]] = {
    dtypes.bool: (dtypes.weakint,),
    dtypes.weakint: (dtypes.uint8, dtypes.int8),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.weakfloat,),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.weakfloat,),
    dtypes.weakfloat: (*FP8_DTYPES, dtypes.bfloat16),
    dtypes.fp8e4m3fn: (dtypes.float16,),
    dtypes.fp8e5m2: (dtypes.float16,),
    dtypes.fp8e4m3fnuz: (dtypes.float16,),
    dtypes.fp8e5m2fnuz: (dtypes.float16,),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@cache
def upper_set(d: DType) -> frozenset[DType]:
    """Every dtype ``d`` may be promoted to, ``d`` included."""
    out = {d}
    for nxt in _PROMO[d]:
        out |= upper_set(nxt)
    return frozenset(out)


@cache
def _lub2(a: DType, b: DType) -> DType:
    common = upper_set(a) & upper_set(b)
    for cand in common:
        if upper_set(cand) == common:
            return cand
    raise DTypeError(f"promotion: no common dtype for {a.name} and {b.name}")  # pragma: no cover


def least_upper_dtype(*ds: DType) -> DType:
    """The join of ``ds`` in the promotion lattice (``int8`` with ``weakint`` is ``int8``)."""
    if not ds:
        raise DTypeError("promotion: expected at least one dtype, got none")
    out = ds[0]
    for d in ds[1:]:
        out = _lub2(out, d)
    return out


def commit_weak(d: DType) -> DType:
    """The concrete dtype a still-weak type becomes when nothing else fixes its width."""
    if d is dtypes.weakint or d == dtypes.weakint:
        return dtypes.default_int
    if d is dtypes.weakfloat or d == dtypes.weakfloat:
        return dtypes.default_float
    return d


def default_float_for(d: DType) -> DType:
    """The float dtype a computation on ``d`` happens in when it needs a float (e.g. ``exp`` of an int)."""
    return d if d.is_float else dtypes.weakfloat if d.weak else dtypes.default_float


# --- value ranges ------------------------------------------------------------------------------------
def dtype_min(d: DType) -> int | float | bool:
    if d.is_bool:
        return False
    if d.is_int:
        return 0 if d.is_unsigned else -(2 ** (d.bits - 1))
    return -math.inf


def dtype_max(d: DType) -> int | float | bool:
    if d.is_bool:
        return True
    if d.is_int:
        return 2 ** d.bits - 1 if d.is_unsigned else 2 ** (d.bits - 1) - 1
    return math.inf


def truncate_const(d: DType, value: object) -> int | float | bool:
    """Python value of ``value`` stored in ``d`` (ints wrap, floats round through the narrow format)."""
    if d.is_bool:
        return bool(value)
    if d.is_int:
        if d.weak:  # a Python int keeps its value until a concrete consumer fixes its width
            return int(value) if not isinstance(value, float) or math.isfinite(value) else 0  # type: ignore[arg-type]
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return 0
            value = int(value)
        v = int(value) & ((1 << d.bits) - 1)
        if not d.is_unsigned and v >= 1 << (d.bits - 1):
            v -= 1 << d.bits
        return v
    v = float(value)  # type: ignore[arg-type]
    if d.weak or d is dtypes.float64:
        return v
    return float(np.array(v, dtype=np.float64).astype(to_numpy(d)).astype(np.float64))


# --- numpy interop -----------------------------------------------------------------------------------
_TO_NUMPY: Final[dict[DType, np.dtype]] = {
    dtypes.bool: np.dtype(np.bool_), dtypes.int8: np.dtype(np.int8), dtypes.int16: np.dtype(np.int16),
    dtypes.int32: np.dtype(np.int32), dtypes.int64: np.dtype(np.int64), dtypes.uint8: np.dtype(np.uint8),
    dtypes.uint16: np.dtype(np.uint16), dtypes.uint32: np.dtype(np.uint32), dtypes.uint64: np.dtype(np.uint64),
    dtypes.float16: np.dtype(np.float16), dtypes.float32: np.dtype(np.float32),
    dtypes.float64: np.dtype(np.float64), dtypes.bfloat16: np.dtype(ml_dtypes.bfloat16),
    dtypes.fp8e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn), dtypes.fp8e5m2: np.dtype(ml_dtypes.float8_e5m2),
    dtypes.fp8e4m3fnuz: np.dtype(ml_dtypes.float8_e4m3fnuz),
    dtypes.fp8e5m2fnuz: np.dtype(ml_dtypes.float8_e5m2fnuz),
}
_FROM_NUMPY: Final[dict[np.dtype, DType]] = {v: k for k, v in _TO_NUMPY.items()}


def to_numpy(d: DType) -> np.dtype:
    """The numpy dtype holding ``d`` on the host (weak types commit first)."""
    d = commit_weak(d)
    try:
        return _TO_NUMPY[d]
    except KeyError:
        raise DTypeError(f"dtype: expected a storable dtype, got {d.name}") from None


def from_numpy(npd: np.dtype | type) -> DType:
    """The drivepack dtype of a numpy dtype; raises DTypeError naming it when there is none."""
    npd = np.dtype(npd)
    try:
        return _FROM_NUMPY[npd]
    except KeyError:
        raise DTypeError(f"dtype: expected one of {sorted(d.name for d in ALL_DTYPES)}, got numpy {npd}") from None


def to_dtype(x: DType | str | np.dtype | type) -> DType:
    """Accept a DType, a name ('float32', 'half') or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return dtypes.from_name(x)
    return from_numpy(x)
