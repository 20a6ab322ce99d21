"""Where tensors live: the registry of targets and the default one (``DEV=CPU`` or ``Device.DEFAULT = ...``)."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator

from jit.common.errors import DrivepackError
from targets.base import Target

# name -> "module:class"; the first one that loads is the default, in this order
# (CPU stays first: the default never moves to an accelerator unless DEV says so)
_TARGETS: dict[str, str] = {"CPU": "targets.cpu:CPUTarget", "OPENCL": "targets.opencl:OpenCLTarget",
                             "QCOM": "targets.qcom:QCOMTarget"}


class DeviceError(DrivepackError, ValueError):
    """An unknown or unavailable device name."""


class _Device:
    def __init__(self) -> None:
        self._instances: dict[str, Target] = {}
        self._default: str | None = None

    @staticmethod
    def canonical(name: str) -> str:
        base = name.split(":", 1)[0].upper()
        if base not in _TARGETS:
            raise DeviceError(f"device: expected one of {sorted(_TARGETS)}, got {name!r}")
        return base + name[len(base):]

    def __getitem__(self, name: str) -> Target:
        key = self.canonical(name)
        if key not in self._instances:
            module, cls = _TARGETS[key.split(":", 1)[0]].split(":")
            make = getattr(importlib.import_module(module), cls)
            # "OPENCL:1": the suffix picks one of several devices of that target, which gets the full name
            self._instances[key] = make(key) if ":" in key else make()
        return self._instances[key]

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - the reference API's spelling
        if self._default is None:
            env = os.environ.get("DEV")
            self._default = self.canonical(env) if env else next(iter(_TARGETS))
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


Device = _Device()
