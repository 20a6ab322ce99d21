"""A long run that builds, realizes and drops graphs keeps the IR table and device memory flat."""

import gc

import numpy as np

from jit import Tensor, UOp
from jit.realize import live_buffer_count


def _one_step(i: int) -> float:
    x = Tensor(np.full((8, 8), i, dtype=np.float32))
    y = ((x * 2 + 1).relu().sum(axis=0) / 3).max()
    return float(y.item())


def test_realize_loop_keeps_memory_flat() -> None:
    for i in range(20):  # warm up: compile the kernels once
        _one_step(i)
    gc.collect()
    uops_before, bufs_before = len(UOp._interned), live_buffer_count()
    for i in range(300):
        assert abs(_one_step(i) - 8 * (2 * i + 1) / 3) < 1e-3
    gc.collect()
    assert live_buffer_count() - bufs_before <= 2
    assert len(UOp._interned) - uops_before < 100
