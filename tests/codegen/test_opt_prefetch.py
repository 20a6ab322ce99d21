"""The next-slice prefetch (jit/codegen/opt/prefetch.py): where a reduce re-reads one output iteration's slice of
weights over several passes, the C target asks for the next iteration's slice meanwhile; elsewhere, with the
setting off and on a language without prefetches, the kernel is left as it was. Results are the same bit for bit."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from jit import Context, Tensor, capture
from jit.codegen.opt.prefetch import prefetch_next_slices
from jit.ir.uop import Ops, toposort
from jit.realize import CompiledKernel, clear_compiled_kernels, compile_uops
from targets.cpu import CPU_LANGUAGE
from targets.cstyle.walk import render_kernel_info

RNG = np.random.default_rng(5)
# a transformer's feed-forward product over 25 tokens: 64 KiB column blocks of weights, read once per row chunk
TOKENS, WIDTH, HIDDEN = 25, 256, 2048
X = RNG.standard_normal((TOKENS, WIDTH), dtype=np.float32)
W = RNG.standard_normal((WIDTH, HIDDEN), dtype=np.float32) * 0.05
PREFETCH_LINE = re.compile(r"if \(\((\w+)<(\d+)\)\) __builtin_prefetch\(data\d\+\(.*\), 0, 3\);")


def _ffn(device: str, prefetch: int = 1) -> tuple[CompiledKernel, np.ndarray]:
    clear_compiled_kernels()  # compiled kernels are cached by graph, not by the setting
    with Context(PREFETCH=prefetch):
        out = (Tensor(X, device=device) @ Tensor(W, device=device)).relu()
        kernel = compile_uops([out.uop], device)[-1]
        return kernel, out.numpy()


def test_a_reread_weight_block_asks_for_the_next_one_and_results_stay_the_same() -> None:
    kernel, got = _ffn("CPU")
    lines = PREFETCH_LINE.findall(kernel.program.source)
    assert len(lines) == 1, kernel.program.source
    assert any(u.op is Ops.PREFETCH for u in toposort([kernel.lowered]))
    plain, want = _ffn("CPU", prefetch=0)
    assert "__builtin_prefetch" not in plain.program.source
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, np.maximum(X @ W, 0), rtol=1e-4, atol=1e-4)


def test_the_prefetched_lines_cover_the_next_block_once() -> None:
    kernel, _ = _ffn("CPU")
    (_, lines), = PREFETCH_LINE.findall(kernel.program.source)
    block = WIDTH * HIDDEN // next(int(g) for g in kernel.program.global_size)
    assert int(lines) == block * 4 // 64  # every line of one column block of weights, 64-byte lines


def test_small_products_and_elementwise_kernels_are_left_alone() -> None:
    clear_compiled_kernels()
    a, b = RNG.standard_normal((8, 16), dtype=np.float32), RNG.standard_normal((16, 32), dtype=np.float32)
    for out in ((Tensor(a) @ Tensor(b)), (Tensor(a).exp() + 1)):
        kernel = compile_uops([out.uop], "CPU")[-1]
        assert "__builtin_prefetch" not in kernel.program.source
        assert prefetch_next_slices(kernel.lowered, 48 << 10, 64) is kernel.lowered


def test_a_language_without_prefetches_renders_the_loads_alone() -> None:
    kernel, _ = _ffn("CPU")
    assert any(u.op is Ops.PREFETCH for u in toposort([kernel.lowered]))
    plain = render_kernel_info(replace(CPU_LANGUAGE, prefetch=""), kernel.program.name, kernel.lowered).source
    assert "prefetch" not in plain
    assert plain.count("__builtin_memcpy") == kernel.program.source.count("__builtin_memcpy")  # every load kept


def test_a_captured_replay_with_prefetches_passes_the_package_checks() -> None:
    w = Tensor(W)
    run = capture(lambda x: {"y": (x @ w).relu()}, {"x": X}, target="CPU")  # the command buffer's checks ran
    assert any("__builtin_prefetch" in k.source for k in run.cmdbuf.kernels)
    np.testing.assert_allclose(run({"x": X})["y"], np.maximum(X @ W, 0), rtol=1e-4, atol=1e-4)
