"""Replaying a command buffer: the interface every target's replay engine answers, and input checking.

A replay is built from a CommandBuffer and its weight bytes alone (``make_replay(cmdbuf, weights, target)``) on a
target's device side (targets.base.Runtime); it never sees the compiler's objects, so a package file is replayed
without the ONNX front end, the renderer or the compiler's IR. Every call
checks its inputs by name before anything runs: missing or unexpected names, the device (host numpy arrays
only), dtype, shape, byte size, C-contiguity and alignment, each failure an InputError naming the input and the
field (``features_buffer: shape expected (1, 25, 512), got (1, 24, 512)``).

Outputs are fresh numpy arrays on every call (the one device-to-host read writes into them), so a later replay
never overwrites what an earlier one returned. State buffers persist across calls inside the replay.

A replay may be called from several threads: each replay holds one lock and runs one call, profile, state read or
reset at a time (calls from other threads wait; inputs are checked before the wait). The engines' shared tables,
device buffers and command buffers are therefore never used by two calls at once, and every call's outputs are
exactly those of a single-threaded run over the same inputs and state. For calls that run in parallel, give each
thread its own replay (``make_replay`` or ``Package.make_replay`` again). A forked child gets fresh locks: a call
there never waits for a thread that exists only in the parent.
"""

from __future__ import annotations

import abc
import importlib
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jit.common.dtype import dtypes, to_numpy
from jit.common.errors import DrivepackError, UnsupportedOp
from targets.base import Program, Runtime
from targets.cmdbuf import BufferSpec, CommandBuffer
from targets.registry import Device

# runtime class (module.qualname) -> its replay engine (module:class); a subclass uses its nearest base's entry,
# so the compiler-facing targets and the QCOM profile (OpenCLRuntime subclasses) replay through these engines
ENGINES: dict[str, str] = {"targets.cpu_runtime.CPURuntime": "targets.replay_cpu:CPUReplay",
                           "targets.opencl_runtime.OpenCLRuntime": "targets.replay_opencl:OpenCLReplay"}


# every replay alive in this process: a forked child gets fresh locks, since the thread that held one at the fork
# does not exist in the child and would never release it
_LIVE: weakref.WeakSet[Replay] = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    for replay in list(_LIVE):
        replay.lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


class InputError(DrivepackError, ValueError):
    """A replay input that does not match the captured one: names the input, the field, expected and got."""


class ReplayError(DrivepackError, ValueError):
    """Weights or kernels that do not fit the command buffer or the target (names the field)."""


@dataclass(frozen=True)
class DispatchTime:
    """How long one dispatch ran, measured on its own (``Replay.profile``)."""

    index: int
    kernel: str
    seconds: float


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
    """``value`` when it is a host array matching ``c``; else an InputError naming the input and the field."""
    if not isinstance(value, np.ndarray):
        where = getattr(value, "device", None)
        got = f"{type(value).__name__} on {where}" if where is not None else type(value).__name__
        raise InputError(f"{c.name}: device expected a host numpy.ndarray, got {got}")
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


class Replay(abc.ABC):
    """A command buffer made runnable on one target. Subclasses implement ``_run``, ``_profile`` and state
    access; this class checks inputs and weights and holds what every engine shares."""

    # kernel targets (the part before ':') whose sources this engine can build
    languages: tuple[str, ...] = ()
    # how a call runs the dispatches (``cpu_driver``, ``command_buffer``, ``enqueue_loop``) and why this one:
    # verify and replay print both, so a fallback is never silent
    mode: str = ""
    mode_reason: str = ""

    def __init__(self, cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime) -> None:
        self.cmdbuf, self.target = cmdbuf, target
        for k in cmdbuf.kernels:
            if k.target.split(":", 1)[0] not in self.languages:
                raise ReplayError(f"kernel {k.name}: target expected one of {list(self.languages)} for a "
                                  f"{target.name} replay, got {k.target}")
        self.weights = {int(b.name): _weight_bytes(b, weights) for b in cmdbuf.weights}
        self._checks = [_input_check(b) for b in cmdbuf.inputs]
        self._names = frozenset(c.name for c in self._checks)
        self.output_specs = cmdbuf.outputs
        self.output_dtypes = [to_numpy(dtypes.from_name(b.dtype)) for b in self.output_specs]
        # one run at a time: engines bind inputs into tables and buffers every call of this replay shares
        self.lock = threading.Lock()
        _LIVE.add(self)

    @staticmethod
    def default_flags(target: Runtime, program: Program) -> str:
        """The compile flags ``target`` built ``program`` with (recorded in its KernelSpec)."""
        return ""

    @property
    def n_dispatches(self) -> int:
        return len(self.cmdbuf.dispatches)

    @property
    def input_names(self) -> list[str]:
        return [c.name for c in self._checks]

    @property
    def output_names(self) -> list[str]:
        return [b.name for b in self.output_specs]

    def check_inputs(self, given: Mapping[str, Any]) -> list[np.ndarray]:
        """The inputs in command-buffer order, each checked; InputError on the first mismatch."""
        if given.keys() != self._names:
            missing = sorted(self._names - given.keys())
            extra = sorted(given.keys() - self._names)
            raise InputError(f"inputs: names expected {sorted(self._names)}, got missing {missing}, "
                             f"unexpected {extra}")
        return [check_input(c, given[c.name]) for c in self._checks]

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        arrays = self.check_inputs({**inputs, **kwargs} if inputs else kwargs)
        with self.lock:
            outputs = self._run(arrays)
        return dict(zip(self.output_names, outputs, strict=True))

    def new_outputs(self) -> list[np.ndarray]:
        """Fresh arrays for one call's outputs: nothing a caller holds is ever written again."""
        return [np.empty(b.shape, dtype=d) for b, d in zip(self.output_specs, self.output_dtypes, strict=True)]

    def profile(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> list[DispatchTime]:
        """Run once, one dispatch at a time, timing each (slower than a replay; for attribution only)."""
        arrays = self.check_inputs({**inputs, **kwargs} if inputs else kwargs)
        with self.lock:
            times = self._profile(arrays)
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
        """Every state buffer back to its initial bytes."""
        with self.lock:
            for spec in self.cmdbuf.states:
                assert spec.init is not None  # CommandBuffer.validate guarantees it
                self._write_state(spec, self.weights[spec.init])

    @abc.abstractmethod
    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One replay over checked inputs (command-buffer order); the outputs in command-buffer order."""

    @abc.abstractmethod
    def _profile(self, inputs: list[np.ndarray]) -> list[float]:
        """Seconds per dispatch, each dispatch run and waited for on its own."""

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


def make_replay(cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Runtime | str) -> Replay:
    """The replay engine of ``target`` (a runtime, or a device name: its ``Device.runtime``) built from a command
    buffer and weights."""
    if isinstance(target, str):
        target = Device.runtime(target)
    return engine_for(target)(cmdbuf, weights, target)
