"""Running a schedule: device memory for BUFFER nodes, the codegen pipeline, kernel launches, DEBUG output."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import numpy as np

from jit.device import Device
from jit.dtype import DType, to_numpy
from jit.helpers import DEBUG
from jit.passes.pipeline import full_rewrite_to_sink
from jit.schedule import ScheduledKernel, create_schedule, realized
from jit.stats import KernelStats, kernel_stats
from jit.uop import Ops, UOp
from targets.base import Buffer, Program, Target

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


_compiled: dict[tuple[str, UOp], CompiledKernel] = {}
_names: dict[str, dict[str, int]] = {}  # base name -> source -> suffix number


def unique_name(base: str, key: str) -> str:
    """``base`` for the first kernel with that name, then ``base`` + ``n2``, ``n3``... for different kernels."""
    seen = _names.setdefault(base, {})
    if key not in seen:
        seen[key] = len(seen) + 1
    n = seen[key]
    return base if n == 1 else f"{base}n{n}"


def compile_kernels(kernels: list[ScheduledKernel], target: Target) -> list[CompiledKernel]:
    """Run the codegen passes, render and compile kernels; the same kernel graph compiles once per process,
    and the target compiles all new kernels of one call together (one C compiler run on the CPU)."""
    todo: dict[UOp, tuple[str, str, dict, UOp]] = {}
    for k in kernels:
        if (target.name, k.ast) in _compiled or k.ast in todo:
            continue
        lowered = full_rewrite_to_sink(k.ast, target)
        probe, _ = target.render("kernel", lowered)
        name = unique_name(k.name, probe)
        source, meta = target.render(name, lowered)
        if DEBUG >= 4:
            print(source)
        todo[k.ast] = (name, source, meta, lowered)
    if todo:
        programs = target.compile_many([(name, source, meta) for name, source, meta, _ in todo.values()])
        for (ast, (name, _, _, lowered)), prog in zip(todo.items(), programs, strict=True):
            _compiled[(target.name, ast)] = CompiledKernel(name, prog, kernel_stats(lowered), lowered)
    return [_compiled[(target.name, k.ast)] for k in kernels]


def run_schedule(kernels: list[ScheduledKernel]) -> None:
    if not kernels:
        return
    compiled = compile_kernels(kernels, Device[kernels[0].device])
    for k, ck in zip(kernels, compiled, strict=True):
        target = Device[k.device]
        bufs = [device_buffer(b) for b in k.buffers]
        if DEBUG >= 2:
            start = time.perf_counter()
            target.launch(ck.program, bufs, wait=True)
            elapsed = time.perf_counter() - start
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
