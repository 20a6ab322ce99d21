"""What the operating system says about this machine's CPU data caches, as the optimizer's ``CacheLevel`` values.

The CPU target's limits (targets/cpu.py) take L1d and L2 from here. Per level, in order: Linux's sysfs
(``/sys/devices/system/cpu/cpu0/cache/index*``), then ``os.sysconf``'s ``SC_LEVEL*_CACHE_*`` where this Python
and C library have them (glibc answers 0 for what it does not know), then ``DEFAULT_L1`` / ``DEFAULT_L2``: a
missing, unreadable or garbled description falls back silently, so the optimizer decides as it did before the
caches were probed. cpu0 stands for every core: on a big.LITTLE CPU that is usually a little core, whose caches are
the smaller ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from targets.base import DEFAULT_L1, DEFAULT_L2, CacheLevel, CacheLevelError

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
_SYSFS_FIELDS = ("level", "type", "size", "ways_of_associativity", "coherency_line_size")
SYSCONF_NAMES = {
    1: ("SC_LEVEL1_DCACHE_SIZE", "SC_LEVEL1_DCACHE_ASSOC", "SC_LEVEL1_DCACHE_LINESIZE"),
    2: ("SC_LEVEL2_CACHE_SIZE", "SC_LEVEL2_CACHE_ASSOC", "SC_LEVEL2_CACHE_LINESIZE"),
}


@dataclass(frozen=True)
class CPUCaches:
    """The two cache levels the optimizer uses (``TargetLimits.l1`` and ``.l2``)."""

    l1: CacheLevel = DEFAULT_L1
    l2: CacheLevel = DEFAULT_L2


def parse_size(text: str) -> int | None:
    """Bytes from a sysfs cache size (``32K``, ``1024K``, ``8M``, plain bytes); None for anything else."""
    text = text.strip().upper()
    scale = _UNITS.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in _UNITS else text
    return int(digits) * scale if digits.isdigit() else None


def cache_level(size: int | None, ways: int | None, line: int | None) -> CacheLevel | None:
    """The ``CacheLevel`` the three numbers describe, or None when one is missing or they do not make whole sets."""
    if size is None or ways is None or line is None:
        return None
    try:
        return CacheLevel(size, ways, line)
    except CacheLevelError:
        return None


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def sysfs_caches(root: Path = SYSFS_CACHE) -> dict[int, CacheLevel]:
    """Data and unified caches by level from a sysfs cache folder; {} where there is none. An entry with a field
    missing, unreadable or not a number is skipped."""
    found: dict[int, CacheLevel] = {}
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return found
    for entry in entries:
        try:
            told = {name: (entry / name).read_text().strip() for name in _SYSFS_FIELDS}
        except (OSError, UnicodeDecodeError):
            continue
        level = _number(told["level"])
        if level is None or told["type"] not in ("Data", "Unified"):
            continue
        cache = cache_level(parse_size(told["size"]), _number(told["ways_of_associativity"]),
                            _number(told["coherency_line_size"]))
        if cache is not None:
            found.setdefault(level, cache)
    return found


def sysconf_caches() -> dict[int, CacheLevel]:
    """L1d and L2 from ``os.sysconf`` where this Python and C library name them and know the values."""
    found: dict[int, CacheLevel] = {}
    names = getattr(os, "sysconf_names", {})
    for level, keys in SYSCONF_NAMES.items():
        if not all(k in names for k in keys):
            continue
        try:
            size, ways, line = (os.sysconf(k) for k in keys)
        except (OSError, ValueError):
            continue
        if (cache := cache_level(size, ways, line)) is not None:
            found[level] = cache
    return found


def cpu_caches(root: Path = SYSFS_CACHE) -> CPUCaches:
    """L1d and L2 of this machine's cpu0: sysfs under ``root``, else sysconf, else the defaults (per level)."""
    told = sysconf_caches() | sysfs_caches(root)
    return CPUCaches(told.get(1, DEFAULT_L1), told.get(2, DEFAULT_L2))
