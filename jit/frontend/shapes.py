"""Shape, axis, padding and window arguments as the front end's ops take them, normalized to tuples of ints.

Pure functions of ints (no Tensor): Tensor's methods, the nn ops, Winograd and the ONNX handlers share them, and
each error names the op that got the bad argument (``what``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jit.common.errors import AxisError, ShapeError

IntOrTuple = int | Sequence[int]


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in [-ndim, ndim) as a non-negative axis (a scalar has the one axis 0, as in numpy)."""
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise AxisError(f"{what}: expected in [{-max(ndim, 1)}, {max(ndim, 1) - 1}] for rank {ndim}, got {axis}")
    return axis % max(ndim, 1)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of ``shapes``: aligned at the end, each dim 1 or the one size the others have."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded, strict=True):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ShapeError(f"broadcast: shapes {' and '.join(map(str, shapes))} are incompatible "
                             f"(sizes {sorted(sizes)} in one dimension)")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """A shape given as separate ints (``reshape(2, 3)``) or as one sequence (``reshape((2, 3))``)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def axes_arg(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """The sorted distinct axes a reduction runs over: every axis for None."""
    if axis is None:
        return tuple(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = tuple(sorted({normalize_axis(a, ndim) for a in axes}))
    if len(norm) != len(axes):
        raise AxisError(f"axis: expected distinct axes, got {tuple(axes)}")
    return norm


def pad_arg(padding: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    """Tensor.pad's argument as one (before, after) pair per axis: pairs for every axis, or torch's flat form."""
    pads = list(padding)
    if pads and isinstance(pads[0], (tuple, list)):
        if len(pads) != ndim:
            raise ShapeError(f"pad: expected {ndim} (before, after) pairs, got {len(pads)}")
        return tuple((int(b), int(a)) for b, a in pads)
    if len(pads) % 2 or len(pads) // 2 > ndim:
        raise ShapeError(f"pad: flat padding expected pairs for at most {ndim} axes, got {len(pads)} values")
    # flat form is torch's: last axis first
    pairs = [(int(pads[i]), int(pads[i + 1])) for i in range(0, len(pads), 2)]
    return tuple([(0, 0)] * (ndim - len(pairs)) + list(reversed(pairs)))


def int_tuple(v: IntOrTuple, n: int, what: str) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a length-``n`` sequence as a tuple."""
    if isinstance(v, int):
        return (v,) * n
    out = tuple(int(x) for x in v)
    if len(out) != n:
        raise ShapeError(f"{what}: expected an int or {n} values, got {tuple(v)}")
    return out


def spatial_pads(padding: Any, n: int, what: str) -> tuple[tuple[int, int], ...]:
    """Per-dim (begin, end) from an int, ``n`` symmetric values, ``n`` pairs, or flat ONNX pads (begins, ends)."""
    if isinstance(padding, int):
        return ((padding, padding),) * n
    pads = list(padding)
    if pads and isinstance(pads[0], (tuple, list)):
        if len(pads) != n:
            raise ShapeError(f"{what}: expected {n} (begin, end) pairs, got {len(pads)}")
        return tuple((int(b), int(e)) for b, e in pads)
    if len(pads) == n:
        return tuple((int(p), int(p)) for p in pads)
    if len(pads) == 2 * n:
        return tuple((int(pads[i]), int(pads[i + n])) for i in range(n))
    raise ShapeError(f"{what}: expected an int, {n} values or {2 * n} ONNX pads, got {tuple(pads)}")


def pool_geometry(shape: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                  dilation: tuple[int, ...], pads: tuple[tuple[int, int], ...], ceil_mode: bool) -> list[int]:
    """Extra end padding per pooled dim that ceil_mode needs (0 without it)."""
    extra = []
    for n, k, s, d, (b, e) in zip(shape[-len(kernel):], kernel, stride, dilation, pads, strict=True):
        span = n + b + e - d * (k - 1) - 1
        if span < 0:
            raise ShapeError(f"pool: kernel {kernel} (dilation {dilation}) is larger than the padded input "
                             f"{shape[-len(kernel):]} with pads {pads}")
        if not ceil_mode:
            extra.append(0)
            continue
        out = -(-span // s) + 1
        if (out - 1) * s >= n + b:  # the last window would start in the end padding: drop it (PyTorch/ONNX)
            out -= 1
        extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (n + b + e)))
    return extra
