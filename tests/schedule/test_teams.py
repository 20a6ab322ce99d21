"""Teams of kernels run by one launch of work-groups that claim their work (jit/schedule/chains.py ``team_kernels``,
targets/cstyle/chains.py ``render_team``): which kernels join, the counters, the rendering, and OPENCL captures that
use them against the same captures without."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from jit import Tensor
from jit.codegen.stats import kernel_stats
from jit.common.errors import CompileError
from jit.schedule.chains import ChainInfo, team_counters, team_kernels
from jit.trace import Captured, capture
from targets.base import TeamLimits
from targets.cmdbuf import CmdbufError, CommandBuffer
from targets.cstyle.chains import render_team
from targets.cstyle.language import CStyleLanguage
from targets.kernel_params import KernelParamsError, check_kernel
from targets.registry import Device
from targets.source_check import OPENCL, check_source
from tests.schedule.test_chains import schedule, squeeze_excite

THREE = TeamLimits(members=3, min_members=2, chunks=4, kernel_flops=1 << 30)


def test_runs_of_kernels_become_teams_of_at_most_members_with_counters_written_last() -> None:
    kernels = schedule()
    assert len(kernels) == 6
    out = team_kernels(kernels, THREE)
    assert [len(k.members) for k in out] == [3, 3]
    first = out[0]
    assert first.members == tuple(kernels[:3]) and first.name == f"t3_{kernels[0].name}"
    info = first.ast.arg
    assert isinstance(info, ChainInfo) and info.counters == first.writes - 1 == 3
    counters = first.buffers[info.counters]
    assert team_counters(out) == [counters, out[1].buffers[out[1].ast.arg.counters]]
    assert counters.dtype.name == "int32" and counters.arg[2] == 2 * 3 + 1  # claim and done per member, groups out
    assert first.written == [*(k.out_buffer for k in kernels[:3]), counters]
    for member, wires in zip(first.members, info.wiring, strict=True):
        assert [first.buffers[i] for i in wires] == member.buffers
    assert team_kernels(kernels, None) is kernels


def test_a_kernel_of_more_flops_than_the_limit_cuts_the_run() -> None:
    kernels = schedule()
    flops = [kernel_stats(k.ast).flops for k in kernels]
    assert flops[2] == max(flops)  # the matmul
    out = team_kernels(kernels, replace(THREE, kernel_flops=flops[2] - 1))
    assert [len(k.members) for k in out] == [2, 0, 3] and out[1] is kernels[2]


def test_kept_apart_kernels_cut_runs_and_short_runs_stay_dispatches() -> None:
    kernels = schedule()
    apart = team_kernels(kernels, THREE, keep_apart={kernels[1].out_buffer})
    assert [len(k.members) for k in apart] == [0, 0, 3, 0]  # kernels[0] alone, too short a run: a dispatch
    assert apart[0] is kernels[0] and apart[1] is kernels[1] and apart[3] is kernels[5]
    assert team_kernels(kernels, replace(THREE, min_members=4)) == kernels


def test_a_padded_copys_zeros_move_before_the_team_instead_of_cutting_it() -> None:
    kernels = schedule()
    zeros = replace(kernels[2], zero_layout=("layout",))
    out = team_kernels([*kernels[:2], zeros, *kernels[3:5]], THREE)
    assert out[0] is zeros and [k.members for k in out[1:]] == [(kernels[0], kernels[1], kernels[3]), ()]
    assert out[2] is kernels[4]  # a run of one after the first team: a dispatch of its own
    # at the start of a run there is nothing to move it before: it stays where it is
    assert team_kernels([zeros, *kernels[:2]], THREE)[0] is zeros


def rendered_team(limits: TeamLimits = THREE) -> tuple[str, dict, list, tuple]:
    from jit.codegen.pipeline import rewrite_kernel

    target = Device["OPENCL"]
    team = team_kernels(schedule(), limits)[0]
    sinks = [rewrite_kernel(m.ast, target).sink for m in team.members]
    parts = list(zip(sinks, team.ast.arg.wiring, strict=True))
    source, meta = target.render_team("team", parts, team.ast.arg.params, team.ast.arg.counters)
    return source, meta, parts, team.ast.arg.params


def test_render_team_claims_each_blocks_work_and_waits_for_it() -> None:
    source, meta, _, _ = rendered_team()
    units = Device["OPENCL"].info.max_compute_units
    assert meta["global_size"] == (units,) and meta["local_size"] == meta["local_request"] == (1,)
    check_source(source, "team", OPENCL)
    # the three small kernels are too little work to split: one claim runs them back to back, nothing waits
    assert re.findall(r"atomic_inc\(data3 \+ (\d+)\)", source) == ["0", "6"]
    # all three run in the claimed iteration: inside its loop, inside their own loops
    assert all(re.search(rf"\n {{10}}\*\(data{i}\+ridx0\) =", source) for i in range(3))
    assert "while" not in source and "get_global_id" not in source
    assert "for (int dp_k = 0; dp_k < 7; dp_k++) data3[dp_k] = 0;" in source


def test_render_team_refuses_what_it_cannot_run() -> None:
    _, _, parts, params = rendered_team()
    with pytest.raises(CompileError, match="launch no range and split loops by range"):
        render_team(CStyleLanguage(global_dims=1, parallel_range=True), "t", parts, params, 3, 4)
    with pytest.raises(CompileError, match="split loops by range"):
        render_team(CStyleLanguage(), "t", parts, params, 3, 4)
    with pytest.raises(CompileError, match="a team expected kernels"):
        render_team(CStyleLanguage(parallel_range=True), "t", [], params, 3, 4)
    with pytest.raises(CompileError, match="a chain parameter per buffer parameter"):
        render_team(CStyleLanguage(parallel_range=True), "t", [(parts[0][0], (0,))], params, 3, 4)


def with_groups(cap: Captured, groups: int) -> Captured:
    """``cap`` replayed with each team launched as ``groups`` work-groups (its dispatches' global size)."""
    cb = cap.cmdbuf
    teams = {i for i, d in enumerate(cb.dispatches) if d.writes > 1}
    dispatches = tuple(replace(d, global_size=(groups,)) if i in teams else d for i, d in enumerate(cb.dispatches))
    return Captured.from_cmdbuf(replace(cb, dispatches=dispatches), cap.weights, "OPENCL")


@pytest.mark.opencl
def test_an_opencl_capture_runs_teams_that_compute_what_kernels_apart_do(monkeypatch: pytest.MonkeyPatch) -> None:
    x = {"x": np.random.default_rng(2).standard_normal((1, 32, 24, 24)).astype(np.float32)}
    target = Device["OPENCL"]
    assert target.team_limits is not None  # PoCL: a CPU device
    teamed = capture(squeeze_excite, x, target="OPENCL")
    monkeypatch.setattr(target, "team_limits", None)
    monkeypatch.setattr(target, "chain_limits", None)
    apart = capture(squeeze_excite, x, target="OPENCL")
    teams = [d for d in teamed.cmdbuf.dispatches if d.writes > 1]
    assert teams and teamed.n_dispatches < apart.n_dispatches
    # the same kernels plus a counters binding per team, fewer launches
    assert sum(d.writes for d in teamed.cmdbuf.dispatches) == apart.n_dispatches + len(teams)
    counters = {d.bindings[d.writes - 1] for d in teams}
    assert counters <= set(teamed.cmdbuf.zeroed)  # zero before the first launch; each launch leaves them so
    # one work-group does all the work, more groups than threads find work claimed: the same bytes
    variants = [teamed, with_groups(teamed, 1), with_groups(teamed, 5)]
    for seed in range(3):  # repeated calls: the counters are back at zero after each
        inp = {"x": np.random.default_rng(seed).standard_normal((1, 32, 24, 24)).astype(np.float32)}
        want = apart(inp)["y"]
        for cap in variants:
            np.testing.assert_array_equal(cap(inp)["y"], want)
    np.testing.assert_allclose(teamed(x)["y"], squeeze_excite(Tensor(x["x"], device="CPU"))["y"].numpy(),
                               rtol=1e-4, atol=1e-4)
    again = CommandBuffer.from_bytes(teamed.cmdbuf.to_bytes())
    assert again == teamed.cmdbuf


@pytest.mark.opencl
def test_a_command_buffer_whose_team_counters_the_replay_would_not_zero_is_refused() -> None:
    """Its groups would wait on counters that start at whatever the arena held: a launch that may never end."""
    cap = capture(squeeze_excite, {"x": np.zeros((1, 32, 24, 24), np.float32)}, target="OPENCL")
    cb = cap.cmdbuf
    team = next(i for i, d in enumerate(cb.dispatches) if d.writes > 1)
    counters = cb.dispatches[team].bindings[cb.dispatches[team].writes - 1]
    with pytest.raises(CmdbufError, match=rf"dispatches\[{team}\] .*atomic counters \(data\d+\) expected in a "
                                          rf"binding the replay zeroes .*, got {re.escape(counters)}$"):
        replace(cb, zeroed=tuple(z for z in cb.zeroed if z != counters))


@pytest.mark.parametrize(("call", "message"), [
    ("atomic_inc(p + 1);", "atomic_inc expected on data<i> plus an offset, got 'p + 1'"),
    ("atomic_add(data1 + 1, 2);", "atomic counters (data1) expected in a binding the replay zeroes"),
])
def test_atomics_outside_a_zeroed_parameter_are_refused(call: str, message: str) -> None:
    source = ("__kernel void k(__global float* restrict data0, __global int* restrict data1) {\n"
              f"  __global int* p = data1;\n  {call}\n}}\n")
    with pytest.raises(KernelParamsError, match=re.escape(message)):
        check_kernel(source, "k", [("arena:0+4", False), ("arena:64+8", False)], 0, "k", writes=2)
    check_kernel(source.replace("p + 1", "data1 + 1"), "k", [("arena:0+4", False), ("arena:64+8", False)], 0, "k",
                 writes=2, zeroed=("arena:64+8",))
