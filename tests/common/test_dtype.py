"""The dtype table, the promotion lattice and numpy interop."""

import ml_dtypes
import numpy as np
import pytest

from jit.common.dtype import (
    ALL_DTYPES,
    commit_weak,
    dtypes,
    from_numpy,
    least_upper_dtype,
    to_dtype,
    to_numpy,
    truncate_const,
)
from jit.common.errors import DTypeError


def test_every_dtype_round_trips_through_numpy() -> None:
    for d in ALL_DTYPES:
        assert from_numpy(to_numpy(d)) is d
        assert to_numpy(d).itemsize == d.itemsize


def test_low_precision_host_types_come_from_ml_dtypes() -> None:
    assert to_numpy(dtypes.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    assert to_numpy(dtypes.fp8e4m3fnuz) == np.dtype(ml_dtypes.float8_e4m3fnuz)
    assert to_numpy(dtypes.fp8e5m2) == np.dtype(ml_dtypes.float8_e5m2)


@pytest.mark.parametrize(("a", "b", "want"), [
    (dtypes.int8, dtypes.weakint, dtypes.int8),
    (dtypes.int8, dtypes.weakfloat, dtypes.weakfloat),
    (dtypes.weakfloat, dtypes.float16, dtypes.float16),
    (dtypes.uint8, dtypes.int8, dtypes.int16),
    (dtypes.uint32, dtypes.int32, dtypes.int64),
    (dtypes.uint64, dtypes.int64, dtypes.weakfloat),
    (dtypes.float16, dtypes.bfloat16, dtypes.float32),
    (dtypes.bool, dtypes.bool, dtypes.bool),
    (dtypes.bool, dtypes.weakint, dtypes.weakint),
    (dtypes.bool, dtypes.uint8, dtypes.uint8),
    (dtypes.int64, dtypes.float16, dtypes.float16),
    (dtypes.fp8e4m3fn, dtypes.fp8e5m2, dtypes.float16),
    (dtypes.float32, dtypes.float64, dtypes.float64),
    (dtypes.weakint, dtypes.weakfloat, dtypes.weakfloat),
])
def test_promotion_lattice(a, b, want) -> None:
    assert least_upper_dtype(a, b) is want
    assert least_upper_dtype(b, a) is want


def test_int8_plus_half_plus_float16_is_float16() -> None:
    assert least_upper_dtype(least_upper_dtype(dtypes.int8, dtypes.weakfloat), dtypes.float16) is dtypes.float16


def test_python_scalars_are_weak() -> None:
    assert dtypes.from_py(3) is dtypes.weakint
    assert dtypes.from_py(0.5) is dtypes.weakfloat
    assert dtypes.from_py(True) is dtypes.bool
    assert commit_weak(dtypes.weakint) is dtypes.int32
    assert commit_weak(dtypes.weakfloat) is dtypes.float32


def test_truncate_const_wraps_and_rounds() -> None:
    assert truncate_const(dtypes.int8, 130) == -126
    assert truncate_const(dtypes.uint8, -1) == 255
    assert truncate_const(dtypes.float16, 1 / 3) == float(np.float16(1 / 3))
    assert truncate_const(dtypes.bool, 2) is True


def test_names_and_errors() -> None:
    assert to_dtype("half") is dtypes.float16
    assert to_dtype(np.float32) is dtypes.float32
    with pytest.raises(DTypeError, match="complex64"):
        from_numpy(np.complex64)
    with pytest.raises(DTypeError, match="'quad'"):
        to_dtype("quad")
