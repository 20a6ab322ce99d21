"""First launches of a capture's kernels on a background thread while the capture renders and checks the rest.

PoCL's CPU driver compiles a kernel for its launch's work-group size when the kernel first runs
(targets/opencl_prewarm.py). During a capture one core renders and checks kernels in Python and the other builds a
program only now and then (targets/opencl_ahead.py ``OpenCLAheadBuild``): efficientnet_b0's cold capture kept the
two cores 1.4 of 2 busy, and its replay's first call then compiled for several seconds more. ``LaunchWarmer`` runs
each kernel of a freshly built batch once, on scratch buffers of its parameters' sizes and a queue of its own, so
that the driver compiles it on that idle core (the driver's calls release the GIL); the first call then finds it
compiled, in this process and in PoCL's disk cache. The replay stops the warmer when it is made: from then on its
first call compiles forwards and the prewarm helper backwards, skipping what was warmed here (``stop``).

The kernels are this process's own renderings, run on buffers of the sizes they were scheduled with, as an eager
Tensor run runs them (targets/index_ranges.py checks a command buffer's kernels when its replay is made). Best
effort: a launch that fails is dropped, and the first call compiles that kernel.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from targets.base import Buffer, Program
from targets.cl_binding import OpenCLError, check, checked_create

# seconds the device must have been left alone before a warmer launches again (``DeviceTurns.wait_for_idle``)
WARM_GRACE = 0.05


class DeviceTurns:
    """A runtime's own work on the device first, a warmer's after: PoCL runs every queue's commands in turn, and a
    warm launch compiling delays a copy or build behind it (efficientnet_b0's weight reads at the end of a capture
    waited 2 s in all). Its copies and launches come in bursts, so the warmer waits ``WARM_GRACE`` past the last."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._wanted = 0
        self._last = 0.0

    @contextlib.contextmanager
    def wanted(self, warming: bool) -> Iterator[None]:
        """The runtime uses the device inside (counted only while a warmer runs: ``warming``)."""
        if not warming:
            yield
            return
        self._change(1)
        try:
            yield
        finally:
            self._change(-1)

    def _change(self, by: int) -> None:
        with self._cond:
            self._wanted += by
            if not self._wanted:
                self._last = time.monotonic()
                self._cond.notify_all()

    def wait_for_idle(self) -> None:
        """Return once nothing has wanted the device for ``WARM_GRACE`` seconds."""
        with self._cond:
            while True:
                self._cond.wait_for(lambda: not self._wanted)
                left = self._last + WARM_GRACE - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)


class WarmedRuntime(Protocol):
    """What the warmer uses of its runtime (targets/opencl_runtime.py ``OpenCLRuntime``)."""

    ffi: Any
    lib: Any
    context: Any
    device_id: Any
    turns: DeviceTurns

    def allocate(self, nbytes: int) -> Buffer: ...

    def launch_on(self, queue: Any, prog: Program, bufs: list[Buffer]) -> None: ...


# a kernel's launch metadata: the buffer parameters that must hold zeros when it starts (a team's counters,
# targets/cstyle/chains.py ``render_team``), which the warmers' scratch buffers are set to before its launch
ZEROED_ARGS = "zeroed_args"
# a launch as the replay makes it: (kernel source, global size, local size or ())
WarmKey = tuple[str, tuple[int, ...], tuple[int, ...]]


def warm_key(source: str, global_size: tuple[int, ...], local_size: tuple[int, ...] | None) -> WarmKey:
    return source, tuple(global_size), tuple(local_size or ())


class LaunchWarmer:
    """Launches kernels once each, in the order given, on a thread of its own until ``stop``."""

    def __init__(self, runtime: WarmedRuntime) -> None:
        self._runtime = runtime
        self._todo: queue.SimpleQueue[tuple[Program, tuple[int, ...]] | None] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._idle = threading.Condition()
        self._pending = 0  # launches added and not yet done (or dropped)
        self._warmed: set[WarmKey] = set()
        self._thread: threading.Thread | None = None

    def add(self, launches: list[tuple[Program, tuple[int, ...]]]) -> None:
        """Launch each (program, its buffer parameters' bytes) once, after those added before."""
        if self._stopped.is_set() or not launches:
            return
        with self._idle:
            self._pending += len(launches)
        for launch in launches:
            self._todo.put(launch)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="drivepack-opencl-warm", daemon=True)
            atexit.register(self._stop_and_join)  # never exit while the driver compiles on this thread
            self._thread.start()

    def stop(self) -> set[WarmKey]:
        """Launch nothing more (the launch running now finishes on its own); the launches done so far."""
        self._stopped.set()
        self._todo.put(None)
        with self._idle:
            return set(self._warmed)

    def wait_until_idle(self, timeout: float) -> bool:
        """Whether every launch added so far was done (or dropped by ``stop``) within ``timeout`` seconds."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _stop_and_join(self) -> None:
        self.stop()
        self.join()

    def _run(self) -> None:
        cl = self._runtime
        warm_queue = None
        scratch: list[Buffer] = []  # one per parameter position, grown as launches need
        try:
            warm_queue = checked_create("clCreateCommandQueue", cl.lib.clCreateCommandQueue, cl.context,
                                        cl.device_id, 0)
            while (item := self._todo.get()) is not None and not self._stopped.is_set():
                program, nbytes = item
                cl.turns.wait_for_idle()
                done = not self._stopped.is_set() and self._warm(warm_queue, program, nbytes, scratch)
                with self._idle:
                    self._pending -= 1
                    if done:
                        self._warmed.add(warm_key(program.source, program.global_size, program.local_size))
                    self._idle.notify_all()
        except OpenCLError:
            self._stopped.set()  # no queue of its own: nothing is warmed
        finally:
            with self._idle:
                self._pending = 0  # what is left is dropped
                self._idle.notify_all()
            if warm_queue is not None:
                cl.lib.clReleaseCommandQueue(warm_queue)
            atexit.unregister(self._stop_and_join)

    def _warm(self, warm_queue: Any, program: Program, nbytes: tuple[int, ...], scratch: list[Buffer]) -> bool:
        """Launch ``program`` once and wait for it; whether it ran."""
        cl = self._runtime
        try:
            for i, n in enumerate(nbytes):
                if i == len(scratch) or scratch[i].nbytes < n:
                    scratch[i:i + 1] = [cl.allocate(n)]
            for i in program.meta.get(ZEROED_ARGS, ()):  # a team's counters: its waits end only from zero
                zeros = bytes(nbytes[i])
                check("clEnqueueWriteBuffer", cl.lib.clEnqueueWriteBuffer(
                    warm_queue, scratch[i].handle, 1, 0, len(zeros), cl.ffi.from_buffer(zeros), 0, cl.ffi.NULL,
                    cl.ffi.NULL))
            cl.launch_on(warm_queue, program, scratch[:len(nbytes)])
        except OpenCLError:
            return False
        return True
