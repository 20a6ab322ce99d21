"""jit/codegen/opt/overlap.py: a reduce kernel's tile row that no vector width divides runs as whole vectors, the
last one shifted back to end at the row's end; every output is the same as without it."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Ops, Tensor, UOp
from jit.codegen.opt import OptOptions, optimize_kernel, plan_tiles
from jit.codegen.opt.overlap import plan_overlap
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule


def _ast(t: Tensor) -> UOp:
    kernels, _ = create_schedule([t.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _max_pool_want(x: np.ndarray, k: int, s: int) -> np.ndarray:
    c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.full((c, oh, ow), -np.inf, np.float32)
    for dy in range(k):
        for dx in range(k):
            out = np.maximum(out, x[:, dy:dy + s * oh:s, dx:dx + s * ow:s])
    return out


def _vector_store_rows(source: str) -> bool:
    return "__builtin_memcpy(data0" in source or "vstore" in source


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
@pytest.mark.parametrize("width, stride", [(111, 2), (55, 2), (27, 2), (13, 1), (29, 1)])
def test_a_pool_row_no_vector_divides_is_vectors_and_matches_numpy(width: int, stride: int, device: str) -> None:
    # squeezenet's 3x3/2 max pools: rows of 55, 27 and 13 outputs (prime factors 5, 11, 3, 13), once scalar code
    rng = np.random.default_rng(width)
    x = rng.standard_normal((8, width, width), dtype=np.float32)
    x[0, 0, :5] = np.nan  # a NaN wins in every window it is in, including those stored twice
    y = Tensor(x, device=device).max_pool2d(3, stride)
    source = compile_uops([y.uop], device)[-1].program.source
    assert _vector_store_rows(source), source
    np.testing.assert_array_equal(y.numpy(), _max_pool_want(x, 3, stride))


@pytest.mark.parametrize("vector_width, width", [(8, 8), (16, 16), (4, 8)])
def test_the_width_takes_the_fewest_vectors(vector_width: int, width: int) -> None:
    x = np.zeros((8, 111, 111), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))  # 55 outputs a row
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan.upcasts[0][1] % 4  # no vector width divides the row as it is planned
    overlapped = plan_overlap(ast, plan, OptOptions(), vector_width)
    assert overlapped is not None and overlapped.overlap
    # widths (16, 8, 4); 8 lanes: 7 tiles of one vector (16: 4 tiles of two); 16 lanes: 4 tiles of one vector
    # (8: 7); 4 lanes: 7 tiles of two vectors, as few as 14 tiles of one, two accumulators a step (16: 16)
    assert overlapped.upcasts[0][1] == width


def test_the_last_tile_starts_where_it_ends_the_row() -> None:
    x = np.zeros((8, 27, 27), np.float32)
    sink = optimize_kernel(_ast(Tensor(x).max_pool2d(3, 1)), OptOptions(), vector_width=8)  # 25 outputs a row
    mins = [u for u in toposort([sink]) if u.op is Ops.MIN and u.dtype.is_int and u.src[1].op is Ops.CONST]
    assert [int(m.src[1].arg) for m in mins] == [25 - 16]  # 2 tiles of 16 (two vectors each): 0, then 9, not 16


def test_off_the_row_stays_scalar_copies() -> None:
    x = np.zeros((8, 111, 111), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))
    off = OptOptions(overlap_rows=False)
    plan = plan_tiles(ast, off)
    assert plan is not None and plan_overlap(ast, plan, off, 8) is None
    sink = optimize_kernel(ast, off, vector_width=8)
    assert not any(u.op is Ops.RANGE and u.arg[1] == "vector" for u in toposort([sink]))


def test_a_row_a_vector_divides_keeps_its_plan() -> None:
    x = np.zeros((8, 66, 66), np.float32)
    ast = _ast(Tensor(x).max_pool2d(3, 2))  # 32 outputs a row
    plan = plan_tiles(ast, OptOptions())
    assert plan is not None and plan_overlap(ast, plan, OptOptions(), 8) is None
