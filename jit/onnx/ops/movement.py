"""ONNX shape and movement ops: Constant, Shape, Reshape, Transpose, Concat, Slice, Gather, Pad, CenterCropPad,
..., and the pass-through ones: If (a known condition), Optional*."""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import dtypes
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor
from jit.onnx.ops.elementwise import onnx_dtype
from jit.onnx.registry import OpContext, Value, onnx_op


def axes_input(ctx: OpContext, input_index: int, since_opset: int) -> list[int] | None:
    """Axes given as an attribute before ``since_opset`` and as an optional input from it on."""
    if ctx.opset >= since_opset:
        return None if not ctx.has(input_index) else [int(a) for a in np.atleast_1d(ctx.static(input_index, "axes"))]
    axes = ctx.attr("axes", None)
    return None if axes is None else [int(a) for a in axes]


@onnx_op("Constant")
def constant(ctx: OpContext) -> np.ndarray:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in ctx.attrs:
            v = ctx.attrs[key]
            if key == "value":
                return np.asarray(v)
            dt = np.float32 if "float" in key else np.int64
            return np.asarray(v, dtype=dt)
    raise ctx.unsupported(attribute=next(iter(ctx.attrs), "none"))


@onnx_op("Shape")
def shape(ctx: OpContext) -> np.ndarray:
    s = np.asarray(ctx.inputs[0].shape if ctx.inputs[0] is not None else (), dtype=np.int64)  # type: ignore[union-attr]
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return s[start:end]


@onnx_op("Size")
def size(ctx: OpContext) -> np.ndarray:
    return np.asarray(math.prod(ctx.inputs[0].shape), dtype=np.int64)  # type: ignore[union-attr]


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx: OpContext) -> Tensor | np.ndarray:
    shape = tuple(int(s) for s in ctx.static(0, "shape"))
    value = ctx.attr("value", None)
    arr = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if math.prod(shape) <= 1 << 16 and arr.dtype.kind in "iub":
        return np.full(shape, arr[0], dtype=arr.dtype)  # shape arithmetic: stays a constant
    return Tensor.full(shape, arr[0].item(), dtype=str(arr.dtype) if arr.dtype != np.float16 else "float16")


@onnx_op("Reshape")
def reshape(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    target = [int(s) for s in (ctx.static(1, "shape") if ctx.opset >= 5 else ctx.attr("shape"))]
    if not ctx.attr("allowzero", 0):
        target = [x.shape[i] if s == 0 else s for i, s in enumerate(target)]
    return x.reshape(target)


@onnx_op("Flatten")
def flatten(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@onnx_op("Squeeze")
def squeeze(ctx: OpContext) -> Tensor:
    axes = axes_input(ctx, 1, 13)
    return ctx.t(0).squeeze(axes)


@onnx_op("Unsqueeze")
def unsqueeze(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    axes = axes_input(ctx, 1, 13) or []
    ndim = x.ndim + len(axes)
    for a in sorted(a % ndim for a in axes):
        x = x.unsqueeze(a)
    return x


@onnx_op("Transpose")
def transpose(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    perm = ctx.attr("perm", None)
    return x.permute(list(perm) if perm is not None else list(reversed(range(x.ndim))))


@onnx_op("Concat")
def concat(ctx: OpContext) -> Tensor:
    xs = [ctx.t(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    xs = [x for x in xs if x.numel() > 0] or xs[:1]
    return Tensor.cat(*xs, dim=ctx.attr("axis"))


@onnx_op("Split")
def split(ctx: OpContext) -> list[Tensor]:
    x = ctx.t(0)
    axis = ctx.attr("axis", 0) % x.ndim
    n_out = len(ctx.node.output)
    if ctx.opset >= 13 and ctx.has(1):
        sizes = [int(s) for s in ctx.static(1, "split")]
    elif ctx.opset < 13 and ctx.attr("split", None) is not None:
        sizes = list(ctx.attr("split"))
    else:
        n = x.shape[axis]
        parts = ctx.attr("num_outputs", None) or n_out
        chunk = math.ceil(n / parts)
        sizes = [min(chunk, n - i * chunk) for i in range(parts)]
    return x.split(sizes, axis)


@onnx_op("Slice")
def slice_(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", None) or range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = [int(v) for v in ctx.static(1)], [int(v) for v in ctx.static(2)]
        axes = [int(v) for v in ctx.static(3)] if ctx.has(3) else list(range(len(starts)))
        steps = [int(v) for v in ctx.static(4)] if ctx.has(4) else [1] * len(starts)
    key = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        key[a % x.ndim] = slice(s, e, st)
    return x[tuple(key)]


@onnx_op("Gather")
def gather(ctx: OpContext) -> Tensor:
    x, idx = ctx.t(0), ctx.t(1)
    return x.take(idx.cast(dtypes.int32), ctx.attr("axis", 0))


@onnx_op("GatherElements")
def gather_elements(ctx: OpContext) -> Tensor:
    x, idx = ctx.t(0), ctx.t(1)
    return x.gather(ctx.attr("axis", 0), idx.cast(dtypes.int32))


@onnx_op("Expand")
def expand(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    target = tuple(int(s) for s in ctx.static(1, "shape"))
    nd = max(len(target), x.ndim)
    xs = (1,) * (nd - x.ndim) + x.shape
    ts = (1,) * (nd - len(target)) + target
    out_shape = []
    for a, b in zip(xs, ts, strict=True):
        if a != b and a != 1 and b != 1:
            raise ShapeError(f"Expand: shape {x.shape} cannot broadcast to {target}")
        out_shape.append(a if b == 1 else b)
    return x.reshape(xs).expand(*out_shape)


@onnx_op("Tile")
def tile(ctx: OpContext) -> Tensor:
    return ctx.t(0).repeat([int(r) for r in ctx.static(1, "repeats")])


@onnx_op("Pad")
def pad(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value, axes = list(ctx.attr("pads")), ctx.attr("value", 0.0), None
    else:
        pads = [int(p) for p in ctx.static(1, "pads")]
        value = 0
        if ctx.has(2):
            v = ctx.inputs[2]
            # a constant_value computed in the graph (CastLike of a constant) stays a Tensor
            value = v.host.reshape(-1)[0].item() if v.host is not None and v.host.size else \
                ctx.t(2).reshape(-1)[0] if v.host is None else 0
        axes = [int(a) % x.ndim for a in ctx.static(3, "axes")] if ctx.has(3) else None
    axes = axes if axes is not None else list(range(x.ndim))
    per_axis = [(0, 0)] * x.ndim
    n = len(axes)
    for i, a in enumerate(axes):
        per_axis[a] = (pads[i], pads[i + n])
    if mode == "wrap":
        out = x
        for a, (b, e) in enumerate(per_axis):
            if b or e:
                size = out.shape[a]
                reps = math.ceil((b + e) / size) + 1 if size else 1
                tiled = Tensor.cat(*([out] * (2 * reps + 1)), dim=a)
                start = reps * size - b
                out = tiled._slice_axis(a, start, start + size + b + e)
        return out
    if mode not in ("constant", "reflect", "edge"):
        raise ctx.unsupported(mode=mode)
    if isinstance(value, Tensor):
        inside = Tensor.full(x.shape, True, dtypes.bool).pad(per_axis)
        return inside.where(x.pad(per_axis), value.cast(x.dtype))
    return x.pad(per_axis, mode=mode, value=value)


@onnx_op("CenterCropPad")
def center_crop_pad(ctx: OpContext) -> Tensor:
    """Center-crop or zero-pad each listed axis to the target size."""
    x = ctx.t(0)
    shape = [int(s) for s in ctx.static(1, "shape")]
    axes = [int(a) % x.ndim for a in (ctx.attr("axes", None) or range(x.ndim))]
    pads = [(0, 0)] * x.ndim
    bounds = [(0, s) for s in x.shape]
    for a, target in zip(axes, shape, strict=True):
        n = x.shape[a]
        if target < n:
            start = (n - target) // 2
            bounds[a] = (start, start + target)
        elif target > n:
            left = (target - n) // 2
            pads[a] = (left, target - n - left)
    return x.shrink(bounds).pad(pads)


@onnx_op("DepthToSpace")
def depth_to_space(ctx: OpContext) -> Tensor:
    x, b = ctx.t(0), ctx.attr("blocksize")
    n, c, h, w = x.shape
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@onnx_op("SpaceToDepth")
def space_to_depth(ctx: OpContext) -> Tensor:
    x, b = ctx.t(0), ctx.attr("blocksize")
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    y = blocks.permute(0, 1, 3, 5, 2, 4) if ctx.attr("mode", "DCR") == "CRD" else blocks.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@onnx_op("Range")
def range_(ctx: OpContext) -> Tensor:
    start, limit, delta = (ctx.static(i).item() for i in range(3))
    dt = ctx.static(0).dtype
    n = max(0, math.ceil((limit - start) / delta))
    return (Tensor.arange(n, dtype=dtypes.int32).cast(str(dt)) * delta + start).cast(str(dt)) \
        if dt.kind == "f" else Tensor.arange(start, start + n * delta, delta, dtype=str(dt)) if n else \
        Tensor.zeros(0, dtype=str(dt))


@onnx_op("EyeLike")
def eye_like(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    n, m = x.shape
    k = ctx.attr("k", 0)
    dt = onnx_dtype(ctx.attr("dtype")) if ctx.attr("dtype", None) is not None else x.dtype
    rows = Tensor.arange(n).reshape(n, 1)
    cols = Tensor.arange(m).reshape(1, m)
    return (cols - rows == k).cast(dt)


@onnx_op("Trilu")
def trilu(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    k = int(ctx.static(1).item()) if ctx.has(1) else 0
    n, m = x.shape[-2:]
    rows = Tensor.arange(n).reshape(n, 1)
    cols = Tensor.arange(m).reshape(1, m)
    keep = (cols - rows >= k) if ctx.attr("upper", 1) else (cols - rows <= k)
    return keep.where(x, x.zeros_like())


@onnx_op("Dropout")
def dropout(ctx: OpContext) -> tuple[Tensor, ...]:
    x = ctx.t(0)
    mask = Tensor.full(x.shape, True, dtypes.bool)
    return (x, mask) if len(ctx.node.output) > 1 else (x,)


@onnx_op("If")
def if_(ctx: OpContext) -> list[Value]:
    cond = ctx.static(0, "cond")
    branch = ctx.attr("then_branch") if bool(cond.reshape(-1)[0]) else ctx.attr("else_branch")
    return ctx.model.run_graph(branch, dict(ctx.env))


# --- optionals (tensor-typed only) ---------------------------------------------------------------------
@onnx_op("OptionalHasElement")
def optional_has_element(ctx: OpContext) -> np.ndarray:
    return np.asarray(ctx.has(0))


def _optional_payload(ctx: OpContext) -> Value:
    v = ctx.inputs[0] if ctx.inputs else None
    if v is None:
        raise ctx.unsupported(input="an empty optional (only tensor-typed optionals holding a value are supported)")
    return v


@onnx_op("OptionalGetElement")
def optional_get_element(ctx: OpContext) -> Value:
    return _optional_payload(ctx)


@onnx_op("Optional")
def optional(ctx: OpContext) -> Value:
    return _optional_payload(ctx)
