"""Commit weak CONSTs, as the last step of dtype lowering.

Before: a kernel graph in which every computing node has a concrete dtype but some CONST operands may still
be weak (left over from lowering, or built by a decomposition). After: no weak CONST remains. A weak CONST
takes the dtype its consumer computes in (an ALU's dtype, a WHERE's branch dtype, a STORE's buffer dtype, a
comparison partner's dtype); where the consumer fixes nothing (the source of a CAST) it takes the CAST's
lower bound or the default width of its kind (int32 / float32). drivepack has no Invalid/sentinel CONST:
every CONST is a value, so every weak CONST is committed.
"""

from __future__ import annotations

from jit.codegen.passes.commit_weak import cast_floor, operand_dtype
from jit.codegen.passes.guards import is_weak
from jit.common.dtype import DType, commit_weak
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import Ops, UOp


def _const_width(user: UOp, i: int, bare: bool) -> DType | None:
    src = user.src[i]
    assert isinstance(src.dtype, DType)
    want = operand_dtype(user, i, user.dtype, lambda u: u.dtype)
    if want is None and user.op is Ops.CAST:
        want = cast_floor(src.dtype, user.dtype)
    if want is None and bare:
        want = commit_weak(src.dtype)
    return want


def commit_const_srcs(x: UOp, bare: bool) -> UOp | None:
    """``x`` with its weak CONST sources at the width ``x`` needs (``bare``: also where ``x`` fixes none)."""
    if is_weak(x.dtype) or x.op is Ops.CONST:
        return None
    srcs = list(x.src)
    for i, s in enumerate(srcs):
        if s.op is Ops.CONST and is_weak(s.dtype):
            want = _const_width(x, i, bare)
            if want is not None:
                srcs[i] = UOp.const(want, s.arg)
    return None if tuple(srcs) == x.src else x.replace(src=tuple(srcs))


pm_cast_const = PatternMatcher([
    (UPat(name="x"), lambda x: commit_const_srcs(x, bare=True)),
])
