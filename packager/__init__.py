"""Pipeline orchestration, package format, CLI, replay/benchmark and verify for drivepack."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("drivepack")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0"
