"""Exact graph keys (jit/ir/stable_key.py): equal only for the same graph, the same in every process."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jit.common.dtype import ImageDType, dtypes
from jit.ir.stable_key import UnkeyableError, structural_key, value_code
from jit.ir.uop import Ops, UOp

ROOT = Path(__file__).resolve().parents[2]


def graph() -> UOp:
    """A small kernel-shaped graph with the values a repr-based key gets wrong (-0.0, a float next to an int)."""
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), (), 1)
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 16),), (0, "global"))
    v = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32.ptr(16), (x, r)),))
    return UOp(Ops.SINK, dtypes.void, ((v * 0.5 + -0.0).alu(Ops.EXP),), None)


class Color(enum.Enum):
    RED = 1


@dataclass(frozen=True)
class Point:
    x: int
    y: float


def test_values_python_calls_equal_get_different_codes() -> None:
    codes = [value_code(v) for v in (1, 1.0, True, 0.0, -0.0, "1", (1,), [1], None, Color.RED)]
    assert len(set(codes)) == len(codes)
    assert value_code(Point(1, 2.0)) != value_code(Point(1, 2))
    assert value_code(frozenset({3, 1})) == value_code(frozenset({1, 3}))
    assert value_code({"a": 1, "b": 2}) == value_code({"b": 2, "a": 1})


def test_image_dtypes_differ_by_size_too() -> None:
    # their repr leaves the element count out: a repr-based key would call these equal
    a, b = ImageDType(dtypes.float32, 1000, 4, 64), ImageDType(dtypes.float32, 1002, 4, 64)
    assert repr(a) == repr(b) and value_code(a) != value_code(b)


def test_unkeyable_values_raise() -> None:
    with pytest.raises(UnkeyableError, match="object"):
        value_code(object())


def test_graph_keys() -> None:
    a = UOp.const(dtypes.float32, 1.0) + UOp.const(dtypes.float32, 2.0)
    b = UOp.const(dtypes.float32, 1.0) + UOp.const(dtypes.float32, 2.0)
    c = UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0)
    d = UOp.const(dtypes.float32, -0.0) + UOp.const(dtypes.float32, 2.0)
    e = UOp.const(dtypes.float32, 0.0) + UOp.const(dtypes.float32, 2.0)
    assert structural_key(a) == structural_key(b)
    assert len({structural_key(u) for u in (a, c, d, e)}) == 4
    assert structural_key(UOp(Ops.SINK, dtypes.void, (a,))) != structural_key(a)


def test_graph_key_is_the_same_in_every_process() -> None:
    code = "from tests.ir.test_stable_key import graph, structural_key; print(structural_key(graph()))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    keys = {subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONHASHSEED": str(seed)}, cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip() for seed in (1, 2)}
    assert keys == {structural_key(graph())}
