"""The CPU driver built as several translation units compiled side by side (targets/replay_cpu.py
``driver_parts``): the same dispatches, the same bytes out as the one-unit driver."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import jit.realize as realize
import targets.cpu_runtime as cpu
import targets.replay_cpu as replay_cpu
from jit import Device, Tensor, capture
from jit.common.errors import CompileError
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager.samples import sample_inputs, vision_model
from targets.base import RenderedKernel
from targets.cmdbuf import KernelSpec


def _defines(unit: str, entry: str) -> bool:
    return any(line.startswith(f"void {entry}(") and line.endswith("{") for line in unit.splitlines())


def _replay_parts(cap) -> list[str]:
    return replay_cpu.driver_parts(cap.cmdbuf, replay_cpu.CPUReplay(cap.cmdbuf, cap.weights, cpu.CPURuntime()).slots,
                                   4)


@pytest.mark.slow
def test_a_large_command_buffer_is_split_and_replays_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = vision_model()
    inputs = sample_inputs(model)
    cap = capture_onnx(load_onnx(model, device="CPU"), inputs, target="CPU")
    assert len(cap.cmdbuf.kernels) >= 2 * replay_cpu.MIN_KERNELS_PER_PART
    parts = _replay_parts(cap)
    assert len(parts) >= 3  # kernel groups, then the glue
    glue = parts[-1]
    assert "drivepack_run" in glue and all("drivepack_run" not in p for p in parts[:-1])
    assert replay_cpu.GLUE_OPTIMIZE in glue and all(replay_cpu.GLUE_OPTIMIZE not in p for p in parts[:-1])
    for k in cap.cmdbuf.kernels:  # each kernel defined in exactly one unit (the glue only declares the rest)
        assert sum(_defines(p, k.entry) for p in parts) == 1
    split = cap.replay(inputs)
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 10**6)
    whole = replay_cpu.CPUReplay(cap.cmdbuf, cap.weights, cpu.CPURuntime())
    assert len(replay_cpu.driver_parts(cap.cmdbuf, whole.slots, 4)) == 1
    for name, out in whole(inputs).items():
        np.testing.assert_array_equal(out.view(np.uint8), split[name].view(np.uint8))


IPOW = ("#ifndef DP_IPOW_INT\n#define DP_IPOW_INT\nint dp_ipow_int(int b, int e) {\n"
        "  unsigned int r = 1, x = (unsigned int)b;\n  while (e > 0) { if (e & 1) r *= x; x *= x; e >>= 1; }\n"
        "  return (int)r;\n}\n#endif\n")


def test_kernels_defining_an_object_wide_helper_stay_in_the_glue_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """An integer power helper is defined once per object: two units defining it would not link, so every
    kernel carrying one is compiled with the glue."""
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 1)
    x = np.arange(1, 9, dtype=np.float32)

    def fn(x: Tensor) -> dict[str, Tensor]:
        a = (x * 2).contiguous()
        b = (x + 1).contiguous()
        return {"a": a, "b": b, "c": (a + b) * 2}

    cap = capture(fn, {"x": x}, target="CPU")
    carrying = {k.entry for k in cap.cmdbuf.kernels[:2]}
    kernels = [dataclasses.replace(k, source=IPOW + k.source) if k.entry in carrying else k
               for k in cap.cmdbuf.kernels]
    cmdbuf = SimpleNamespace(kernels=kernels, dispatches=cap.cmdbuf.dispatches, segments=cap.cmdbuf.segments)
    slots = replay_cpu.CPUReplay(cap.cmdbuf, cap.weights, cpu.CPURuntime()).slots
    parts = replay_cpu.driver_parts(cmdbuf, slots, 4)  # type: ignore[arg-type]
    assert len(parts) == 2  # the one kernel without the helper, then the glue with the two that carry it
    assert "DP_IPOW" not in parts[0] and parts[-1].count("#ifndef DP_IPOW_INT") == 2
    # the kernels come before the glue's lower optimization level, which covers only what follows it
    assert parts[-1].rindex("#ifndef DP_IPOW_INT") < parts[-1].index(replay_cpu.GLUE_OPTIMIZE)
    assert cpu.compile_shared_parts(parts, flags=(*cpu.CFLAGS, *replay_cpu.DRIVER_FLAGS)).exists()  # it links


def test_a_cpu_capture_compiles_its_kernels_once_in_the_driver(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Regression: a CPU capture compiled every kernel on its own and then again inside the replay's driver.
    Now it only renders them; a kernel later launched eagerly is compiled from that rendering."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    scale = float(np.random.default_rng().uniform(1.5, 2.5))  # kernels no earlier test compiled
    x = np.arange(16, dtype=np.float32)

    def fn(x: Tensor) -> dict[str, Tensor]:
        return {"y": (x * scale).contiguous().exp() + 1}

    Device["CPU"]  # made first: its one-time probe of the machine compiles too (the test alone failed on it)
    before = cpu.cc_invocations
    cap = capture(fn, {"x": x}, target="CPU")
    assert cpu.cc_invocations - before == 1  # the driver, kernels included
    want = np.exp(x * np.float32(scale)) + 1
    np.testing.assert_allclose(cap(x=x)["y"], want, rtol=1e-6)
    np.testing.assert_allclose(fn(Tensor(x))["y"].numpy(), want, rtol=1e-6)  # eager: the rendered kernels built


def _chain(scale: float):
    def fn(x: Tensor) -> dict[str, Tensor]:
        a = (x * scale).contiguous()
        b = (a.exp() + 1).contiguous()
        c = (b * a - scale).contiguous()
        return {"y": (c.relu() * 3).contiguous() + b}
    return fn


def test_a_capture_compiles_each_kernel_unit_once_rendered_and_links_them_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The capture starts the compiler of each of the driver's kernel units (``CPUAheadBuild``) as soon as it has
    rendered the unit's kernels, before it renders the rest; the replay then waits for them and compiles only the
    glue: no unit twice."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 1)
    monkeypatch.setattr(replay_cpu, "UNIT_BYTES", 1)  # a unit per kernel
    monkeypatch.setattr(cpu, "compile_jobs", lambda: 2)
    events: list[str] = []
    real_ahead, real_render = cpu.compile_ahead, realize._rewrite_and_render
    monkeypatch.setattr(cpu, "compile_ahead", lambda parts, **kw: events.append(f"start {real_ahead(parts, **kw)}")
                        or int(events[-1].split()[1]))
    monkeypatch.setattr(realize, "_rewrite_and_render", lambda *a: events.append("render") or real_render(*a))
    scale = float(np.random.default_rng().uniform(1.5, 2.5))  # kernels no earlier test compiled
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    before = cpu.cc_invocations
    cap = capture(_chain(scale), {"x": x}, target="CPU")
    kernels = len(cap.cmdbuf.kernels)
    assert events[:2] == ["render", "start 1"]  # the first unit compiles while the second kernel is rendered
    assert events.count("start 1") == kernels and events[-1] == "start 0"  # at the end: nothing left to start
    assert cpu.cc_invocations - before == kernels + 2  # ...then the glue and the link
    a = x * np.float32(scale)
    b = np.exp(a) + 1
    np.testing.assert_allclose(cap(x=x)["y"], np.maximum(b * a - scale, 0) * 3 + b, rtol=1e-5)


def test_zero_fills_compile_with_the_glue_so_every_unit_compiled_ahead_is_linked(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A capture renders the zero fill of every padded copy and then drops those the replay zeroes once
    (jit/trace.py ``_zeroed_once``): here one dropped, one kept. Fills are compiled with the glue, so the kernel
    units started while rendering are exactly those the command buffer's kernels make: none stopped, none started
    after. Regression: in the kernel units, a dropped fill changed the text of the units it was in, which were
    compiled a second time after the capture, while it waited."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 1)
    monkeypatch.setattr(replay_cpu, "UNIT_BYTES", 1)  # a unit per kernel
    monkeypatch.setattr(cpu, "compile_jobs", lambda: 2)
    stopped: list[list[str]] = []
    real_abandon = cpu.abandon_ahead
    monkeypatch.setattr(cpu, "abandon_ahead",
                        lambda parts=None, **kw: stopped.append(parts) or real_abandon(parts, **kw))
    started_at_finish: list[int] = []
    real_finish = replay_cpu.CPUAheadBuild.finish
    monkeypatch.setattr(replay_cpu.CPUAheadBuild, "finish",
                        lambda self, kernels: started_at_finish.append(real_finish(self, kernels)) or 0)
    rng = np.random.default_rng(3)
    w1, w2, w3, w4 = (rng.standard_normal(s, dtype=np.float32) for s in ((16, 16, 1, 1), (16, 1, 3, 3),
                                                                           (96, 16, 1, 1), (96, 1, 3, 3)))

    def model(x: Tensor) -> dict[str, Tensor]:
        mid = x.conv2d(Tensor(w1)).relu().conv2d(Tensor(w2), groups=16, padding=1)
        return {"y": mid.conv2d(Tensor(w3)).relu().conv2d(Tensor(w4), groups=96, padding=1)}

    x = rng.standard_normal((1, 16, 56, 56), dtype=np.float32)
    cap = capture(model, {"x": x}, target="CPU")
    fills = [d for d in cap.cmdbuf.dispatches if len(d.bindings) == 1]
    assert len(fills) == 1 and len(cap.cmdbuf.zeroed) == 1  # one fill kept, one dropped
    assert stopped == [[]] and started_at_finish == [0]
    expected = {k: v.numpy() for k, v in model(Tensor(x)).items()}
    np.testing.assert_allclose(cap(x=x)["y"], expected["y"], rtol=1e-4, atol=1e-4)


def test_kernel_units_are_consecutive_kernels_closed_at_unit_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units depend only on the kernels before them, so the units of a prefix are those of the whole."""
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 1)
    monkeypatch.setattr(replay_cpu, "UNIT_BYTES", 60)
    kernels = [SimpleNamespace(source=f"void k{n}(float* data0, float* data1) {{}}", entry=f"k{n}")
               for n in (1, 22, 3, 4, 5)]  # 38 or 39 bytes each
    units, shared = replay_cpu._kernel_units(kernels, 2)  # type: ignore[arg-type,misc]
    sources = [k.source for k in kernels]
    assert units == ["\n".join(sources[:2]), "\n".join(sources[2:4]), sources[4]] and shared == []
    assert replay_cpu._kernel_units(kernels[:4], 2)[0] == units[:2]  # type: ignore[arg-type,index]
    fill = SimpleNamespace(source="void fill(float* data0) {}", entry="fill")  # one buffer: compiled with the glue
    assert replay_cpu._kernel_units([*kernels[:2], fill, *kernels[2:]], 2) == (units, [fill])  # type: ignore[arg-type]
    assert replay_cpu._kernel_units(kernels, 1) is None  # one core: one unit


def _tiny_kernels(tmp_path: Path, n: int) -> list[KernelSpec]:
    """``n`` one-statement C kernels named after the test's folder: sources no other test compiled."""
    tag = tmp_path.name.replace("-", "_")
    return [KernelSpec(f"dp_k{i}_{tag}", f"void dp_k{i}_{tag}(int* data0, int* data1) {{ *data0 = *data1 + {i}; }}",
                       f"dp_k{i}_{tag}", "CPU", "") for i in range(n)]


def test_an_ahead_build_stops_the_units_the_command_buffer_does_not_make(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path) -> None:
    """Units started while rendering that the final kernels do not make (here: too few kernels to split) are
    stopped, not left running, so the same text can be started again."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(replay_cpu, "UNIT_BYTES", 1)
    monkeypatch.setattr(cpu, "compile_jobs", lambda: 2)
    specs = _tiny_kernels(tmp_path, 2)
    ahead = replay_cpu.CPUAheadBuild()
    before = cpu.cc_invocations
    for spec in specs:
        ahead.add(RenderedKernel(spec.name, spec.source, {}, (4,)))
        ahead.add(RenderedKernel(spec.name, spec.source, {}, (4,)))  # a name seen before is not a new kernel
    assert cpu.cc_invocations - before == 2
    assert ahead.finish(specs) == 0  # fewer than 2 * MIN_KERNELS_PER_PART kernels: one unit, nothing started
    flags = (*cpu.CFLAGS, *replay_cpu.DRIVER_FLAGS)
    assert cpu.compile_ahead([specs[0].source], flags=flags) == 1  # stopped, so started anew
    cpu.abandon_ahead([specs[0].source], flags=flags)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
    return found


def test_a_stopped_compile_leaves_no_compiler_running_and_no_file_behind(tmp_path, monkeypatch) -> None:
    """Regression: stopping a compile killed the compiler driver only; its compiler proper ran on, orphaned, and
    the assembly file it was writing stayed in the temporary directory."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path / "cache"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    flags = (*cpu.CFLAGS, *replay_cpu.DRIVER_FLAGS)
    body = "\n".join(f"  a[{i}] = a[{i - 1}] * b[{i % 7}] + c[{i % 5}];" for i in range(1, 40000))
    part = f"void dp_slow_{tmp_path.name.replace('-', '_')}(float *a, float *b, float *c) {{\n{body}\n}}"
    assert cpu.compile_ahead([part], flags=flags) == 1
    deadline = time.monotonic() + 30
    while len(_processes_mentioning(str(scratch))) < 2:  # the driver and the compiler proper it started
        assert time.monotonic() < deadline, "the compiler proper never started"
        time.sleep(0.01)
    cpu.abandon_ahead([part], flags=flags)
    deadline = time.monotonic() + 5
    while _processes_mentioning(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _processes_mentioning(str(scratch)) == []
    assert list(scratch.iterdir()) == []


def test_objects_compiled_ahead_are_cached_and_a_failed_one_is_reported_at_the_link(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    flags = (*cpu.CFLAGS, *replay_cpu.DRIVER_FLAGS)
    units = [f"int dp_unit{i}_{tmp_path.name.replace('-', '_')}(int x) {{ return x + {i}; }}" for i in range(2)]
    assert cpu.compile_ahead(units, flags=flags) == 2
    assert cpu.compile_ahead(units, flags=flags) == 0  # already being compiled
    before = cpu.cc_invocations
    assert cpu.compile_shared_parts([*units, "int dp_glue(void) { return 0; }"], flags=flags).exists()
    assert cpu.cc_invocations - before == 2  # the glue's unit and the link
    assert cpu.compile_ahead(units, flags=flags) == 0  # cached objects
    broken = ["int dp_broken(void) { return nothing; }", "int dp_fine(void) { return 1; }"]
    assert cpu.compile_ahead(broken, flags=flags) == 2
    with pytest.raises(CompileError, match="part 0"):
        cpu.compile_shared_parts(broken, flags=flags)


def test_the_last_unit_starts_once_every_kernel_is_rendered(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """``rendered`` starts the unit still open (its kernels will not grow), so its compiler runs while the capture
    plans and checks the command buffer; ``finish`` then finds every unit started. Only after a unit closed:
    before that, the kernels may yet make a single unit, compiled another way."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.setattr(replay_cpu, "MIN_KERNELS_PER_PART", 1)
    monkeypatch.setattr(cpu, "compile_jobs", lambda: 2)
    specs = _tiny_kernels(tmp_path, 3)
    tag = tmp_path.name.replace("-", "_")
    monkeypatch.setattr(replay_cpu, "UNIT_BYTES", len(specs[0].source) + 1)  # two kernels close a unit
    lone = replay_cpu.CPUAheadBuild()
    lone.add(RenderedKernel(specs[0].name, specs[0].source, {}, (4,)))
    before = cpu.cc_invocations
    lone.rendered()
    assert cpu.cc_invocations == before  # no unit closed yet: nothing started
    ahead = replay_cpu.CPUAheadBuild()
    for spec in specs:
        ahead.add(RenderedKernel(spec.name, spec.source, {}, (4,)))
    assert cpu.cc_invocations - before == 1  # the first two kernels' unit
    ahead.rendered()
    assert cpu.cc_invocations - before == 2  # the third's, still open
    assert ahead.finish(specs) == 0  # both units were started: nothing left, nothing stopped
    flags = (*cpu.CFLAGS, *replay_cpu.DRIVER_FLAGS)
    path = cpu.compile_shared_parts([*replay_cpu._kernel_units(specs, 2)[0], f"int dp_glue_{tag};"], flags=flags)
    assert path.exists() and cpu.cc_invocations - before == 4  # the glue and the link only
