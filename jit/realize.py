"""Running a schedule: device memory for BUFFER nodes, the codegen pipeline, kernel launches, DEBUG output."""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from jit.codegen.opt.search import settings_key as tuning_settings_key
from jit.codegen.passes.dtype_policy import DTypePolicy, ModelDTypeReport, aggregate_policies
from jit.codegen.pipeline import RewrittenKernel, rewrite_kernel
from jit.codegen.stats import KernelStats, kernel_stats
from jit.common.dtype import DType, to_numpy
from jit.common.helpers import DEBUG, EMULATED_DTYPES, NOOPT, WINO
from jit.ir.uop import Ops, UOp
from jit.schedule.kernels import ScheduledKernel, create_schedule, realized
from targets.base import Buffer, Program, Target
from targets.registry import Device

# BUFFER uid -> device memory; an entry is dropped when its BUFFER node is garbage-collected
_memory: dict[int, Buffer] = {}


def _free(uid: int) -> None:
    _memory.pop(uid, None)


def device_buffer(buf: UOp) -> Buffer:
    """The memory behind a BUFFER node, allocated on first use."""
    uid, device, size = buf.arg
    mem = _memory.get(uid)
    if mem is None:
        assert isinstance(buf.dtype, DType)
        mem = Device[device].allocate(size * buf.dtype.itemsize)
        _memory[uid] = mem
        weakref.finalize(buf, _free, uid)
    return mem


def holds_data(buf: UOp) -> bool:
    """Whether BUFFER ``buf`` has device memory: data copied in or a kernel's result (a capture's input
    placeholders have none)."""
    return buf.arg[0] in _memory


def live_buffer_count() -> int:
    return len(_memory)


def copy_to_device(buf: UOp, data: np.ndarray) -> None:
    mem = device_buffer(buf)
    # through a uint8 view: ml_dtypes arrays (bf16, fp8) do not export the buffer protocol
    mem.target.copyin(mem, memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8)))


def copy_from_device(buf: UOp) -> np.ndarray:
    assert isinstance(buf.dtype, DType)
    mem = device_buffer(buf)
    out = np.empty(buf.arg[2], dtype=to_numpy(buf.dtype))
    mem.target.copyout(mem, memoryview(out.view(np.uint8)))
    return out


@dataclass
class CompiledKernel:
    name: str
    program: Program
    stats: KernelStats
    lowered: UOp
    dtype_policy: DTypePolicy = field(default_factory=lambda: DTypePolicy("?"))


# (target, settings that change codegen, kernel graph) -> compiled kernel
_compiled: dict[tuple[str, str, UOp], CompiledKernel] = {}
# the same key -> a kernel rendered but not compiled (``compile_kernels(..., build=False)``)
_rendered: dict[tuple[str, str, UOp], CompiledKernel] = {}
# rewriting and rendering recurse along the graph's depth; emulated 64-bit division is ~600 levels deep
_RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def _deep_recursion(limit: int = _RECURSION_LIMIT) -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def kernel_settings_key() -> str:
    """The run settings a compiled kernel depends on (a kernel compiled under EMULATED_DTYPES=long differs; WINO
    changes the graph a conv builds, kept here so a kernel cached under one value is never reused under another)."""
    return f"EMULATED_DTYPES={EMULATED_DTYPES.value};NOOPT={NOOPT.value};WINO={WINO.value};{tuning_settings_key()}"


def clear_compiled_kernels() -> None:
    """Forget every kernel compiled in this process, so the next run compiles again (under the settings and
    target defaults in force then)."""
    _compiled.clear()
    _rendered.clear()


_names: dict[str, dict[object, int]] = {}  # base name -> kernel graph -> suffix number


def unique_name(base: str, key: object) -> str:
    """``base`` for the first kernel with that name, then ``base`` + ``n2``, ``n3``... for different kernels."""
    seen = _names.setdefault(base, {})
    if key not in seen:
        seen[key] = len(seen) + 1
    n = seen[key]
    return base if n == 1 else f"{base}n{n}"


def compile_kernels(kernels: list[ScheduledKernel], target: Target, build: bool = True) -> list[CompiledKernel]:
    """Run the codegen passes, render and compile kernels; the same kernel graph compiles once per process,
    and the target compiles all new kernels of one call together (one C compiler run on the CPU).

    ``build=False`` renders without compiling (a capture for a target whose replay compiles the sources itself,
    ``Runtime.replay_builds_kernels``): each program then has no handle, and a later call that launches the
    kernel compiles the rendered source, rendering nothing twice."""
    settings = kernel_settings_key()
    todo: dict[UOp, tuple[str, str, dict, RewrittenKernel]] = {}
    for k in kernels:
        key = (target.name, settings, k.ast)
        if key in _compiled or (not build and key in _rendered) or k.ast in todo:
            continue
        if key in _rendered:
            ck = _rendered.pop(key)
            todo[k.ast] = (ck.name, ck.program.source, ck.program.meta, RewrittenKernel(ck.lowered, ck.dtype_policy))
            continue
        with _deep_recursion():
            rewritten = rewrite_kernel(k.ast, target)  # the dtype policy is computed afresh per kernel
            name = unique_name(k.name, rewritten.sink)
            source, meta = target.render(name, rewritten.sink)
        if DEBUG >= 2:
            for line in rewritten.dtype_policy.debug_lines():  # once per kernel: compiled kernels are cached
                print(f"{line} in {name}")
        if DEBUG >= 4:
            print(source)
        todo[k.ast] = (name, source, meta, rewritten)
    if todo and not build:
        for ast, (name, source, meta, rw) in todo.items():
            program = Program(name, source, None, tuple(meta.get("global_size", (1,))), meta.get("local_size"),
                              meta)
            _rendered[(target.name, settings, ast)] = CompiledKernel(name, program, kernel_stats(rw.sink), rw.sink,
                                                                     rw.dtype_policy)
    elif todo:
        programs = target.compile_many([(name, source, meta) for name, source, meta, _ in todo.values()])
        for (ast, (name, _, _, rw)), prog in zip(todo.items(), programs, strict=True):
            _compiled[(target.name, settings, ast)] = CompiledKernel(name, prog, kernel_stats(rw.sink), rw.sink,
                                                                      rw.dtype_policy)
    return [_compiled.get(key) or _rendered[key] for key in ((target.name, settings, k.ast) for k in kernels)]


def dtype_policy_report(compiled: list[CompiledKernel]) -> ModelDTypeReport:
    """Which dtypes a set of compiled kernels (a model's schedule) ran natively and which emulated, and why."""
    return aggregate_policies((ck.name, ck.dtype_policy) for ck in compiled)


def schedule_dtype_policy(targets: list[UOp], device: str | None = None) -> ModelDTypeReport:
    """The dtype-policy report of the kernels realizing ``targets`` would launch (compiles, does not run)."""
    return dtype_policy_report(compile_uops(targets, device))


def run_schedule(kernels: list[ScheduledKernel]) -> None:
    if not kernels:
        return
    compiled = compile_kernels(kernels, Device[kernels[0].device])
    for k, ck in zip(kernels, compiled, strict=True):
        target = Device[k.device]
        bufs = [device_buffer(b) for b in k.buffers]
        if DEBUG >= 2:
            start = time.perf_counter()
            device_time = target.launch(ck.program, bufs, wait=True)
            # the device's own timer where it has one (OpenCL profiling), else wall time around the call
            elapsed = device_time if device_time else time.perf_counter() - start
            s, per_s = ck.stats, 1 / elapsed / 1e9 if elapsed else 0.0
            print(f"*** {k.device:6s} {ck.name:28s} global {s.global_size!s:16s} {elapsed * 1e3:9.3f} ms "
                  f"{s.flops * per_s:9.2f} GFLOP/s {s.bytes * per_s:8.2f} GB/s")
        else:
            target.launch(ck.program, bufs)


def compile_uops(targets: list[UOp], device: str | None = None) -> list[CompiledKernel]:
    """The compiled kernels that realizing ``targets`` would launch, without running them."""
    dev = device or Device.DEFAULT
    kernels, _ = create_schedule(targets, dev)
    return compile_kernels(kernels, Device[dev])


def realize_uops(targets: list[UOp], device: str | None = None) -> dict[UOp, UOp]:
    """Compute ``targets``; returns each one's buffer view, and records every computed node as realized."""
    kernels, becomes = create_schedule(targets, device or Device.DEFAULT)
    run_schedule(kernels)
    for node, view in becomes.items():
        if node.op is not Ops.BUFFER and node is not view:
            realized[node] = view
    return becomes


def compiled_kernel(target_name: str, name: str) -> CompiledKernel | None:
    """The kernel named ``name`` compiled (or only rendered) in this process for target ``target_name`` under the
    current settings (its stats and dtype policy, e.g. for a package manifest); None when there is none."""
    settings = kernel_settings_key()
    for (tname, tsettings, _), ck in (*_compiled.items(), *_rendered.items()):
        if tname == target_name and tsettings == settings and ck.name == name:
            return ck
    return None
