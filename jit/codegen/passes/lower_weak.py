"""Lower the weak compute nodes that no consumer gave a width.

Before: a kernel graph after ``commit_weak`` reached its fixed point: the weak nodes left are expressions
whose every consumer is itself weak, a comparison between weak expressions, or a CAST across kinds (for
example ``(where(c, 1, 2) < 3)`` or ``where(c, 1, 2).cast(float16)``). After: every non-CONST node has a
concrete dtype: a weak node takes the default of its kind (weakint -> int32, weakfloat -> float32, the
widths a Python scalar has when nothing else decides), sources first, so an expression is lowered as a
whole and its operands agree; weak CONST operands of a lowered node take that node's width. A CAST to a
weak dtype becomes a CAST to the default (``x_f32.cast(weakint)`` is still a float -> int32 conversion).
Weak CONSTs whose consumer fixes no width (the source of a CAST) stay for ``cast_const``.
"""

from __future__ import annotations

from jit.codegen.passes.cast_const import commit_const_srcs
from jit.common.dtype import DType, commit_weak, dtypes
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import Ops, UOp


def lower_weak_node(x: UOp) -> UOp | None:
    """A weak non-CONST node at the default width of its kind (its sources are lowered already)."""
    if x.op is Ops.CONST or not isinstance(x.dtype, DType):
        return None
    return x.replace(dtype=commit_weak(x.dtype))


pm_lower_weak = PatternMatcher([
    (UPat(dtype=(dtypes.weakint, dtypes.weakfloat), name="x"), lower_weak_node),
    (UPat(name="x"), lambda x: commit_const_srcs(x, bare=False)),
])
