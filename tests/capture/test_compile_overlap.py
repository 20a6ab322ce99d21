"""A capture's compiles overlap its own work: weight-only kernels compile in the background while the kept kernels
are rendered (jit/realize.py ``compile_soon``, targets/cpu_runtime.py ``compile_shared_ahead``), below the
capture's priority, and a capture that fails meanwhile leaves nothing half-computed behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

import jit.realize as realize
import jit.trace as trace
import jit.weight_folding as weight_folding
import targets.cpu_runtime as cpu
from jit import Context, Tensor, capture
from jit.common.errors import CompileError
from jit.frontend.winograd import winograd_weight
from jit.realize import compile_soon, copy_from_device, run_schedule
from jit.schedule.kernels import ScheduledKernel, create_schedule

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 3, 10, 10), dtype=np.float32)


def _fresh_weight() -> np.ndarray:
    return RNG.standard_normal((8, 3, 3, 3), dtype=np.float32)  # kernels and values no earlier test made


def test_kernels_compiled_soon_are_run_without_another_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    w = _fresh_weight()
    scale = float(RNG.uniform(1.5, 2.5))
    folded = Tensor(w) * scale + 1
    kernels, becomes = create_schedule([folded.uop], "CPU")
    before = cpu.cc_invocations
    assert compile_soon(kernels)
    started = cpu.cc_invocations - before
    assert started >= 1  # the kernels' compiler (and the thread pool's, if a kernel is parallel and it is new)
    run_schedule(kernels)
    assert cpu.cc_invocations - before == started  # waited for, not compiled again
    got = copy_from_device(becomes[folded.uop].base).view(np.float32)[:w.size].reshape(w.shape)
    np.testing.assert_allclose(got, w * np.float32(scale) + 1, rtol=1e-6, atol=1e-6)  # a fused multiply-add
    assert not compile_soon(kernels)  # compiled: nothing to start (a capture then runs such kernels at once)


def test_a_target_that_queues_launches_compiles_nothing_soon() -> None:
    """OpenCL compiles when asked: a capture runs its weight-only kernels at once, and the queue computes them
    while the kept kernels are rendered."""
    kernels, _ = create_schedule([(Tensor(_fresh_weight(), device="OPENCL") * 2).uop], "OPENCL")
    assert kernels and not compile_soon(kernels)


def test_a_capture_failing_after_folding_forgets_the_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: folded weights count as realized before their kernels run; a capture failing in between must
    not leave them so, or the next capture of the same graph binds buffers nothing wrote."""
    w = Tensor(_fresh_weight())
    folded = w * 3 - 1  # one graph for both captures, kept alive: the folded node is the same node

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": x.conv2d(folded, padding=1)}

    def failing(*args: object, **kwargs: object) -> object:
        raise CompileError("injected")

    with monkeypatch.context() as m:
        m.setattr(trace, "compile_kernels", failing)
        with pytest.raises(CompileError, match="injected"):
            capture(model, {"x": X}, target="CPU")
    run = capture(model, {"x": X}, target="CPU")
    want = Tensor(X).conv2d(Tensor(w.numpy() * 3 - 1), padding=1).numpy()
    np.testing.assert_allclose(run({"x": X})["y"], want, rtol=1e-4, atol=1e-4)


def test_compilers_started_ahead_run_below_the_callers_priority(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    niced: list[int] = []
    real = os.setpriority
    monkeypatch.setattr(os, "setpriority", lambda which, pid, prio: niced.append(prio) or real(which, pid, prio))
    tag = tmp_path.name.replace("-", "_")
    source = f"int dp_ahead_{tag}(int x) {{ return x * 3; }}"
    assert cpu.compile_shared_ahead([source]) == 1
    assert cpu.compile_shared_ahead([source]) == 0  # already running
    before = cpu.cc_invocations
    assert cpu.compile_shared_many([source])[0].exists()
    assert cpu.cc_invocations == before and niced == [cpu.AHEAD_NICENESS]
    assert cpu.compile_shared_ahead([source]) == 0  # cached
    cpu.compile_shared_many([f"int dp_waited_{tag}(void) {{ return 1; }}"])
    assert niced == [cpu.AHEAD_NICENESS]  # a compiler its caller waits for keeps the caller's priority


def test_a_failed_compile_started_ahead_is_reported_where_it_is_waited_for(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    broken = f"int dp_broken_{tmp_path.name.replace('-', '_')}(void) {{ return nothing; }}"
    assert cpu.compile_shared_ahead([broken]) == 1
    with pytest.raises(CompileError, match="nothing"):
        cpu.compile_shared_many([broken])


def test_a_captures_weight_folds_compile_like_its_kernels_and_fold_what_eager_computes(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The folds run once, at capture, but are built with the replay kernels' ``CFLAGS``: GCC fuses different
    multiplies and adds into FMAs at -O2 and -O3. Regression: folds built at -O2 gave Winograd filters (and so
    outputs) a few ulps off the eager ones on an AMD Zen 5 machine."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    flags_of: dict[str, tuple[str, ...]] = {}

    def recording(real):  # noqa: ANN001, ANN202
        def record(sources: list[str], cc: str | None = None, flags: tuple[str, ...] = cpu.CFLAGS):  # noqa: ANN202
            flags_of.update((src, flags) for src in sources)
            return real(sources, cc, flags)
        return record

    monkeypatch.setattr(cpu, "compile_shared_many", recording(cpu.compile_shared_many))
    monkeypatch.setattr(cpu, "compile_shared_ahead", recording(cpu.compile_shared_ahead))
    w = RNG.standard_normal((48, 48, 3, 3), dtype=np.float32) * np.float32(0.1)
    x = RNG.standard_normal((1, 48, 16, 16), dtype=np.float32)
    with Context(WINO=4):
        run = capture(lambda x: {"y": x.conv2d(Tensor(w), padding=1)}, {"x": x}, target="CPU")
        filters = winograd_weight(Tensor(w), 4).numpy()
        eager = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
    assert flags_of and all(flags[:len(cpu.CFLAGS)] == cpu.CFLAGS for flags in flags_of.values())
    folded = [np.asarray(b).view(np.float32) for b in run.weights.values() if np.asarray(b).nbytes == filters.nbytes]
    assert len(folded) == 1 and folded[0].tobytes() == filters.tobytes()
    assert run({"x": x})["y"].tobytes() == eager.tobytes()


def test_a_kernel_reads_another_devices_buffer_through_a_copy_made_once() -> None:
    """A kernel on OPENCL reading a buffer that lives on the CPU (and the other way round) reads a copy of its bytes
    made on the kernel's device the first time, then that copy again. Regression: an OPENCL kernel handed the CPU's
    memory failed with a TypeError."""
    w = _fresh_weight()
    for home, other in (("CPU", "OPENCL"), ("OPENCL", "CPU")):
        t = Tensor(w, device=home)
        made = []
        for scale in (2.0, 3.0):
            out = (t * scale).uop
            kernels, becomes = create_schedule([out], other)
            assert [k.device for k in kernels] == [other] and t.uop.base in kernels[0].buffers[1:]
            run_schedule(kernels)
            np.testing.assert_array_equal(copy_from_device(becomes[out].base).reshape(w.shape), w * np.float32(scale))
            made.append(realize.device_buffer_on(t.uop.base, other))
        assert made[0] is made[1] and made[0] is not realize.device_buffer(t.uop.base)  # one copy, read by both


@pytest.mark.parametrize("winograd", [False, True])
def test_an_opencl_capture_folds_its_weights_with_cpu_kernels(monkeypatch: pytest.MonkeyPatch, winograd: bool) -> None:
    """Kernels that run once at capture are built by the host's C compiler whatever the target (on PoCL each would
    cost a program build and a compile at its first launch, and a read of its result waits behind the capture's
    own compiles); the OPENCL replay binds their results. Winograd's transformed filters too, four times the
    size of the weights they come from (regression: they were computed on the device)."""
    devices: list[str] = []
    real = realize.run_schedule

    def recording(kernels: list[ScheduledKernel]) -> None:
        devices.extend(k.device for k in kernels)
        real(kernels)
    monkeypatch.setattr(trace, "run_schedule", recording)  # deferred folds (their compile ran meanwhile)
    monkeypatch.setattr(weight_folding, "run_schedule", recording)  # folds run at once
    w, x = _fresh_weight(), X
    if winograd:
        w, x = RNG.standard_normal((32, 32, 3, 3), dtype=np.float32), RNG.standard_normal((1, 32, 8, 8), np.float32)

    def model(x: Tensor) -> dict[str, Tensor]:
        weight = Tensor(w, device="OPENCL")
        return {"y": x.conv2d(weight if winograd else weight * 0.5 + 0.25, padding=1).relu()}

    with Context(WINO="4" if winograd else "0"):
        run = capture(model, {"x": x}, target="OPENCL")
    assert devices and set(devices) == {"CPU"}
    want = Tensor(x).conv2d(Tensor(w if winograd else w * 0.5 + 0.25), padding=1).relu().numpy()
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
