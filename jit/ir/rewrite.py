"""The rewrite engine: UPat patterns, op-indexed PatternMatcher, and memoised bottom-up graph_rewrite.

Every transformation drivepack applies to a UOp graph is a list of ``(UPat, function)`` rules. A function
receives the pattern's named captures as keyword arguments (and ``ctx`` if it asks for it) and returns a
replacement node, or None to decline.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jit.common.dtype import AnyDType, DType
from jit.ir.uop import GroupOp, Ops, UOp

RewriteFn = Callable[..., UOp | None]


class UPat:
    """A pattern over UOps.

    ``src`` as a tuple matches sources in order; as a list, in any order (commutative matching); as a
    single UPat, every source. ``name`` captures the matched node for the rewrite function.
    """

    __slots__ = ("ops", "dtypes", "src", "name", "arg", "allow_any_len", "is_commutative")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: AnyDType | Iterable[AnyDType] | None = None,
                 src: UPat | tuple[UPat, ...] | list[UPat] | None = None, name: str | None = None,
                 arg: Any = None, allow_any_len: bool = False) -> None:
        self.ops: frozenset[Ops] | None = (None if op is None else frozenset((op,)) if isinstance(op, Ops)
                                           else frozenset(op))
        self.dtypes: tuple[AnyDType, ...] | None = (None if dtype is None else (dtype,)
                                                    if isinstance(dtype, DType) or not isinstance(dtype, Iterable)
                                                    else tuple(dtype))
        self.is_commutative = isinstance(src, list)
        self.src: tuple[UPat, ...] | UPat | None = tuple(src) if isinstance(src, (list, tuple)) else src
        self.name = name
        self.arg = arg
        self.allow_any_len = allow_any_len

    # --- sugar --------------------------------------------------------------------------------------
    @staticmethod
    def var(name: str | None = None, dtype: AnyDType | Iterable[AnyDType] | None = None) -> UPat:
        """Any node."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: AnyDType | Iterable[AnyDType] | None = None) -> UPat:
        """A constant."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: AnyDType | Iterable[AnyDType] | None, value: Any) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    def _binary(self, op: Ops, other: UPat | int | float) -> UPat:
        other_pat = other if isinstance(other, UPat) else UPat.const(None, other)
        srcs = [self, other_pat] if op in GroupOp.Commutative else (self, other_pat)
        return UPat(op, src=srcs)

    def __add__(self, x: UPat | int | float) -> UPat: return self._binary(Ops.ADD, x)
    def __mul__(self, x: UPat | int | float) -> UPat: return self._binary(Ops.MUL, x)
    def __sub__(self, x: UPat | int | float) -> UPat: return self._binary(Ops.SUB, x)
    def __floordiv__(self, x: UPat | int) -> UPat: return self._binary(Ops.IDIV, x)
    def __mod__(self, x: UPat | int) -> UPat: return self._binary(Ops.MOD, x)
    def __lt__(self, x: UPat | int | float) -> UPat: return self._binary(Ops.CMPLT, x)
    def maximum(self, x: UPat | int | float) -> UPat: return self._binary(Ops.MAX, x)

    def __repr__(self) -> str:
        ops = None if self.ops is None else sorted(o.name for o in self.ops)
        return f"UPat({ops}, name={self.name!r}, arg={self.arg!r})"

    # --- matching -----------------------------------------------------------------------------------
    def match(self, uop: UOp, store: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
        """Yield every capture dict under which ``uop`` matches (commutative sources can match several ways)."""
        if self.ops is not None and uop.op not in self.ops:
            return
        if self.dtypes is not None and uop.dtype not in self.dtypes:
            return
        if self.arg is not None and (uop.arg != self.arg or type(uop.arg) is not type(self.arg)):
            return
        if self.name is not None:
            bound = store.get(self.name)
            if bound is not None and bound is not uop:
                return
            store = {**store, self.name: uop}
        if self.src is None:
            yield store
            return
        if isinstance(self.src, UPat):
            yield from _match_all(tuple(self.src for _ in uop.src), uop.src, store)
            return
        if len(self.src) != len(uop.src) and not (self.allow_any_len and len(uop.src) >= len(self.src)):
            return
        orders = itertools.permutations(self.src) if self.is_commutative else (self.src,)
        for pats in orders:
            yield from _match_all(tuple(pats), uop.src[:len(pats)], store)


def _match_all(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], store: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
    if not pats:
        yield store
        return
    for st in pats[0].match(srcs[0], store):
        yield from _match_all(pats[1:], srcs[1:], st)


SinglePathMatcher = Callable[[UOp, dict[str, UOp]], bool]


def single_path(pat: UPat) -> SinglePathMatcher | None:
    """``pat.match`` as a plain function, for a pattern that matches a node in at most one way (no commutative
    sources anywhere in it): it binds the captures into the dict it is given, in the order ``match`` would, and
    says whether the node matched (the dict is to be dropped when not). None for a pattern with commutative
    sources, which only ``match`` enumerates. A rewrite tries every rule on every node: the generators ``match``
    builds per try cost more than most tries' work."""
    if pat.is_commutative:
        return None
    every: SinglePathMatcher | None = None
    children: tuple[SinglePathMatcher, ...] = ()
    if isinstance(pat.src, UPat):
        if (every := single_path(pat.src)) is None:
            return None
    elif pat.src is not None:
        found = [single_path(p) for p in pat.src]
        if any(c is None for c in found):
            return None
        children = tuple(c for c in found if c is not None)
    ops, dtypes, arg, name, has_src = pat.ops, pat.dtypes, pat.arg, pat.name, pat.src is not None
    n, any_len = len(children), pat.allow_any_len

    def matches(uop: UOp, store: dict[str, UOp]) -> bool:
        if ops is not None and uop.op not in ops:
            return False
        if dtypes is not None and uop.dtype not in dtypes:
            return False
        if arg is not None and (uop.arg != arg or type(uop.arg) is not type(arg)):
            return False
        if name is not None:
            bound = store.get(name)
            if bound is not None and bound is not uop:
                return False
            store[name] = uop
        if not has_src:
            return True
        srcs = uop.src
        if every is not None:
            return all(every(s, store) for s in srcs)
        if len(srcs) != n and not (any_len and len(srcs) >= n):
            return False
        for child, s in zip(children, srcs, strict=False):  # allow_any_len: srcs may run longer
            if not child(s, store):
                return False
        return True

    return matches


class PatternMatcher:
    """An ordered list of rules, indexed by op so that a node is only tried against rules for its op."""

    def __init__(self, rules: list[tuple[UPat, RewriteFn]]) -> None:
        self.rules = rules
        self._by_op: dict[Ops, list[tuple[UPat, RewriteFn, bool, SinglePathMatcher | None]]] = {op: [] for op in Ops}
        for pat, fn in rules:
            wants_ctx = "ctx" in inspect.signature(fn).parameters
            single = single_path(pat)
            for op in (pat.ops if pat.ops is not None else Ops):
                self._by_op[op].append((pat, fn, wants_ctx, single))

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def matches(self, uop: UOp) -> Iterator[tuple[RewriteFn, bool, dict[str, UOp]]]:
        """Every rule whose pattern matches ``uop``, in rule order (a commutative pattern once per way it
        matches), as its function, whether that takes ``ctx``, and the captures."""
        for pat, fn, wants_ctx, single in self._by_op[uop.op]:
            if single is None:
                for captures in pat.match(uop, {}):
                    yield fn, wants_ctx, captures
            elif single(uop, captures := {}):
                yield fn, wants_ctx, captures

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first non-None result of a matching rule, or None (``matches``, without its generator)."""
        for pat, fn, wants_ctx, single in self._by_op[uop.op]:
            if single is None:
                for captures in pat.match(uop, {}):
                    out = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
                    if out is not None and out is not uop:
                        return out
            elif single(uop, captures := {}):
                out = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
                if out is not None and out is not uop:
                    return out
        return None


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, name: str | None = None) -> UOp:
    """Rewrite ``root`` bottom-up until no rule matches anywhere; each node is rewritten once (memoised).

    Sources are rewritten before their users; a rule's result is itself rewritten to a fixed point.
    """
    from jit.ir import viz  # imported here: viz renders graphs and must not be a dependency of the engine

    memo: dict[UOp, UOp] = {}
    # an explicit stack instead of recursion: driving models give graphs thousands of nodes deep
    stack: list[tuple[UOp, int]] = [(root, 0)]
    pending: dict[UOp, UOp] = {}  # node whose rule result is being rewritten -> that result
    while stack:
        node, state = stack.pop()
        if node in memo:
            continue
        if state == 0:
            stack.append((node, 1))
            stack.extend((s, 0) for s in reversed(node.src) if s not in memo)
            continue
        if state == 1:
            new_src = tuple(memo[s] for s in node.src)
            rebuilt = node if new_src == node.src else node.replace(src=new_src)
            out = pm.rewrite(rebuilt, ctx)
            if out is None:
                memo[node] = rebuilt
                if rebuilt is not node:
                    memo.setdefault(rebuilt, rebuilt)
                continue
            if out in memo:
                memo[node] = memo[out]
                continue
            pending[node] = out
            stack.append((node, 2))
            stack.append((out, 0))
            continue
        memo[node] = memo[pending.pop(node)]
    result = memo[root]
    viz.record(name or "graph_rewrite", root, result)
    return result
