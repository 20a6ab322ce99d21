"""Tensor indexing (``t[key]``): ints, slices of any step, None, Ellipsis, and one integer-tensor index.

A basic index is a view (a shrink, then flip and stride for negative and larger steps, then a reshape that drops
int-indexed axes and inserts None ones); an integer tensor, list or array index gathers along its axis (take).
jit/frontend/__init__.py attaches ``TENSOR_METHODS`` (``__getitem__``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jit.common.errors import AxisError, DTypeError
from jit.frontend.tensor import Tensor


def _index_key(k: Any, device: str) -> Any:
    """A list or numpy array index becomes an integer Tensor; boolean masks (data-dependent shape) are refused."""
    if isinstance(k, (list, np.ndarray)):
        arr = np.asarray(k)
        if arr.dtype.kind not in "iub" and arr.size:
            raise DTypeError(f"index: array index dtype expected an integer type, got numpy {arr.dtype}")
        k = Tensor(arr.astype(np.int32) if arr.dtype.kind != "b" else arr, device=device)
    if isinstance(k, Tensor) and not k.dtype.is_int:
        raise DTypeError(f"index: tensor index dtype expected an integer type, got {k.dtype.name}"
                         + (" (boolean masks have a data-dependent shape; use where)" if k.dtype.is_bool else ""))
    return k


def getitem(t: Tensor, key: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None, Ellipsis; and integer Tensors (gather) on one axis."""
    keys = [_index_key(k, t.device) for k in (key if isinstance(key, tuple) else (key,))]
    n_real = sum(1 for k in keys if k is not None and k is not Ellipsis)
    if n_real > t.ndim:
        raise AxisError(f"index: too many indices for a tensor of rank {t.ndim}: {n_real}")
    ellipses = [i for i, k in enumerate(keys) if k is Ellipsis]  # identity: `in` would call Tensor.__eq__
    if len(ellipses) > 1:
        raise IndexError("index: an index can only have a single ellipsis ('...')")
    if ellipses:
        i = ellipses[0]
        keys = keys[:i] + [slice(None)] * (t.ndim - n_real) + keys[i + 1:]
    keys += [slice(None)] * (t.ndim - sum(1 for k in keys if k is not None))
    out = t
    out_shape: list[int] = []
    axis = 0
    bounds, steps, flips, drop = [], [], [], []
    tensor_keys: list[tuple[int, Tensor]] = []
    for k in keys:
        if k is None:
            out_shape.append(-1)  # placeholder for an inserted axis
            continue
        n = t.shape[axis]
        if isinstance(k, Tensor):
            tensor_keys.append((axis, k))
            bounds.append((0, n))
            steps.append(1)
            out_shape.append(-2)
        elif isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise AxisError(f"index: {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            bounds.append((i, i + 1))
            steps.append(1)
            drop.append(axis)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step > 0:
                count = max(0, math.ceil((stop - start) / step))
                bounds.append((start, start + max(count - 1, 0) * step + 1) if count else (0, 0))
                steps.append(step)
            else:
                count = max(0, math.ceil((start - stop) / -step))
                lo = start - (count - 1) * -step if count else 0
                bounds.append((lo, start + 1) if count else (0, 0))
                steps.append(-step)
                flips.append(axis)
            out_shape.append(count)
        else:
            raise TypeError(f"index: expected int, slice, None, Ellipsis or Tensor, got {type(k).__name__}")
        axis += 1
    out = out.shrink(tuple(bounds))
    if flips:
        out = out.flip(*flips)
    out = out.stride(steps)
    for ax, idx in tensor_keys:
        out = out.take(idx, ax) if len(tensor_keys) == 1 else out
    if len(tensor_keys) > 1:
        raise TypeError("index: at most one integer-tensor index is supported")
    final = [s for s in out.shape]
    result_shape: list[int] = []
    j = 0
    src_axes = [a for a in range(t.ndim)]
    for k in keys:
        if k is None:
            result_shape.append(1)
            continue
        a = src_axes.pop(0)
        if a in drop:
            j += 1
            continue
        if isinstance(k, Tensor):
            result_shape.extend(k.shape)
            j += k.ndim
            continue
        result_shape.append(final[j])
        j += 1
    return out.reshape(tuple(result_shape))


TENSOR_METHODS: dict[str, Any] = {"__getitem__": getitem}
