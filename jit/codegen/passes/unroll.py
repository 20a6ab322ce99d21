"""Unroll (upcast) small loops.

Before: a kernel graph whose STOREs and REDUCEs run over RANGEs. After: every global RANGE of at most
UPCAST_MAX iterations that is innermost in the output is replaced by one STORE per iteration (the
iterations become straight-line code), and every REDUCE over a single RANGE of at most UPCAST_MAX
iterations becomes a chain of its combine op over the substituted bodies. NOOPT=1 skips this pass.
"""

from __future__ import annotations

from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import Ops, UOp, toposort

UPCAST_MAX = 4


def _range_size(r: UOp) -> int:
    return int(r.src[0].arg)


def unroll_reduce(r: UOp) -> UOp | None:
    ranges = r.src[1:]
    if len(ranges) != 1 or _range_size(ranges[0]) > UPCAST_MAX:
        return None
    rng = ranges[0]
    acc: UOp | None = None
    for i in range(_range_size(rng)):
        v = r.src[0].substitute({rng: rng.const_like(i)})
        acc = v if acc is None else UOp(r.arg, r.dtype, (acc, v))
    return acc


pm_unroll_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="r"), unroll_reduce)])


def unroll_small_ranges(sink: UOp) -> UOp:
    """Upcast the innermost global range if it is small, then unroll small reduces."""
    globals_ = sorted((u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "global"),
                      key=lambda u: u.arg[0])
    if globals_ and _range_size(globals_[-1]) <= UPCAST_MAX:
        rng = globals_[-1]
        stores = [s.substitute({rng: rng.const_like(i)}) for s in sink.src for i in range(_range_size(rng))]
        sink = sink.replace(src=tuple(stores))
    return graph_rewrite(sink, pm_unroll_reduce, name="unroll")
