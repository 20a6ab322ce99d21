"""CPU replay: the dispatch list becomes one generated C driver compiled with the kernels, so a replay is one FFI
call with no Python per kernel.

The driver takes one pointer table ``p``: ``p[0]`` is the arena, then one slot per weight, state, input and
output, in command-buffer order, and last the replay's flag per dispatch, set where a parallel dispatch runs on the
calling thread alone (targets/cpu_split.py). Arena bindings are ``p[0]`` plus a constant offset baked into the
source; the replay fills the input and output slots with the caller's arrays (no copy in, outputs written in place into
fresh arrays) and calls ``drivepack_run(p)``. ``drivepack_dispatch(p, i)`` runs dispatch ``i`` alone, for
per-kernel timing. Kernels and driver are one translation unit built through the CPU target's cached compile
(keyed by source hash, so a second process compiles nothing); kernels get hidden visibility so they never bind to
same-named kernels of other loaded objects. Before anything is compiled every kernel's recorded flags and source
are checked (targets/source_check.py): the compiler only ever sees the target's own flags. No state lives in the
shared object itself: two replays of one command buffer share the code and keep separate tables.

Threads: a parallel kernel takes the range of its parallel loops as its last two parameters (``int dp_lo, int
dp_hi``, targets/cstyle/walk.py); its dispatch records the range's n as ``global_size[0]`` (the index check bounds
the parameters by it, targets/index_ranges.py), and the driver calls it through a job function that the process's
thread pool (targets/cpu_pool.py) runs over chunks of ``[0, n)``, the calling thread included. A segment's lanes
are chunks of one pool region too (a kernel's own split inside a lane runs on the lane's thread). The driver's
glue follows every kernel in the file, so no kernel can name it. ``set_threads`` sets the count per replay;
kernels of an earlier renderer (the OpenMP pragma) still build, with -fopenmp, and follow the same count.

Inputs are read where the caller's memory lies (numpy array, bytes, memoryview or RawBuffer: the slot gets its
address): the kernels need no more than the dtype's natural alignment (vector loads go through memcpy), so only
untyped memory off that alignment is copied (``Replay.input_modes`` says so). A replay built with
``share_states_with`` points its state slots at the other replay's arrays: one buffer, written by both drivers.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import cffi
import numpy as np

import targets.cpu_runtime as cpu
from targets.base import Program, RenderedKernel, Runtime
from targets.cmdbuf import BufferSpec, CommandBuffer, Dispatch, KernelSpec, Scalar, parse_arena
from targets.cpu_split import (
    ROUNDS,
    candidates,
    keep_choice,
    probe_wanted,
    split_choice,
    split_key,
    store_choice,
    stored_choice,
)
from targets.host_memory import aligned_in_place, huge_page_array
from targets.kernel_cache import framed_digest
from targets.kernel_params import kernel_params, range_kernel
from targets.replay import AheadBuild, Replay, ReplayError
from targets.source_check import C, check_kernels

DRIVER_HEADER = """#include <stdint.h>
#define DP_EXPORT __attribute__((visibility("default")))
"""
# flags added to the kernels' own: symbols stay local to the object, calls between them direct
DRIVER_FLAGS = ("-fvisibility=hidden",)
# a command buffer of fewer than twice this many kernels is one unit: a parallel build would cost more compiler
# starts than it saves
MIN_KERNELS_PER_PART = 8
# kernel source per translation unit: enough that a compiler start is a small share of its work, little enough
# that a capture starts compiling its first units while it still renders the rest (``CPUAheadBuild``)
UNIT_BYTES = 100_000
_THREADS_SETTER = "drivepack_set_threads"
# the flags a CPU kernel may record (``default_flags``): the target's, with or without OpenMP; "" (a command
# buffer written without flags) means the target's
OPENMP_KERNEL_FLAGS = " ".join((*cpu.CFLAGS, *cpu.OPENMP_FLAGS))
TARGET_FLAGS = frozenset({"", " ".join(cpu.CFLAGS), OPENMP_KERNEL_FLAGS})

# scalar dtype -> (C type, unsigned C type of the same width holding its bits)
_SCALAR_TYPES = {"bool": ("_Bool", "uint8_t"), "int8": ("int8_t", "uint8_t"), "int16": ("int16_t", "uint16_t"),
                 "int32": ("int32_t", "uint32_t"), "int64": ("int64_t", "uint64_t"), "uint8": ("uint8_t", "uint8_t"),
                 "uint16": ("uint16_t", "uint16_t"), "uint32": ("uint32_t", "uint32_t"),
                 "uint64": ("uint64_t", "uint64_t"), "float16": ("_Float16", "uint16_t"),
                 "float32": ("float", "uint32_t"), "float64": ("double", "uint64_t")}


def scalar_expr(s: Scalar) -> str:
    """A C expression of exactly the scalar's value: its bits reinterpreted (floats keep NaN payloads)."""
    if s.dtype not in _SCALAR_TYPES:
        raise ReplayError(f"scalar: dtype expected one of {sorted(_SCALAR_TYPES)}, got {s.dtype}")
    ctype, utype = _SCALAR_TYPES[s.dtype]
    return f"((union {{ {utype} u; {ctype} v; }}){{ .u = ({utype}){s.bits}ULL }}).v"


class CPUReplay(Replay):
    """A command buffer of C kernels, replayed by one call into a generated driver."""

    languages = ("CPU",)
    threaded = True
    mode = "cpu_driver"
    mode_reason = "one call into the generated C driver runs every dispatch"

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime,
                 share_states_with: Replay | None = None) -> None:
        super().__init__(cmdbuf, weights, target, share_states_with)
        # package text never steers the compiler: flags are the target's own, sources the renderer's shape
        _check_kernels_once(cmdbuf)
        self.slots = self._slot_table()
        parts = driver_parts(cmdbuf, self.slots, cpu.compile_jobs())
        self.source = "\n".join(parts)
        self.flags = _flags(cmdbuf.kernels)
        path = cpu.compile_shared_parts(parts, flags=(*self.flags, *DRIVER_FLAGS))
        if any(f in self.flags for f in cpu.OPENMP_FLAGS):
            cpu.pin_openmp_runtime()
        self._ffi = cffi.FFI()
        self._ffi.cdef("void drivepack_run(void **p); int drivepack_dispatch(void **p, int i); "
                       f"void {_THREADS_SETTER}(int n); void drivepack_set_pool(void *f);")
        self._lib = self._ffi.dlopen(str(path))
        self._run_fn, self._dispatch_fn = self._lib.drivepack_run, self._lib.drivepack_dispatch
        self.threads = 1
        ranged = _ranged(cmdbuf)
        self._parallel = [ranged[d.kernel] for d in cmdbuf.dispatches]
        # per thread count: which parallel dispatches run inline (targets/cpu_split.py), measured on its first call
        self._inline: dict[int, list[bool]] = {}
        self._inline_flags = np.zeros(max(len(cmdbuf.dispatches), 1), np.uint8)  # the driver reads them per call
        self._threads_cell = np.ones(1, np.int32)  # and this replay's thread count
        self._inline_for = 1 if any(self._parallel) else 0  # the thread count whose choice they hold (0: no choices)
        self._pool: Any = None
        if cmdbuf.segments or any(ranged):  # parallel kernels, lanes: on the pool (one per process)
            pool = cpu.thread_pool()
            self._pool = pool.lib
            self._lib.drivepack_set_pool(self._ffi.cast("void*", pool.parallel_for_address))
        self.set_threads(int(getattr(target, "threads", 1)))
        if cpu.OMP_THREADS_SYMBOL in self.source:
            # a forked child cannot use the parent's OpenMP thread pool (kernels of an earlier version's pragma):
            # it runs single-threaded; the drivepack pool starts its own workers in a child
            os.register_at_fork(after_in_child=cpu.call_if_alive(weakref.WeakMethod(self._single_thread)))
        # memory the table points at; kept referenced for as long as the replay lives
        # read and written by every call: on huge pages, as the weights a capture packs (targets/host_memory.py);
        # zero-filled, as the bindings in cmdbuf.zeroed need (no dispatch writes their zeros)
        self._keep: dict[str, np.ndarray] = {"arena:": huge_page_array(cmdbuf.arena_bytes)}
        for wid, data in aligned_in_place(self.weights, cmdbuf.alignment).items():
            self._keep[f"weight:{wid}"] = data
        for spec in cmdbuf.states:
            if spec.name in self.shared_states:
                assert isinstance(share_states_with, CPUReplay)  # device_mismatch refused any other engine
                self._keep[spec.binding] = share_states_with.state_array(spec.name)
            else:
                self._keep[spec.binding] = target.allocate(spec.nbytes).handle
        self._table = self._ffi.new("void*[]", len(self.slots) + 2)
        self._table[len(self.slots)] = self._ffi.cast("void*", self._inline_flags.ctypes.data)
        self._table[len(self.slots) + 1] = self._ffi.cast("void*", self._threads_cell.ctypes.data)
        for binding, slot in self.slots.items():
            if binding in self._keep:
                self._table[slot] = self._ffi.cast("void*", self._keep[binding].ctypes.data)
        self._in_slots = [self.slots[b.binding] for b in cmdbuf.inputs]
        self._out_slots = [self.slots[b.binding] for b in cmdbuf.computed_outputs]
        self.reset_own_states()

    @staticmethod
    def ahead_build(target: Runtime) -> AheadBuild:
        return CPUAheadBuild()

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        # kernels with a thread pragma (an earlier renderer's) are built with the target's OpenMP flags as well
        extra = cpu.OPENMP_FLAGS if program.meta.get("openmp") else ()
        return " ".join((*cpu.CFLAGS, *extra))

    def set_threads(self, n: int) -> None:
        """Threads the driver's parallel kernels and lanes use from the next call on (the CPU target's count at
        load: ``$DRIVEPACK_CPU_THREADS``, else the cores this process may run on)."""
        if n < 1:
            raise ReplayError(f"threads: expected a positive integer, got {n}")
        self._threads_cell[0] = n
        getattr(self._lib, _THREADS_SETTER)(n)  # the OpenMP team size of earlier versions' kernels (_glue)
        self.threads = n

    def _single_thread(self) -> None:
        self.set_threads(1)

    def _slot_table(self) -> dict[str, int]:
        order = ["arena:"] + [b.binding for b in self.cmdbuf.buffers if b.kind != "arena"]
        return {b: i for i, b in enumerate(order)}

    def _bind(self, arrays: list[np.ndarray], outputs: list[np.ndarray]) -> list[Any]:
        """Point the input and output slots at the arrays; returns the cffi views the call must keep alive."""
        table, keep = self._table, []
        for slot, a in zip(self._in_slots + self._out_slots, arrays + outputs, strict=True):
            try:
                view = self._ffi.from_buffer(a)  # the fastest pointer cffi gives for a numpy array
            except TypeError:  # ml_dtypes arrays (bf16, fp8) do not export the buffer protocol
                view = self._ffi.cast("void*", a.ctypes.data)
            table[slot] = view
            keep.append(view)
        return keep

    def _pool_held(self) -> _PoolHold:
        """The pool held for one call (``dp_pool_hold``, targets/cpu_pool.py): its sleeping workers woken at the
        start, while the call binds its arrays and runs its first kernels, and polling between the call's regions
        instead of sleeping. Nothing where the call runs on one thread."""
        return _PoolHold(self._pool if self.threads > 1 else None)

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self._split_for_threads(inputs)
        with self._pool_held():
            outputs = self.new_outputs()
            keep = self._bind(inputs, outputs)
            self._run_fn(self._table)
            del keep
        return outputs

    @property
    def inline_dispatches(self) -> dict[int, tuple[int, ...]]:
        """Per thread count measured so far: the parallel dispatches that run on the caller alone
        (targets/cpu_split.py)."""
        return {threads: tuple(i for i, on in enumerate(choice) if on) for threads, choice in self._inline.items()}

    def _set_inline(self, choice: Sequence[bool]) -> None:
        self._inline_flags[:len(choice)] = choice

    def _split_for_threads(self, inputs: list[np.ndarray]) -> None:
        """Apply this thread count's choice of dispatches run inline, measuring it first on its first call
        (targets/cpu_split.py); nothing to choose on one thread, without parallel dispatches, or with the probe
        off."""
        if not self._inline_for or self.threads in (1, self._inline_for):
            return  # nothing to choose, one thread splits nothing, or the choice is in force: every call checks
        if self.threads not in self._inline:
            self._inline[self.threads] = self._stored_or_measured_split(inputs) if probe_wanted() else \
                [False] * self.n_dispatches
        self._set_inline(self._inline[self.threads])
        self._inline_for = self.threads

    def _stored_or_measured_split(self, inputs: list[np.ndarray]) -> list[bool]:
        """The choice the kernel cache holds for this driver, thread count and machine, else measured and stored
        (targets/cpu_split.py)."""
        key = split_key(self.source, self.threads)
        choice = stored_choice(key, self.n_dispatches)
        if choice is None:
            self._pool.dp_pool_end_solo()  # a stall before or while measuring would time every dispatch inline
            choice = self._measure_split(inputs)
            if self._pool.dp_pool_solo():
                return [False] * self.n_dispatches  # a worker stalled: timings of a shared core, not stored
            store_choice(key, choice)
        return choice

    def _measure_split(self, inputs: list[np.ndarray]) -> list[bool]:
        """Every dispatch timed split and inline, in order, then the candidates (targets/cpu_split.py) again
        ``ROUNDS - 1`` times, then the whole call with the resulting choice against every dispatch split; the states
        are restored afterwards, so the call that measured computes from the states it was given."""
        n = self.n_dispatches
        saved = {spec.binding: self._keep[spec.binding].copy() for spec in self.cmdbuf.states}
        best = {False: [float("inf")] * n, True: [float("inf")] * n}
        whole = {False: float("inf"), True: float("inf")}
        with self._pool_held():
            outputs = self.new_outputs()
            keep = self._bind(inputs, outputs)
            timed: Sequence[int] = range(n)
            for _ in range(ROUNDS):
                for inline in (False, True):
                    self._set_inline([inline and p for p in self._parallel])
                    times = best[inline]
                    for i in timed:
                        start = time.perf_counter()
                        self._dispatch_fn(self._table, i)
                        times[i] = min(times[i], time.perf_counter() - start)
                timed = candidates(best[False], best[True], self._parallel)
            choice = split_choice(best[False], best[True], self._parallel)
            for _ in range(ROUNDS if any(choice) else 0):
                for chosen in (False, True):
                    self._set_inline(choice if chosen else [False] * n)
                    start = time.perf_counter()
                    self._run_fn(self._table)
                    whole[chosen] = min(whole[chosen], time.perf_counter() - start)
            del keep
        for binding, data in saved.items():
            self._keep[binding][:] = data
        return choice if any(choice) and keep_choice(whole[False], whole[True]) else [False] * n

    def _profile(self, inputs: list[np.ndarray]) -> tuple[list[float], list[np.ndarray]]:
        self._split_for_threads(inputs)
        with self._pool_held():
            outputs = self.new_outputs()
            keep = self._bind(inputs, outputs)
            times = []
            for i in range(self.n_dispatches):
                start = time.perf_counter()
                self._dispatch_fn(self._table, i)
                times.append(time.perf_counter() - start)
            del keep
        return times, outputs

    def state_array(self, name: str) -> np.ndarray:
        """The aligned host array state ``name`` lives in (no copy: what the driver's slot points at)."""
        return self._keep[self.state_spec(name).binding]

    def state_handle(self, name: str) -> int:
        return int(self.state_array(name).ctypes.data)

    def _read_state(self, spec: BufferSpec, out: np.ndarray) -> None:
        out[:] = self._keep[spec.binding][:spec.nbytes]

    def _write_state(self, spec: BufferSpec, data: np.ndarray) -> None:
        self._keep[spec.binding][:spec.nbytes] = data


# digests of kernel sets check_kernels passed in this process: a capture checks the kernels it rendered, and each
# replay of a package the same ones again (a fifth of a warm capture's time on an efficientnet)
_checked: set[str] = set()


class _PoolHold:
    """``CPUReplay._pool_held``'s context (``pool``: the pool's library, None for nothing to hold): a plain class,
    because a generator-based context manager costs a small model's call about a microsecond more."""

    __slots__ = ("pool",)

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def __enter__(self) -> None:
        if self.pool is not None:
            self.pool.dp_pool_hold(1)

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.dp_pool_hold(-1)


def _check_kernels_once(cmdbuf: CommandBuffer) -> None:
    """``check_kernels(cmdbuf, C, TARGET_FLAGS)``, skipped for a set of kernels that passed it before in this
    process. The check reads only each kernel's name, entry, flags and source: the digest covers exactly those
    (lengths framed, so no two different sets share one); a set that failed is checked (and fails) again."""
    if not all(isinstance(t, str) for k in cmdbuf.kernels for t in (k.name, k.entry, k.flags, k.source)):
        check_kernels(cmdbuf, C, TARGET_FLAGS)  # refuses what is no text, with its own message
        return
    digest = framed_digest(t for k in cmdbuf.kernels for t in (k.name, k.entry, k.flags, k.source))
    if digest in _checked:
        return
    check_kernels(cmdbuf, C, TARGET_FLAGS)
    _checked.add(digest)


def _flags(kernels: Sequence[KernelSpec]) -> tuple[str, ...]:
    """The flags of one translation unit holding every kernel: the CPU target's, with its OpenMP flags when a
    kernel was built with them (a command buffer of an earlier version, whose kernels carry the OpenMP pragma;
    -fopenmp only changes kernels that use it). Built from the target's own tuples, never from the recorded text
    (``check_kernels`` refused any other)."""
    openmp = any(k.flags == OPENMP_KERNEL_FLAGS for k in kernels)
    return (*cpu.CFLAGS, *cpu.OPENMP_FLAGS) if openmp else cpu.CFLAGS


def _arg(binding: str, slots: dict[str, int]) -> str:
    if binding.startswith("arena:"):
        off, _ = parse_arena(binding)
        return f"(void*)((char*)p[0] + {off})"
    return f"p[{slots[binding]}]"


def _call(cmdbuf: CommandBuffer, d: Dispatch, slots: dict[str, int], lo_hi: str = "") -> str:
    args = [_arg(b, slots) for b in d.bindings] + [scalar_expr(s) for s in d.scalars]
    return f"{cmdbuf.kernels[d.kernel].entry}({', '.join(args + ([lo_hi] if lo_hi else []))});"


def _ranged(cmdbuf: CommandBuffer) -> list[bool]:
    """Per kernel: whether it takes the range parameters (a parallel kernel the driver splits over the pool)."""
    return [range_kernel(k.source, k.entry, k.name) for k in cmdbuf.kernels]


# the driver's own part, after every kernel (so that no kernel can name it): the pool's entry (set at load), the
# thread count, and the split of one range over the pool (inline when there is no pool or one thread)
# the glue only calls kernels: optimized as little as that needs (the kernels before it keep their flags), it
# compiles in about half the time, and it is the last unit a capture's replay waits for
GLUE_OPTIMIZE = '#pragma GCC optimize ("O1")'
DRIVER_POOL = """typedef void (*dp_job_fn)(void *ctx, int lo, int hi);
typedef void (*dp_parallel_fn)(int threads, int n, int chunks, dp_job_fn fn, void *ctx);
static dp_parallel_fn dp_parallel;
/* ctx is the replay's table; after the buffers, the replay's flag per dispatch: run on the caller alone
   (targets/cpu_split.py), and its thread count: the replay's own, not this library's, which every replay of the
   same command buffer shares. i < 0: a segment's lanes, always split */
static void dp_split(int i, int n, int chunks, dp_job_fn fn, void *ctx) {
  const unsigned char *inline_flags = ((void **)ctx)[DP_INLINE_SLOT];
  int threads = *(const int *)((void **)ctx)[DP_THREADS_SLOT];
  if (dp_parallel && threads > 1 && (i < 0 || !inline_flags[i])) dp_parallel(threads, n, chunks, fn, ctx);
  else fn(ctx, 0, n);
}
DP_EXPORT void drivepack_set_pool(void *f) { dp_parallel = (dp_parallel_fn)f; }
"""


def _statements(cmdbuf: CommandBuffer, slots: dict[str, int]) -> tuple[list[str], list[str]]:
    """Per dispatch the statement that runs it (a parallel one: its range split over the pool, through a job
    function taking the subrange), and the job functions."""
    ranged = _ranged(cmdbuf)
    calls, jobs = [], []
    for i, d in enumerate(cmdbuf.dispatches):
        if not ranged[d.kernel]:
            calls.append(_call(cmdbuf, d, slots))
            continue
        jobs.append(f"static void dp_job{i}(void *ctx, int lo, int hi) {{ void **p = ctx; "
                    f"{_call(cmdbuf, d, slots, 'lo, hi')} }}")
        calls.append(f"dp_split({i}, {d.global_size[0]}, 0, dp_job{i}, p);")
    return calls, jobs


def _lanes(cmdbuf: CommandBuffer, calls: list[str]) -> tuple[dict[int, str], list[str]]:
    """Per segment start the statement that runs its lanes side by side on the pool (one chunk per lane: lanes
    claimed by whichever thread is free, the caller included), and the lane functions. A kernel's own split inside
    a lane runs on the lane's thread alone (the pool is busy with the lanes)."""
    starts, fns = {}, []
    for k, seg in enumerate(cmdbuf.segments):
        n_lanes = max(seg.lanes) + 1
        body = [f"static void dp_lanes{k}(void *ctx, int lo, int hi) {{", "  void **p = ctx;",
                "  for (int lane = lo; lane < hi; lane++) {", "    switch (lane) {"]
        for lane in range(n_lanes):
            body.append(f"    case {lane}:")
            body += [f"      {calls[j]}" for j in range(seg.start, seg.end) if seg.lanes[j - seg.start] == lane]
            body.append("      break;")
        fns.append("\n".join([*body, "    }", "  }", "}"]))
        starts[seg.start] = f"dp_split(-1, {n_lanes}, {n_lanes}, dp_lanes{k}, p);"
    return starts, fns


def _run_body(cmdbuf: CommandBuffer, calls: list[str], lanes: dict[int, str]) -> list[str]:
    """Every dispatch in order, except that each segment's dispatches run as its lanes."""
    lines: list[str] = []
    segments = {s.start: s for s in cmdbuf.segments}
    i = 0
    while i < len(calls):
        seg = segments.get(i)
        if seg is None:
            lines.append(f"  {calls[i]}")
            i += 1
            continue
        lines.append(f"  {lanes[i]}")
        i = seg.end
    return lines


def _glue(cmdbuf: CommandBuffer, slots: dict[str, int]) -> list[str]:
    """The driver's pool glue, ``drivepack_run`` (every dispatch in order, segments' lanes concurrently),
    ``drivepack_dispatch`` (one) and the thread-count setter (which also sets the OpenMP team size of kernels
    built with the pragma, in command buffers of earlier versions): what follows the kernels."""
    calls, jobs = _statements(cmdbuf, slots)
    lanes, lane_fns = _lanes(cmdbuf, calls)
    lines = [GLUE_OPTIMIZE, f"#define DP_INLINE_SLOT {len(slots)}", f"#define DP_THREADS_SLOT {len(slots) + 1}",
             DRIVER_POOL, *jobs, *lane_fns, ""]
    symbol = cpu.OMP_THREADS_SYMBOL
    omp = f"{symbol} = n;" if any(f"int {symbol}" in k.source for k in cmdbuf.kernels) else "(void)n;"
    lines += [f"DP_EXPORT void {_THREADS_SETTER}(int n) {{ {omp} }}", ""]
    lines += ["DP_EXPORT void drivepack_run(void **p) {", *_run_body(cmdbuf, calls, lanes)]
    lines += ["}", "", "DP_EXPORT int drivepack_dispatch(void **p, int i) {", "  switch (i) {"]
    lines += [f"  case {i}: {c} return 0;" for i, c in enumerate(calls)]
    lines += ["  default: return -1;", "  }", "}", ""]
    return lines


def driver_source(cmdbuf: CommandBuffer, slots: dict[str, int]) -> str:
    """The kernels followed by the driver's glue (``_glue``): one translation unit."""
    return "\n".join([DRIVER_HEADER, *(k.source for k in cmdbuf.kernels), "", *_glue(cmdbuf, slots)])


def _declaration(source: str, name: str) -> str:
    """What the glue needs to call kernel ``name`` of another translation unit: the text before its definition
    (includes and guarded typedefs, which its parameters may use) and its signature as a prototype."""
    head, _, rest = source.partition(f"void {name}(")
    return f"{head}void {name}({rest.split(') {', 1)[0]});"


def _object_wide(source: str) -> bool:
    """Whether a kernel defines a symbol once per object (integer power helpers, the OpenMP team size): such
    kernels stay in the glue's unit."""
    return "#ifndef DP_IPOW" in source or f"int {cpu.OMP_THREADS_SYMBOL}" in source


def _in_glue_unit(source: str, entry: str) -> bool:
    """Whether a kernel is compiled in the glue's unit instead of a kernel unit: an object-wide one
    (``_object_wide``), or one of a single buffer, which reads nothing. The latter are the zero fills of padded
    copies, which a capture renders and then mostly drops (the replay zeroes the copy once, jit/trace.py
    ``_zeroed_once``): in the kernel units, a fill rendered and then dropped made every later unit's text differ
    from the command buffer's, and those units were compiled twice, the second time while the capture waited."""
    return _object_wide(source) or sum(p.pointer for p in kernel_params(source, entry, "kernel")) == 1


class _UnitBuilder:
    """Kernel sources gathered, in order, into translation units closed once they hold ``UNIT_BYTES``."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self._open: list[str] = []
        self._size = 0

    def add(self, source: str) -> str | None:
        """Adds a kernel's source; returns the unit it closed, if it closed one."""
        self._open.append(source)
        self._size += len(source)
        if self._size < UNIT_BYTES:
            return None
        self.closed.append("\n".join(self._open))
        self._open, self._size = [], 0
        return self.closed[-1]

    def units(self) -> list[str]:
        return [*self.closed, "\n".join(self._open)] if self._open else self.closed


def _kernel_units(kernels: Sequence[KernelSpec], jobs: int) -> tuple[list[str], list[KernelSpec]] | None:
    """The kernels of ``driver_parts``' units but the glue's: consecutive kernels in command-buffer order, each
    unit closed once it holds ``UNIT_BYTES`` of source (so a unit is known before the kernels after it are
    rendered), and the kernels left for the glue's unit; None where everything is one unit."""
    if jobs < 2 or len(kernels) < 2 * MIN_KERNELS_PER_PART:
        return None
    shared = [k for k in kernels if _in_glue_unit(k.source, k.entry)]
    builder = _UnitBuilder()
    for k in kernels:
        if k not in shared:
            builder.add(k.source)
    return builder.units(), shared


def driver_parts(cmdbuf: CommandBuffer, slots: dict[str, int], jobs: int) -> list[str]:
    """``driver_source`` as translation units to compile side by side (``jobs`` of 2 or more): the kernels in
    units of about ``UNIT_BYTES`` (``_kernel_units``), and the glue, which declares them. Kernels ``_in_glue_unit``
    (object-wide symbols, zero fills) are compiled with the glue, and a command buffer of fewer than
    2 * ``MIN_KERNELS_PER_PART`` kernels is one unit."""
    units = _kernel_units(cmdbuf.kernels, jobs)
    if units is None:
        return [driver_source(cmdbuf, slots)]
    groups, shared = units
    apart = [k for k in cmdbuf.kernels if k not in shared]
    glue = [DRIVER_HEADER, *(k.source for k in shared), *(_declaration(k.source, k.entry) for k in apart), "",
            *_glue(cmdbuf, slots)]
    return [*groups, "\n".join(glue)]


class CPUAheadBuild(AheadBuild):
    """Each driver unit (``_kernel_units``) compiled from the moment the capture has rendered its kernels: the
    compiler runs beside the rendering of the rest and the command buffer's check, and the replay made later links
    the objects. A unit the command buffer's kernels do not make after all (another order, fewer kernels, other
    flags) is stopped at ``finish``."""

    def __init__(self) -> None:
        self._flags = (*cpu.CFLAGS, *DRIVER_FLAGS)  # what ``_flags`` gives kernels of this renderer
        self._names: set[str] = set()
        self._units = _UnitBuilder()
        self._started: list[str] = []

    def add(self, kernel: RenderedKernel) -> None:
        if kernel.name in self._names or _in_glue_unit(kernel.source, kernel.name):
            return
        self._names.add(kernel.name)
        closed = self._units.add(kernel.source)
        if closed is not None:
            self._start(closed)

    def rendered(self) -> None:
        # the last unit too, while the capture plans its arena and checks its command buffer; only after a closed
        # one (fewer kernels may make a single unit of everything, which compiles differently)
        if self._started and len(units := self._units.units()) > len(self._units.closed):
            self._start(units[-1])

    def _start(self, unit: str) -> None:
        if cpu.compile_jobs() >= 2:
            cpu.compile_ahead([unit], flags=self._flags)
            self._started.append(unit)

    def finish(self, kernels: Sequence[KernelSpec]) -> int:
        units = _kernel_units(kernels, cpu.compile_jobs())
        flags = (*_flags(kernels), *DRIVER_FLAGS)
        made = set(units[0]) if units is not None and flags == self._flags else set()
        cpu.abandon_ahead([part for part in self._started if part not in made], flags=self._flags)
        return 0 if units is None else cpu.compile_ahead(units[0], flags=flags)
