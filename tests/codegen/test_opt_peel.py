"""jit/codegen/opt/peel.py: the masked ends of an elementwise kernel's innermost loop become straight-line copies."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Ops, Tensor, UOp, graph_rewrite
from jit.codegen.opt import OptOptions, optimize_kernel
from jit.codegen.opt.peel import peel_masked_row
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.pipeline import commit_dtypes
from jit.codegen.stats import range_deps
from jit.ir.uop import toposort
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule


def _ast(t: Tensor, device: str = "CPU") -> UOp:
    kernels, _ = create_schedule([t.uop], device)
    assert len(kernels) == 1
    return commit_dtypes(kernels[0].ast)


def _phase_copy(x: np.ndarray, device: str = "CPU") -> Tensor:
    """A stride-2 conv's input prepared as DESIGN's phase copy: padded by 1, columns split into even and odd."""
    c, h, w = x.shape
    padded = Tensor(x, device=device).pad(((0, 0), (1, 1), (1, 1)))  # (c, h + 2, w + 2)
    return padded.reshape(c, h + 2, (w + 2) // 2, 2).permute(0, 1, 3, 2).contiguous()


def _phase_copy_want(x: np.ndarray) -> np.ndarray:
    c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    return padded.reshape(c, h + 2, (w + 2) // 2, 2).transpose(0, 1, 3, 2)


def _peel_ranges(sink: UOp) -> list[UOp]:
    return [u for u in toposort([sink]) if u.op is Ops.RANGE and u.arg[1] == "peel"]


def test_interior_of_a_padded_row_has_no_mask_or_clamp() -> None:
    x = np.arange(3 * 5 * 40, dtype=np.float32).reshape(3, 5, 40)
    ast = _ast(Tensor(x).pad(((0, 0), (1, 1), (2, 3))))
    peeled, interior = peel_masked_row(ast, launch_dims=0)
    assert interior is not None and interior.arg[1] == "peel"
    assert int(interior.src[0].arg) == 40  # columns 2..41 of 45: 2 left and 3 right border columns
    assert len(peeled.src) == 2 + 1 + 3
    simplified = graph_rewrite(peeled, pm_symbolic)
    inner, = _peel_ranges(simplified)
    deps = range_deps(simplified)
    masked = [u for u in toposort([simplified]) if u.op in (Ops.CMPLT, Ops.MAX, Ops.MIN) and inner in deps[u]]
    assert masked == []


def test_interior_is_whole_vectors_and_values_match() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 9, 62), dtype=np.float32)
    y = _phase_copy(x)
    peeled, interior = peel_masked_row(_ast(y), launch_dims=0, multiple=8)
    assert interior is not None and int(interior.src[0].arg) % 8 == 0
    kernel, = compile_uops([y.uop])
    assert "__builtin_memcpy(data0" in kernel.program.source  # the interior stores whole vectors
    np.testing.assert_array_equal(y.numpy(), _phase_copy_want(x))


def test_uint8_normalize_with_pad_matches_numpy() -> None:
    # the vision model's first kernel: uint8 frames, divided and shifted, padded and phase-split
    x = np.arange(4 * 7 * 50, dtype=np.uint8).reshape(4, 7, 50)
    norm = Tensor(x).cast("float32") / Tensor(np.array([255.0], np.float32)) - Tensor(np.array([0.5], np.float32))
    padded = norm.pad(((0, 0), (1, 1), (1, 1))).reshape(4, 9, 26, 2).permute(0, 1, 3, 2).contiguous()
    want = np.pad(x.astype(np.float32) / np.float32(255.0) - np.float32(0.5), ((0, 0), (1, 1), (1, 1)))
    assert _peel_ranges(optimize_kernel(_ast(padded), OptOptions(), 8))
    np.testing.assert_array_equal(padded.numpy(), want.reshape(4, 9, 26, 2).transpose(0, 1, 3, 2))


def test_opencl_peels_only_a_row_that_is_a_loop() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6, 30), dtype=np.float32)
    y = _phase_copy(x, "OPENCL")  # 4 output axes: the innermost is a loop inside each work-item
    ast = _ast(y, "OPENCL")
    assert peel_masked_row(ast, launch_dims=3)[1] is not None
    assert peel_masked_row(ast, launch_dims=4)[1] is None
    np.testing.assert_array_equal(y.numpy(), _phase_copy_want(x))


@pytest.mark.parametrize("case", ["unmasked", "reduce", "too short", "one axis", "off"])
def test_kernels_that_do_not_qualify_stay_whole(case: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 64), dtype=np.float32)
    if case == "unmasked":
        ast = _ast(Tensor(x) * 2.0)
    elif case == "reduce":
        ast = _ast(Tensor(x).pad(((0, 0), (1, 1))).sum(0))
    elif case == "too short":
        ast = _ast(Tensor(x[:, :5]).pad(((0, 0), (1, 1))))  # 7 columns: no interior of 8
    elif case == "one axis":
        ast = _ast(Tensor(x.reshape(-1)).pad(((1, 1),)))  # peeled, the row would be one loop on one thread
    else:
        ast = _ast(Tensor(x).pad(((0, 0), (1, 3))))
        assert not _peel_ranges(optimize_kernel(ast, OptOptions(peel=False, vectorize=False)))
        return
    assert peel_masked_row(ast, launch_dims=0) == (ast, None)


def test_data_comparisons_do_not_block_a_peel() -> None:
    # a ReLU-like select on loaded values depends on the row too, but it is not an index mask
    x = np.random.default_rng(3).standard_normal((5, 40), dtype=np.float32)
    t = Tensor(x)
    y = (t < 0).where(t * 0.1, t).pad(((0, 0), (1, 1)))
    assert peel_masked_row(_ast(y), launch_dims=0)[1] is not None
    want = np.pad(np.where(x < 0, x * np.float32(0.1), x), ((0, 0), (1, 1)))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)


def test_range_bounded_index_arithmetic_is_plain_signed_c() -> None:
    """Mask and clamp arithmetic whose value range fits int32 is spelled as plain signed C (the compiler may then
    treat it as affine), while arithmetic on loaded integers still wraps through the unsigned type."""
    x = np.arange(4 * 6 * 9, dtype=np.float32).reshape(4, 6, 9)
    padded = Tensor(x).pad(((0, 0), (1, 1), (1, 1)))
    kernel, = compile_uops([padded.uop])
    assert "unsigned" not in kernel.program.source
    np.testing.assert_array_equal(padded.numpy(), np.pad(x, ((0, 0), (1, 1), (1, 1))))
    a = np.array([2**31 - 1, -2**31, 7], dtype=np.int32)
    wrapped = (Tensor(a) * 3 + 1).maximum(-5)
    kernel, = compile_uops([wrapped.uop])
    assert "unsigned" in kernel.program.source
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(wrapped.numpy(), np.maximum(a * np.int32(3) + 1, -5))
