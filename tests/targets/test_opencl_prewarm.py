"""The PoCL prewarm helper (targets/opencl_prewarm.py): a second process compiling a fresh replay's kernels for its
launches, stopped by the replay's first call. Run in subprocesses with empty kernel and PoCL caches, so that every
kernel is compiled there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from jit.common.helpers import usable_cores
from targets import opencl_prewarm
from targets.opencl_prewarm import MIN_LAUNCHES, MIN_SOURCE_CHARS, Launch, prewarm_wanted, start_prewarm
from targets.registry import Device
from targets.replay_opencl import helper_launches
from tests.targets.team_sources import BUFFER_BYTES, SPOIL, TEAM

pytestmark = pytest.mark.opencl
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os
    from pathlib import Path
    import numpy as np
    from jit import Tensor, capture
    from targets.registry import Device

    Device["OPENCL"].chain_limits = Device["OPENCL"].team_limits = None  # a dispatch per kernel: for the helper

    def chain(x):
        for i in range(18):  # a reduce and an add per step, each step's constant its own: 19 distinct kernels
            x = x + (x * (i + 1.5)).max(axis=1, keepdim=True)
        return {"y": x}

    def specialised():  # PoCL compiles a kernel for its work-group size when it first runs, into its cache
        return sum(p.parent.name != "0-0-0" for p in Path(os.environ["POCL_CACHE_DIR"]).rglob("*.so"))

    x = {"x": np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)}
    cap = capture(chain, x, target="OPENCL")
    helper = cap.replay.prewarm
    if helper is None:
        print("none", specialised())
    elif os.environ.get("STOP_AT_ONCE"):
        proc = helper.proc
        helper.stop()  # what the first call does: the helper stops before its next kernel
        print(proc.wait(timeout=600), specialised())
    else:
        code = helper.proc.wait(timeout=600)  # left alone, it runs every launch, then exits
        print(code, specialised())
    want = chain(Tensor(x["x"], device="CPU"))["y"].numpy()
    np.testing.assert_allclose(cap(x)["y"], want, rtol=1e-6)
    assert cap.replay.prewarm is None  # the first call stopped it
    print(cap.n_dispatches, specialised())
    from targets.registry import Device
    from targets.replay_opencl import OpenCLReplay
    again = OpenCLReplay(cap.cmdbuf, cap.weights, Device["OPENCL"])  # the same kernels, already compiled
    print(again.prewarm)
""")


def _run(tmp_path: Path, **env: str) -> list[str]:
    full = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path / "kernels"), "POCL_CACHE_DIR": str(tmp_path / "pocl"),
            "PYTHONPATH": str(ROOT), **env}
    full.pop("DEV", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    *figures, second_replay = proc.stdout.split()
    assert second_replay == "None"  # a second replay of the same kernels in one process starts no helper
    return figures


def test_the_helper_compiles_every_launch_before_the_first_call(tmp_path: Path) -> None:
    if not prewarm_wanted("Portable Computing Language", True):
        pytest.fail("expected a machine where the helper runs: two usable cores, POCL_KERNEL_CACHE on")
    code, before, dispatches, after = _run(tmp_path)
    assert code == "0" and int(dispatches) >= MIN_LAUNCHES
    assert int(before) == int(after) == int(dispatches)  # the helper compiled them all; the first call none


def test_stopped_at_once_the_helper_compiles_nothing(tmp_path: Path) -> None:
    """Stopped before it read its launches (it takes longer than that to start), it exits without compiling."""
    code, before, dispatches, after = _run(tmp_path, STOP_AT_ONCE="1")
    assert code == "0" and int(before) == 0 and int(after) == int(dispatches)


def test_switched_off_the_first_call_compiles_them(tmp_path: Path) -> None:
    none, before, dispatches, after = _run(tmp_path, DRIVEPACK_OPENCL_PREWARM="0")
    assert none == "none" and int(before) == 0 and int(after) == int(dispatches)


def test_a_warm_replay_starts_no_helper(tmp_path: Path) -> None:
    """Kernels from the drivepack cache were compiled by an earlier process: no helper."""
    _run(tmp_path, DRIVEPACK_OPENCL_PREWARM="0")
    none, *_ = _run(tmp_path)
    assert none == "none"


def test_the_helper_zeroes_what_the_replay_zeroes_before_a_launch(tmp_path: Path) -> None:
    """Regression: the helper ran a team on a scratch buffer another launch had written, and spun on its wait
    forever, two cores busy."""
    spoil = Launch(0, "spoil", (1,), (1,), BUFFER_BYTES, ())
    team = Launch(1, "team", (2,), (1,), BUFFER_BYTES, (), zeroed=(1,))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"device": Device["OPENCL"].index, "options": "", "sources": [SPOIL, TEAM],
                                "launches": [asdict(spoil), asdict(team)]}))
    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path / "pocl"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "targets.opencl_prewarm", str(spec)], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.close()
        proc.stderr.close()


def test_the_helpers_launches_zero_the_bindings_the_replay_zeroes() -> None:
    from jit.trace import capture
    from tests.schedule.test_chains import squeeze_excite

    cap = capture(squeeze_excite, {"x": np.zeros((1, 32, 24, 24), np.float32)}, target="OPENCL")
    cb = cap.cmdbuf
    sources, launches = helper_launches(cb, {k.source: k.source for k in cb.kernels}, set())
    assert sources == list(dict.fromkeys(k.source for k in cb.kernels)) and len(launches) == len(cb.dispatches)
    for launch, d in zip(launches, cb.dispatches, strict=True):
        assert [d.bindings[i] for i in launch.zeroed] == [b for b in d.bindings if b in cb.zeroed]
    assert any(d.bindings[d.writes - 1] in cb.zeroed for d in cb.dispatches if d.writes > 1)  # a team's counters


def test_few_launches_start_no_helper_unless_their_sources_are_long(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple] = []
    monkeypatch.setattr(opencl_prewarm, "Prewarm", lambda *args: started.append(args) or "helper")
    launches = [Launch(0, "k", (1,), (1,), (4,), ()), Launch(1, "t", (2,), (1,), (4,), ())]
    short, long = ["k" * 100, "t" * 100], ["k" * 100, "t" * MIN_SOURCE_CHARS]
    assert start_prewarm(0, "", [], []) is None and start_prewarm(0, "", short, launches) is None
    assert start_prewarm(0, "", long[1:], launches[1:]) is None  # one launch: the first call compiles it as fast
    assert start_prewarm(0, "", long, launches) == "helper"  # a team's long source: worth a helper
    assert started == [(0, "", long, launches[::-1])]


@pytest.mark.parametrize(("platform", "cpu", "env", "want"), [
    ("Portable Computing Language", True, {}, True),
    ("Portable Computing Language", False, {}, False),
    ("NVIDIA CUDA", True, {}, False),
    ("Portable Computing Language", True, {"POCL_KERNEL_CACHE": "0"}, False),
    ("Portable Computing Language", True, {"DRIVEPACK_OPENCL_PREWARM": "0"}, False),
])
def test_prewarm_wanted_only_on_pocl_cpu_with_its_cache(monkeypatch: pytest.MonkeyPatch, platform: str, cpu: bool,
                                                       env: dict[str, str], want: bool) -> None:
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("DRIVEPACK_OPENCL_PREWARM", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert prewarm_wanted(platform, cpu) is (want and usable_cores() >= 2)


def test_a_helper_that_cannot_start_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No interpreter to run it: no helper and no spec file left behind; the first call compiles everything."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    launches = [Launch(0, f"k{i}", (1,), (1,), (4,), ()) for i in range(MIN_LAUNCHES)]
    assert start_prewarm(0, "", ["__kernel void k0(__global float* a) {}"], launches) is None
    assert not list(tmp_path.glob("drivepack-prewarm-*"))


def test_fresh_batches_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels no replay takes (eager runs) are forgotten beyond ``FRESH_BATCH_KERNELS``; the newest stay takeable."""
    from targets import opencl_runtime
    from targets.registry import Device
    monkeypatch.setattr(opencl_runtime, "FRESH_BATCH_KERNELS", 2)
    target = Device["OPENCL"]
    salt = time.time_ns() % 1_000_000  # sources no cache holds yet: built from scratch here
    sources = [f"__kernel void fb{i}(__global float* a) {{ a[0] = {salt}.{i}f; }}\n" for i in range(3)]
    target.compile_many([(f"fb{i}", src, {"global_size": (1,)}) for i, src in enumerate(sources)])
    assert set(target.take_fresh_batches(sources)) == set(sources[1:])


def test_fresh_kernels_launched_with_the_runtimes_work_group_size_are_prewarmed(tmp_path: Path) -> None:
    """Regression: a fresh replay whose dispatches leave the work-group size to the runtime (``local_size`` None)
    failed to build at all when it described its launches to the helper. The helper launches them the same way."""
    import numpy as np

    from targets.cmdbuf import BufferSpec, CommandBuffer, Dispatch, KernelSpec
    from targets.registry import Device
    from targets.replay import make_replay
    target = Device["OPENCL"]
    salt = time.time_ns() % 1_000_000  # sources no cache holds yet: built from scratch here
    sources = [f"__kernel void add{i}(__global float* data0, __global const float* data1) {{\n"
               f"  int i = get_global_id(0); data0[i] = data1[i] + {salt}.0f + {i}.0f;\n}}\n"
               for i in range(MIN_LAUNCHES)]
    kernels = tuple(KernelSpec(f"add{i}", src, f"add{i}", "OPENCL", target.build_options)
                    for i, src in enumerate(sources))
    dispatches = tuple(Dispatch(i, (8,), None, ("output:y" if i == MIN_LAUNCHES - 1 else "arena:0+32",
                                                "input:x" if i == 0 else "arena:0+32"), ())
                       for i in range(MIN_LAUNCHES))
    cb = CommandBuffer(target="OPENCL", kernels=kernels, dispatches=dispatches,
                       buffers=(BufferSpec("input:x", "float32", (8,), 32), BufferSpec("output:y", "float32", (8,), 32),
                                BufferSpec("arena:0+32", "uint8", (32,), 32)), arena_bytes=128, alignment=128)
    rep = make_replay(CommandBuffer.from_bytes(cb.to_bytes()), {}, target)
    if prewarm_wanted(target.info.platform, True):
        assert rep.prewarm is not None and rep.prewarm.proc is not None
        assert rep.prewarm.proc.wait(timeout=600) == 0  # every launch ran there, with the runtime's group size
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(rep(x=x)["y"], x + np.float32(sum(salt + i for i in range(MIN_LAUNCHES))))


def test_the_helper_runs_with_its_driver_threads_unpinned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: PoCL pins worker i to core i in every process, so the helper's compiling worker and the first
    call's shared one core while the other idled (efficientnet_b0's first call 6.0-6.3 s instead of 4.8-4.9)."""
    import subprocess as sp

    seen: list[dict[str, str]] = []

    class _Popen:
        def __init__(self, args: list[str], **kwargs: object) -> None:
            seen.append(kwargs["env"])  # type: ignore[arg-type]
            self.stdin = open(os.devnull, "wb")  # noqa: SIM115 - closed by stop()

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(sp, "Popen", _Popen)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the spec file no helper reads stays there
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setenv("POCL_AFFINITY", "1")  # what drivepack sets for its own process
    launches = [Launch(0, f"k{i}", (1,), (1,), (4,), ()) for i in range(MIN_LAUNCHES)]
    helper = start_prewarm(0, "", ["__kernel void k0(__global float* a) {}"], launches)
    assert helper is not None
    helper.stop()
    assert seen and seen[0]["POCL_AFFINITY"] == "0" and os.environ["POCL_AFFINITY"] == "1"


def test_the_helper_imports_only_the_opencl_binding() -> None:
    """It starts while the first call compiles: importing the dtype tables (ml_dtypes, numpy) took it 0.6 s."""
    code = ("import sys, targets.opencl_prewarm, targets.cl_binding\n"
            "print(sorted(m for m in ('numpy', 'ml_dtypes', 'onnx', 'targets.registry') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
