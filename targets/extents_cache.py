"""The on-disk cache of proven access extents (targets/index_ranges.py ``access_extents``), by launch.

Proving a kernel's accesses bounded parses and evaluates its C source: for a 120-kernel model about a second in
every new process that captures it or opens its package, though the answer depends only on the source, the launch
and the checker's own code. This cache keeps the answers that proved bounds, in files ``extents-<key>.json`` beside the
compiled kernels (targets/kernel_cache.py), and, in ``params-<key>.json``, which parameters each source may store
through (targets/kernel_params.py ``stored_params``: a few milliseconds a source, which depend on the source alone).

Key: a SHA-256 over the checker's code (the bytes of every ``targets/index_*.py`` and ``targets/kernel_params.py``,
read once per process: an edited checker misses), the source, the entry, the launch sizes and the scalar arguments.
A failed proof is not stored (the next process proves it again and fails again, with the same message).

Trust: an entry vouches for memory safety, so whoever may write this folder may let a kernel touch memory it
should not. The same folder holds the shared objects the CPU target loads by the hash of their source, so writing
it already gives that much; nothing here widens it. Files are plain JSON, read as data only; one that does not
parse, names another key or holds anything but integers where integers belong is a miss and is overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from targets.kernel_cache import cache_dir, framed_digest, publish, read_entry

FORMAT = 1
ENV = "DRIVEPACK_EXTENTS_CACHE"  # "0": prove every launch again


@cache
def checker_fingerprint() -> str:
    """A digest of the checker's code as this process found it (see the module docstring)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(f"drivepack-extents/{FORMAT}".encode())
    for path in sorted([*here.glob("index_*.py"), here / "kernel_params.py"]):
        h.update(f"\n{path.name}\n".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def enabled() -> bool:
    return os.environ.get(ENV, "1") not in ("0", "")


def launch_key(source: str, entry: str, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               scalars: tuple[tuple[str, int], ...]) -> str:
    """The key of one launch's extents: lengths framed, so no two launches share one."""
    return framed_digest((source, entry, repr(global_size), repr(local_size), repr(scalars)), checker_fingerprint())


def _path(key: str) -> Path:
    return cache_dir() / f"extents-{key}.json"


def _ints(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(type(x) is int for x in v)


def load(key: str) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int, frozenset[int]]]] | None:
    """(buffers, images) stored under ``key``, or None: nothing stored, or not a valid entry (a miss)."""
    doc = read_entry(_path(key), FORMAT, key)
    if doc is None:
        return None
    buffers, images = doc.get("buffers"), doc.get("images")
    if not (isinstance(buffers, list) and all(_ints(b, 3) for b in buffers) and isinstance(images, list)
            and all(isinstance(i, list) and len(i) == 4 and _ints(i[:3], 3) and _ints(i[3], len(i[3]))
                    for i in images)):
        return None
    return ({k: (lo, hi) for k, lo, hi in buffers},
            {i[0]: (i[1], i[2], frozenset(i[3])) for i in images})


def store(key: str, buffers: dict[int, tuple[int, int]], images: dict[int, tuple[int, int, frozenset[int]]]) -> None:
    """Keep a proof; a folder that cannot be written costs the next process the proof, nothing else."""
    doc = {"format": FORMAT, "key": key, "buffers": [[k, lo, hi] for k, (lo, hi) in sorted(buffers.items())],
           "images": [[k, lo, hi, sorted(w)] for k, (lo, hi, w) in sorted(images.items())]}
    try:
        publish(_path(key), json.dumps(doc))
    except OSError:
        pass


def params_key(source: str) -> str:
    """The key of the parameters ``source`` may store through."""
    return framed_digest(("stored-params", source), checker_fingerprint())


def load_params(key: str) -> frozenset[int] | None:
    """The stored-through parameters kept under ``key``, or None (a miss, as for ``load``)."""
    doc = read_entry(cache_dir() / f"params-{key}.json", FORMAT, key)
    stored = doc.get("stored") if doc is not None else None
    return frozenset(stored) if isinstance(stored, list) and _ints(stored, len(stored)) else None


def store_params(key: str, stored: frozenset[int]) -> None:
    """Keep the stored-through parameters of a source (see ``store``)."""
    try:
        doc = {"format": FORMAT, "key": key, "stored": sorted(stored)}
        publish(cache_dir() / f"params-{key}.json", json.dumps(doc))
    except OSError:
        pass
