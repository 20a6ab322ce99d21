"""Index simplification: the integer part of symbolic, on concretely typed integer and bool nodes only.

Before: a kernel graph whose index arithmetic may be in any association (``(i*4 + j) // 4`` from reshapes),
with constant integer subexpressions and same-type integer CASTs. After: constant integer/bool ALU nodes are
folded, integer sums are canonical, ``//`` and ``%`` by positive constants are split where value ranges
prove it, range-decided comparisons are folded and ``CAST(x: int32, int32)`` is gone. Float nodes and weak
nodes are never touched (that is what separates this pass from full symbolic).
"""

from __future__ import annotations

from jit.codegen.passes.guards import only_where
from jit.codegen.passes.symbolic import canonical_sum, fold_by_range, fold_consts, split_divmod
from jit.common.dtype import DType
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import GroupOp, Ops, UOp


def _int_or_bool(u: UOp) -> bool:
    d = u.dtype
    return isinstance(d, DType) and not d.weak and (d.is_int or d.is_bool)


def _all_int_srcs(u: UOp) -> bool:
    return _int_or_bool(u) and all(_int_or_bool(s) for s in u.src)


pm_index_simplify = only_where(PatternMatcher([
    (UPat(GroupOp.ALU, name="alu", src=UPat(Ops.CONST)), fold_consts),
    (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
    (UPat((Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL), name="x"), canonical_sum),
    (UPat((Ops.IDIV, Ops.MOD), name="d"), split_divmod),
    (UPat((Ops.CMPLT, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ), name="alu"), fold_by_range),
]), _all_int_srcs)
