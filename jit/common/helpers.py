"""Run settings read from the environment (DEBUG, NOOPT, VIZ, ...), overridable in code with Context."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


class Setting:
    """An integer or string setting whose default comes from the environment variable of the same name."""

    def __init__(self, key: str, default: Any) -> None:
        self.key = key
        raw = os.environ.get(key)
        self.value: Any = default if raw is None else type(default)(raw) if not isinstance(default, str) else raw

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __ge__(self, x: int) -> bool:
        return int(self.value) >= x

    def __gt__(self, x: int) -> bool:
        return int(self.value) > x

    def __repr__(self) -> str:
        return f"{self.key}={self.value!r}"


DEBUG = Setting("DEBUG", 0)
NOOPT = Setting("NOOPT", 0)
# BEAM=N: search each kernel's optimizer options by timing (beam width N) at compile time (jit/codegen/opt/search.py)
BEAM = Setting("BEAM", 0)
VIZ = Setting("VIZ", 0)
EMULATED_DTYPES = Setting("EMULATED_DTYPES", "")
NOLOCALS = Setting("NOLOCALS", 0)  # OpenCL: launch with a NULL local size (the driver picks the work-group size)
# WINO=0|2|4|auto: 3x3 stride-1 convs by Winograd F(2,3) / F(4,3), or per conv by size (jit/frontend/winograd.py)
WINO = Setting("WINO", "auto")
# STREAMS=0: CPU replays run every dispatch in order, none of them side by side in lanes (jit/schedule/streams.py)
STREAMS = Setting("STREAMS", 1)
# FUSION_COST=0: fuse every elementwise producer into the reduce reading it, however often it is recomputed there
# (the fusion cost model, jit/schedule/fusion_cost.py, is off)
FUSION_COST = Setting("FUSION_COST", 1)
# STORE_VIEWS=0: kernels store only into buffers of their own: a conv's padded input and a stored concat are copy
# kernels, not written in place by their producers (jit/schedule/padded_stores.py, concat_stores.py)
STORE_VIEWS = Setting("STORE_VIEWS", 1)
# PREFETCH=0: no kernel asks for the next output iteration's slice of a buffer it re-reads (jit/codegen/opt/prefetch.py)
PREFETCH = Setting("PREFETCH", 1)

_SETTINGS: dict[str, Setting] = {s.key: s for s in (DEBUG, NOOPT, BEAM, VIZ, EMULATED_DTYPES, NOLOCALS, WINO,
                                                 STREAMS, FUSION_COST, STORE_VIEWS, PREFETCH)}


def settings_key() -> str:
    """Every setting as ``KEY=value``, in one line: what a cache of results computed under them is keyed by."""
    return ";".join(f"{key}={s.value!r}" for key, s in sorted(_SETTINGS.items()))


@contextlib.contextmanager
def Context(**kwargs: Any) -> Iterator[None]:  # noqa: N802 - reads like the reference system's Context
    """Temporarily override settings: ``with Context(NOOPT=1): ...``."""
    old = {k: _SETTINGS[k].value for k in kwargs}
    try:
        for k, v in kwargs.items():
            _SETTINGS[k].value = v
        yield
    finally:
        for k, v in old.items():
            _SETTINGS[k].value = v


def prod(xs: Any) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def usable_cores() -> int:
    """The cores this process may run on (``taskset`` may give it fewer than the machine has; every core where the
    platform cannot say)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
