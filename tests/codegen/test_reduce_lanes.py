"""Lane reduces (jit/codegen/opt/reduce_lanes.py): a reduce that reads its input contiguously along its innermost
range and a plane apart along the output row runs as vectors along the reduce, with a lane combine at its end."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Tensor
from jit.codegen.opt import DEFAULT_OPTS, OptOptions, optimize_kernel
from jit.codegen.opt.reduce_lanes import plan_reduce_lanes
from jit.codegen.opt.search import neighbours
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import Ops, UOp, toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from targets.registry import Device

RNG = np.random.default_rng(5)


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _lane_reduces(sink: UOp) -> list[UOp]:
    return [u for u in toposort([sink]) if u.op is Ops.REDUCE and len(u.src) == 2 and u.src[1].arg[1] == "vector"]


def test_a_global_pool_over_nchw_reduces_along_its_rows_in_vectors() -> None:
    """Efficientnet's squeeze-and-excitation pool: each output lane used to be a separate load a plane apart."""
    x = RNG.standard_normal((1, 144, 32, 64), dtype=np.float32)
    ast = _ast(Tensor(x).mean(axis=(2, 3)))
    assert plan_reduce_lanes(ast, DEFAULT_OPTS, 8) is not None
    optimized = optimize_kernel(ast, DEFAULT_OPTS, 8)
    assert len(_lane_reduces(optimized)) == 4  # a tile of 4 channels, one vector accumulator each
    source = compile_uops([Tensor(x).mean(axis=(2, 3)).uop], "CPU")[-1].program.source
    assert "*(ptr" not in source  # no lane-by-lane gather: whole vector loads along the row
    assert "lanes" in source
    np.testing.assert_allclose(Tensor(x).mean(axis=(2, 3)).numpy(), x.astype(np.float64).mean(axis=(2, 3)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_lane_reduces_match_numpy(device: str, op: str) -> None:
    x = RNG.standard_normal((2, 40, 96), dtype=np.float32)
    x[0, 3, 17], x[1, 5, 95], x[1, 7, 0] = np.nan, np.inf, -np.inf
    t = getattr(Tensor(x, device=device), op)(2)
    assert _lane_reduces(optimize_kernel(_ast(getattr(Tensor(x), op)(2)), DEFAULT_OPTS, 8))
    np.testing.assert_allclose(t.numpy(), getattr(np, op)(x.astype(np.float64), axis=2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_rows_no_width_divides_shift_their_last_vector_back(device: str, op: str) -> None:
    """Softmax's max and sum over a ViT's 197 tokens: 13 vectors a row, the last one from 181; what it shares with
    the one before counts once in a sum (a value only there sums to itself) and changes no max or min."""
    x = RNG.standard_normal((2, 24, 197), dtype=np.float32)
    x[0, 1, :] = 0
    x[0, 1, 185] = 3  # only in the lanes the last two vectors share
    x[0, 3, 183], x[1, 5, 196], x[1, 7, 0], x[1, 9, 190] = np.nan, np.inf, -np.inf, -np.inf
    ast = _ast(getattr(Tensor(x), op)(2))
    assert plan_reduce_lanes(ast, DEFAULT_OPTS, 16) is not None
    assert _lane_reduces(optimize_kernel(ast, DEFAULT_OPTS, 16))
    got = getattr(Tensor(x, device=device), op)(2).numpy()
    np.testing.assert_allclose(got, getattr(np, op)(x.astype(np.float64), axis=2), rtol=1e-5, atol=1e-5)
    assert got[0, 1] == {"sum": 3, "max": 3, "min": 0}[op]


def test_integer_sums_are_exact() -> None:
    x = RNG.integers(-2**20, 2**20, (24, 4096), dtype=np.int32)
    assert plan_reduce_lanes(_ast(Tensor(x).sum(1)), DEFAULT_OPTS, 8) is not None
    np.testing.assert_array_equal(Tensor(x).sum(1).numpy(), x.sum(1, dtype=np.int32))


def test_an_elementwise_producer_is_computed_as_vectors_too() -> None:
    """A pool of a swish (fused into the reduce): the exp runs on the lane vectors."""
    x = RNG.standard_normal((1, 32, 16, 16), dtype=np.float32)
    t = Tensor(x)
    got = (t * t.sigmoid()).mean(axis=(2, 3)).numpy()
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, (x64 / (1 + np.exp(-x64))).mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)


def test_it_stays_off_where_the_tiles_read_well_already() -> None:
    x = Tensor(np.ones((1, 64, 32, 32), np.float32))
    assert plan_reduce_lanes(_ast(x.sum(2)), DEFAULT_OPTS, 8) is None  # the reduce walks a column: stride 32
    assert plan_reduce_lanes(_ast(x.sum(axis=(2, 3))), DEFAULT_OPTS, 0) is None  # no vectors on the target
    assert plan_reduce_lanes(_ast(x.sum(axis=(2, 3))), OptOptions(reduce_lanes=False), 8) is None
    a, b = Tensor(np.ones((64, 256), np.float32)), Tensor(np.ones((256, 64), np.float32))
    assert plan_reduce_lanes(_ast(a @ b), DEFAULT_OPTS, 8) is None  # a matmul's rows share loads: register tiles
    assert plan_reduce_lanes(_ast(Tensor(np.ones((64, 12), np.float32)).sum(1)), DEFAULT_OPTS, 8) is None  # short


def test_beam_search_can_turn_it_off() -> None:
    assert any(not o.reduce_lanes for o in neighbours(DEFAULT_OPTS, Device["CPU"], (64,)))
