"""CPU replay: the dispatch list becomes one generated C driver compiled with the kernels, so a replay is one FFI
call with no Python per kernel.

The driver takes one pointer table ``p``: ``p[0]`` is the arena, then one slot per weight, state, input and
output, in command-buffer order. Arena bindings are ``p[0]`` plus a constant offset baked into the source; the
replay fills the input and output slots with the caller's arrays (no copy in, outputs written in place into
fresh arrays) and calls ``drivepack_run(p)``. ``drivepack_dispatch(p, i)`` runs dispatch ``i`` alone, for
per-kernel timing. Kernels and driver are one translation unit built through the CPU target's cached compile
(keyed by source hash, so a second process compiles nothing); kernels get hidden visibility so they never bind to
same-named kernels of other loaded objects. Before anything is compiled every kernel's recorded flags and source
are checked (targets/source_check.py): the compiler only ever sees the target's own flags. No state lives in the
shared object itself: two replays of one command buffer share the code and keep separate tables.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Mapping
from typing import Any

import cffi
import numpy as np

import targets.cpu_runtime as cpu
from targets.base import Program, Runtime
from targets.cmdbuf import BufferSpec, CommandBuffer, Dispatch, Scalar, parse_arena
from targets.replay import Replay, ReplayError
from targets.source_check import C, check_kernels

DRIVER_HEADER = """#include <stdint.h>
#define DP_EXPORT __attribute__((visibility("default")))
"""
# flags added to the kernels' own: symbols stay local to the object, calls between them direct
DRIVER_FLAGS = ("-fvisibility=hidden",)
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
    mode = "cpu_driver"
    mode_reason = "one call into the generated C driver runs every dispatch"

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime) -> None:
        super().__init__(cmdbuf, weights, target)
        # package text never steers the compiler: flags are the target's own, sources the renderer's shape
        check_kernels(cmdbuf, C, TARGET_FLAGS)
        self.slots = self._slot_table()
        source = driver_source(cmdbuf, self.slots)
        self.source = source
        self.flags = _flags(cmdbuf)
        path = cpu.compile_shared(source, flags=(*self.flags, *DRIVER_FLAGS))
        if any(f in self.flags for f in cpu.OPENMP_FLAGS):
            cpu.pin_openmp_runtime()
        self._ffi = cffi.FFI()
        self._ffi.cdef("void drivepack_run(void **p); int drivepack_dispatch(void **p, int i);")
        self._lib = self._ffi.dlopen(str(path))
        self._run_fn, self._dispatch_fn = self._lib.drivepack_run, self._lib.drivepack_dispatch
        self.threads = 1
        if _THREADS_SETTER in source:
            self._ffi.cdef(f"void {_THREADS_SETTER}(int n);")
            self.set_threads(int(getattr(target, "threads", 1)))
            # a forked child cannot use the parent's OpenMP thread pool: it runs single-threaded
            os.register_at_fork(after_in_child=cpu.call_if_alive(weakref.WeakMethod(self._single_thread)))
        # memory the table points at; kept referenced for as long as the replay lives
        self._arena = target.allocate(cmdbuf.arena_bytes)
        self._keep: dict[str, np.ndarray] = {"arena:": self._arena.handle}
        for wid, data in self.weights.items():
            self._keep[f"weight:{wid}"] = data if data.ctypes.data % cmdbuf.alignment == 0 else _aligned_copy(
                target, data)
        for spec in cmdbuf.states:
            self._keep[spec.binding] = target.allocate(spec.nbytes).handle
        self._table = self._ffi.new("void*[]", max(len(self.slots), 1))
        for binding, slot in self.slots.items():
            if binding in self._keep:
                self._table[slot] = self._ffi.cast("void*", self._keep[binding].ctypes.data)
        self._in_slots = [self.slots[b.binding] for b in cmdbuf.inputs]
        self._out_slots = [self.slots[b.binding] for b in cmdbuf.outputs]
        self.reset_state()

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        # kernels with a thread pragma are built with the target's OpenMP flags as well
        extra = cpu.OPENMP_FLAGS if program.meta.get("openmp") else ()
        return " ".join((*cpu.CFLAGS, *extra))

    def set_threads(self, n: int) -> None:
        """Threads the driver's parallel kernels use (the CPU target's count at load)."""
        if _THREADS_SETTER not in self.source:
            return
        if n < 1:
            raise ReplayError(f"threads: expected a positive integer, got {n}")
        getattr(self._lib, _THREADS_SETTER)(n)
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

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        outputs = self.new_outputs()
        keep = self._bind(inputs, outputs)
        self._run_fn(self._table)
        del keep
        return outputs

    def _profile(self, inputs: list[np.ndarray]) -> list[float]:
        outputs = self.new_outputs()
        keep = self._bind(inputs, outputs)
        times = []
        for i in range(self.n_dispatches):
            start = time.perf_counter()
            self._dispatch_fn(self._table, i)
            times.append(time.perf_counter() - start)
        del keep
        return times

    def _read_state(self, spec: BufferSpec, out: np.ndarray) -> None:
        out[:] = self._keep[spec.binding][:spec.nbytes]

    def _write_state(self, spec: BufferSpec, data: np.ndarray) -> None:
        self._keep[spec.binding][:spec.nbytes] = data


def _aligned_copy(target: Runtime, data: np.ndarray) -> np.ndarray:
    buf = target.allocate(data.nbytes)
    target.copyin(buf, memoryview(data))
    return buf.handle


def _flags(cmdbuf: CommandBuffer) -> tuple[str, ...]:
    """The flags of one translation unit holding every kernel: the CPU target's, with its OpenMP flags when a
    kernel was built with them (-fopenmp only changes kernels that use it) or lanes need them in the driver. Built
    from the target's own tuples, never from the recorded text (``check_kernels`` refused any other)."""
    openmp = bool(cmdbuf.segments) or any(k.flags == OPENMP_KERNEL_FLAGS for k in cmdbuf.kernels)
    return (*cpu.CFLAGS, *cpu.OPENMP_FLAGS) if openmp else cpu.CFLAGS


def _arg(binding: str, slots: dict[str, int]) -> str:
    if binding.startswith("arena:"):
        off, _ = parse_arena(binding)
        return f"(void*)((char*)p[0] + {off})"
    return f"p[{slots[binding]}]"


def _call(cmdbuf: CommandBuffer, d: Dispatch, slots: dict[str, int]) -> str:
    args = [_arg(b, slots) for b in d.bindings] + [scalar_expr(s) for s in d.scalars]
    return f"{cmdbuf.kernels[d.kernel].entry}({', '.join(args)});"


def _run_body(cmdbuf: CommandBuffer, calls: list[str]) -> list[str]:
    """Every dispatch in order, except that each segment's lanes run in one OpenMP team: thread t runs lanes
    t, t + team size, ... (a team of one runs them all, in order). A kernel's own parallel loop inside a lane is
    a nested region, which OpenMP runs on the lane's thread alone (libgomp's default of one active level)."""
    lines: list[str] = []
    segments = {s.start: s for s in cmdbuf.segments}
    i = 0
    while i < len(calls):
        seg = segments.get(i)
        if seg is None:
            lines.append(f"  {calls[i]}")
            i += 1
            continue
        n_lanes = max(seg.lanes) + 1
        lines += [f"  #pragma omp parallel num_threads({cpu.OMP_THREADS_SYMBOL} < {n_lanes} ? "
                  f"{cpu.OMP_THREADS_SYMBOL} : {n_lanes})",
                  f"  for (int lane = omp_get_thread_num(); lane < {n_lanes}; lane += omp_get_num_threads()) {{",
                  "    switch (lane) {"]
        for lane in range(n_lanes):
            lines.append(f"    case {lane}:")
            lines += [f"      {calls[j]}" for j in range(seg.start, seg.end) if seg.lanes[j - seg.start] == lane]
            lines.append("      break;")
        lines += ["    }", "  }"]
        i = seg.end
    return lines


def driver_source(cmdbuf: CommandBuffer, slots: dict[str, int]) -> str:
    """The kernels followed by ``drivepack_run`` (every dispatch in order, segments' lanes concurrently) and
    ``drivepack_dispatch`` (one), and a thread-count setter when the kernels declare the CPU target's OpenMP
    team-size variable or segments need it (hidden here)."""
    calls = [_call(cmdbuf, d, slots) for d in cmdbuf.dispatches]
    lines = [DRIVER_HEADER, *(k.source for k in cmdbuf.kernels), ""]
    symbol = cpu.OMP_THREADS_SYMBOL
    if cmdbuf.segments:
        lines += ["#include <omp.h>", cpu.OMP_THREADS_SETUP, ""]
    if cmdbuf.segments or any(f"int {symbol}" in k.source for k in cmdbuf.kernels):
        lines += [f"DP_EXPORT void {_THREADS_SETTER}(int n) {{ {symbol} = n; }}", ""]
    lines += ["DP_EXPORT void drivepack_run(void **p) {", *_run_body(cmdbuf, calls)]
    lines += ["}", "", "DP_EXPORT int drivepack_dispatch(void **p, int i) {", "  switch (i) {"]
    lines += [f"  case {i}: {c} return 0;" for i, c in enumerate(calls)]
    lines += ["  default: return -1;", "  }", "}", ""]
    return "\n".join(lines)
