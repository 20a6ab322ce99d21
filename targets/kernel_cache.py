"""The on-disk cache of compiled kernels (device side): shared objects and OpenCL program binaries by key.

It lives in ``$DRIVEPACK_CACHE`` or ``~/.cache/drivepack``. Kernels compiled together share one file: each
kernel's key then names a ``<key>.ref`` file holding the name of the batch file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    root = Path(os.environ.get("DRIVEPACK_CACHE") or Path.home() / ".cache" / "drivepack")
    root.mkdir(parents=True, exist_ok=True)
    return root


def cached_artifact(stem: str, ext: str) -> Path | None:
    """The cached file holding the kernel named ``stem``: ``stem + ext`` itself, or the batch file that
    ``stem.ref`` names (kernels compiled together share one file)."""
    own = cache_dir() / f"{stem}{ext}"
    if own.exists():
        return own
    ref = cache_dir() / f"{stem}.ref"
    if ref.exists():
        batch = cache_dir() / ref.read_text().strip()
        if batch.exists():
            return batch
    return None


def publish(path: Path, data: bytes | str | Iterable[Any]) -> None:
    """Write atomically: concurrent test workers may compile the same kernel. ``data``: the bytes, the text, or
    an iterable of bytes-like chunks written one after another (a large file never held whole in memory). Staged
    beside ``path``: a rename within one folder is atomic, and a writer thread never follows a later cache folder."""
    chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, bytes | bytearray) else data
    fd, staged = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def read_entry(path: Path, fmt: int, key: str) -> dict[str, Any] | None:
    """The JSON object in cache file ``path`` when it is an entry of format ``fmt`` stored under ``key``; None for a
    file that is missing, unreadable, not JSON or another format's or key's (a miss: the next store replaces it)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == fmt and doc.get("key") == key else None


def framed_digest(parts: Iterable[str], seed: str = "") -> str:
    """SHA-256 of ``seed`` and ``parts``, each part framed by its length: no two different sequences share one."""
    h = hashlib.sha256(seed.encode())
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
