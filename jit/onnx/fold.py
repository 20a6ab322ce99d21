"""Load-time folding of shape arithmetic.

When every input of a node is a model constant holding integers (or booleans), and the op is one of the
shape-arithmetic ops below, the result is computed with numpy right away and stays a constant. This is
what keeps ``Shape -> Gather -> Concat -> Reshape`` chains out of the lazy graph. Float math is never
folded here: it computes through Tensor ops like everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jit.onnx.registry import OpContext, Value

MAX_FOLD_ELEMENTS = 1 << 16


def _axes(ctx: OpContext, i: int) -> list[int] | None:
    op = ctx.node.op_type
    # axes moved from an attribute to an input: Squeeze/Unsqueeze/ReduceSum at 13, the other Reduce* at 18
    since = 18 if op.startswith("Reduce") and op != "ReduceSum" else 13
    if ctx.opset >= since:
        return None if not ctx.has(i) else [int(a) for a in np.atleast_1d(ctx.static(i))]
    a = ctx.attrs.get("axes")
    return None if a is None else list(a)


def _unsqueeze(ctx: OpContext, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    axes = _axes(ctx, 1) or []
    ndim = x.ndim + len(axes)
    out = x
    for a in sorted(a % ndim for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(ctx: OpContext, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    axes = _axes(ctx, 1)
    return np.squeeze(x) if axes is None else np.squeeze(x, tuple(a % x.ndim for a in axes))


def _slice(ctx: OpContext, x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    if ctx.opset < 10:
        starts, ends = ctx.attrs["starts"], ctx.attrs["ends"]
        axes = ctx.attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = list(rest[0]), list(rest[1])
        axes = list(rest[2]) if len(rest) > 2 and rest[2] is not None else list(range(len(starts)))
        steps = list(rest[3]) if len(rest) > 3 and rest[3] is not None else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        sl[int(a) % x.ndim] = slice(int(s), int(e), int(st))
    return x[tuple(sl)]


def _reshape(ctx: OpContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    allowzero = ctx.attrs.get("allowzero", 0)
    target = [int(s) for s in shape]
    if not allowzero:
        target = [x.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return x.reshape(target)


def _range(ctx: OpContext, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


def _cast(ctx: OpContext, x: np.ndarray) -> np.ndarray | None:
    from onnx import helper
    to = helper.tensor_dtype_to_np_dtype(ctx.attrs["to"])
    return x.astype(to) if np.dtype(to).kind in "iub" else None


def _gather(ctx: OpContext, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    axis = ctx.attrs.get("axis", 0)
    return np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)


def _div(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.trunc(a / b).astype(np.result_type(a, b))


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray | None]:
    def run(ctx: OpContext, x: np.ndarray, *rest: np.ndarray) -> np.ndarray | None:
        axes = _axes(ctx, 1)
        keep = bool(ctx.attrs.get("keepdims", 1))
        if axes is None or (len(axes) == 0 and not ctx.attrs.get("noop_with_empty_axes", 0)):
            axes = list(range(x.ndim))
        if not axes:
            return x
        if any(x.shape[a] == 0 for a in axes):
            return None  # an empty reduction: the handler fills in the identity
        return np.asarray(fn(x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)  # np.sum widens int32
    return run


FOLDERS: dict[str, Callable[..., Any]] = {
    "Identity": lambda ctx, x: x,
    "Cast": _cast,
    "Gather": _gather,
    "Concat": lambda ctx, *xs: np.concatenate(xs, axis=ctx.attrs["axis"]),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Slice": _slice,
    "Add": lambda ctx, a, b: a + b,
    "Sub": lambda ctx, a, b: a - b,
    "Mul": lambda ctx, a, b: a * b,
    "Div": _div,
    "Mod": lambda ctx, a, b: np.fmod(a, b) if ctx.attrs.get("fmod", 0) else np.mod(a, b),
    "Neg": lambda ctx, a: -a,
    "Abs": lambda ctx, a: np.abs(a),
    "Equal": lambda ctx, a, b: a == b,
    "Less": lambda ctx, a, b: a < b,
    "Greater": lambda ctx, a, b: a > b,
    "Not": lambda ctx, a: ~a,
    "And": lambda ctx, a, b: a & b,
    "Or": lambda ctx, a, b: a | b,
    "Where": lambda ctx, c, a, b: np.where(c, a, b),
    "Max": lambda ctx, *xs: np.maximum.reduce(xs),
    "Min": lambda ctx, *xs: np.minimum.reduce(xs),
    "Range": _range,
    "Expand": lambda ctx, x, s: x * np.ones([int(v) for v in s], dtype=x.dtype),
    "Transpose": lambda ctx, x: np.transpose(x, ctx.attrs.get("perm")),
    "Tile": lambda ctx, x, r: np.tile(x, [int(v) for v in r]),
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
}


def try_fold(ctx: OpContext) -> list[Value] | None:
    """The node's outputs as constants if it is shape arithmetic on constants; otherwise None."""
    op = ctx.node.op_type
    fn = FOLDERS.get(op)
    if fn is None:
        return None
    present = [v for v in ctx.inputs if v is not None]
    if not present or not all(v.const and v.host is not None for v in present):
        return None
    hosts = [v.host for v in present]
    if any(h.dtype.kind not in "iub" or h.size > MAX_FOLD_ELEMENTS for h in hosts):  # type: ignore[union-attr]
        return None
    args = [v.host if v is not None else None for v in ctx.inputs]
    out = fn(ctx, *args)
    if out is None:
        return None
    return [Value(host=np.asarray(out), const=True)]
