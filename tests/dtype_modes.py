"""Test helpers for dtype lowering: CPU targets that lack a dtype, and the three ways a dtype can run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jit import Context, Device, DType, dtypes
from targets.cpu import CPU_DTYPES, CPUTarget


class CPUWithout(CPUTarget):
    """The CPU target with some dtypes removed from its declared set (the C it renders is unchanged)."""

    missing: frozenset[DType] = frozenset()

    def supported_dtypes(self) -> frozenset[DType]:
        return CPU_DTYPES - self.missing


class CPUNoInt64(CPUWithout):
    name = "CPU_NO_INT64"
    missing = frozenset({dtypes.int64, dtypes.uint64})


class CPUNoFloat16(CPUWithout):
    name = "CPU_NO_FLOAT16"
    missing = frozenset({dtypes.float16})


@contextlib.contextmanager
def cpu_target(target: CPUTarget) -> Iterator[CPUTarget]:
    """Run everything in the block on ``target`` as the "CPU" device (its own name keeps compiled kernels apart)."""
    key = Device.canonical("CPU")
    old = Device._instances.get(key)
    Device._instances[key] = target
    try:
        yield target
    finally:
        if old is None:
            Device._instances.pop(key, None)
        else:
            Device._instances[key] = old


TARGETS: dict[str, CPUTarget] = {}


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """``native``, ``emulated-long`` / ``emulated-half`` (EMULATED_DTYPES) or ``no-int64`` / ``no-float16``."""
    if name == "native":
        yield
    elif name == "emulated-long":
        with Context(EMULATED_DTYPES="long"):
            yield
    elif name == "emulated-half":
        with Context(EMULATED_DTYPES="half"):
            yield
    elif name in ("no-int64", "no-float16"):
        cls = CPUNoInt64 if name == "no-int64" else CPUNoFloat16
        target = TARGETS.setdefault(name, cls())
        with cpu_target(target):
            yield
    else:
        raise ValueError(f"mode: expected native, emulated-long, emulated-half, no-int64 or no-float16, got {name}")


LONG_MODES = ("native", "emulated-long", "no-int64")
HALF_MODES = ("native", "emulated-half", "no-float16")
