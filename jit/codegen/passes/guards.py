"""Restrict a PatternMatcher's rules to the nodes a predicate accepts.

Before: a PatternMatcher whose rules may fire on any node their pattern matches. After: the same rules, in
the same order, that decline (return None) on a node the predicate rejects. Used to keep symbolic folding
off weak-typed nodes until their width is committed, and to run only the integer-index part of symbolic.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from jit.common.dtype import DType
from jit.ir.rewrite import PatternMatcher, RewriteFn, UPat
from jit.ir.uop import UOp

_ROOT = "_guarded_root"


def is_weak(d: object) -> bool:
    """True for ``weakint`` / ``weakfloat`` (a Python scalar's type before a width is committed)."""
    return isinstance(d, DType) and d.weak


def _guard(fn: RewriteFn, root_name: str, drop_root: bool, accept: Callable[[UOp], bool]) -> RewriteFn:
    wants_ctx = "ctx" in inspect.signature(fn).parameters

    def run(ctx: Any = None, **captures: UOp) -> UOp | None:
        root = captures.pop(root_name) if drop_root else captures[root_name]
        if not accept(root):
            return None
        return fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)

    return run


def only_where(pm: PatternMatcher, accept: Callable[[UOp], bool]) -> PatternMatcher:
    """``pm``'s rules, each declining a matched node for which ``accept(node)`` is False."""
    rules: list[tuple[UPat, RewriteFn]] = []
    for pat, fn in pm.rules:
        root = copy.copy(pat)
        drop = root.name is None
        if drop:
            root.name = _ROOT
        rules.append((root, _guard(fn, root.name, drop, accept)))  # type: ignore[arg-type]
    return PatternMatcher(rules)


def skip_weak(pm: PatternMatcher) -> PatternMatcher:
    """``pm`` restricted to nodes whose own dtype is concrete (weak nodes are folded once committed)."""
    return only_where(pm, lambda u: not is_weak(u.dtype))
