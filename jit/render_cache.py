"""The on-disk cache of rendered kernels: a kernel graph before the codegen passes -> its rendered source.

A warm capture compiles nothing (the compiled objects are cached by source, targets/kernel_cache.py), yet it
used to run every codegen pass and the renderer again for each kernel: most of its time. This cache keeps, per
kernel, what ``jit.realize.compile_kernels`` takes from those passes: the source (its kernel name cut out), the
launch metadata, the kernel's stats and dtype policy, and the structural key of the rewritten graph (which the
kernel's name numbering is keyed by).

Key: a SHA-256 over everything the result depends on (``entry_key``):

* the kernel graph (``jit.ir.stable_key.structural_key``: exact, process-independent);
* the target: its class, name, declared dtypes, limits, language, default optimizer options and every plain
  setting it holds (an OpenCL device's info and work-group limits);
* the run settings (``NOOPT``, ``EMULATED_DTYPES``, ``WINO``, ...);
* the compiler itself: every source file under ``jit/`` and ``targets/`` but the graph builders (``jit/frontend``,
  ``jit/onnx``: they only decide the graph, which is keyed itself), as read when the compiler is imported,
  and the numpy / ml_dtypes / Python versions that fold constants. An edited pass or renderer therefore misses
  instead of serving stale code, and a process that imports a compiler module edited after that moment stores
  nothing (it may run code its fingerprint does not describe).

It is not used (``cache_enabled``) under a tuning session or BEAM search (they count hits and time candidates),
under VIZ (which records the passes), when ``DRIVEPACK_RENDER_CACHE=0``, or for a kernel whose graph or
target holds a value with no exact key.

It also keeps the answers of planning questions asked about a kernel before it is compiled (``cached_answer``: the
scheduler asks whether the optimizer will tile a conv across channels, to choose its output's layout), keyed the
same way with the question's name in the settings part: a warm capture asks the file instead of planning again.

Files are ``render-<key>.json`` and ``answer-<key>.json`` in the kernel cache's folder
(``targets.kernel_cache.cache_dir``): plain JSON, read as data only (nothing in them is executed or unpickled). A
file that does not parse, names another key or another format, or holds a field of the wrong type is a miss
(``load`` returns None) and is overwritten by the next store.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from jit.codegen.opt import target_default_opts
from jit.codegen.passes.dtype_policy import DTypePolicy
from jit.codegen.stats import KernelStats
from jit.common.dtype import DTYPES_BY_NAME, DType
from jit.common.errors import DrivepackError
from jit.common.helpers import BEAM, VIZ
from jit.ir.stable_key import UnkeyableError, structural_key, value_code
from jit.ir.uop import UOp
from targets.kernel_cache import cache_dir, publish, read_entry

FORMAT = 1
ENV = "DRIVEPACK_RENDER_CACHE"
# marks where the kernel's name stood in the stored source; the name is the process's (``unique_name``)
NAME_SLOT = "@@KERNEL_NAME@@"


class RenderCacheError(DrivepackError, ValueError):
    """A render-cache file that is not a valid entry for its key (``load`` treats it as a miss)."""


@dataclass(frozen=True)
class RenderedEntry:
    """What a kernel's codegen passes and render produced, minus its name (given per process)."""

    sink_key: str  # structural_key of the rewritten graph
    source: str  # with NAME_SLOT where the kernel's name goes (exactly once, in the signature)
    meta: dict[str, Any]
    stats: KernelStats
    policy: DTypePolicy

    def source_for(self, name: str) -> str:
        return self.source.replace(NAME_SLOT, name)


def cache_enabled() -> bool:
    """Whether compiles may read and write the cache now (see the module docstring)."""
    from jit.codegen.opt.search import current_session  # search imports the pipeline: only when asked
    return os.environ.get(ENV, "1") not in ("0", "") and not VIZ and not int(BEAM) and current_session() is None


# what builds kernel graphs (tensor ops, the ONNX loader) only decides the graph, which is the key itself; what
# turns a graph into source (the IR, the codegen passes, the lowering they import, realize, the targets) is hashed
_GRAPH_BUILDERS = ("jit/frontend/", "jit/onnx/")


def _is_compiler_file(rel: str) -> bool:
    return rel.split("/")[0] in ("jit", "targets") and not rel.startswith(_GRAPH_BUILDERS)


def _compiler_files() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    paths = (path for pkg in ("jit", "targets") for path in sorted((root / pkg).rglob("*.py")))
    return [p for p in paths if _is_compiler_file(p.relative_to(root).as_posix())]


_module_files: dict[str, str | None] = {}  # module name -> its compiler source file, None for any other module


def _compiler_modules() -> dict[str, str]:
    """Loaded compiler module name -> its source file (the modules of ``_compiler_files``). Each module's file is
    looked up once: the check runs before every store."""
    root = Path(__file__).resolve().parents[1]
    out = {}
    for name, module in list(sys.modules.items()):
        if name not in _module_files:
            file = getattr(module, "__file__", None)
            found = None
            if name.split(".")[0] in ("jit", "targets") and isinstance(file, str):
                try:
                    rel = Path(file).resolve().relative_to(root).as_posix()
                except ValueError:
                    rel = ""
                found = file if _is_compiler_file(rel) else None
            _module_files[name] = found
        if (path := _module_files[name]) is not None:
            out[name] = path
    return out


def _fingerprint() -> tuple[str, float, frozenset[str]]:
    """(digest, when it was taken, the compiler modules loaded then): see ``compiler_fingerprint``."""
    taken = time.time()
    loaded = frozenset(_compiler_modules())
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"{sys.version}|{np.__version__}|{ml_dtypes.__version__}|{platform.machine()}".encode())
    for path in _compiler_files():
        h.update(f"\n{path.relative_to(root).as_posix()}\n".encode())
        h.update(path.read_bytes())
    return h.hexdigest(), taken, loaded


_FINGERPRINT: tuple[str, float, frozenset[str]] | None = None


def take_fingerprint() -> None:
    """Take the compiler fingerprint now, if not yet taken: jit.realize calls this once its imports (the codegen
    pipeline, the targets) are loaded, so that it describes the code this process runs."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _fingerprint()


def compiler_fingerprint() -> str:
    """A digest of the compiler's code as this process loaded it: every .py file under jit/ and targets/ that turns
    a kernel graph into source (all but the graph builders, jit/frontend and jit/onnx), path and bytes, and the
    versions of Python, numpy and ml_dtypes; read once, by ``take_fingerprint``."""
    take_fingerprint()
    assert _FINGERPRINT is not None
    return _FINGERPRINT[0]


def sources_unchanged() -> bool:
    """False when this process may run compiler code that ``compiler_fingerprint`` does not describe: a module it
    imported after the fingerprint was taken, from a file changed since. Stores stop then (an entry would claim the
    fingerprinted code produced it); reads stay safe. A module loaded before the fingerprint runs the bytes it
    describes, whatever its file holds now, and a file edited before the fingerprint is in it."""
    take_fingerprint()
    assert _FINGERPRINT is not None
    taken, loaded = _FINGERPRINT[1], _FINGERPRINT[2]
    try:
        return all(os.stat(path).st_mtime < taken for name, path in _compiler_modules().items() if name not in loaded)
    except OSError:
        return False


def target_fingerprint(target: Any) -> str:
    """The target's render-relevant state as exact text: its class, name, declared dtypes, limits, language and
    default optimizer options, and every public plain attribute it holds (counters and containers excluded). Raises
    UnkeyableError when one of the named ones has no exact encoding."""
    cls = type(target)
    parts = [f"{cls.__module__}.{cls.__qualname__}", value_code(target.name),
             value_code(sorted(d.name for d in target.supported_dtypes())),
             value_code(getattr(target, "limits", None)), value_code(getattr(target, "language", None)),
             value_code(target_default_opts(target))]
    for attr, v in sorted(vars(target).items()):
        # mutable containers and counters are runtime state (live buffers, builds), not what a render reads
        if attr.startswith("_") or attr.endswith("_count") or isinstance(v, dict | list | set):
            continue
        try:
            parts.append(f"{attr}={value_code(v)}")
        except UnkeyableError:  # handles (cffi pointers, counters): not what rendering reads
            continue
    return "\n".join(parts)


def key_context(target: Any, settings: str) -> str | None:
    """Everything of a key but the graph: the format, the compiler, ``target`` and ``settings`` (taken once per
    batch of kernels: the target's fingerprint walks its settings); None when the target has no exact key."""
    try:
        return "\n--\n".join((f"drivepack-render-cache/{FORMAT}", compiler_fingerprint(), target_fingerprint(target),
                               settings))
    except UnkeyableError:
        return None


def entry_key(ast: UOp, target: Any, settings: str, context: str | None = None) -> str | None:
    """The cache key of kernel graph ``ast`` rendered for ``target`` under ``settings`` (``context``: their
    ``key_context``, when the caller has it); None when it has none."""
    context = key_context(target, settings) if context is None else context
    if context is None:
        return None
    try:
        graph = structural_key(ast)
    except UnkeyableError:
        return None
    return hashlib.sha256(f"{context}\n--\n{graph}".encode()).hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / f"render-{key}.json"


# --- encoding: JSON has no tuples; meta's sequences are all tuples, so lists read back as tuples -------------
def _tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    if isinstance(v, dict):
        return {k: _tuples(x) for k, x in v.items()}
    return v


def _dtype(name: Any) -> DType:
    if not isinstance(name, str) or name not in DTYPES_BY_NAME:
        raise RenderCacheError(f"unknown dtype {name!r}")
    return DTYPES_BY_NAME[name]


def encode(entry: RenderedEntry, key: str) -> str | None:
    """The entry stored under ``key`` as JSON text, or None when it would not read back equal (then it is not
    stored)."""
    doc = {"format": FORMAT, "key": key, "sink_key": entry.sink_key, "source": entry.source, "meta": entry.meta,
           "stats": {"flops": entry.stats.flops, "bytes": entry.stats.bytes,
                     "global_size": list(entry.stats.global_size)},
           "policy": {"target": entry.policy.target, "native": [d.name for d in entry.policy.native],
                      "emulated": [[d.name, why] for d, why in entry.policy.emulated]}}
    try:
        text = json.dumps(doc, sort_keys=True)
        back = decode(text, key)
    except (TypeError, ValueError):
        return None
    same = back == entry and value_code(back.meta) == value_code(entry.meta)  # value_code: 1 vs True vs 1.0
    return text if same else None


def decode(text: str, key: str) -> RenderedEntry:
    """The entry in ``text``, stored under ``key``; RenderCacheError when it is not one (or is another key's)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise RenderCacheError(f"not JSON: {e}") from None
    try:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise RenderCacheError(f"not a render-cache entry of format {FORMAT}")
        if doc.get("key") != key:
            raise RenderCacheError(f"the entry of key {str(doc.get('key'))[:16]!r}..., expected {key[:16]!r}...")
        source, sink_key, meta = doc["source"], doc["sink_key"], doc["meta"]
        stats, policy = doc["stats"], doc["policy"]
        if not (isinstance(source, str) and source.count(NAME_SLOT) == 1 and isinstance(sink_key, str)
                and isinstance(meta, dict)):
            raise RenderCacheError("source, sink_key or meta of the wrong type")
        flops, nbytes, glob = stats["flops"], stats["bytes"], stats["global_size"]
        if not (type(flops) is int and type(nbytes) is int and isinstance(glob, list)
                and all(type(g) is int for g in glob)):
            raise RenderCacheError("stats of the wrong type")
        if not (isinstance(policy["target"], str) and isinstance(policy["native"], list)
                and isinstance(policy["emulated"], list)
                and all(isinstance(e, list) and len(e) == 2 and isinstance(e[1], str) for e in policy["emulated"])):
            raise RenderCacheError("dtype policy of the wrong type")
        pol = DTypePolicy(policy["target"], tuple(_dtype(n) for n in policy["native"]),
                          tuple((_dtype(n), why) for n, why in policy["emulated"]))
    except (KeyError, TypeError) as e:
        raise RenderCacheError(f"malformed entry: {e!r}") from None
    return RenderedEntry(sink_key, source, _tuples(meta), KernelStats(flops, nbytes, tuple(glob)), pol)


def load(key: str) -> RenderedEntry | None:
    """The entry stored under ``key``, or None: none stored, or the file is not a valid entry (a miss; the next
    store replaces it)."""
    try:
        text = _path(key).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return decode(text, key)
    except RenderCacheError:
        return None


def store(key: str, name: str, source: str, meta: dict[str, Any], stats: KernelStats, policy: DTypePolicy,
          sink: UOp) -> bool:
    """Store a kernel rendered under ``name``; False (nothing stored) when the name does not stand exactly once in
    the source, as `` name(`` (then it could not be put back exactly), or the entry would not read back equal."""
    marker = f" {name}("
    if source.count(marker) != 1 or NAME_SLOT in source or not sources_unchanged():
        return False
    try:
        sink_key = structural_key(sink)
    except UnkeyableError:
        return False
    entry = RenderedEntry(sink_key, source.replace(marker, f" {NAME_SLOT}("), meta, stats, policy)
    text = encode(entry, key)
    if text is None:
        return False
    try:
        publish(_path(key), text)
    except OSError:  # a read-only or full cache folder costs speed, not correctness
        return False
    return True


def _answer_path(key: str) -> Path:
    return cache_dir() / f"answer-{key}.json"


def cached_answer(question: str, ast: UOp, target: Any, answer: Callable[[], bool]) -> bool:
    """``answer()``: a yes/no planning ``question`` about kernel graph ``ast`` on ``target`` whose answer depends only
    on the compiler's code, the target and the graph, read from the cache where an earlier process stored it (and
    stored where the cache may be written; a file that is not a valid answer for its key is a miss)."""
    key = entry_key(ast, target, f"question={question}") if cache_enabled() else None
    if key is None:
        return answer()
    doc = read_entry(_answer_path(key), FORMAT, key)
    if doc is not None and isinstance(doc.get("answer"), bool):
        return doc["answer"]
    result = bool(answer())
    if sources_unchanged():
        try:
            publish(_answer_path(key), json.dumps({"format": FORMAT, "key": key, "answer": result}))
        except OSError:  # a read-only or full cache folder costs speed, not correctness
            pass
    return result
