"""Tensor-level composites behind the ONNX nn handlers: einsum, separable resize, attention.

Host (numpy) work here is shape arithmetic only: index and weight tables that depend on shapes and
constant attributes. Every data value is computed through Tensor ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from jit.common.dtype import DType, dtypes, to_numpy
from jit.common.errors import ShapeError
from jit.frontend.tensor import Tensor


# --- small pieces ------------------------------------------------------------------------------------
def compute_dtype(d: DType) -> DType:
    """The float dtype arithmetic on ``d`` runs in: float32 for narrow floats and integers, else ``d``."""
    return d if d.is_float and d.itemsize >= 4 else dtypes.float32


def host_const(arr: np.ndarray, like: Tensor, dtype: DType | None = None) -> Tensor:
    """Host data (index or weight tables) as a Tensor on ``like``'s device, in ``dtype`` when given."""
    a = np.ascontiguousarray(arr if dtype is None else arr.astype(to_numpy(dtype)))
    return Tensor(a, device=like.device)


def saturate_to(x: Tensor, d: DType) -> Tensor:
    """Cast a float result back to ``d``; integers round half to even and clamp to the range (onnx)."""
    if d.is_int:
        return x.round().clip(float(d.min), float(d.max)).cast(d)
    return x.cast(d)


def first_argmax_onehot(x: Tensor, axis: int) -> Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere (ONNX Hardmax), in ``x``'s dtype."""
    ax = axis % x.ndim
    n = x.shape[ax]
    idx = x.argmax(ax, keepdim=True)
    rng = Tensor.arange(n, device=x.device).reshape(*[n if i == ax else 1 for i in range(x.ndim)])
    return (idx.cast(dtypes.int32) == rng).cast(x.dtype)


# --- einsum ------------------------------------------------------------------------------------------
def _parse_operand(spec: str, ndim: int, what: str) -> tuple[list[str], int]:
    """Labels of one einsum term and the number of dims its ellipsis covers."""
    if "..." in spec:
        head, tail = spec.split("...", 1)
        if "..." in tail:
            raise ShapeError(f"einsum: {what} {spec!r} has more than one ellipsis")
        n_ell = ndim - len(head) - len(tail)
        if n_ell < 0:
            raise ShapeError(f"einsum: {what} {spec!r} has more labels than the operand's rank {ndim}")
        return [*head, *[f"...{i}" for i in range(n_ell)], *tail], n_ell
    if len(spec) != ndim:
        raise ShapeError(f"einsum: {what} {spec!r} expected {ndim} labels (operand rank), got {len(spec)}")
    return list(spec), 0


def _rename_ellipsis(labels: list[str], n_ell: int, total: int) -> list[str]:
    """Right-align an operand's ellipsis dims with the widest ellipsis (broadcasting)."""
    return [f"...{int(lb[3:]) + total - n_ell}" if lb.startswith("...") else lb for lb in labels]


def diagonal(t: Tensor, a: int, b: int) -> Tensor:
    """The diagonal over axes ``a`` and ``b`` (equal sizes), moved to the last axis."""
    n = t.shape[a]
    if t.shape[b] != n:
        raise ShapeError(f"einsum: repeated label covers axes of sizes {t.shape[a]} and {t.shape[b]}")
    rest = [i for i in range(t.ndim) if i not in (a, b)]
    flat = t.permute(*rest, a, b).reshape(*[t.shape[i] for i in rest], n * n)
    return flat[..., ::n + 1]


def einsum(equation: str, operands: Sequence[Tensor]) -> Tensor:
    """numpy-style einsum: implicit/explicit output, ellipsis broadcasting, repeated labels (diagonals).

    Each operand is reduced to distinct labels, aligned on a common label order, broadcast-multiplied and
    summed over the labels missing from the output: one multiply-reduce kernel.
    """
    eq = equation.replace(" ", "")
    lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
    specs = lhs.split(",")
    if len(specs) != len(operands):
        raise ShapeError(f"einsum: equation {equation!r} names {len(specs)} operands, got {len(operands)}")
    parsed = [_parse_operand(s, t.ndim, f"operand {i}") for i, (s, t) in enumerate(zip(specs, operands, strict=True))]
    total_ell = max((n for _, n in parsed), default=0)
    labelled: list[tuple[Tensor, list[str]]] = []
    for (labels, n_ell), t in zip(parsed, operands, strict=True):
        labels = _rename_ellipsis(labels, n_ell, total_ell)
        while len(set(labels)) != len(labels):  # a repeated label: keep its diagonal
            lb = next(lb for lb in labels if labels.count(lb) > 1)
            a = labels.index(lb)
            b = labels.index(lb, a + 1)
            t = diagonal(t, a, b)
            labels = [x for i, x in enumerate(labels) if i not in (a, b)] + [lb]
        labelled.append((t, labels))
    ell = [f"...{i}" for i in range(total_ell)]
    if rhs is None:
        counts: dict[str, int] = {}
        for s in specs:
            for c in s.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell + sorted(c for c, k in counts.items() if k == 1)
    else:
        n_out = len(rhs) - 3 + total_ell if "..." in rhs else len(rhs)
        out_labels, _ = _parse_operand(rhs, n_out, "output")
    every: list[str] = list(out_labels)
    for _, labels in labelled:
        every += [lb for lb in labels if lb not in every]
    sizes: dict[str, int] = {}
    for t, labels in labelled:
        for lb, s in zip(labels, t.shape, strict=True):
            if s != 1 and sizes.get(lb, 1) not in (1, s):
                raise ShapeError(f"einsum: label {lb!r} has sizes {sizes[lb]} and {s}")
            sizes[lb] = max(sizes.get(lb, 1), s)
    out_dtype = operands[0].dtype
    acc = compute_dtype(out_dtype) if out_dtype.is_float else None
    prod: Tensor | None = None
    for t, labels in labelled:
        perm = sorted(range(len(labels)), key=lambda i: every.index(labels[i]))
        aligned = t.permute(perm) if perm else t
        ordered = [labels[i] for i in perm]
        shape = [aligned.shape[ordered.index(lb)] if lb in labels else 1 for lb in every]
        aligned = aligned.reshape(shape) if shape else aligned.reshape(())
        if acc is not None:
            aligned = aligned.cast(acc)
        prod = aligned if prod is None else prod * aligned
    assert prod is not None
    red = tuple(range(len(out_labels), len(every)))
    out = prod.sum(red) if red else prod
    if tuple(out.shape) != tuple(sizes.get(lb, 1) for lb in out_labels):
        out = out.expand(*[sizes.get(lb, 1) for lb in out_labels])
    return out.cast(out_dtype)


# --- resize ------------------------------------------------------------------------------------------
CoeffFn = Callable[[float, float], np.ndarray]


def nearest_coeffs(mode: str) -> CoeffFn:
    """Two-tap selector for the (left, right) neighbours of a coordinate (onnx reference semantics)."""
    def fn(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        if mode == "ceil":
            return np.array([0.0, 1.0])
        raise ValueError(f"nearest_mode {mode!r}")
    return fn


def linear_coeffs(antialias: bool) -> CoeffFn:
    def fn(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return fn


def source_coords(mode: str, out_len: int, in_len: int, scale: float,
                  roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of each output index, and (tf_crop_and_resize) which ones extrapolate."""
    y = np.arange(out_len, dtype=np.float64)
    out_w = scale * in_len
    extrap = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_w == 1 else y * (in_len - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        r0, r1 = roi if roi is not None else (0.0, 1.0)
        x = np.full(out_len, (r1 - r0) * (in_len - 1) / 2) if out_w == 1 else y * (r1 - r0) * (in_len - 1) / (out_w - 1)
        x = x + r0 * (in_len - 1)
        extrap = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    else:
        raise ValueError(f"coordinate_transformation_mode {mode!r}")
    return x, extrap


def resize_taps(coords: np.ndarray, in_len: int, scale: float, coeff_fn: CoeffFn,
                exclude_outside: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (out, taps): the neighbours of each coordinate and their weights."""
    floor = np.floor(coords)
    ratios = np.where(coords == floor, 1.0, coords - floor)
    coeffs = np.stack([np.asarray(coeff_fn(float(r), scale), dtype=np.float64) for r in ratios]) \
        if len(ratios) else np.zeros((0, 2))
    n = coeffs.shape[1]
    pad = math.ceil(n / 2)
    xp = coords + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        off = np.where(frac <= 0.5, base, base + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
        s = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(s == 0, 1.0, s)
    return _merge_repeated_taps(np.clip(idx, 0, in_len - 1), coeffs)


def _merge_repeated_taps(idx: np.ndarray, coeffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Taps that read the same (edge-clamped) element summed into the first of them here, in float64: at an edge,
    weights 1/6 and 5/6 of one element, each rounded to float32 and added on the device, gave -15.499999 for the
    edge value -15.5, which an int8 output then rounded to -15 instead of -16 (half to even)."""
    idx, coeffs = idx.copy(), coeffs.copy()
    for k in range(1, idx.shape[1]):
        for j in range(k):
            same = (idx[:, k] == idx[:, j]) & (coeffs[:, k] != 0)
            coeffs[same, j] += coeffs[same, k]
            coeffs[same, k] = 0.0
    return idx, coeffs


def resize_axis(x: Tensor, axis: int, idx: np.ndarray, coeffs: np.ndarray, extrap: np.ndarray | None,
                extrapolation_value: float, selector: bool) -> Tensor:
    """Resample ``x`` along ``axis``: a gather per tap and a weighted sum (one gather when ``selector``)."""
    out_len, n = idx.shape
    post = (1,) * (x.ndim - axis - 1)
    if selector:  # nearest: one neighbour per output, weight 1
        pick = idx[np.arange(out_len), np.argmax(coeffs, axis=1)] if out_len else idx[:, 0]
        y = x.take(host_const(pick, x, dtypes.int32), axis)
    else:
        d = x.dtype
        if n <= 4:
            y = None
            for j in range(n):
                w = host_const(coeffs[:, j].reshape(out_len, *post), x, d)
                term = x.take(host_const(idx[:, j], x, dtypes.int32), axis) * w
                y = term if y is None else y + term
            assert y is not None
        else:
            g = x.take(host_const(idx, x, dtypes.int32), axis)
            w = host_const(coeffs.reshape(out_len, n, *post), x, d)
            y = (g * w).sum(axis + 1)
    if extrap is not None and extrap.any():
        mask = host_const(extrap.reshape(out_len, *post), x)
        y = mask.where(extrapolation_value, y).cast(y.dtype)
    return y


# --- attention ---------------------------------------------------------------------------------------
def neg_inf_bias(allowed: Tensor, d: DType) -> Tensor:
    """0 where ``allowed``, -inf elsewhere, in dtype ``d``."""
    return allowed.where(Tensor(0.0, dtype=d, device=allowed.device), Tensor(-math.inf, dtype=d, device=allowed.device))


def offset_mask(q_len: int, kv_len: int, offset: int | Tensor, like: Tensor, left: int = -1, right: int = -1,
                causal: bool = False) -> Tensor:
    """Bool (q, kv) (or (B, 1, q, kv) for a per-batch offset) of the keys a query may attend.

    ``diff = i + offset - j``; causal keeps ``diff >= 0``, a window keeps ``diff <= left`` and
    ``-diff <= right`` for each non-negative bound.
    """
    if isinstance(offset, int):
        diff_np = np.arange(q_len)[:, None] + offset - np.arange(kv_len)[None, :]
        ok = np.ones((q_len, kv_len), dtype=bool)
        if causal:
            ok &= diff_np >= 0
        if left >= 0:
            ok &= diff_np <= left
        if right >= 0:
            ok &= -diff_np <= right
        return host_const(ok, like)
    i = Tensor.arange(q_len, device=like.device).reshape(1, 1, q_len, 1)
    j = Tensor.arange(kv_len, device=like.device).reshape(1, 1, 1, kv_len)
    diff = i + offset.cast(dtypes.int32).reshape(-1, 1, 1, 1) - j
    ok_t = Tensor.full((1, 1, q_len, kv_len), True, dtypes.bool, device=like.device)
    if causal:
        ok_t = ok_t & (diff >= 0)
    if left >= 0:
        ok_t = ok_t & (diff <= left)
    if right >= 0:
        ok_t = ok_t & ((-diff) <= right)
    return ok_t


def masked_softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis; an all -inf row gives zeros instead of nan (onnx Attention)."""
    m = x.max(-1, keepdim=True)
    safe = m.isinf().logical_and(m < 0).where(0.0, m).cast(x.dtype)
    e = (x - safe).exp()
    s = e.sum(-1, keepdim=True)
    s = (s == 0).where(1.0, s).cast(s.dtype)
    return e / s
