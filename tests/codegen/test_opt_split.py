"""jit/codegen/opt/split.py: an innermost output row read only through // d and % d becomes two ranges."""

from __future__ import annotations

import numpy as np

from jit import Ops, Tensor
from jit.codegen.opt import OptOptions, plan_tiles
from jit.codegen.opt.split import split_divmod_ranges
from jit.codegen.pipeline import commit_dtypes
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule


def _tile_rows(seed: int = 0) -> tuple[Tensor, np.ndarray]:
    """Winograd's last output step in small: row x = 4 * tile + q of each of 64 rows is the sum over j of
    table[q, j] * partial[row, tile, j], plus an epilogue read at x."""
    rng = np.random.default_rng(seed)
    part, table, bias = (rng.standard_normal(s, dtype=np.float32) for s in ((64, 14, 6), (4, 6), (64, 56)))
    table_qj = Tensor(np.ascontiguousarray(table.T)).permute(1, 0)  # stored (j, q): q contiguous, as Winograd's
    y = (Tensor(part).reshape(64, 14, 1, 6) * table_qj.reshape(1, 1, 4, 6)).sum(-1).reshape(64, 56)
    want = np.einsum("rtj,qj->rtq", part, table).reshape(64, 56) + bias
    return (y + Tensor(bias)).relu(), np.maximum(want, 0)


def _ast(t: Tensor):
    kernels, _ = create_schedule([t.uop], "CPU")
    assert len(kernels) == 1
    return commit_dtypes(kernels[0].ast)


def _global_sizes(sink) -> list[int]:
    ranges = sorted((u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    return [int(r.src[0].arg) for r in ranges]


def test_row_read_through_div_and_mod_becomes_tile_and_column() -> None:
    y, want = _tile_rows()
    ast = _ast(y)
    assert _global_sizes(ast) == [64, 56]
    split = split_divmod_ranges(ast)
    assert _global_sizes(split) == [64, 14, 4]
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in toposort([split]))
    # the column of 4 is the tile row (one 4-lane vector), the tiles its reuse axis: a 6-long reduce tiles as
    # it is instead of running across scattered output channels
    plan = plan_tiles(split, OptOptions())
    assert plan is not None and [(int(r.src[0].arg), f) for r, f in plan.upcasts][0] == (4, 4)
    kernel, = compile_uops([y.uop])
    body = kernel.program.source.split("for (")[-1]  # the reduce loop and the stores after it
    assert "__builtin_memcpy(data0" in body and "[" not in body  # whole-vector loads and stores, no gathers
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_rows_read_otherwise_stay_whole() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 32), dtype=np.float32), rng.standard_normal((32, 56), dtype=np.float32)
    plain = _ast(Tensor(a).matmul(Tensor(b)))  # no // or % at all
    assert split_divmod_ranges(plain) is plain
    # row x also read at x // 8 (a second table): neither split leaves it free of // and %, so it stays whole
    y, _ = _tile_rows()
    coarse = Tensor(rng.standard_normal((64, 7), dtype=np.float32)).reshape(64, 7, 1).expand(64, 7, 8)
    mixed = _ast(y + coarse.reshape(64, 56))
    assert split_divmod_ranges(mixed) is mixed
