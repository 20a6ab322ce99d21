"""The cl_mem objects, kernels and recordings an OpenCL replay binds for one set of input addresses
(targets/replay_opencl.py, zero-copy inputs), and the release of what a replay made.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def release_kernels(lib: Any, kernels: list[Any]) -> None:
    for k in kernels:
        lib.clReleaseKernel(k)


def release_command_buffer(release: Any, cb: Any) -> None:
    release(cb)


def release_mems(lib: Any, mems: list[Any]) -> None:
    for m in mems:
        lib.clReleaseMemObject(m)


class InputBinding:
    """The cl_mem each input is bound to for one set of input addresses (None: the replay's own buffer, written
    each call), the launches that read them (kernels of their own for the dispatches reading an input) and the
    command buffer recorded from those launches."""

    def __init__(self, mems: list[Any], launches: list[Any], kernels: list[Any]) -> None:
        self.mems, self.launches, self.kernels = mems, launches, kernels
        self.command_buffer: Any = None

    def release(self, lib: Any, release_cb: Any) -> None:
        if self.command_buffer is not None:
            release_cb(self.command_buffer)
            self.command_buffer = None
        release_kernels(lib, self.kernels)
        release_mems(lib, [m for m in self.mems if m is not None])
        self.mems, self.launches, self.kernels = [], [], []


def release_bindings(lib: Any, release_cb: Any, bindings: OrderedDict[Any, InputBinding]) -> None:
    for b in bindings.values():
        b.release(lib, release_cb)
    bindings.clear()
