"""Compile-time shortcuts of the optimizer give the very graphs of the straightforward rewrites they replace."""

from __future__ import annotations

import numpy as np

from jit import Tensor, UOp, graph_rewrite
from jit.codegen.opt import OptOptions, optimize_kernel, plan_tiles, tile_kernel, unroll_small_loops
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.passes.unroll import unroll_small_ranges
from jit.codegen.pipeline import commit_dtypes
from jit.schedule.kernels import create_schedule


def _ast(out: Tensor) -> UOp:
    kernels, _ = create_schedule([out.uop], "CPU")
    return commit_dtypes(kernels[-1].ast)


def _tile_by_substitute(sink: UOp, upcasts: tuple[tuple[UOp, int], ...]) -> UOp:
    """The reference: one full-graph substitute per copy and axis (what tile_kernel did before)."""
    for rng, factor in reversed(upcasts):
        outer = UOp(rng.op, rng.dtype, (rng.src[0].const_like(int(rng.src[0].arg) // factor),), rng.arg)
        sink = sink.replace(src=tuple(s.substitute({rng: outer * factor + c if c else outer * factor})
                                      for s in sink.src for c in range(factor)))
    return sink


def test_tile_kernel_builds_the_same_graph_as_per_copy_substitution() -> None:
    x = Tensor(np.ones((1, 8, 16, 32), np.float32))
    w = Tensor(np.ones((8, 8, 3, 3), np.float32))
    ast = _ast(x.conv2d(w, padding=1).relu())
    plan = plan_tiles(ast)
    assert plan is not None and len(plan.upcasts) == 2
    assert tile_kernel(ast, plan) is _tile_by_substitute(ast, plan.upcasts)  # hash-consed: same graph, same node


def test_unroll_small_loops_matches_the_unroll_pass() -> None:
    small_inner = _ast(Tensor(np.ones((64, 3), np.float32)) * 2)
    small_reduce = _ast(Tensor(np.ones((64, 3), np.float32)).sum(axis=1))
    for ast in (small_inner, small_reduce):
        want = graph_rewrite(unroll_small_ranges(ast), pm_symbolic)
        assert graph_rewrite(unroll_small_loops(ast), pm_symbolic) is want


def test_kernels_left_alone_come_back_as_the_same_node() -> None:
    big_inner = _ast(Tensor(np.ones((8, 64), np.float32)) + 1)  # nothing small to unroll, nothing to tile
    assert optimize_kernel(big_inner) is big_inner
    tiny_matmul = _ast(Tensor(np.ones((8, 16), np.float32)).matmul(Tensor(np.ones((16, 8), np.float32))))
    assert plan_tiles(tiny_matmul) is None  # 64 outputs: under min_outputs, compile time is not worth it
    assert plan_tiles(tiny_matmul, OptOptions(min_outputs=64)) is not None
