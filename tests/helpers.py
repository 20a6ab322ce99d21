"""Helpers shared by the test modules: numpy-oracle comparisons, random inputs, one-node ONNX models."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from jit import Tensor

DEFAULT_TOL = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-6, 1e-6),
               np.dtype(np.float64): (1e-12, 1e-12)}


def check_tensor(t: Tensor, expected: Any, dtype: Any = None, rtol: float | None = None, atol: float | None = None,
                 tol: dict[np.dtype, tuple[float, float]] | None = None) -> None:
    """Realize ``t`` and compare it to ``expected`` (shape, dtype of the result, values; NaN equals NaN)."""
    got = t.numpy()
    exp = np.asarray(expected)
    assert got.shape == exp.shape == t.shape, f"shape {got.shape} (tensor {t.shape}) != {exp.shape}"
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), f"dtype {got.dtype} != {np.dtype(dtype)}"
    if got.dtype.kind in "biu" and exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp)
    else:
        r, a = (tol or DEFAULT_TOL).get(got.dtype, (1e-6, 1e-6))
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), rtol=rtol or r,
                                   atol=atol if atol is not None else a, equal_nan=True)


def rand_array(shape: tuple[int, ...], dtype: Any, lo: float = -3, hi: float = 3, seed: int = 0) -> np.ndarray:
    """Uniform random values of ``dtype`` in [lo, hi] (clipped to the dtype's range for integers)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in "iu":
        return rng.integers(max(int(lo), int(np.iinfo(dt).min)), min(int(hi), int(np.iinfo(dt).max)) + 1,
                            size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def single_op_model(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 21,
                    consts: dict[str, np.ndarray] | None = None, **attrs: object) -> onnx.ModelProto:
    """A model of one ``op`` node: ``inputs`` as graph inputs, ``consts`` as initializers, outputs y0..yN."""
    consts = consts or {}
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, list(inputs) + list(consts), outs, **attrs)
    vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for k, v in inputs.items()]
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                                                for o in outs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def float_accumulators(source: str) -> int:
    """Float accumulators a C kernel declares, a vector of n lanes counting n (register-tile size)."""
    scalars = sum(1 for ln in source.splitlines() if ln.strip().startswith("float acc"))
    vectors = re.findall(r"^\s*dp_float32x(\d+) acc", source, re.MULTILINE)
    return scalars + sum(int(n) for n in vectors)


def mapping_flags(address: int) -> set[str]:
    """The VmFlags (Linux /proc/self/smaps) of the mapping holding ``address``: ``hg`` where it was advised
    MADV_HUGEPAGE."""
    lines = open("/proc/self/smaps").read().splitlines()
    inside = False
    for line in lines:
        head = line.split(" ", 1)[0]
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds address {address:#x}")
