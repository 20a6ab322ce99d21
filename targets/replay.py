"""Replaying a command buffer: the interface every target's replay engine answers, and input checking.

A replay is built from a CommandBuffer and its weight bytes alone (``make_replay(cmdbuf, weights, target)``) on a
target's device side (targets.base.Runtime); it never sees the compiler's objects, so a package file is replayed
without the ONNX front end, the renderer or the compiler's IR. Every call
checks its inputs by name before anything runs: missing or unexpected names, the kind of object, dtype, shape,
byte size, C-contiguity and alignment, each failure an InputError naming the input and the field
(``features_buffer: shape expected (1, 25, 512), got (1, 24, 512)``).

Zero-copy inputs: besides a numpy array, an input may be ``bytes``, a ``bytearray``, a ``memoryview`` (its format,
when not plain bytes, must be the input's dtype) or a ``RawBuffer(address, nbytes)`` (the caller keeps the memory
alive and unchanged for the call): each is checked for its exact byte size and read where it lies. Such untyped
memory that is not aligned to the input's dtype is copied once into an aligned array (a numpy array that is not
is refused, as numpy itself marks it unaligned). ``input_modes`` says, per input, how the last call read it:
``in place``, or ``copied: <why>`` (the OpenCL engine adds its own reasons: a device without host-unified memory,
an address off CL_DEVICE_MEM_BASE_ADDR_ALIGN, a small input, a first call at an address).

Shared states: ``make_replay(..., share_states_with=other)`` binds ``other``'s device buffers for every state of
the same name (dtype, shape, byte size and initial bytes must match), so two captured functions of one step (the
modeld ``run`` and ``prepare``) update one frame queue on the device, never copied to the host between calls.
Both replays then hold one lock, so their calls never interleave; ``reset_state`` on either resets the shared
buffers (to the one initial value both have), and building a sharer leaves them as they are.

Outputs are fresh numpy arrays on every call (the one device-to-host read writes into them), so a later replay
never overwrites what an earlier one returned. State buffers persist across calls inside the replay.

A replay may be called from several threads: each replay holds one lock and runs one call, profile, state read or
reset at a time (calls from other threads wait; inputs are checked before the wait). The engines' shared tables,
device buffers and command buffers are therefore never used by two calls at once, and every call's outputs are
exactly those of a single-threaded run over the same inputs and state. For calls that run in parallel, give each
thread its own replay (``make_replay`` or ``Package.make_replay`` again). A forked child gets fresh locks: a call
there never waits for a thread that exists only in the parent (replays that shared one lock share one again).
"""

from __future__ import annotations

import abc
import importlib
import os
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jit.common.dtype import dtypes, to_numpy
from jit.common.errors import DrivepackError, UnsupportedOp
from jit.common.helpers import DEBUG
from targets.base import Program, RenderedKernel, Runtime
from targets.cmdbuf import BufferSpec, CommandBuffer, KernelSpec
from targets.registry import Device

# runtime class (module.qualname) -> its replay engine (module:class); a subclass uses its nearest base's entry,
# so the compiler-facing targets and the QCOM profile (OpenCLRuntime subclasses) replay through these engines
ENGINES: dict[str, str] = {"targets.cpu_runtime.CPURuntime": "targets.replay_cpu:CPUReplay",
                           "targets.opencl_runtime.OpenCLRuntime": "targets.replay_opencl:OpenCLReplay"}


# every replay alive in this process: a forked child gets fresh locks, since the thread that held one at the fork
# does not exist in the child and would never release it
_LIVE: weakref.WeakSet[Replay] = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    fresh: dict[int, threading.Lock] = {}  # old lock -> its replacement, so replays sharing states still share one
    for replay in list(_LIVE):
        replay.lock = fresh.setdefault(id(replay.lock), threading.Lock())


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


class InputError(DrivepackError, ValueError):
    """A replay input that does not match the captured one: names the input, the field, expected and got."""


class ReplayError(DrivepackError, ValueError):
    """Weights or kernels that do not fit the command buffer or the target (names the field)."""


@dataclass(frozen=True)
class RawBuffer:
    """Host memory given by address: ``nbytes`` bytes at ``address``, read in place. The caller guarantees the
    memory stays valid and unchanged until the call returns (a camera buffer mapped by VisionIPC, say)."""

    address: int
    nbytes: int


IN_PLACE = "in place"


@dataclass(frozen=True)
class DispatchTime:
    """How long one dispatch ran, measured on its own (``Replay.profile``)."""

    index: int
    kernel: str
    seconds: float


@dataclass(frozen=True)
class DispatchSpan:
    """When one dispatch ran within a whole call, on the device's clock: seconds from the call's first start
    (``OpenCLReplay.timeline``). The time between one span's end and the next one's start is the driver's own."""

    index: int
    kernel: str
    start: float
    end: float


@dataclass(frozen=True)
class _InputCheck:
    """What one input must be, precomputed so the per-call check is a few comparisons."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int
    strides: tuple[int, ...]
    align: int  # the dtype's natural alignment, what numpy's ALIGNED flag checks


def _input_check(spec: BufferSpec) -> _InputCheck:
    npd = to_numpy(dtypes.from_name(spec.dtype))
    strides, acc = [], npd.itemsize
    for n in reversed(spec.shape):
        strides.append(acc)
        acc *= n
    return _InputCheck(spec.name, npd, tuple(spec.shape), spec.nbytes, tuple(reversed(strides)), npd.alignment)


def check_input(c: _InputCheck, value: Any) -> np.ndarray:
    """``value`` as a host array matching ``c`` (no copy unless untyped memory is misaligned); else an InputError
    naming the input and the field."""
    return host_input(c, value)[0]


class _AddressView:
    """Exposes raw memory to numpy without a copy (numpy's array interface over an address)."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__array_interface__ = {"data": (address, True), "shape": (nbytes,), "typestr": "|u1", "version": 3}


_BYTE_FORMATS = frozenset({"B", "b", "c", "@B", "=B", "<B", ">B"})


def _check_array(c: _InputCheck, value: np.ndarray) -> np.ndarray:
    if value.dtype != c.dtype:
        raise InputError(f"{c.name}: dtype expected {c.dtype}, got {value.dtype}")
    if value.shape != c.shape:
        raise InputError(f"{c.name}: shape expected {c.shape}, got {value.shape}")
    if value.nbytes != c.nbytes:
        raise InputError(f"{c.name}: nbytes expected {c.nbytes}, got {value.nbytes}")
    if not value.flags.c_contiguous:
        raise InputError(f"{c.name}: strides expected {c.strides} (C-contiguous), got {value.strides}")
    if not value.flags.aligned:  # numpy's own flag: the address is a multiple of the dtype's alignment
        address = value.__array_interface__["data"][0]
        raise InputError(f"{c.name}: alignment expected an address multiple of {c.align} bytes, got address % "
                         f"{c.align} == {address % c.align}")
    return value


def _raw_bytes(c: _InputCheck, value: Any) -> np.ndarray | None:
    """The bytes of an untyped input object as a uint8 array over the same memory; None for another kind."""
    if isinstance(value, RawBuffer):
        if not isinstance(value.nbytes, int) or value.nbytes < 0:
            raise InputError(f"{c.name}: nbytes expected a non-negative int, got {value.nbytes!r}")
        if not isinstance(value.address, int) or value.address < 0 or (value.address == 0 and value.nbytes):
            raise InputError(f"{c.name}: address expected a non-zero int, got {value.address!r}")
        if value.nbytes != c.nbytes:  # before numpy sees the address: never read past what the caller gave
            raise InputError(f"{c.name}: nbytes expected {c.nbytes}, got {value.nbytes}")
        return np.asarray(_AddressView(value.address, value.nbytes)) if value.nbytes else np.empty(0, np.uint8)
    if not isinstance(value, (bytes, bytearray, memoryview)):
        return None
    view = memoryview(value)
    if not view.c_contiguous:
        raise InputError(f"{c.name}: strides expected C-contiguous memory, got a memoryview of strides "
                         f"{view.strides}")
    if view.format not in _BYTE_FORMATS:
        try:
            fmt = np.dtype(view.format)
        except TypeError:
            fmt = None
        if fmt != c.dtype:
            raise InputError(f"{c.name}: dtype expected {c.dtype}, got memoryview format {view.format!r}")
    if view.nbytes != c.nbytes:
        raise InputError(f"{c.name}: nbytes expected {c.nbytes}, got {view.nbytes}")
    return np.frombuffer(view, dtype=np.uint8) if view.nbytes else np.empty(0, np.uint8)


def host_input(c: _InputCheck, value: Any) -> tuple[np.ndarray, str]:
    """(the input as a host array of ``c``'s dtype and shape, how it is read: ``in place`` or ``copied: why``)."""
    if isinstance(value, np.ndarray):
        return _check_array(c, value), IN_PLACE
    raw = _raw_bytes(c, value)
    if raw is None:
        where = getattr(value, "device", None)
        got = f"{type(value).__name__} on {where}" if where is not None else type(value).__name__
        # tests/targets/test_replay_inputs.py pins this text; bytes-like and RawBuffer are the module doc's
        raise InputError(f"{c.name}: device expected a host numpy.ndarray, got {got}")
    arr = raw.view(c.dtype).reshape(c.shape)
    address = raw.__array_interface__["data"][0]
    if address % c.align:
        # bytes carry no alignment promise, and the kernels read whole elements: one aligned copy
        return arr.copy(), f"copied: address not {c.align}-byte aligned (address % {c.align} == {address % c.align})"
    return arr, IN_PLACE



class AheadBuild:
    """A replay build started before its replay is made, by a capture that renders the kernels (only text this
    process rendered: a package's kernels are checked before anything compiles them). ``add`` is called with each
    kernel as it is rendered, in command-buffer order (a name seen before again), ``rendered`` after the last one,
    and ``finish`` with the command buffer's kernels once it is made, returning the compilers it started. This
    base builds nothing."""

    def add(self, kernel: RenderedKernel) -> None:
        """``kernel`` was rendered."""

    def rendered(self) -> None:
        """Every kernel is rendered; the command buffer is not made yet (a later step may still drop or change
        kernels, which ``finish`` then sees)."""

    def finish(self, kernels: Sequence[KernelSpec]) -> int:
        """Every kernel is rendered: ``kernels`` are the command buffer's."""
        return 0


class Replay(abc.ABC):
    """A command buffer made runnable on one target. Subclasses implement ``_run``, ``_profile`` and state
    access; this class checks inputs and weights and holds what every engine shares."""

    # kernel targets (the part before ':') whose sources this engine can build
    languages: tuple[str, ...] = ()
    # how a call runs the dispatches (``cpu_driver``, ``command_buffer``, ``enqueue_loop``) and why this one:
    # verify and replay print both, so a fallback is never silent
    mode: str = ""
    mode_reason: str = ""

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime,
                 share_states_with: Replay | None = None) -> None:
        self.cmdbuf, self.target = cmdbuf, target
        for k in cmdbuf.kernels:
            if k.target.split(":", 1)[0] not in self.languages:
                raise ReplayError(f"kernel {k.name}: target expected one of {list(self.languages)} for a "
                                  f"{target.name} replay, got {k.target}")
        self.weights = {int(b.name): _weight_bytes(b, weights) for b in cmdbuf.weights}
        self._checks = [_input_check(b) for b in cmdbuf.inputs]
        self._names = frozenset(c.name for c in self._checks)
        # what every call reads: a call of a small model costs microseconds, of which building these took a fifth
        self._input_names = tuple(c.name for c in self._checks)
        self._output_names = tuple(b.name for b in cmdbuf.outputs)
        computed = cmdbuf.computed_outputs  # what an engine's call fills (``new_outputs``), in this order
        self._output_layouts = tuple((b.shape, to_numpy(dtypes.from_name(b.dtype))) for b in computed)
        index = {b.binding: i for i, b in enumerate(computed)}
        source = {a.binding: a.source for a in cmdbuf.aliases}
        # per output: the computed array it is, or (an alias) the one whose bytes it copies, at its own shape
        self._assembly = tuple((index[source.get(b.binding, b.binding)], b.shape if b.binding in source else None)
                               for b in cmdbuf.outputs)
        # one run at a time: engines bind inputs into tables and buffers every call of this replay shares
        self.lock = threading.Lock()
        # how the last call read each input (``in place`` / ``copied: why``)
        self.input_modes: dict[str, str] = {}
        self.share_source = share_states_with
        self.shared_states = self._shared_states(share_states_with)
        if share_states_with is not None:
            self.lock = share_states_with.lock  # the other replay's calls write these buffers too
        _LIVE.add(self)

    def _shared_states(self, other: Replay | None) -> frozenset[str]:
        """The names of the states bound to ``other``'s buffers; ReplayError when they cannot be shared."""
        if other is None:
            return frozenset()
        if not isinstance(other, Replay):
            raise ReplayError(f"share_states_with: expected a Replay, got {type(other).__name__}")
        mismatch = self.device_mismatch(other)
        if mismatch:
            raise ReplayError(f"share_states_with: device {mismatch}")
        theirs = {b.name: b for b in other.cmdbuf.states}
        shared = []
        for b in self.cmdbuf.states:
            o = theirs.get(b.name)
            if o is None:
                continue  # a state only this replay has stays its own
            for field in ("dtype", "shape", "nbytes"):
                if getattr(b, field) != getattr(o, field):
                    raise ReplayError(f"state {b.name}: {field} expected {getattr(o, field)} (the shared replay's), "
                                      f"got {getattr(b, field)}")
            assert b.init is not None and o.init is not None  # CommandBuffer.validate guarantees it
            # one initial value, so a reset through either replay leaves the buffer in the same state
            if not np.array_equal(self.weights[b.init], other.weights[o.init]):
                raise ReplayError(f"state {b.name}: init expected the shared replay's initial bytes, got other bytes")
            shared.append(b.name)
        return frozenset(shared)

    def device_mismatch(self, other: Replay) -> str:
        """Why ``other``'s buffers cannot be bound here ("" when they can): another engine by default."""
        if type(other) is not type(self):
            return f"expected engine {type(self).__name__} on {self.target.name}, got {type(other).__name__} on " \
                   f"{other.target.name}"
        return ""

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        """The compile flags ``target`` built ``program`` with (recorded in its KernelSpec)."""
        return ""

    @staticmethod
    def ahead_build(target: Runtime) -> AheadBuild:
        """What builds a capture's kernels for ``target`` in the background while it renders and checks them, for a
        replay made of them later. Nothing by default: an engine builds when it is made."""
        return AheadBuild()

    @property
    def n_dispatches(self) -> int:
        return len(self.cmdbuf.dispatches)

    @property
    def input_names(self) -> list[str]:
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    def check_inputs(self, given: Mapping[str, Any]) -> list[np.ndarray]:
        """The inputs in command-buffer order, each checked; InputError on the first mismatch."""
        return self.checked_inputs(given)[0]

    def checked_inputs(self, given: Mapping[str, Any]) -> tuple[list[np.ndarray], list[str]]:
        """(the inputs in command-buffer order, each checked, how each is read on the host side)."""
        if given.keys() != self._names:
            missing = sorted(self._names - given.keys())
            extra = sorted(given.keys() - self._names)
            raise InputError(f"inputs: names expected {sorted(self._names)}, got missing {missing}, "
                             f"unexpected {extra}")
        pairs = [host_input(c, given[c.name]) for c in self._checks]
        return [a for a, _ in pairs], [m for _, m in pairs]

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        arrays, modes = self.checked_inputs({**inputs, **kwargs} if inputs else kwargs)
        with self.lock:
            self.input_modes = dict(zip(self._input_names, modes, strict=True))
            outputs = self._run(arrays) if not DEBUG >= 2 else self._debug_run(arrays)
        return self._named_outputs(outputs)

    def _named_outputs(self, computed: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Every output by name from an engine's computed ones: an alias gets a copy of its source's bytes (a
        caller writing into one output never changes another)."""
        if not self.cmdbuf.aliases:
            return dict(zip(self._output_names, computed, strict=True))
        return {name: computed[i] if shape is None else computed[i].reshape(shape).copy()
                for name, (i, shape) in zip(self._output_names, self._assembly, strict=True)}

    def _debug_run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """One call, dispatch by dispatch, printing a line per dispatch to stderr (``DEBUG=2``, as the eager
        run prints its launches): each dispatch is waited for, so the call is slower than a replay."""
        times, outputs = self._profile(arrays)
        for i, (d, t) in enumerate(zip(self.cmdbuf.dispatches, times, strict=True)):
            print(f"*** {self.target.name:6s} #{i:<4d} {self.cmdbuf.kernels[d.kernel].name:28s} global "
                  f"{d.global_size!s:16s} {t * 1e3:9.3f} ms", file=sys.stderr)
        return outputs

    # whether ``set_threads`` means anything here (the CPU driver's pool; an OpenCL device schedules its own)
    threaded = False
    threads = 1

    def set_threads(self, n: int) -> None:
        """Threads this replay's parallel kernels use from the next call on."""
        raise ReplayError(f"threads: expected a CPU replay (its thread pool), got {type(self).__name__}: the "
                          f"device schedules its own work-items")

    def run(self, inputs: Mapping[str, Any], threads: int | None = None) -> dict[str, np.ndarray]:
        """One call like ``replay(inputs)``, on ``threads`` threads for this call only (None: the replay's count;
        a keyword of ``__call__`` would be taken for an input's name)."""
        if threads is None:
            return self(inputs)
        arrays, modes = self.checked_inputs(dict(inputs))
        with self.lock:
            self.input_modes = dict(zip(self.input_names, modes, strict=True))
            before = self.threads
            self.set_threads(threads)
            try:
                outputs = self._run(arrays) if not DEBUG >= 2 else self._debug_run(arrays)
            finally:
                self.set_threads(before)
        return self._named_outputs(outputs)

    def new_outputs(self) -> list[np.ndarray]:
        """Fresh arrays for one call's computed outputs (``CommandBuffer.computed_outputs``): nothing a caller holds
        is ever written again."""
        return [np.empty(shape, dtype=dtype) for shape, dtype in self._output_layouts]

    def profile(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> list[DispatchTime]:
        """Run once, one dispatch at a time, timing each (slower than a replay; for attribution only)."""
        arrays, modes = self.checked_inputs({**inputs, **kwargs} if inputs else kwargs)
        with self.lock:
            self.input_modes = dict(zip(self.input_names, modes, strict=True))
            times = self._profile(arrays)[0]
        names = [self.cmdbuf.kernels[d.kernel].name for d in self.cmdbuf.dispatches]
        return [DispatchTime(i, n, t) for i, (n, t) in enumerate(zip(names, times, strict=True))]

    def state_spec(self, name: str) -> BufferSpec:
        for b in self.cmdbuf.states:
            if b.name == name:
                return b
        raise InputError(f"state: name expected one of {[b.name for b in self.cmdbuf.states]}, got {name!r}")

    def read_state(self, name: str) -> np.ndarray:
        """A copy of state buffer ``name`` as it is now."""
        spec = self.state_spec(name)
        out = np.empty(spec.shape, dtype=to_numpy(dtypes.from_name(spec.dtype)))
        with self.lock:
            self._read_state(spec, out.reshape(-1).view(np.uint8))
        return out

    def reset_state(self) -> None:
        """Every state buffer back to its initial bytes (shared ones too: the replay sharing them sees it)."""
        with self.lock:
            self._write_initial(self.cmdbuf.states)

    def reset_own_states(self) -> None:
        """The states this replay does not share back to their initial bytes (what a new replay starts from:
        building one never resets buffers another replay is using)."""
        with self.lock:
            self._write_initial([b for b in self.cmdbuf.states if b.name not in self.shared_states])

    def _write_initial(self, specs: list[BufferSpec]) -> None:
        for spec in specs:
            assert spec.init is not None  # CommandBuffer.validate guarantees it
            self._write_state(spec, self.weights[spec.init])

    @abc.abstractmethod
    def state_handle(self, name: str) -> int:
        """The device buffer of state ``name`` as an integer: its host address on the CPU, its cl_mem handle on
        OpenCL. Two replays sharing a state give the same value; it never changes across calls."""

    @abc.abstractmethod
    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One replay over checked inputs (command-buffer order); the computed outputs in command-buffer order."""

    @abc.abstractmethod
    def _profile(self, inputs: list[np.ndarray]) -> tuple[list[float], list[np.ndarray]]:
        """(seconds per dispatch, each dispatch run and waited for on its own; the call's computed outputs)."""

    @abc.abstractmethod
    def _read_state(self, spec: BufferSpec, out: np.ndarray) -> None: ...

    @abc.abstractmethod
    def _write_state(self, spec: BufferSpec, data: np.ndarray) -> None: ...


def _weight_bytes(spec: BufferSpec, weights: Mapping[int, Any]) -> np.ndarray:
    """The bytes of weight ``spec`` as a uint8 array (no copy of bytes-like data); ReplayError on a mismatch."""
    wid = int(spec.name)
    if wid not in weights:
        raise ReplayError(f"{spec.binding}: weights expected an entry for id {wid}, got none")
    data = weights[wid]
    arr = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    if arr.nbytes != spec.nbytes:
        raise ReplayError(f"{spec.binding}: nbytes expected {spec.nbytes}, got {arr.nbytes}")
    return arr


def engine_for(target: Runtime) -> type[Replay]:
    """The replay engine class of ``target``: the ENGINES entry of its class or of its nearest base."""
    for cls in type(target).__mro__:
        engine = ENGINES.get(f"{cls.__module__}.{cls.__qualname__}")
        if engine is not None:
            module, name = engine.split(":")
            found: type[Replay] = getattr(importlib.import_module(module), name)
            return found
    raise UnsupportedOp(f"replay: target expected one with a replay engine ({sorted(ENGINES)}), got "
                        f"{type(target).__name__} {target.name}")


def kernel_flags(target: Runtime, program: Program) -> str:
    """The compile flags ``target`` built ``program`` with, as its replay engine records them."""
    return engine_for(target).default_flags(target, program)


def ahead_build(target: Runtime) -> AheadBuild:
    """``target``'s replay engine's ``ahead_build``: a capture hands it each kernel as it renders it, then its
    command buffer's kernels before checking them, so the compile overlaps the rendering and the check."""
    return engine_for(target).ahead_build(target)


def make_replay(cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime | str,
                share_states_with: Replay | None = None) -> Replay:
    """The replay engine of ``target`` (a runtime, or a device name: its ``Device.runtime``) built from a command
    buffer and weights; with ``share_states_with``, its states of the same names are that replay's buffers."""
    if isinstance(target, str):
        target = Device.runtime(target)
    return engine_for(target)(cmdbuf, weights, target, share_states_with=share_states_with)
