"""Reverse-mode autodiff over tensor-level UOp graphs.

Before: ``root`` is a tensor-level graph (the ops in docs/architecture.md), ``grad`` has ``root``'s shape and
dtype, and ``targets`` are nodes of that graph (or not: an unreached target gets zeros).
After: one gradient UOp per target, with the target's shape and dtype, built from the same tensor-level ops
(so it is lazy, fuses and realizes like any Tensor); nothing is computed here. ``Tensor.gradient`` and
``Tensor.backward`` (``TENSOR_METHODS``, attached by jit/frontend/__init__.py) are the Tensor-level entry points.

The rules are data: ``pm_gradient`` maps a node (captured as ``ret``, with the gradient of that node as
``ctx``) to a tuple holding one gradient per source, None for a source that gets no gradient. Conventions:

* Gradients flow only into float-valued nodes: integer and bool values are piecewise constant, so they
  get none (``x.int().float()`` has gradient 0, not the straight-through 1).
* Rounding (TRUNC/FLOOR/CEIL/RINT) and comparisons contribute nothing (zero almost everywhere).
* Ties split the gradient evenly: elementwise MAX/MIN give half to each equal operand, and a MAX/MIN
  reduce divides the gradient among all positions equal to the result (as tinygrad does).
* A MUL reduce uses ``grad * out / x``, which is nan where ``x`` is 0.
* A target that is a RESHAPE of a node is that node's data: its gradient is the reshaped gradient of the node
  under its reshapes, so every use of that data counts (even one that reads it through a different reshape).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from jit.common.dtype import DType
from jit.common.errors import ShapeError, UnsupportedOp
from jit.frontend.tensor import Tensor, live_tensors
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import GroupOp, Ops, UOp, toposort

Grads = tuple[UOp | None, ...]


def _t(u: UOp) -> Tensor:
    return Tensor(u)


# --- rules that need more than one line ------------------------------------------------------------
def _pow_grads(ctx: UOp, ret: UOp) -> Grads:
    a, b, out, gt = _t(ret.src[0]), _t(ret.src[1]), _t(ret), _t(ctx)
    # b * a^(b-1) is 0*inf = nan at a = b = 0, where the limit (and torch) says 0
    d_base = (b == 0).where(0, b * a.pow(b - 1))
    # out * log(a) is 0*-inf = nan at a = 0; the base is 0 there, so the exponent does not matter
    d_exp = (a == 0).where(0, out * a.log())
    return ((gt * d_base).uop, (gt * d_exp).uop)


def _minmax_grads(ctx: UOp, ret: UOp) -> Grads:
    a, b, gt = _t(ret.src[0]), _t(ret.src[1]), _t(ctx)
    a_wins = (a > b) if ret.op is Ops.MAX else (a < b)
    b_wins = (b > a) if ret.op is Ops.MAX else (b < a)
    half = gt * 0.5
    return (a_wins.where(gt, (a == b).where(half, 0)).uop, b_wins.where(gt, (a == b).where(half, 0)).uop)


def _reduce_grads(ctx: UOp, ret: UOp) -> Grads:
    x, gt, out = _t(ret.src[0]), _t(ctx), _t(ret)
    op, axes = ret.arg
    if op is Ops.ADD:
        return (gt.expand(x.shape).uop,)
    if op is Ops.MUL:
        return ((gt.expand(x.shape) * out.expand(x.shape) / x).uop,)
    if op in (Ops.MAX, Ops.MIN):
        hit = x == out.expand(x.shape)
        count = hit.cast(x.dtype).sum(axes, keepdim=True)
        return (hit.where((gt / count).expand(x.shape), 0).uop,)
    raise UnsupportedOp(f"gradient: REDUCE_AXIS op expected ADD, MUL, MAX or MIN, got {op}")


def _expand_grads(ctx: UOp, ret: UOp) -> Grads:
    src_shape = ret.src[0].shape
    assert src_shape is not None
    axes = tuple(i for i, (s, o) in enumerate(zip(src_shape, ret.arg, strict=True)) if s != o)
    return (_t(ctx).sum(axes, keepdim=True).uop if axes else ctx,)


def _permute_grads(ctx: UOp, ret: UOp) -> Grads:
    inverse = [0] * len(ret.arg)
    for out_axis, src_axis in enumerate(ret.arg):
        inverse[src_axis] = out_axis
    return (_t(ctx).permute(inverse).uop,)


def _stride_grads(ctx: UOp, ret: UOp) -> Grads:
    # an axis of size n read every s-th element gives m = ceil(n/s) values: give each a trailing block of s-1
    # zeros ((m, 1) padded to (m, s)), flatten to m*s >= n and cut back to n
    src_shape = ret.src[0].shape
    gt = _t(ctx)
    assert src_shape is not None
    pairs = gt.reshape(*[v for m in gt.shape for v in (m, 1)])
    pairs = pairs.pad(tuple(p for s in ret.arg for p in ((0, 0), (0, s - 1))))
    flat = pairs.reshape(*[m * s for m, s in zip(gt.shape, ret.arg, strict=True)])
    return (flat.shrink(tuple((0, n) for n in src_shape)).uop,)


def _window_axis_grad(t: Tensor, n: int, stride: int, dilation: int) -> Tensor:
    """(..., O, K) window gradient -> (..., n): element (o, k) adds into position o*stride + k*dilation."""
    *pre, o, k = t.shape
    keep = ((0, 0),) * len(pre)
    # space the outputs stride apart and the kernel taps dilation apart (zeros in between)
    t = t.reshape(*pre, o, 1, k).pad((*keep, (0, 0), (0, stride - 1), (0, 0))).reshape(*pre, o * stride, k)
    t = t.reshape(*pre, o * stride, k, 1).pad((*keep, (0, 0), (0, 0), (0, dilation - 1)))
    q, j = o * stride, k * dilation
    t = t.reshape(*pre, q, j).transpose(-1, -2)  # (..., j, q)
    # skew: row r of a (j, L) block re-read as rows of L-1 shifts right by r, so [r, c] lands on [r, c + r]
    width = q + j
    t = t.pad((*keep, (0, 0), (0, j))).reshape(*pre, j * width)
    t = t.shrink((*((0, s) for s in pre), (0, j * (width - 1)))).reshape(*pre, j, width - 1)
    t = t.sum(-2)  # (..., q + j - 1): position p collects every (o, k) with o*stride + k*dilation = p
    have = width - 1
    if have >= n:  # the tail past n holds only the zeros put in above
        return t.shrink((*((0, s) for s in pre), (0, n)))
    return t.pad((*keep, (0, n - have)))


def _window_grads(ctx: UOp, ret: UOp) -> Grads:
    kernel, stride, dilation = ret.arg
    src_shape = ret.src[0].shape
    assert src_shape is not None
    nk = len(kernel)
    lead = len(src_shape) - nk
    # (lead, O_0..O_n, K_0..K_n) -> (lead, O_0, K_0, O_1, K_1, ...); each (O_i, K_i) pair then becomes one axis
    gt = _t(ctx).permute(*range(lead), *(a for i in range(nk) for a in (lead + i, lead + nk + i)))
    for i in range(nk):
        ax = lead + i  # earlier pairs are already one axis each
        rest = [a for a in range(gt.ndim) if a not in (ax, ax + 1)]
        t = _window_axis_grad(gt.permute(*rest, ax, ax + 1), src_shape[ax], stride[i], dilation[i])
        gt = t.permute(*range(ax), t.ndim - 1, *range(ax, t.ndim - 1))
    return (gt.uop,)


def _gather_grads(ctx: UOp, ret: UOp) -> Grads:
    # scatter-add as a reduce: grad_x[.., j, ..] = sum over k of grad[.., k, ..] where idx[.., k, ..] == j
    x_shape = ret.src[0].shape
    assert x_shape is not None
    axis, n = ret.arg, x_shape[ret.arg]
    idx = _t(ret.src[1])
    idx = (idx < 0).where(idx + n, idx).maximum(0).minimum(max(n - 1, 0))  # as lowering reads: wrap, then clamp
    positions = Tensor.arange(n).reshape(*(1,) * (axis + 1), n, *(1,) * (len(x_shape) - axis - 1))
    hit = idx.unsqueeze(axis + 1) == positions
    return (hit.where(_t(ctx).unsqueeze(axis + 1), 0).sum(axis).uop, None)


def _float_mod_grads(ctx: UOp, ret: UOp) -> Grads:
    a, b, gt = _t(ret.src[0]), _t(ret.src[1]), _t(ctx)
    return (ctx, (-gt * (a / b).trunc()).uop)  # fmod(a, b) = a - trunc(a/b) * b


def _none(ret: UOp) -> Grads:
    return (None,) * len(ret.src)


# --- the rules ---------------------------------------------------------------------------------------
_NOT_DIFFERENTIABLE = (GroupOp.Comparison | {Ops.TRUNC, Ops.FLOOR, Ops.CEIL, Ops.RINT, Ops.NOT, Ops.AND, Ops.OR,
                                              Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.BITCAST})

pm_gradient = PatternMatcher([
    (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (_t(ctx).cast(ret.src[0].dtype).uop,)),
    (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
    (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, (-_t(ctx)).uop)),
    (UPat(Ops.MUL, name="ret"), lambda ctx, ret: ((_t(ctx) * _t(ret.src[1])).uop, (_t(ctx) * _t(ret.src[0])).uop)),
    (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (
        (_t(ctx) / _t(ret.src[1])).uop,
        (-_t(ctx) * _t(ret.src[0]) / (_t(ret.src[1]) * _t(ret.src[1]))).uop)),
    (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (
        (_t(ctx) * _t(ret.src[1])).uop, (_t(ctx) * _t(ret.src[0])).uop, ctx)),
    (UPat(Ops.NEG, name="ret"), lambda ctx, ret: ((-_t(ctx)).uop,)),
    (UPat(Ops.EXP, name="ret"), lambda ctx, ret: ((_t(ctx) * _t(ret)).uop,)),
    (UPat(Ops.LOG, name="ret"), lambda ctx, ret: ((_t(ctx) / _t(ret.src[0])).uop,)),
    (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: ((_t(ctx) / (_t(ret) * 2)).uop,)),
    (UPat(Ops.SIN, name="ret"), lambda ctx, ret: ((_t(ctx) * _t(ret.src[0]).cos()).uop,)),
    (UPat(Ops.COS, name="ret"), lambda ctx, ret: ((-_t(ctx) * _t(ret.src[0]).sin()).uop,)),
    (UPat(Ops.TAN, name="ret"), lambda ctx, ret: ((_t(ctx) * (_t(ret) * _t(ret) + 1)).uop,)),
    (UPat(Ops.TANH, name="ret"), lambda ctx, ret: ((_t(ctx) * (1 - _t(ret) * _t(ret))).uop,)),
    (UPat(Ops.ERF, name="ret"), lambda ctx, ret: (
        (_t(ctx) * (-_t(ret.src[0]) * _t(ret.src[0])).exp() * (2 / math.sqrt(math.pi))).uop,)),
    (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: ((-_t(ctx) * _t(ret) * _t(ret)).uop,)),
    (UPat(Ops.POW, name="ret"), _pow_grads),
    (UPat((Ops.MAX, Ops.MIN), name="ret"), _minmax_grads),
    (UPat(Ops.ABS, name="ret"), lambda ctx, ret: ((_t(ctx) * _t(ret.src[0]).sign()).uop,)),
    (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (
        None, _t(ret.src[0]).where(_t(ctx), 0).uop, _t(ret.src[0]).where(0, _t(ctx)).uop)),
    (UPat(Ops.MOD, name="ret"), lambda ctx, ret: _float_mod_grads(ctx, ret) if _is_float(ret) else _none(ret)),
    (UPat(_NOT_DIFFERENTIABLE, name="ret"), lambda ret: _none(ret)),
    (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_grads),
    (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
    (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (_t(ctx).reshape(ret.src[0].shape).uop,)),
    (UPat(Ops.PERMUTE, name="ret"), _permute_grads),
    (UPat(Ops.EXPAND, name="ret"), _expand_grads),
    (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (
        _t(ctx).shrink(tuple((b, b + n) for (b, _), n in zip(ret.arg, ret.src[0].shape, strict=True))).uop,)),
    (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (
        _t(ctx).pad(tuple((b, n - e) for (b, e), n in zip(ret.arg, ret.src[0].shape, strict=True))).uop,)),
    (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (_t(ctx).flip(*ret.arg).uop,)),
    (UPat(Ops.STRIDE, name="ret"), _stride_grads),
    (UPat(Ops.WINDOW, name="ret"), _window_grads),
    (UPat(Ops.GATHER, name="ret"), _gather_grads),
])


def _is_float(u: UOp) -> bool:
    return isinstance(u.dtype, DType) and u.dtype.is_float


def _rule(node: UOp, grad: UOp) -> Grads:
    """The source gradients of the first rule in ``pm_gradient`` that matches ``node``.

    ``PatternMatcher.rewrite`` promises a UOp, and these rules return tuples, so the match runs here.
    """
    for fn, wants_ctx, captures in pm_gradient.matches(node):
        rule: Callable[..., Grads | None] = fn  # type: ignore[assignment]  # these rules return tuples
        out = rule(ctx=grad, **captures) if wants_ctx else rule(**captures)
        if out is not None:
            return out
    raise UnsupportedOp(f"gradient: no rule for op {node.op.name} (dtype {node.dtype!r}, arg {node.arg!r})")


def _reshape_base(u: UOp) -> UOp:
    """The node under a chain of RESHAPEs: the same data, so its gradient reshaped is ``u``'s gradient."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def compute_gradients(root: UOp, grad: UOp, targets: list[UOp]) -> list[UOp]:
    """d(root)/d(target) for each target, seeded with ``grad`` (root's shape); zeros for unreached targets."""
    if grad.shape != root.shape:
        raise ShapeError(f"gradient: grad shape expected {root.shape} (the root's), got {grad.shape}")
    # differentiate with respect to what is under a target's reshapes: Tensor.reshape folds reshape(reshape(x))
    # into one reshape of x's source, so a reshaped target (any uploaded n-d tensor) may be absent from the graph
    bases = [_reshape_base(t) for t in targets]
    wanted = set(bases)
    order = toposort([root])
    # only nodes with a path down to some target need a gradient
    on_path: set[UOp] = set()
    for node in order:
        if node in wanted or any(s in on_path for s in node.src):
            on_path.add(node)
    grads: dict[UOp, UOp] = {root: grad} if root in on_path else {}
    for node in reversed(order):
        g = grads.get(node)
        if g is None or not any(s in on_path for s in node.src):
            continue
        for src, sg in zip(node.src, _rule(node, g), strict=True):
            if sg is None or src not in on_path or not _is_float(src):
                continue
            if sg.shape != src.shape:
                raise ShapeError(f"gradient: rule for {node.op.name} gave a source gradient of shape {sg.shape}, "
                                 f"expected {src.shape}")
            sg = _t(sg).cast(src.dtype).uop  # a rule may promote (e.g. weak constants); keep the source's dtype
            grads[src] = sg if src not in grads else (_t(grads[src]) + _t(sg)).uop
    out = []
    for t, base in zip(targets, bases, strict=True):
        assert t.shape is not None and isinstance(t.dtype, DType)
        out.append(_t(grads[base]).reshape(t.shape).uop if base in grads else Tensor.zeros(t.shape, dtype=t.dtype).uop)
    return out


def gradient(self: Tensor, *targets: Tensor, grad: Tensor | None = None) -> list[Tensor]:
    """d(self)/d(target) for each target; ``self`` must be a scalar unless ``grad`` is given."""
    if grad is None:
        if self.numel() != 1:
            raise ShapeError(f"gradient: expected a scalar loss, got shape {self.shape} (pass grad=)")
        grad = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    grads = compute_gradients(self.uop, grad.uop, [t.uop for t in targets])
    return [Tensor(g, device=self.device) for g in grads]


def backward(self: Tensor, grad: Tensor | None = None) -> Tensor:
    """Set ``.grad`` on every tensor with ``requires_grad`` that this one depends on."""
    want = [t for t in list(live_tensors) if t.requires_grad]
    for t, g in zip(want, gradient(self, *want, grad=grad), strict=True):
        t.grad = g if t.grad is None else t.grad + g
    return self


TENSOR_METHODS: dict[str, Any] = {"gradient": gradient, "backward": backward}
