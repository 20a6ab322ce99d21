"""Which ONNX nodes a UOp computes for: a side table, so a kernel can be named by the model nodes it runs.

UOps are hash-consed (the same spec is the same object), so the names cannot live in the node itself: two ONNX
nodes that build the same subexpression share one UOp, and it is tagged with both. The ONNX loader tags the nodes
each ONNX node's outputs newly reach (``tag_new``); a rewrite that rebuilds a node with new sources keeps its tags
(``inherit``); the scheduler unions the tags of a kernel's body (``names_in``). Weak: a dropped graph frees its
entries. Buffers, constants and views of them (movement ops only) are never tagged: a weight read by two nodes
belongs to neither.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from jit.ir.uop import GroupOp, Ops, UOp

_tags: weakref.WeakKeyDictionary[UOp, frozenset[str]] = weakref.WeakKeyDictionary()
_LEAVES = (Ops.BUFFER, Ops.CONST)


def _taggable(u: UOp) -> bool:
    while u.op in GroupOp.Movement:  # a view of a weight or a constant is shared by whoever reads it
        u = u.src[0]
    return u.op not in _LEAVES


def tag_new(roots: Iterable[UOp], name: str) -> None:
    """Tag ``name`` on every node under ``roots`` that has no tag yet, not walking below a tagged node (what an
    earlier ONNX node built is that node's)."""
    stack = [r for r in roots if r not in _tags]
    seen: set[UOp] = set()
    tag = frozenset((name,))
    while stack:
        u = stack.pop()
        if u in seen or u in _tags:
            continue
        seen.add(u)
        if _taggable(u):
            _tags[u] = tag
        stack.extend(s for s in u.src if s not in _tags and s not in seen)


def inherit(new: UOp, old: UOp) -> None:
    """``new`` (``old`` rebuilt with other sources) computes for the same ONNX nodes as ``old``."""
    found = _tags.get(old)
    if found is not None and new is not old:
        _tags[new] = _tags.get(new, frozenset()) | found


def names_in(nodes: Iterable[UOp]) -> tuple[str, ...]:
    """The ONNX node names tagged on ``nodes``, sorted."""
    out: set[str] = set()
    for u in nodes:
        out |= _tags.get(u, frozenset())
    return tuple(sorted(out))
