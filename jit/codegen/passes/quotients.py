"""``fold_reciprocal_products``: a division or a product with a reciprocal, whichever costs fewer operations.

A sigmoid is ``1 / (1 + e^-x)`` (jit/frontend/elementwise.py), and SiLU and Swish multiply it by ``x``: every
element pays a division and a multiply, where ``x / (1 + e^-x)`` is the division alone (a vector divide and a
vector reciprocal cost the same). EfficientNet's expand convs spend about half their time in that epilogue. The
other way round, a softmax divides every element of a row by the row's sum: one reciprocal a row and a multiply an
element cost less than a division an element (the C compiler hoists the reciprocal out of the row's loop).

Before: a kernel graph after the optimizer (and the vector exp lowering). After: every float32 ``MUL(a,
RECIPROCAL(b))`` whose reciprocal has no other consumer and varies with every range ``a`` varies with is
``FDIV(a, b)``; where ``a`` varies with a range ``b`` does not, the product stays. And every float32 ``FDIV(a, b)``
whose ``b`` varies with fewer ranges than ``a`` (and is no constant: symbolic folds those it can) is ``MUL(a,
RECIPROCAL(b))``. The quotient is the correctly rounded ``a / b``, a product with the reciprocal within an ulp of
it (rounded twice); infinities, zeros and NaNs come out as either gives them.
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


def _product(d: UOp) -> UOp | None:
    a, b = d.src
    if b.op is Ops.CONST or not _ranges(b) < _ranges(a):
        return None
    return UOp(Ops.MUL, d.dtype, (a, UOp(Ops.RECIPROCAL, b.dtype, (b,))))


pm_reciprocal_products = PatternMatcher([(UPat(Ops.MUL, dtype=dtypes.float32, name="m"), _quotient),
                                         (UPat(Ops.FDIV, dtype=dtypes.float32, name="d"), _product)])


def fold_reciprocal_products(sink: UOp) -> UOp:
    """The pass (module docstring) over ``sink``; the same node when it has no reciprocal."""
    nodes = sink.toposort()
    if not any(u.op in (Ops.RECIPROCAL, Ops.FDIV) for u in nodes):
        return sink
    consumers = Counter(s for u in nodes for s in set(u.src))
    return graph_rewrite(sink, pm_reciprocal_products, ctx=consumers, name="reciprocal products")
