"""The kernel optimizer (jit/codegen/opt) and CPU threads: tiling plans, tiled results, NOOPT, stats, OpenMP, fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jit import Context, Device, Tensor
from jit.codegen.opt import plan_tiles
from jit.codegen.pipeline import commit_dtypes, rewrite_kernel
from jit.common.errors import CompileError
from jit.realize import compile_uops, device_buffer
from jit.schedule.kernels import create_schedule
from targets.cpu import CPUTarget
from tests.helpers import float_accumulators

ROOT = Path(__file__).resolve().parents[2]


def _ast(out: Tensor):
    kernels, _ = create_schedule([out.uop], "CPU")
    return kernels[-1].ast


def _conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, co, oh, ow), np.float64)
    for dy in range(kh):
        for dx in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + oh, dx:dx + ow], w[:, :, dy, dx])
    return (out + b[None, :, None, None]).astype(np.float32)


def test_matmul_plan_tiles_the_contiguous_axis_and_the_row_axis() -> None:
    a = Tensor(np.ones((64, 48), np.float32))
    b = Tensor(np.ones((48, 80), np.float32))
    plan = plan_tiles(commit_dtypes(_ast(a.matmul(b))))
    assert plan is not None
    factors = [(int(r.src[0].arg), f) for r, f in plan.upcasts]
    assert factors == [(80, 16), (64, 4)]  # inner (n) first, then the row (m) that shares B's row


def test_elementwise_and_tiny_reduce_kernels_are_not_tiled() -> None:
    x = Tensor(np.ones((32, 32), np.float32))
    assert plan_tiles(commit_dtypes(_ast(x + 1))) is None
    assert plan_tiles(commit_dtypes(_ast(Tensor(np.ones((32, 2), np.float32)).sum(axis=1)))) is None


@pytest.mark.parametrize(("lanes", "accumulators"), [("eight_lane_channels", 64), ("wide_vectors", 128)])
def test_tiled_matmul_shares_one_reduce_loop_and_matches_numpy(lanes: str, accumulators: int,
                                                               request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(lanes)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 48), dtype=np.float32), rng.standard_normal((48, 80), dtype=np.float32)
    out = Tensor(a).matmul(Tensor(b)).relu()
    src = compile_uops([out.uop])[-1].program.source
    # a 4 x 16 tile; where 16-lane vectors pay, the same registers hold 8 x 16 (WIDE_VECTOR_OPTS)
    assert float_accumulators(src) == accumulators
    assert src.count("for (int ridx2") == 1  # all the accumulators in one pass over k
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


def test_noopt_turns_tiling_off() -> None:
    a = Tensor(np.ones((64, 64), np.float32))
    with Context(NOOPT=1):
        src = compile_uops([a.matmul(a + 1).uop])[-1].program.source
    assert float_accumulators(src) == 1


@pytest.mark.parametrize("shape", [(1, 8, 16, 32), (1, 5, 9, 12), (2, 3, 7, 7)])
def test_tiled_conv_with_padding_bias_and_relu_matches_reference(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((16, shape[1], 3, 3), dtype=np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    got = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(_conv_reference(x, w, b, 1), 0), rtol=1e-4, atol=1e-4)


def test_tiling_keeps_counted_flops_and_bytes_of_outputs() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((32, 16), dtype=np.float32), rng.standard_normal((16, 64), dtype=np.float32)
    tiled = compile_uops([Tensor(a).matmul(Tensor(b)).uop])[-1].stats
    with Context(NOOPT=1):
        plain = compile_uops([Tensor(a).matmul(Tensor(b)).uop])[-1].stats
    assert tiled.flops == plain.flops == 2 * 32 * 16 * 64  # one mul and one add per term, counted from the graph
    assert tiled.bytes < plain.bytes  # a tile reads each shared operand once: fewer loads, as executed


def test_parallel_range_only_for_kernels_with_enough_work() -> None:
    big = Tensor(np.ones((256, 256), np.float32))
    small = Tensor(np.ones((8, 8), np.float32))
    assert "int dp_lo, int dp_hi" in compile_uops([big.matmul(big + 1).uop])[-1].program.source
    assert "dp_lo" not in compile_uops([(small + 1).uop])[-1].program.source


def test_thread_counts_give_the_same_result() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 96), dtype=np.float32)
    out = Tensor(a).matmul(Tensor(a.T.copy())) + 1
    kernels, becomes = create_schedule([out.uop], "CPU")
    sinks = [rewrite_kernel(k.ast, Device["CPU"]).sink for k in kernels]
    results = []
    for threads in (1, 2, 3):
        target = CPUTarget(threads=threads)
        for i, (k, sink) in enumerate(zip(kernels, sinks, strict=True)):
            source, meta = target.render(f"k{i}", sink)
            target.launch(target.compile(f"k{i}", source, meta), [device_buffer(b) for b in k.buffers])
        results.append(target.host_view(device_buffer(kernels[-1].out_buffer)).copy())
    assert "int dp_lo, int dp_hi" in source
    assert all(np.array_equal(results[0], r) for r in results[1:])
    np.testing.assert_allclose(results[0].view(np.float32).reshape(256, 256), a @ a.T + 1, rtol=1e-4, atol=1e-4)
    del becomes


def test_bad_thread_settings_are_typed_errors() -> None:
    with pytest.raises(CompileError, match="threads: expected a positive integer, got 0"):
        CPUTarget(threads=0)
    proc = subprocess.run([sys.executable, "-c", "from targets.cpu import CPUTarget; CPUTarget()"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "DRIVEPACK_CPU_THREADS": "two"})
    assert proc.returncode != 0 and "DRIVEPACK_CPU_THREADS: expected a positive integer, got 'two'" in proc.stderr


def test_forked_child_runs_parallel_kernels_after_the_parent_did() -> None:
    # libgomp's thread pool does not survive fork: without the target's fork hook the child hangs
    code = textwrap.dedent("""
        import os, numpy as np
        from jit.frontend.tensor import Tensor
        a = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 65536
        ref = a @ (a + 1)
        np.testing.assert_allclose(Tensor(a).matmul(Tensor(a)).numpy(), a @ a, rtol=1e-4)
        pid = os.fork()
        if pid == 0:
            ok = np.allclose(Tensor(a).matmul(Tensor(a) + 1).numpy(), ref, rtol=1e-4)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        raise SystemExit(os.waitstatus_to_exitcode(status))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DRIVEPACK_CPU_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr


def test_default_target_uses_available_cores() -> None:
    assert Device["CPU"].threads == len(os.sched_getaffinity(0)) or "DRIVEPACK_CPU_THREADS" in os.environ
