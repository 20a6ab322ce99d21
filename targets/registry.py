"""Where tensors live: the registry of targets and the default one (``DEV=CPU`` or ``Device.DEFAULT = ...``).

``Device[name]`` is the compiler-facing Target; ``Device.runtime(name)`` the device side alone (what a replay
runs on), which imports no renderer unless this process already made that name's Target.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from typing import Any

from jit.common.errors import DeviceError
from targets.base import Runtime, Target

# name -> "module:class"; the first one that loads is the default, in this order
# (CPU stays first: the default never moves to an accelerator unless DEV says so)
TARGETS: dict[str, str] = {"CPU": "targets.cpu:CPUTarget", "OPENCL": "targets.opencl:OpenCLTarget",
                             "QCOM": "targets.qcom:QCOMTarget"}
# name -> its device side alone ("module:class"): compiling given sources, buffers, launches
_RUNTIMES: dict[str, str] = {"CPU": "targets.cpu_runtime:CPURuntime", "OPENCL": "targets.opencl_runtime:OpenCLRuntime",
                             "QCOM": "targets.qcom_runtime:QCOMRuntime"}


class _Device:
    def __init__(self) -> None:
        self._instances: dict[str, Target] = {}
        self._runtimes: dict[str, Runtime] = {}
        self._default: str | None = None

    @staticmethod
    def canonical(name: str) -> str:
        base = name.split(":", 1)[0].upper()
        if base not in TARGETS:
            raise DeviceError(f"device: expected one of {sorted(TARGETS)}, got {name!r}")
        return base + name[len(base):]

    def __getitem__(self, name: str) -> Target:
        key = self.canonical(name)
        if key not in self._instances:
            self._instances[key] = _make(TARGETS, key)
        return self._instances[key]

    def runtime(self, name: str) -> Runtime:
        """The device side of ``name``: this process's Target of that name when it made one (one context per
        device), else the runtime alone, made once."""
        key = self.canonical(name)
        if key in self._instances:
            return self._instances[key]
        if key not in self._runtimes:
            self._runtimes[key] = _make(_RUNTIMES, key)
        return self._runtimes[key]

    def forget_compiled(self) -> None:
        """``forget_compiled`` on every target and runtime this process made."""
        for made in (*self._instances.values(), *self._runtimes.values()):
            made.forget_compiled()

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - the reference API's spelling
        if self._default is None:
            env = os.environ.get("DEV")
            self._default = self.canonical(env) if env else next(iter(TARGETS))
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self._default = self.canonical(name)

    @contextlib.contextmanager
    def default_as(self, name: str | None) -> Iterator[None]:
        """``DEFAULT`` is ``name`` inside the block (unchanged when None): code that creates tensors without
        naming a device (an ONNX op's constants) puts them where the model runs."""
        if name is None:
            yield
            return
        saved, self._default = self._default, self.canonical(name)
        try:
            yield
        finally:
            self._default = saved


def _make(classes: dict[str, str], key: str) -> Any:
    """An instance of the class ``classes`` names for device ``key``."""
    module, cls = classes[key.split(":", 1)[0]].split(":")
    make = getattr(importlib.import_module(module), cls)
    # "OPENCL:1": the suffix picks one of several devices of that target, which gets the full name
    return make(key) if ":" in key else make()


Device = _Device()
