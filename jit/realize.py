"""Running a schedule: device memory for BUFFER nodes, the codegen pipeline, kernel launches, DEBUG output."""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

import jit.render_cache as render_cache
from jit.codegen.opt import OptOptions, target_default_opts
from jit.codegen.opt.search import settings_key as tuning_settings_key
from jit.codegen.passes.dtype_policy import DTypePolicy, ModelDTypeReport, aggregate_policies
from jit.codegen.pipeline import rewrite_kernel
from jit.codegen.stats import KernelStats, kernel_stats
from jit.common.dtype import DType, ImageDType, to_numpy
from jit.common.errors import CompileError
from jit.common.helpers import DEBUG, EMULATED_DTYPES, FUSION_COST, NOLOCALS, NOOPT, PREFETCH, STREAMS, WINO, Context
from jit.ir.stable_key import UnkeyableError, structural_key
from jit.ir.uop import Ops, UOp
from jit.schedule.chains import ChainInfo, chain_sink
from jit.schedule.kernels import ScheduledKernel, create_schedule, realized
from targets.base import Buffer, Program, RenderedKernel, Target
from targets.registry import Device

# the compiler is loaded: the render cache's fingerprint of it is taken now, before any kernel is compiled
render_cache.take_fingerprint()

# BUFFER uid -> device memory; an entry is dropped when its BUFFER node is garbage-collected
_memory: dict[int, Buffer] = {}
# (BUFFER uid, device) -> a copy of its memory on another device than its own, for kernels launched there; dropped
# with the node like its memory. A BUFFER is written once (its upload or the kernel computing it), before any kernel
# reads it, so a copy made for a reader stays its value
_copies: dict[tuple[int, str], Buffer] = {}


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


def device_buffer_on(buf: UOp, device: str) -> Buffer:
    """The memory of BUFFER ``buf`` for a kernel launched on ``device``: its own where it lives there, else a copy
    of its bytes made there once (weights on the host read by a device's kernel, or a device's weights folded by
    host kernels: jit/weight_folding.py)."""
    uid, home, size = buf.arg
    if home == device:
        return device_buffer(buf)
    mem = _copies.get((uid, device))
    if mem is None:
        assert isinstance(buf.dtype, DType)
        data = np.empty(size * buf.dtype.itemsize, np.uint8)
        read_into(buf, data)
        target = Device[device]
        mem = target.allocate(data.nbytes)
        target.copyin(mem, memoryview(data))
        _copies[(uid, device)] = mem
        weakref.finalize(buf, _copies.pop, (uid, device), None)
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
    """A fresh host copy of ``buf``'s elements."""
    assert isinstance(buf.dtype, DType)
    out = np.empty(buf.arg[2], dtype=to_numpy(buf.dtype))
    read_into(buf, out.view(np.uint8))
    return out


def read_into(buf: UOp, out: np.ndarray) -> None:
    """``buf``'s bytes written into ``out``, a writable uint8 array of its size."""
    mem = device_buffer(buf)
    mem.target.copyout(mem, memoryview(out))


def host_bytes(buf: UOp) -> np.ndarray | None:
    """``buf``'s device memory as a read-only uint8 array without a copy, on a target whose memory is the host's
    (``host_view``: the CPU); None elsewhere. Safe to keep: a BUFFER's memory is written once, by the upload or
    the kernel that computes it (every kernel writes a fresh BUFFER), and the array keeps the memory alive."""
    mem = device_buffer(buf)
    view = getattr(mem.target, "host_view", None)
    if view is None:
        return None
    arr = view(mem).view()
    arr.flags.writeable = False
    return arr


@dataclass
class CompiledKernel:
    """A kernel ready to launch: its name, program, stats and dtype policy. ``lowered`` is the graph it was rendered
    from; a kernel served by the render cache (jit/render_cache.py) has none until first asked, when the codegen
    passes run again on ``ast`` under the settings and default options it was compiled with (deterministic: the
    same graph, checked against the structural key the cache stored with it)."""

    name: str
    program: Program
    stats: KernelStats
    lowered_sink: UOp | None = field(default=None, repr=False)
    dtype_policy: DTypePolicy = field(default_factory=lambda: DTypePolicy("?"))
    ast: UOp | None = field(default=None, repr=False)
    target: Target | None = field(default=None, repr=False)
    settings: dict[str, object] = field(default_factory=dict, repr=False)
    default_opts: OptOptions | None = field(default=None, repr=False)
    sink_key: str | None = field(default=None, repr=False)

    @property
    def lowered(self) -> UOp:
        if self.lowered_sink is None:
            assert self.ast is not None and self.target is not None, "a kernel without its graph keeps its ast"
            with _deep_recursion(), Context(**self.settings):
                sink = _rewritten(self.ast, self.target, self.default_opts)[0]
            if self.sink_key is not None and structural_key(sink) != self.sink_key:
                raise CompileError(f"kernel {self.name}: lowered graph expected the one it was rendered from, got "
                                   "another (the tuning or the target's options changed since it was compiled)")
            self.lowered_sink = sink
        return self.lowered_sink


@dataclass
class _Pending:
    """A kernel rendered in this ``compile_kernels`` call (or earlier, without a build), not compiled yet."""

    name: str
    source: str
    meta: dict
    stats: KernelStats
    policy: DTypePolicy
    lowered: UOp | None
    sink_key: str | None = None  # the rewritten graph's structural key, where a render-cache hit left no graph


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
    changes the graph a conv builds, PREFETCH the code rendered for it: kept here so a kernel cached under one value
    is never reused under another)."""
    return f"EMULATED_DTYPES={EMULATED_DTYPES.value};NOOPT={NOOPT.value};WINO={WINO.value};PREFETCH={PREFETCH.value};" \
        f"{tuning_settings_key()}"


def clear_compiled_kernels() -> None:
    """Forget every kernel compiled in this process, so the next run compiles again (under the settings and
    target defaults in force then)."""
    _compiled.clear()
    _rendered.clear()
    Device.forget_compiled()


class KernelNames:
    """Kernel names of one scope: a capture's command buffer (``compile_kernels(..., names=)``), or everything else a
    process compiles. ``base`` for the first kernel of that base name on a target, then ``base`` + ``n2``, ``n3``...
    for different kernels (told apart by their rewritten graph's exact key) in the order the scope meets them. Names
    are part of the source, which the compiled-kernel caches are keyed by: a capture named in its own scope is the
    same source in every process, whatever else the process compiled before it."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], dict[object, int]] = {}

    def name(self, target: str, base: str, key: object) -> str:
        seen = self._seen.setdefault((target, base), {})
        if key not in seen:
            seen[key] = len(seen) + 1
        n = seen[key]
        return base if n == 1 else f"{base}n{n}"


_process_names = KernelNames()  # what is compiled outside a capture (eager runs, weight folds)


def _name_key(sink: UOp) -> object:
    """What tells kernels of one base name apart: the rewritten graph's exact key (the graph where it has none)."""
    try:
        return structural_key(sink)
    except UnkeyableError:
        return sink


def _renamed(done: CompiledKernel, name: str) -> _Pending | None:
    """A kernel compiled or rendered before, under ``name`` instead (its name stands once in its source, as
    `` name(``); None where it does not."""
    old = f" {done.name}("
    if done.program.source.count(old) != 1:
        return None
    return _Pending(name, done.program.source.replace(old, f" {name}("), done.program.meta, done.stats,
                    done.dtype_policy, done.lowered_sink, done.sink_key)


def _rewritten(ast: UOp, target: Target, default_opts: OptOptions | None = None) -> tuple[UOp, DTypePolicy]:
    """Kernel graph ``ast`` through the codegen passes (its dtype policy computed afresh), and that policy. A chain's
    (jit/schedule/chains.py): each member's, as a SINK of their SINKs with the chain's arg, and the policies' union."""
    if not isinstance(ast.arg, ChainInfo):
        rewritten = rewrite_kernel(ast, target, default_opts)
        return rewritten.sink, rewritten.dtype_policy
    parts = [rewrite_kernel(member, target, default_opts) for member in ast.src]
    policies = [p.dtype_policy for p in parts]
    policy = DTypePolicy(target.name, tuple(dict.fromkeys(d for p in policies for d in p.native)),
                         tuple(dict.fromkeys(e for p in policies for e in p.emulated)))
    return chain_sink([p.sink for p in parts], ast.arg.wiring, ast.arg.counters), policy


def _render(target: Target, name: str, sink: UOp) -> tuple[str, dict, KernelStats]:
    """Source, launch metadata and stats of a rewritten kernel graph (a chain's: its members' stats summed)."""
    if not isinstance(sink.arg, ChainInfo):
        source, meta = target.render(name, sink)
        return source, meta, kernel_stats(sink)
    parts = list(zip(sink.src, sink.arg.wiring, strict=True))
    if sink.arg.counters is None:
        source, meta = target.render_chain(name, parts, sink.arg.params)
    else:
        source, meta = target.render_team(name, parts, sink.arg.params, sink.arg.counters)
    stats = [kernel_stats(member) for member in sink.src]
    return source, meta, KernelStats(sum(s.flops for s in stats), sum(s.bytes for s in stats),
                                     tuple(meta["global_size"]))


def _rewrite_and_render(k: ScheduledKernel, target: Target, disk_key: str | None, names: KernelNames) -> _Pending:
    """Kernel ``k`` through the codegen passes and the renderer, or from the render cache under ``disk_key``
    (stored there after a miss), named in ``names``. Either way the same name, source, metadata, stats and policy."""
    entry = render_cache.load(disk_key) if disk_key else None
    if entry is not None:
        name = names.name(target.name, k.name, entry.sink_key)
        return _Pending(name, entry.source_for(name), entry.meta, entry.stats, entry.policy, None, entry.sink_key)
    with _deep_recursion():
        sink, policy = _rewritten(k.ast, target)
        # numbered by the rewritten graph's exact key, as a cache hit is (the graph itself is not at hand there)
        name = names.name(target.name, k.name, _name_key(sink))
        source, meta, stats = _render(target, name, sink)
    if disk_key:
        render_cache.store(disk_key, name, source, meta, stats, policy, sink)
    return _Pending(name, source, meta, stats, policy, sink)


def _render_settings_key(settings: str) -> str:
    """``kernel_settings_key`` plus every other setting a render could read: the render cache's key part."""
    return ";".join((settings, *(repr(s) for s in (NOLOCALS, STREAMS, FUSION_COST))))


def _buffer_bytes(k: ScheduledKernel) -> tuple[int, ...] | None:
    """Each buffer parameter's bytes, or None where the kernel reads one as an image (its parameter types say so:
    a weight read as an image keeps its plain BUFFER, jit/trace.py ``_read_as_images``)."""
    params = getattr(k.ast.arg, "params", ())
    if any(isinstance(p, ImageDType) for p in params) or not all(isinstance(b.dtype, DType) for b in k.buffers):
        return None
    return tuple(b.arg[2] * b.dtype.itemsize for b in k.buffers)


def compile_kernels(kernels: list[ScheduledKernel], target: Target, build: bool = True,
                    rendered: Callable[[RenderedKernel], None] | None = None,
                    names: KernelNames | None = None) -> list[CompiledKernel]:
    """Run the codegen passes, render and compile kernels; the same kernel graph compiles once per process,
    and the target compiles all new kernels of one call together (one C compiler run on the CPU). A kernel
    rendered in an earlier process under the same code, target and settings is read from the render cache
    (jit/render_cache.py) instead of rewritten and rendered again.

    ``build=False`` renders without compiling (a capture for a target whose replay compiles the sources itself,
    ``Runtime.replay_builds_kernels``): each program then has no handle, and a later call that launches the
    kernel compiles the rendered source, rendering nothing twice. ``rendered`` is called with each kernel in order
    as soon as its source is known (targets/replay.py ``AheadBuild``).

    ``names``: the scope the kernels are named in (a capture's, ``KernelNames``); a kernel compiled before under
    another name is renamed (its source edited, then built again where ``build``). None: the process's."""
    settings = kernel_settings_key()
    disk_settings = _render_settings_key(settings) if render_cache.cache_enabled() else None
    disk_context = render_cache.key_context(target, disk_settings) if disk_settings is not None else None
    default_opts = target_default_opts(target)  # what a render-cache hit's ``lowered`` is rebuilt with
    context = {"NOOPT": NOOPT.value, "EMULATED_DTYPES": EMULATED_DTYPES.value, "WINO": WINO.value,
               "PREFETCH": PREFETCH.value}
    todo: dict[UOp, _Pending] = {}
    ready: dict[UOp, CompiledKernel] = {}  # kernels compiled (or rendered, without ``build``) before, as they are
    for k in kernels:
        key = (target.name, settings, k.ast)
        if k.ast in todo or k.ast in ready:
            continue
        done = _compiled.get(key) or _rendered.get(key)
        pending: _Pending | None = None
        if done is not None:
            name = done.name if names is None else \
                names.name(target.name, k.name, done.sink_key or _name_key(done.lowered))
            if name == done.name and (key in _compiled or not build):
                ready[k.ast] = done
                if rendered is not None:
                    rendered(RenderedKernel(done.name, done.program.source, done.program.meta, _buffer_bytes(k)))
                continue
            pending = _renamed(done, name)  # built under another name, or rendered only: built now
        if pending is None:
            disk_key = render_cache.entry_key(k.ast, target, "", disk_context) if disk_context is not None else None
            pending = _rewrite_and_render(k, target, disk_key, names or _process_names)
        todo[k.ast] = pending
        if rendered is not None:
            rendered(RenderedKernel(pending.name, pending.source, pending.meta, _buffer_bytes(k)))
        if DEBUG >= 2:
            for line in pending.policy.debug_lines():  # once per kernel: compiled kernels are cached
                print(f"{line} in {pending.name}")
        if DEBUG >= 4:
            print(pending.source)

    def kernel(ast: UOp, p: _Pending, program: Program) -> CompiledKernel:
        return CompiledKernel(p.name, program, p.stats, p.lowered, p.policy, ast, target, context, default_opts,
                              p.sink_key)

    if todo and not build:
        for ast, p in todo.items():
            program = Program(p.name, p.source, None, tuple(p.meta.get("global_size", (1,))),
                              p.meta.get("local_size"), p.meta)
            ready[ast] = _rendered[(target.name, settings, ast)] = kernel(ast, p, program)
    elif todo:
        programs = target.compile_many([(p.name, p.source, p.meta) for p in todo.values()])
        for (ast, p), prog in zip(todo.items(), programs, strict=True):
            ready[ast] = _compiled[(target.name, settings, ast)] = kernel(ast, p, prog)
            _rendered.pop((target.name, settings, ast), None)
    return [ready[k.ast] for k in kernels]


def compile_soon(kernels: list[ScheduledKernel]) -> bool:
    """Render ``kernels`` now and start compiling them in the background where their target can
    (``Target.compile_ahead``): a later ``run_schedule`` of them waits for that compile instead of making its own.
    Whether a compiler was started."""
    if not kernels:
        return False
    target = Device[kernels[0].device]
    settings = kernel_settings_key()
    fresh = [k for k in kernels if (target.name, settings, k.ast) not in _compiled]
    # compile_kernels compiles them later in this order, each kernel graph once
    rendered = dict(zip((k.ast for k in fresh), compile_kernels(fresh, target, build=False), strict=True))
    return target.compile_ahead([(ck.name, ck.program.source, ck.program.meta)
                                 for ck in rendered.values()]) > 0


def dtype_policy_report(compiled: list[CompiledKernel]) -> ModelDTypeReport:
    """Which dtypes a set of compiled kernels (a model's schedule) ran natively and which emulated, and why."""
    return aggregate_policies((ck.name, ck.dtype_policy) for ck in compiled)


def schedule_dtype_policy(targets: list[UOp], device: str | None = None) -> ModelDTypeReport:
    """The dtype-policy report of the kernels realizing ``targets`` would launch (compiles, does not run)."""
    return dtype_policy_report(compile_uops(targets, device))


def run_schedule(kernels: list[ScheduledKernel]) -> None:
    """Launch ``kernels`` in order."""
    if not kernels:
        return
    compiled = compile_kernels(kernels, Device[kernels[0].device])
    for k, ck in zip(kernels, compiled, strict=True):
        target = Device[k.device]
        # what it reads may live on another device; what it writes (the first) is its own, never a copy
        bufs = [device_buffer(k.buffers[0]), *(device_buffer_on(b, k.device) for b in k.buffers[1:])]
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


def compiled_kernel(target_name: str, name: str, source: str) -> CompiledKernel | None:
    """The kernel named ``name`` with ``source`` compiled (or only rendered) in this process for target
    ``target_name`` under the current settings (its stats and dtype policy, e.g. for a package manifest); None when
    there is none. The source tells it apart from another capture's kernel of the same name (``KernelNames``)."""
    settings = kernel_settings_key()
    for (tname, tsettings, _), ck in (*_compiled.items(), *_rendered.items()):
        if tname == target_name and tsettings == settings and ck.name == name and ck.program.source == source:
            return ck
    return None
