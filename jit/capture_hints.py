"""Which cached programs a capture used, remembered for the next capture of the same graph on the same target.

A warm capture on a target whose cached programs cost a build each to load (``Runtime.prefetches_programs``: an
OpenCL CPU device, whose driver builds the cached source again and answers from its own cache,
targets/opencl_runtime.py) could only start those builds once its schedule had found the kernels, and then waited
for them. The capture before it knew them: ``remember`` keeps their program keys in a hint file keyed by the traced
graph and the target, and ``start_prefetch`` hands them to the runtime right after tracing, which loads them on its
background thread while the capture schedules.

A hint only guides that early load: the capture compiles as it would without one, and a program it named in vain
is loaded and forgotten. Key: a SHA-256 over the render cache's key context (the compiler's code, the target and
the settings: jit/render_cache.py) and the traced graph, its buffers numbered by first use (two loads of one model
share the key; weight values do not enter it, their sizes do). Files are ``hint-<key>.json`` in the kernel cache's
folder: plain JSON, read as data only; a file that is not a list of 64-digit hex keys is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from jit import render_cache
from jit.ir.uop import Ops, UOp, toposort
from targets.base import Runtime
from targets.kernel_cache import cache_dir, publish, read_entry

FORMAT = 1
_PROGRAM_KEY = re.compile(r"[0-9a-f]{64}")


def _path(key: str) -> Path:
    return cache_dir() / f"hint-{key}.json"


def graph_key(roots: list[UOp], target: Runtime) -> str | None:
    """The hint key of a capture of ``roots`` on ``target``; None where no hint is kept (a target that loads its
    cached programs cheaply, the render cache off, a target with no exact key)."""
    if not target.prefetches_programs or not render_cache.cache_enabled():
        return None
    context = render_cache.key_context(target, "capture-hint")
    if context is None:
        return None
    h = hashlib.sha256(context.encode())
    index: dict[UOp, int] = {}
    for i, node in enumerate(toposort(roots)):
        index[node] = i
        arg = ("buffer", node.arg[2]) if node.op is Ops.BUFFER else node.arg
        h.update(f"\n{node.op.name}|{node.dtype}|{arg!r}|{','.join(str(index[s]) for s in node.src)}".encode())
    return h.hexdigest()


def _read(key: str) -> list[str] | None:
    doc = read_entry(_path(key), FORMAT, key)
    programs = doc.get("programs") if doc is not None else None
    ok = isinstance(programs, list) and all(isinstance(p, str) and _PROGRAM_KEY.fullmatch(p) for p in programs)
    return programs if ok else None


def start_prefetch(key: str | None, target: Runtime) -> list[str] | None:
    """Hand the program keys the hint of ``key`` holds to ``target.prefetch``; returns them (None: no hint)."""
    programs = _read(key) if key is not None else None
    if programs:
        target.prefetch(programs)
    return programs


def remember(key: str | None, target: Runtime, sources: Sequence[str], known: list[str] | None) -> None:
    """Keep the program keys of the kernel ``sources`` a capture of ``key`` replays (unless the hint read at its
    start, ``known``, already holds exactly those)."""
    if key is None or not render_cache.sources_unchanged():
        return
    programs = list(dict.fromkeys(target.program_keys(sources)))
    if programs and programs != known:
        try:
            publish(_path(key), json.dumps({"format": FORMAT, "key": key, "programs": programs}))
        except OSError:  # a read-only or full cache folder costs speed, not correctness
            pass
