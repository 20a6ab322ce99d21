"""A capture's OpenCL kernels built while it renders the rest (``OpenCLAheadBuild``, what the OPENCL replay's
``ahead_build`` gives a capture), and on a CPU device launched once each so that the driver compiles them for their
work-group size meanwhile (targets/opencl_warm.py)."""

from __future__ import annotations

from targets.base import Program, RenderedKernel
from targets.cl_binding import CL_DEVICE_TYPE_CPU
from targets.opencl_prewarm import prewarm_wanted
from targets.opencl_runtime import OpenCLRuntime
from targets.opencl_warm import LaunchWarmer
from targets.replay import AheadBuild

# kernels a capture's background build takes at a time (``OpenCLAheadBuild``): more programs cost more in all (PoCL
# built efficientnet_b0's 88 kernels in 1.57 s as one program, 1.79 s as four, 2.17 s as eight)
AHEAD_BATCH = 24


class OpenCLAheadBuild(AheadBuild):
    """Every ``AHEAD_BATCH`` kernels a capture renders, built as one program on the runtime's background thread
    while it renders the rest (targets/opencl_runtime.py ``build_in_background``): the driver's compiler ran only
    after the last kernel was rendered (efficientnet_b0 on PoCL: 1.1 s of a 5.6 s capture, the other core idle).
    The capture's own build (``compile_many``) waits for these and builds what is left. On PoCL's CPU driver each
    built kernel is also launched once on a thread of its own (targets/opencl_warm.py), which the replay made of
    them stops."""

    def __init__(self, runtime: OpenCLRuntime) -> None:
        self._runtime = runtime
        self._seen: set[str] = set()
        self._batch: dict[str, RenderedKernel] = {}  # by name: names are unique within a program
        self._warmer: LaunchWarmer | None = None
        if prewarm_wanted(runtime.info.platform, bool(runtime.info.device_type & CL_DEVICE_TYPE_CPU)):
            if runtime.warmer is not None:  # an earlier capture's, never made into a replay
                runtime.warmer.stop()
            self._warmer = runtime.warmer = LaunchWarmer(runtime)

    def add(self, kernel: RenderedKernel) -> None:
        if kernel.source in self._seen:
            return
        self._seen.add(kernel.source)
        if kernel.name in self._batch:
            self._start()
        self._batch[kernel.name] = kernel
        if len(self._batch) >= AHEAD_BATCH:
            self._start()

    def _start(self) -> None:
        self._runtime.build_in_background(list(self._batch.values()), self._warm if self._warmer else None)
        self._batch = {}

    def _warm(self, built: list[tuple[Program, RenderedKernel]]) -> None:
        assert self._warmer is not None
        self._warmer.add([(program, k.buffer_bytes) for program, k in built if k.buffer_bytes is not None])
