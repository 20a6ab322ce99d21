"""Whole captures kept on disk: a capture of a graph it has captured before replays what that one produced.

A warm capture compiles nothing (kernels are cached by source: targets/kernel_cache.py; rendered sources by
kernel graph: jit/render_cache.py), yet it still scheduled, lowered, folded weights and planned memory again
before it could look those up. A capture whose traced graph, constants, target and settings are those of an
earlier one produces the same command buffer and weights (every step after tracing is deterministic): this cache
keeps them, and ``jit.trace.capture`` replays them straight after tracing.

Key (``capture_key``): a SHA-256 over the render cache's key context (the compiler's code, the target, the kernel
settings: jit/render_cache.py), every run setting (``jit.common.helpers.settings_key``), whether weights are
folded, each state's initial value (stored with the weights) and the traced graph node by node, each arg in
``value_code``'s exact encoding; a BUFFER enters by its dtype, size and either the name of the input or state it
stands for or the SHA-256 of the bytes it holds (so a model with other weights misses). A graph holding a value
with no exact encoding, or a buffer that is neither, has no key: it is captured as before. The cache is off
(``cache_enabled``) with ``DRIVEPACK_CAPTURE_CACHE=0`` and wherever the render cache is (tuning, BEAM search, VIZ).

A capture of a loaded ONNX model (``jit.trace.capture_onnx``) is looked up before it traces, by ``model_key``: the
same context, the graph builders' code (``jit/frontend``, ``jit/onnx``: tracing no longer decides the key), the
SHA-256 of the bytes the model was parsed from and of its external tensors (``OnnxModel.content_digest``; a model
given as a ModelProto has none and is keyed by its traced graph only), its float16 and device settings and the
inputs' names, dtypes and shapes. ``model-capture-<key>.json`` names the capture entry its last capture stored
(the weights are not stored twice), the host nodes that capture ran and, on a target whose cached programs cost a
build each to load (PoCL), those programs, which start loading before the entry is read.

Files, in the kernel cache's folder (``targets.kernel_cache.cache_dir``): ``capture-<key>.bin``, the weights one
after another, each at a multiple of ``BLOB_ALIGNMENT``; ``capture-<key>.json``, plain JSON read as data only: the
command buffer (``CommandBuffer.to_dict``, validated again by ``from_dict`` on load), each weight's id, offset and
size, the SHA-256 of the .bin file and the capture's report. The .json is written last, so an entry is complete
once it exists. A hit maps the .bin read-only and checks its digest before use: the weights are then views of
the page cache, not copies. Anything that does not check out (a missing or changed .bin, a command buffer that
does not validate or names another target, a field of the wrong type) is a miss, and the next store replaces it.
Files are replaced, never rewritten in place (``publish``), so a replay's mapping never changes under it. The .bin
files are kept under ``DRIVEPACK_CAPTURE_CACHE_MB`` (``DEFAULT_BUDGET_MB``) in all, the least recently used
removed first; a model-capture file naming a removed entry is a miss (those files are a few hundred bytes).
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from jit import render_cache
from jit.common.helpers import settings_key
from jit.ir.stable_key import UnkeyableError, value_code
from jit.ir.uop import Ops, UOp, toposort
from jit.realize import holds_data, host_bytes, kernel_settings_key, read_into
from targets.cmdbuf import CmdbufError, CommandBuffer
from targets.kernel_cache import cache_dir, publish, read_entry

FORMAT = 1
ENV = "DRIVEPACK_CAPTURE_CACHE"
BUDGET_ENV = "DRIVEPACK_CAPTURE_CACHE_MB"
DEFAULT_BUDGET_MB = 2048
# a page: each weight of a mapped .bin starts on one, which is any command buffer's alignment but the largest
BLOB_ALIGNMENT = 4096
_KEY = re.compile(r"[0-9a-f]{64}")  # a SHA-256 hex digest: what a file names another entry or a program by
REPORT_FIELDS = ("kernels_traced", "kernels_kept", "weights", "weight_bytes", "arena_bytes", "naive_bytes")

# BUFFER node -> SHA-256 of its bytes: a BUFFER's memory is written once (by its upload or the kernel computing it)
_digests: weakref.WeakKeyDictionary[UOp, str] = weakref.WeakKeyDictionary()


def cache_enabled() -> bool:
    return os.environ.get(ENV, "1") not in ("0", "") and render_cache.cache_enabled()


def _content_digest(buf: UOp, scratch: list[np.ndarray]) -> str:
    digest = _digests.get(buf)
    if digest is None:
        data = host_bytes(buf)
        if data is None:  # device memory: read through one scratch array, grown as needed, not a copy per buffer
            nbytes = buf.arg[2] * buf.dtype.itemsize
            if scratch[0].nbytes < nbytes:
                scratch[0] = np.empty(nbytes, np.uint8)
            data = scratch[0][:nbytes]
            read_into(buf, data)
        digest = _digests[buf] = hashlib.sha256(data).hexdigest()
    return digest


def _context(target: Any, fold_weights: bool) -> str | None:
    """What both keys share: the render cache's key context under every setting; None when the cache is off or
    the target has no exact key."""
    if not cache_enabled():
        return None
    return render_cache.key_context(target, f"{kernel_settings_key()}|{settings_key()}|fold={fold_weights}")


def capture_key(roots: list[UOp], names: Mapping[UOp, str], target: Any, fold_weights: bool,
                states: Mapping[str, np.ndarray]) -> str | None:
    """The key of a capture of ``roots`` on ``target`` whose placeholder BUFFERs are ``names`` (``input:x``,
    ``state:h``) and whose states start at ``states`` (stored with the weights, not in the graph); None where it
    has none (see the module docstring)."""
    context = _context(target, fold_weights)
    if context is None:
        return None
    h = hashlib.sha256(f"drivepack-capture-cache/{FORMAT}\n{context}".encode())
    for name, value in sorted(states.items()):
        arr = np.ascontiguousarray(value)
        digest = hashlib.sha256(arr.reshape(-1).view(np.uint8)).hexdigest()
        h.update(f"\nstate {name} {arr.dtype.str} {arr.shape} {digest}".encode())
    index: dict[UOp, int] = {}
    scratch = [np.empty(0, np.uint8)]
    try:
        for i, node in enumerate(toposort(roots)):
            index[node] = i
            if node.op is Ops.BUFFER:
                if node in names:
                    what = f"placeholder {names[node]}"
                elif holds_data(node):
                    what = f"bytes {_content_digest(node, scratch)}"
                else:
                    return None
                arg = f"{what} {node.arg[2]}"
            else:
                arg = value_code(node.arg)
            h.update(f"\n{node.op.name}|{value_code(node.dtype)}|{arg}|{','.join(str(index[s]) for s in node.src)}"
                     .encode())
    except UnkeyableError:
        return None
    return h.hexdigest()


# the graph builders: a capture keyed by its model (``model_key``) is replayed without them running
_BUILDERS = ("jit/frontend", "jit/onnx")


@functools.cache
def _builders_fingerprint() -> tuple[str, float]:
    """(SHA-256 of every graph builder file's path and bytes, when it was taken)."""
    taken = time.time()
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for folder in _BUILDERS:
        for path in sorted((root / folder).rglob("*.py")):
            h.update(f"\n{path.relative_to(root).as_posix()}\n".encode())
            h.update(path.read_bytes())
    return h.hexdigest(), taken


def _builders_unchanged() -> bool:
    """False when a graph builder file changed after ``_builders_fingerprint`` read them (this process may run
    code the fingerprint does not describe)."""
    taken = _builders_fingerprint()[1]
    root = Path(__file__).resolve().parents[1]
    try:
        return all(p.stat().st_mtime < taken for folder in _BUILDERS for p in (root / folder).rglob("*.py"))
    except OSError:
        return False


def model_key(content_digest: str | None, model_settings: str, example_inputs: Mapping[str, Any], target: Any,
              fold_weights: bool) -> str | None:
    """The key of a capture of a loaded model (jit/onnx/loader.py ``OnnxModel``) whose bytes have
    ``content_digest`` and whose own settings (float16, device) read ``model_settings``, called with inputs of
    ``example_inputs``' names, dtypes and shapes: what a capture keyed by its traced graph would be, without
    tracing. None where it has none (no digest: a model given as a ModelProto; an input that is no array)."""
    context = _context(target, fold_weights) if content_digest is not None else None
    if context is None:
        return None
    parts = [f"drivepack-model-capture/{FORMAT}", context, _builders_fingerprint()[0], content_digest, model_settings]
    for name, arr in example_inputs.items():
        if not isinstance(arr, np.ndarray):
            return None
        parts.append(f"input {name} {arr.dtype.str} {arr.shape}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _alias_path(key: str) -> Path:
    return cache_dir() / f"model-capture-{key}.json"


def load_model_capture(key: str | None, target: Any) -> tuple[str, tuple[CommandBuffer, dict[int, np.ndarray],
                                                                         dict[str, Any]], list[list[str]]] | None:
    """For a ``model_key``: the key of the capture entry its model's last capture stored, that entry (``load``)
    and the host nodes that capture ran (``OnnxModel.host_nodes``, as [node, op] pairs); None on a miss. On a
    target whose cached programs cost a build each to load (``prefetches_programs``: jit/capture_hints.py), the
    programs that capture replayed start loading first, while the entry is read and checked."""
    if key is None:
        return None
    wait_stored()
    doc = read_entry(_alias_path(key), FORMAT, key)
    if doc is None:
        return None
    graph_key, host_nodes, programs = doc.get("capture"), doc.get("host_nodes"), doc.get("programs")
    if not isinstance(graph_key, str) or not _KEY.fullmatch(graph_key) or not isinstance(host_nodes, list) or not all(
            isinstance(h, list) and len(h) == 2 and all(isinstance(v, str) for v in h) for h in host_nodes):
        return None
    if isinstance(programs, list) and programs and target.prefetches_programs and all(
            isinstance(p, str) and _KEY.fullmatch(p) for p in programs):
        target.prefetch(programs, awaited=True)
    hit = load(graph_key, target.name)
    return None if hit is None else (graph_key, hit, host_nodes)


def store_model_capture(key: str | None, target: Any, captured_key: str | None, sources: list[str],
                        host_nodes: list[tuple[str, str]]) -> None:
    """Remember that the capture of ``model_key`` ``key`` on ``target`` is the capture entry ``captured_key``
    (which holds the command buffer and weights: two models of one graph share them), that its kernels are
    ``sources`` (the programs to prefetch) and that it ran ``host_nodes``."""
    if key is None or captured_key is None or not render_cache.sources_unchanged() or not _builders_unchanged():
        return
    programs = list(dict.fromkeys(target.program_keys(sources))) if target.prefetches_programs else []
    _in_background(_publish_quietly, _alias_path(key), json.dumps({
        "format": FORMAT, "key": key, "capture": captured_key, "programs": programs,
        "host_nodes": [list(h) for h in host_nodes]}))


def _publish_quietly(path: Path, text: str) -> None:
    try:
        publish(path, text)
    except OSError:  # a read-only or full cache folder costs the next capture its speed, never a result
        pass


def _paths(key: str) -> tuple[Path, Path]:
    folder = cache_dir()
    return folder / f"capture-{key}.json", folder / f"capture-{key}.bin"


def _blob_digest(path: Path) -> tuple[str, Any]:
    """The SHA-256 of the file at ``path`` and a read-only mapping of it (None for an empty file)."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return hashlib.sha256().hexdigest(), None
        mapping = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    return hashlib.sha256(mapping).hexdigest(), mapping


def load(key: str | None, target_name: str) -> tuple[CommandBuffer, dict[int, np.ndarray], dict[str, Any]] | None:
    """The command buffer, weights (read-only uint8 views of the mapped .bin) and report fields stored under
    ``key`` for the target named ``target_name``; None on a miss."""
    if key is None:
        return None
    wait_stored()
    doc_path, blob_path = _paths(key)
    doc = read_entry(doc_path, FORMAT, key)
    if doc is None:
        return None
    try:
        cmdbuf = CommandBuffer.from_dict(doc["cmdbuf"])
        if cmdbuf.target != target_name:
            return None
        digest, mapping = _blob_digest(blob_path)
        if digest != doc["blob_sha256"]:
            return None
        whole = np.frombuffer(mapping, np.uint8) if mapping is not None else np.empty(0, np.uint8)
        weights: dict[int, np.ndarray] = {}
        for wid, offset, nbytes in doc["weights"]:
            if not all(type(v) is int for v in (wid, offset, nbytes)) or offset < 0 or offset + nbytes > whole.size:
                return None
            weights[wid] = whole[offset:offset + nbytes]
        if {int(b.name): b.nbytes for b in cmdbuf.weights} != {wid: w.size for wid, w in weights.items()}:
            return None
        report = {f: doc["report"][f] for f in REPORT_FIELDS}
        nodes = doc["report"]["kernel_nodes"]
        if not all(type(v) is int for v in report.values()) or not all(
                isinstance(n, list) and all(isinstance(s, str) for s in n) for n in nodes):
            return None
        report["kernel_nodes"] = tuple(tuple(n) for n in nodes)
    except (CmdbufError, OSError, KeyError, TypeError, ValueError):
        return None
    try:
        os.utime(blob_path)  # recently used: the last to be evicted
    except OSError:
        pass
    return cmdbuf, weights, report


def store(key: str | None, cmdbuf: CommandBuffer, weights: Mapping[int, np.ndarray], report: Any) -> None:
    """Keep a capture's command buffer, weights and report (its ``REPORT_FIELDS`` and ``kernel_nodes``) under ``key``,
    written on a thread of its own (``wait_stored``). A read-only or full cache folder costs the next capture its
    speed, never this one its result."""
    if key is not None and render_cache.sources_unchanged():  # the folder is this call's, not the writer's later one
        _in_background(_write_entry, *_paths(key), key, cmdbuf, dict(weights), report, budget_bytes())


# a capture returns while its entry is written (the file's pages, on a fresh VM, can cost as much as the capture's
# last steps); every lookup first waits for the writes this process started, and the interpreter for any left
_writer: ThreadPoolExecutor | None = None
_writing: list[Future[None]] = []
# the writer's nice value: its hashing and copying never take a core from the replay's first calls, whose dispatch
# timings choose how the replay splits its work (targets/cpu_split.py)
WRITER_NICENESS = 19


def _lower_priority() -> None:
    if sys.platform == "linux":  # a thread's own nice value: on Linux, setpriority of a thread id is per thread
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICENESS)
        except OSError:
            pass  # best effort: the entry is the same at any priority


def _in_background(fn: Callable[..., None], *args: Any) -> None:
    global _writer
    if _writer is None:
        _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drivepack-capture-cache",
                                     initializer=_lower_priority)
    _writing.append(_writer.submit(fn, *args))


def wait_stored() -> None:
    """Wait until the entries this process started storing are written (or given up on)."""
    while _writing:
        _writing.pop(0).result()


def _write_entry(doc_path: Path, blob_path: Path, key: str, cmdbuf: CommandBuffer, weights: dict[int, np.ndarray],
                 report: Any, budget: int) -> None:
    layout, end = [], 0
    for wid, w in weights.items():
        layout.append([wid, end, w.nbytes])
        end = -(-(end + w.nbytes) // BLOB_ALIGNMENT) * BLOB_ALIGNMENT
    sha = hashlib.sha256()

    def chunks() -> Iterator[memoryview]:  # each weight, then zeros up to the next one's offset; hashed as written
        written = 0
        for (_, offset, _), w in zip(layout, weights.values(), strict=True):
            for chunk in (memoryview(bytes(offset - written)), memoryview(np.ascontiguousarray(w).reshape(-1)
                                                                          .view(np.uint8))):
                sha.update(chunk)
                yield chunk
            written = offset + w.nbytes
        tail = memoryview(bytes(end - written))
        sha.update(tail)
        yield tail

    try:
        publish(blob_path, chunks())
        doc = {"format": FORMAT, "key": key, "cmdbuf": cmdbuf.to_dict(), "weights": layout,
               "blob_sha256": sha.hexdigest(), "report": {f: getattr(report, f) for f in REPORT_FIELDS}
               | {"kernel_nodes": [list(n) for n in report.kernel_nodes]}}
        publish(doc_path, json.dumps(doc, sort_keys=True, separators=(",", ":")))
        _evict(blob_path.parent, budget)
    except OSError:
        pass


def budget_bytes() -> int:
    raw = os.environ.get(BUDGET_ENV, "")
    try:
        return max(int(raw), 0) << 20 if raw else DEFAULT_BUDGET_MB << 20
    except ValueError:
        raise ValueError(f"{BUDGET_ENV}: expected a number of MiB, got {raw!r}") from None


def _evict(folder: Path, budget: int) -> None:
    """Remove the least recently used entries in ``folder`` until its .bin files hold ``budget`` bytes at most."""
    entries = []
    for blob in folder.glob("capture-*.bin"):
        try:
            st = blob.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, blob))
    total = sum(size for _, size, _ in entries)
    for _, size, blob in sorted(entries):
        if total <= budget:
            break
        for path in (blob.with_suffix(".json"), blob):  # the entry first: a .json never names a missing .bin
            path.unlink(missing_ok=True)
        total -= size
