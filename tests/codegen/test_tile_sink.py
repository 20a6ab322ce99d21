"""``tile_sink`` (jit/codegen/opt/tiling.py): every source of a SINK copied once per mapping, in one walk."""

from __future__ import annotations

from jit import dtypes
from jit.codegen.opt.tiling import tile_sink
from jit.ir.uop import Ops, UOp


def _range(i: int, n: int) -> UOp:
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (i, "global"))


def test_each_source_is_copied_per_mapping_like_substitute_source_by_source() -> None:
    r, other = _range(0, 4), _range(1, 3)
    shared = r * 3 + other  # depends on the key, read by both stores
    fixed = other * 2  # depends on no key: kept as it is in every copy
    sink = UOp(Ops.SINK, src=(shared + 1, shared * fixed, fixed))
    maps = [{r: r.const_like(i)} for i in range(4)]
    tiled = tile_sink(sink, (r,), maps)
    assert tiled.op is Ops.SINK
    assert tiled.src == tuple(s.substitute(m) for s in sink.src for m in maps)
    assert tiled.src[-4:] == (fixed,) * 4


def test_no_mapping_leaves_no_source_and_an_untouched_graph_is_kept() -> None:
    r, other = _range(0, 4), _range(1, 3)
    sink = UOp(Ops.SINK, src=(other + 1,))
    assert tile_sink(sink, (r,), [{r: r.const_like(0)}, {r: r.const_like(1)}]).src == (other + 1, other + 1)
    assert tile_sink(sink, (r,), []).src == ()
