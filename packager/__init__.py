"""Pipeline orchestration, package format, CLI, replay/benchmark and verify for drivepack.

Public API (imported on first use, so that loading a package pulls in no compiler code):
``load_package`` and ``Package`` (the runtime side), ``build_package`` and ``BuildOptions`` (the compiler
side), ``verify_package``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("drivepack")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0"

EXPORTS: dict[str, str] = {
    "load_package": "packager.package",
    "Package": "packager.package",
    "build_package": "packager.build",
    "BuildOptions": "packager.build",
    "verify_package": "packager.verify",
}

__all__ = ["__version__", *sorted(EXPORTS)]


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'packager' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
