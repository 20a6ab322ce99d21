"""Chains of small kernels run as one (jit/schedule/chains.py): which kernels join, the chain's buffers and wiring,
its rendering, and OPENCL captures that use them against the same captures without."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jit import Tensor
from jit.codegen.stats import kernel_stats
from jit.common.errors import CompileError
from jit.schedule.chains import ChainInfo, chain_kernels
from jit.schedule.kernels import ScheduledKernel, create_schedule
from jit.trace import capture
from targets.base import ChainLimits
from targets.cmdbuf import CommandBuffer
from targets.cstyle.chains import render_chain
from targets.cstyle.language import CStyleLanguage
from targets.registry import Device
from tests.capture.test_capture import shift_history

SMALL = ChainLimits(kernel_flops=4096, kernel_bytes=1 << 16, chain_flops=1 << 20)


def steps(x: Tensor, w: Tensor) -> list[Tensor]:
    """Two small elementwise kernels, a 64x64 matmul (more than ``SMALL`` lets join), three small kernels."""
    a = (x * 2).contiguous()
    b = (a.exp() + x).contiguous()
    big = (b.reshape(64, 1) * w).sum(0).reshape(64).contiguous()
    c = (big - 1).contiguous()
    d = (c * c).contiguous()
    return [(d + a).contiguous()]


def schedule() -> list[ScheduledKernel]:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal(64).astype(np.float32), device="CPU")
    w = Tensor(rng.standard_normal((64, 64)).astype(np.float32), device="CPU")
    return create_schedule([t.uop for t in steps(x, w)], "CPU")[0]


def test_consecutive_small_kernels_become_one_chain_and_large_ones_stay() -> None:
    kernels = schedule()
    assert len(kernels) == 6
    out = chain_kernels(kernels, SMALL)
    assert [len(k.members) for k in out] == [2, 0, 3]
    first, big, last = out
    assert big is kernels[2] and first.members == tuple(kernels[:2]) and last.members == tuple(kernels[3:])
    # the members' outputs first (what the chain writes), then what they only read, each once
    assert last.writes == 3 and last.written == [k.out_buffer for k in kernels[3:]]
    assert last.buffers[3:] == [kernels[2].out_buffer, kernels[0].out_buffer]
    info = last.ast.arg
    assert isinstance(info, ChainInfo) and last.ast.src == tuple(k.ast for k in kernels[3:])
    for member, wires in zip(last.members, info.wiring, strict=True):
        assert [last.buffers[i] for i in wires] == member.buffers
    assert last.name == f"c3_{kernels[3].name}" and last.out_buffer is kernels[3].out_buffer


def test_a_chain_stops_at_its_flops_and_kept_apart_kernels_stay_alone() -> None:
    kernels = schedule()
    flops = [kernel_stats(k.ast).flops for k in kernels]
    assert flops[0] + flops[1] > flops[3] + flops[4] < flops[3] + flops[4] + flops[5]
    tight = ChainLimits(SMALL.kernel_flops, SMALL.kernel_bytes, chain_flops=flops[3] + flops[4])
    assert [len(k.members) for k in chain_kernels(kernels, tight)] == [0, 0, 0, 2, 0]
    apart = chain_kernels(kernels, SMALL, keep_apart={kernels[4].out_buffer})
    assert [len(k.members) for k in apart] == [2, 0, 0, 0, 0]  # the run 3..5 cut at 4 leaves runs of one
    assert chain_kernels(kernels, None) is kernels


def test_render_chain_wires_each_block_to_the_chains_parameters() -> None:
    from jit.codegen.pipeline import rewrite_kernel

    target = Device["OPENCL"]
    last = chain_kernels(schedule(), SMALL)[-1]
    sinks = [rewrite_kernel(m.ast, target).sink for m in last.members]
    source, meta = target.render_chain("chained", list(zip(sinks, last.ast.arg.wiring, strict=True)),
                                       last.ast.arg.params)
    assert meta["global_size"] == meta["local_size"] == (1,)
    assert source.count("\n  {\n") == 3 and "get_global_id" not in source
    assert source.count("__kernel void chained(") == 1
    body = source.split("\n  {\n")
    for block, wires in zip(body[1:], last.ast.arg.wiring, strict=True):
        named = {int(n) for n in re.findall(r"\bdata(\d+)\b", block)}
        assert named <= set(wires) and wires[0] in named  # each block stores through its own output
    with pytest.raises(CompileError, match="launch no range"):
        render_chain(CStyleLanguage(global_dims=3), "c", [(sinks[0], last.ast.arg.wiring[0])],
                     last.ast.arg.params)
    with pytest.raises(CompileError, match="a chain parameter per buffer parameter"):
        target.render_chain("c", [(sinks[0], (0,))], last.ast.arg.params)


def squeeze_excite(x: Tensor) -> dict[str, Tensor]:
    """A squeeze-and-excitation block's small kernels (pool, two small matmuls, the scale) around a 3x3 conv."""
    rng = np.random.default_rng(1)
    w1 = Tensor(rng.standard_normal((8, 32)).astype(np.float32), device=x.device)
    w2 = Tensor(rng.standard_normal((32, 8)).astype(np.float32), device=x.device)
    k = Tensor(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1, device=x.device)
    y = x.conv2d(k, padding=1).relu()
    s = y.mean(axis=(2, 3)).reshape(1, 32)
    s = ((s @ w1.T).relu() @ w2.T).sigmoid().reshape(1, 32, 1, 1)
    return {"y": (y * s).conv2d(k, padding=1)}


@pytest.mark.opencl
def test_an_opencl_capture_chains_small_kernels_and_computes_what_it_did_without(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = {"x": np.random.default_rng(2).standard_normal((1, 32, 24, 24)).astype(np.float32)}
    target = Device["OPENCL"]
    assert target.chain_limits is not None  # PoCL: a CPU device
    monkeypatch.setattr(target, "team_limits", None)  # chains run where a target runs no teams
    chained = capture(squeeze_excite, x, target="OPENCL")
    monkeypatch.setattr(target, "chain_limits", None)
    apart = capture(squeeze_excite, x, target="OPENCL")
    chains = [d for d in chained.cmdbuf.dispatches if d.writes > 1]
    assert chains and chained.n_dispatches < apart.n_dispatches
    assert sum(d.writes for d in chained.cmdbuf.dispatches) == apart.n_dispatches  # the same kernels, fewer launches
    assert all(d.global_size == d.local_size == (1,) for d in chains)
    for seed in range(3):
        inp = {"x": np.random.default_rng(seed).standard_normal((1, 32, 24, 24)).astype(np.float32)}
        np.testing.assert_array_equal(chained(inp)["y"], apart(inp)["y"])  # the same code, one work-item
    want = squeeze_excite(Tensor(x["x"], device="CPU"))["y"].numpy()
    np.testing.assert_allclose(chained(x)["y"], want, rtol=1e-4, atol=1e-4)
    assert chained.replay.mode == "command_buffer"
    again = CommandBuffer.from_bytes(chained.cmdbuf.to_bytes())
    assert again == chained.cmdbuf and [d.writes for d in again.dispatches] == [d.writes for d in
                                                                                  chained.cmdbuf.dispatches]


@pytest.mark.opencl
@pytest.mark.parametrize("teams", [False, True])
def test_a_states_producer_and_write_back_stay_dispatches_of_their_own(monkeypatch: pytest.MonkeyPatch,
                                                                        teams: bool) -> None:
    """The state's producer may be rewritten to store into the state (jit/trace.py ``_states_in_place``): no chain
    or team takes it or the write-back, and the replay keeps the ring buffer as the CPU target does."""
    if not teams:
        monkeypatch.setattr(Device["OPENCL"], "team_limits", None)
    init = np.arange(15, dtype=np.float32).reshape(5, 3)
    cap = capture(shift_history, {"x": np.zeros(3, np.float32)}, target="OPENCL", state={"history": init})
    host = capture(shift_history, {"x": np.zeros(3, np.float32)}, target="CPU", state={"history": init})
    writers = [d for d in cap.cmdbuf.dispatches if "state:history" in d.written]
    assert writers and all(d.writes == 1 for d in writers)
    for step in range(4):
        x = np.full(3, step + 0.5, np.float32)
        np.testing.assert_array_equal(cap(x=x)["weighted"], host(x=x)["weighted"])
        np.testing.assert_array_equal(cap.read_state("history"), host.read_state("history"))
