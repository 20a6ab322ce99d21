"""A capture's first launches on a thread of its own (targets/opencl_warm.py ``LaunchWarmer``), waiting while the
runtime's own work wants the device, and stopped by the replay the capture makes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import targets.opencl_warm as opencl_warm
from targets.opencl_runtime import OpenCLRuntime
from targets.opencl_warm import LaunchWarmer, warm_key
from targets.registry import Device
from tests.targets.team_sources import BUFFER_BYTES, SPOIL, TEAM

pytestmark = pytest.mark.opencl
ROOT = Path(__file__).resolve().parents[2]


def _fresh_programs(n: int, target: OpenCLRuntime) -> list:
    salt = time.time_ns() % 1_000_000  # sources no cache holds yet
    return target.compile_many([(f"w{i}", f"__kernel void w{i}(__global float* a, __global const float* b) {{\n"
                                 f"  a[get_global_id(0)] = b[get_global_id(0)] + {salt}.{i}f;\n}}\n",
                                 {"global_size": (64,), "local_request": (8,)}) for i in range(n)])


def test_the_warmer_launches_each_kernel_once_then_stops() -> None:
    target = Device["OPENCL"]
    progs = _fresh_programs(3, target)
    warmer = LaunchWarmer(target)
    warmer.add([(p, (256, 256)) for p in progs])
    assert warmer.wait_until_idle(60)
    want = {warm_key(p.source, p.global_size, p.local_size) for p in progs}
    assert warmer.stop() == want and all(k[2] == (8,) for k in want)
    warmer.join(60)
    warmer.add([(progs[0], (256, 256))])  # stopped: nothing is launched again
    assert warmer.wait_until_idle(0) and warmer.stop() == want


def test_the_warmer_zeroes_a_teams_counters_before_launching_it() -> None:
    """Regression: a team launched on scratch buffers another kernel had written spun forever on its wait."""
    target = Device["OPENCL"]
    spoil, team = target.compile_many([
        ("spoil", SPOIL, {"global_size": (1,), "local_request": (1,)}),
        ("team", TEAM, {"global_size": (2,), "local_request": (1,), opencl_warm.ZEROED_ARGS: (1,)})])
    warmer = LaunchWarmer(target)
    warmer.add([(spoil, BUFFER_BYTES), (team, BUFFER_BYTES)])
    assert warmer.wait_until_idle(60)
    assert len(warmer.stop()) == 2
    warmer.join(60)


def test_a_stopped_warmer_drops_what_it_had_not_launched() -> None:
    target = Device["OPENCL"]
    progs = _fresh_programs(12, target)
    warmer = LaunchWarmer(target)
    warmer.add([(p, (256, 256)) for p in progs])
    warmer.stop()
    warmer.join(60)
    assert warmer.wait_until_idle(0) and len(warmer.stop()) < len(progs)


def test_the_warmer_waits_while_the_runtime_uses_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm launch compiling holds up the runtime's own reads and launches behind it (PoCL runs every queue's
    commands in turn), so the warmer's turn comes only ``WARM_GRACE`` seconds after the runtime's last use."""
    target = Device["OPENCL"]
    monkeypatch.setattr(opencl_warm, "WARM_GRACE", 0.3)
    monkeypatch.setattr(target, "warmer", LaunchWarmer(target))  # a capture's warmer is running
    buf = target.allocate(64)
    target.copyin(buf, memoryview(np.zeros(16, np.float32)).cast("B"))
    done = time.monotonic()
    target.turns.wait_for_idle()
    assert time.monotonic() - done >= 0.29
    start = time.monotonic()
    target.turns.wait_for_idle()  # nothing since: at once
    assert time.monotonic() - start < 0.29


SCRIPT = textwrap.dedent("""
    import os
    from pathlib import Path
    import numpy as np
    import targets.opencl_ahead as oa
    import targets.replay_opencl as ro
    from jit import Tensor, capture
    from targets.opencl_warm import LaunchWarmer
    from targets.registry import Device

    Device["OPENCL"].chain_limits = Device["OPENCL"].team_limits = None  # every kernel a dispatch: as counted below

    oa.AHEAD_BATCH = 4  # a program every four kernels, each warmed once built
    stop = LaunchWarmer.stop
    def drained_stop(self):  # the replay stops the warmer once it launched what it was given
        assert self.wait_until_idle(600)
        return stop(self)
    LaunchWarmer.stop = drained_stop
    helper_launches = []
    start = ro.start_prewarm
    ro.start_prewarm = lambda index, options, sources, launches: helper_launches.append(len(launches)) or None

    def specialised():  # PoCL compiles a kernel for its work-group size when it first runs, into its cache
        return sum(p.parent.name != "0-0-0" for p in Path(os.environ["POCL_CACHE_DIR"]).rglob("*.so"))

    def chain(x):
        for i in range(18):  # a reduce and an add per step, each step's constant its own: 19 kernels
            x = x + (x * (i + 1.5)).max(axis=1, keepdim=True)
        return {"y": x}

    x = {"x": np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)}
    cap = capture(chain, x, target="OPENCL")
    fresh = len({(k.source) for k in cap.cmdbuf.kernels})
    print(cap.n_dispatches, fresh, specialised(), helper_launches[0] if helper_launches else -1)
    want = chain(Tensor(x["x"], device="CPU"))["y"].numpy()
    np.testing.assert_allclose(cap(x)["y"], want, rtol=1e-6)
""")


def test_a_capture_warms_its_built_kernels_and_the_helper_gets_the_rest(tmp_path: Path) -> None:
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path / "kernels"), "POCL_CACHE_DIR": str(tmp_path / "pocl"),
           "PYTHONPATH": str(ROOT)}
    env.pop("DEV", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    dispatches, kernels, compiled, for_helper = map(int, proc.stdout.split())
    from targets.opencl_prewarm import prewarm_wanted
    from targets.opencl_runtime import CL_DEVICE_TYPE_CPU
    target = Device["OPENCL"]
    if not prewarm_wanted(target.info.platform, bool(target.info.device_type & CL_DEVICE_TYPE_CPU)):
        assert compiled == 0 and for_helper == -1
        return
    warmed = kernels - kernels % 4  # every full batch of four was built in the background, then launched
    assert dispatches == kernels == 19 and compiled >= warmed  # compiled before the replay's first call
    assert for_helper == kernels - warmed  # the helper is left only the kernels the warmer never saw


def test_kernels_reading_images_are_never_warmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a weight read as an image keeps its plain buffer in the schedule, and the warmer bound a buffer
    where the kernel takes an image2d_t (PoCL crashed a test worker now and then)."""
    import targets.opencl_ahead as oa
    import targets.replay_opencl as ro
    from jit import capture_onnx, load_onnx
    from jit.realize import clear_compiled_kernels
    from packager.samples import sample_inputs, vision_model

    seen: list = []
    add = oa.OpenCLAheadBuild.add
    monkeypatch.setattr(oa.OpenCLAheadBuild, "add", lambda self, kernel: seen.append(kernel) or add(self, kernel))
    monkeypatch.setattr(ro, "usable_cores", lambda: 2)
    clear_compiled_kernels()
    proto = vision_model()
    feeds = sample_inputs(proto, seed=4)
    run = capture_onnx(load_onnx(proto, device="QCOM:images"), feeds, target="QCOM:images")
    readers = [k for k in seen if "image2d_t" in k.source]
    assert readers and all(k.buffer_bytes is None for k in readers)
    assert all(k.buffer_bytes is not None for k in seen if "image2d_t" not in k.source)
    assert run(feeds)
