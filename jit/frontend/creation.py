"""Tensor's creation functions: constants, ranges, identity matrices and device-computed random numbers.

Each builds a small graph (a broadcast CONST, an IOTA and its arithmetic), so nothing is uploaded and the values
fuse into whatever reads them. jit/frontend/__init__.py attaches ``TENSOR_METHODS`` (``Tensor.zeros``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jit.common.dtype import DType, commit_weak, dtypes, to_dtype
from jit.common.errors import ShapeError
from jit.frontend.shapes import shape_arg
from jit.frontend.tensor import Scalar, Tensor
from jit.ir.uop import Ops, UOp


@dataclass
class _RngState:
    """manual_seed's seed and the draws since: each rand call hashes a fresh counter."""
    seed: int = 0
    counter: int = 0


_RNG = _RngState()


def full(shape: Sequence[int], value: Scalar, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    d = to_dtype(dtype) if dtype is not None else commit_weak(dtypes.from_py(value))
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ShapeError(f"full: shape expected non-negative sizes, got {shape}")
    const = UOp.const(d, value)
    return Tensor(const, **kw)._broadcast_to_shape(shape)


def zeros(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    return full(shape_arg(shape), 0, dtype or dtypes.default_float, **kw)


def ones(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    return full(shape_arg(shape), 1, dtype or dtypes.default_float, **kw)


def full_like(self: Tensor, value: Scalar, dtype: DType | str | None = None) -> Tensor:
    return full(self.shape, value, dtype or self.dtype, device=self.device)


def zeros_like(self: Tensor, dtype: DType | str | None = None) -> Tensor:
    return full_like(self, 0, dtype)


def ones_like(self: Tensor, dtype: DType | str | None = None) -> Tensor:
    return full_like(self, 1, dtype)


def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
           **kw: Any) -> Tensor:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step expected non-zero, got 0")
    n = max(0, math.ceil((stop - start) / step))
    is_float = any(isinstance(v, float) for v in (start, stop, step))
    d = to_dtype(dtype) if dtype is not None else (dtypes.default_float if is_float else dtypes.default_int)
    values = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), **kw).cast(d)
    # a step of 1 and a start of 0 change no value (no -0.0 arises from a positive step), so the kernel skips them
    if step != 1:
        values = values * step
    if start != 0 or step < 0:
        values = values + start
    return values.cast(d)


def manual_seed(seed: int = 0) -> None:
    _RNG.seed, _RNG.counter = seed, 0


def rand(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    """Uniform [0, 1) from a counter-based hash computed on the device (seeded by manual_seed)."""
    shape = shape_arg(shape)
    n = math.prod(shape)
    counter = _RNG.counter
    _RNG.counter += 1
    idx = Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), **kw).cast(dtypes.uint32)
    seed_mix = _RNG.seed * 0x85EBCA6B & 0xFFFFFFFF
    bits = _hash_u32(_hash_u32(idx + (counter * 0x9E3779B9 & 0xFFFFFFFF)) ^ seed_mix)
    # 24 random bits -> float32 in [0, 1) exactly representable
    out = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
    return out.reshape(shape).cast(dtype or dtypes.default_float)


def randn(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    """Standard normal by Box-Muller over two rand draws."""
    shape = shape_arg(shape)
    u1, u2 = rand(*shape, **kw), rand(*shape, **kw)
    return ((1 - u1).log() * -2).sqrt().mul((u2 * (2 * math.pi)).cos()).cast(dtype or dtypes.default_float)


def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kw: Any) -> Tensor:
    return rand(*shape, **kw) * (high - low) + low


def eye(n: int, m: int | None = None, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    m = n if m is None else m
    return (arange(n, **kw).reshape(n, 1) == arange(m, **kw).reshape(1, m)).cast(dtype or dtypes.default_float)


def _hash_u32(x: Tensor) -> Tensor:
    """A 32-bit integer mix (lowbias32): deterministic, device-computed randomness."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


TENSOR_METHODS: dict[str, Any] = {
    "full": staticmethod(full), "zeros": staticmethod(zeros), "ones": staticmethod(ones),
    "full_like": full_like, "zeros_like": zeros_like, "ones_like": ones_like,
    "arange": staticmethod(arange), "eye": staticmethod(eye), "manual_seed": staticmethod(manual_seed),
    "rand": staticmethod(rand), "randn": staticmethod(randn), "uniform": staticmethod(uniform),
}
