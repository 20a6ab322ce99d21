"""Merging adjacent output axes into one, so a short row (resnet's 56, 28, 14, 7) stops limiting the tile row.

Before: a kernel graph with output RANGEs ``a`` (outer, size A) and ``b`` (inner, size B) that reach nothing but
memory addresses, each address affine in them with ``coef(a) == B * coef(b)`` (the row-major layout of a
1x1 convolution's or an elementwise epilogue's (h, w): ``h * W + w``). After: ``b`` is one RANGE of size A*B with
``b``'s id and ``a`` is the constant 0, so every such address ``a * B * k + b * k`` becomes ``m * k``: the same
element for every (a, b) = (m // B, m % B). The symbolic pass that follows folds the ``0 * ...`` terms.

A range used in any other way (a padding mask's comparison, a stride's division, a value computed from it) or
with another ratio in any address (a 3x3 window, a transpose) is never merged.
"""

from __future__ import annotations

from jit.ir.uop import Ops, UOp, toposort

TILE_ROW = 16  # rows that are a multiple of this already fill a tile row: left as they are


def _affine(e: UOp, ranges: tuple[UOp, UOp], memo: dict[UOp, dict[UOp, int] | None]) -> dict[UOp, int] | None:
    """Coefficients of ``ranges`` in integer expression ``e`` when it is affine in them, else None (``memo`` holds
    ``{}`` for every node that depends on neither)."""
    if e in memo:
        return memo[e]
    out: dict[UOp, int] | None
    if e in ranges:
        out = {e: 1}
    elif e.op is Ops.ADD:
        parts = [_affine(s, ranges, memo) for s in e.src]
        out = None if any(p is None for p in parts) else \
            {r: sum(p.get(r, 0) for p in parts if p is not None) for r in ranges}
    elif e.op is Ops.MUL and any(s.op is Ops.CONST for s in e.src):
        const = next(s for s in e.src if s.op is Ops.CONST)
        other = e.src[1] if e.src[0] is const else e.src[0]
        inner = _affine(other, ranges, memo)
        out = None if inner is None else {r: c * int(const.arg) for r, c in inner.items()}
    else:
        out = None
    memo[e] = out
    return out


def _mergeable(nodes: list[UOp], users: dict[UOp, list[UOp]], outer: UOp, inner: UOp) -> bool:
    size_b = int(inner.src[0].arg)
    stack, seen = [outer, inner], set()
    dependent = {outer, inner}
    for node in nodes:
        if any(s in dependent for s in node.src):
            dependent.add(node)
    memo: dict[UOp, dict[UOp, int] | None] = {n: {} for n in nodes if n not in dependent}
    while stack:
        node = stack.pop()
        for usr in users.get(node, []):
            if usr in seen:
                continue
            seen.add(usr)
            if usr.op is Ops.INDEX and usr.src[1] is node:
                coefs = _affine(node, (outer, inner), memo)
                if coefs is None or coefs.get(outer, 0) != size_b * coefs.get(inner, 0):
                    return False
            elif usr.op in (Ops.ADD, Ops.MUL):
                stack.append(usr)
            else:
                return False
    return True


def merge_output_dims(sink: UOp) -> UOp:
    """``sink`` with each mergeable (outer, inner) pair of adjacent output ranges merged, innermost first, while
    the inner row is short (not a multiple of ``TILE_ROW``); the same graph when nothing merges."""
    while True:
        nodes = toposort([sink])
        outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
        if len(outs) < 2 or int(outs[-1].src[0].arg) % TILE_ROW == 0:
            return sink
        users: dict[UOp, list[UOp]] = {}
        for node in nodes:
            for src in node.src:
                users.setdefault(src, []).append(node)
        outer, inner = outs[-2], outs[-1]
        if not _mergeable(nodes, users, outer, inner):
            return sink
        merged = UOp(Ops.RANGE, inner.dtype, (inner.src[0].const_like(int(outer.src[0].arg) * int(inner.src[0].arg)),),
                     inner.arg)
        sink = sink.substitute({outer: outer.src[0].const_like(0), inner: merged})
