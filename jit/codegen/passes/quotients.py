"""``fold_reciprocal_products``: ``a * (1 / b)`` as one division ``a / b`` where that costs one operation fewer.

A sigmoid is ``1 / (1 + e^-x)`` (jit/frontend/elementwise.py), and SiLU and Swish multiply it by ``x``: every
element pays a division and a multiply, where ``x / (1 + e^-x)`` is the division alone (a vector divide and a
vector reciprocal cost the same). EfficientNet's expand convs spend about half their time in that epilogue.

Before: a kernel graph after the optimizer (and the vector exp lowering). After: every float32 ``MUL(a,
RECIPROCAL(b))`` whose reciprocal has no other consumer and varies with every range ``a`` varies with is
``FDIV(a, b)``. Where ``a`` varies with a range ``b`` does not (a softmax's ``e_i * (1 / sum)``, the reciprocal
computed once per row; a vector of lanes times one scalar's reciprocal), the product stays: a division per element
would replace a multiply per element. The quotient is the correctly rounded ``a / b``, where the product rounded
twice; infinities, zeros and NaNs come out as the product gave them.
"""

from __future__ import annotations

from collections import Counter

from jit.common.dtype import dtypes
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import Ops, UOp


def _ranges(u: UOp) -> frozenset[UOp]:
    return frozenset(n for n in u.toposort() if n.op is Ops.RANGE)


def _quotient(ctx: Counter[UOp], m: UOp) -> UOp | None:
    recip, a = (m.src[1], m.src[0]) if m.src[1].op is Ops.RECIPROCAL else (m.src[0], m.src[1])
    if recip.op is not Ops.RECIPROCAL or ctx[recip] != 1 or not _ranges(a) <= _ranges(recip):
        return None
    return UOp(Ops.FDIV, m.dtype, (a, recip.src[0]))


pm_reciprocal_products = PatternMatcher([(UPat(Ops.MUL, dtype=dtypes.float32, name="m"), _quotient)])


def fold_reciprocal_products(sink: UOp) -> UOp:
    """The pass (module docstring) over ``sink``; the same node when it has no reciprocal."""
    nodes = sink.toposort()
    if not any(u.op is Ops.RECIPROCAL for u in nodes):
        return sink
    consumers = Counter(s for u in nodes for s in set(u.src))
    return graph_rewrite(sink, pm_reciprocal_products, ctx=consumers, name="reciprocal products")
