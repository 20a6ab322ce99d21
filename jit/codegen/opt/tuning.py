"""Tuning files: the optimizer options a timed search (BEAM) chose per kernel, stored as plain JSON.

A tuning file maps ``(kernel, target, device)`` to one ``OptOptions``: ``kernel`` is ``kernel_key(sink)``, a
sha256 of the kernel graph *before* optimisation (so the key does not depend on the options it selects),
``target`` the device name (``CPU``, ``OPENCL``, ``QCOM:630``) and ``device`` ``device_fingerprint(target)`` (a
tuning measured on one machine says nothing about another). Each entry also records what the search measured
(``time_us`` of the kept candidate, ``default_us`` of the heuristic default, ``candidates`` timed) so a reader can
see what tuning bought; those numbers are informative only and never change what is compiled.

What holds: ``dumps`` is canonical (sorted keys and entries, fixed layout), so the same table gives the same
bytes; ``loads(dumps(t)) == t``; ``loads`` refuses anything else with a ``TuningError`` naming the field, the
expected and the actual value. The file is data only: nothing in it is executed.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jit.codegen.opt import target_caches
from jit.codegen.opt.options import OptOptions, OptOptionsError
from jit.common.errors import DrivepackError
from jit.ir.uop import UOp, toposort

FORMAT = "drivepack-tuning"
VERSION = 1
_HEX = frozenset("0123456789abcdef")


class TuningError(DrivepackError, ValueError):
    """A tuning file that cannot be read or does not follow the format."""


def kernel_key(sink: UOp) -> str:
    """A stable hash of a kernel graph: the same graph gives the same key in every process (op names, dtype
    reprs, args and source positions in topological order; nothing depends on object ids or hash seeds)."""
    nodes = toposort([sink])
    index = {node: i for i, node in enumerate(nodes)}
    h = hashlib.sha256()
    for node in nodes:
        srcs = ",".join(str(index[s]) for s in node.src)
        h.update(f"{node.op.name}|{node.dtype!r}|{node.arg!r}|{srcs}\n".encode())
    return h.hexdigest()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def device_fingerprint(target: Any) -> str:
    """What a timing depends on besides the kernel: the machine, and per target kind the OpenCL platform,
    device and driver, or the CPU model, C compiler, thread count and the caches the optimizer sized loops by
    (``TargetLimits.l1`` / ``.l2``: a model name such as a VM's "AMD EPYC" does not tell them)."""
    info = getattr(target, "info", None)
    if info is not None:  # OpenCL and the QCOM profile on top of it
        return f"{platform.machine()}|{info.platform}|{info.name}|{info.driver_version}"
    import os
    import shutil

    from targets.cpu_runtime import compiler_identity

    cc = compiler_identity(os.environ.get("CC") or shutil.which("cc") or "cc")
    caches = ",".join(f"{c.size}/{c.ways}/{c.line}" for c in target_caches(target))
    return f"{platform.machine()}|{_cpu_model()}|{cc}|threads={getattr(target, 'threads', 1)}|caches={caches}"


@dataclass(frozen=True)
class TuningEntry:
    """The options kept for one kernel on one target and device, and what the search measured."""

    kernel: str
    target: str
    device: str
    opts: OptOptions
    name: str = ""  # the kernel's name when it was tuned (for a reader; not part of the key)
    time_us: float = 0.0
    default_us: float = 0.0
    candidates: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kernel, self.target, self.device)

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "target": self.target, "device": self.device, "name": self.name,
                "opts": self.opts.to_dict(), "time_us": round(self.time_us, 3), "default_us": round(self.default_us, 3),
                "candidates": self.candidates}


@dataclass
class TuningTable:
    """Tuning entries by key; ``get``/``put`` are what the search and the optimizer hook use."""

    entries: dict[tuple[str, str, str], TuningEntry] = field(default_factory=dict)

    def get(self, kernel: str, target: str, device: str) -> TuningEntry | None:
        return self.entries.get((kernel, target, device))

    def put(self, entry: TuningEntry) -> None:
        self.entries[entry.key] = entry

    def __len__(self) -> int:
        return len(self.entries)

    def digest(self) -> str:
        """sha256 of the options only (not the timings): two tables that compile the same kernels agree."""
        body = [[*k, self.entries[k].opts.to_dict()] for k in sorted(self.entries)]
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def dumps(self) -> str:
        """The file's text: one entry per line (sorted by key, keys sorted), so a diff shows changed kernels."""
        rows = [json.dumps(self.entries[k].to_dict(), sort_keys=True, allow_nan=False) for k in sorted(self.entries)]
        body = ",\n  ".join(rows)
        return (f'{{"format": "{FORMAT}", "version": {VERSION}, "entries": [' + (f"\n  {body}\n" if rows else "")
                + "]}\n")

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps())


def _field(raw: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in raw:
        raise TuningError(f"{where}.{name}: expected a field, got none")
    value = raw[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TuningError(f"{where}.{name}: expected {want}, got {type(value).__name__} {value!r}")
    return value


def _entry(raw: Any, where: str) -> TuningEntry:
    if not isinstance(raw, dict):
        raise TuningError(f"{where}: expected an object, got {type(raw).__name__}")
    known = {"kernel", "target", "device", "name", "opts", "time_us", "default_us", "candidates"}
    if unknown := sorted(set(raw) - known):
        raise TuningError(f"{where}: expected fields among {sorted(known)}, got unknown {unknown}")
    kernel = _field(raw, "kernel", str, where)
    if len(kernel) != 64 or not set(kernel) <= _HEX:
        raise TuningError(f"{where}.kernel: expected 64 lowercase hex digits (sha256), got {kernel!r}")
    try:
        opts = OptOptions.from_dict(_field(raw, "opts", dict, where))
    except (OptOptionsError, TypeError) as e:
        raise TuningError(f"{where}.opts: {e}") from None
    nums = {}
    for name in ("time_us", "default_us"):
        nums[name] = float(_field(raw, name, (int, float), where)) if name in raw else 0.0
        if nums[name] < 0:
            raise TuningError(f"{where}.{name}: expected >= 0, got {nums[name]}")
    candidates = _field(raw, "candidates", int, where) if "candidates" in raw else 0
    return TuningEntry(kernel, _field(raw, "target", str, where), _field(raw, "device", str, where), opts,
                       _field(raw, "name", str, where) if "name" in raw else "", nums["time_us"], nums["default_us"],
                       candidates)


def loads(text: str, source: str = "tuning file") -> TuningTable:
    """The table in ``text`` (TuningError, naming ``source`` and the field, when it is not a tuning file)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuningError(f"{source}: expected JSON, got a parse error at line {e.lineno}: {e.msg}") from None
    if not isinstance(doc, dict):
        raise TuningError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise TuningError(f"{source}.format: expected {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise TuningError(f"{source}.version: expected {VERSION}, got {doc.get('version')!r}")
    entries = _field(doc, "entries", list, source)
    table = TuningTable()
    for i, raw in enumerate(entries):
        entry = _entry(raw, f"{source}.entries[{i}]")
        if entry.key in table.entries:
            raise TuningError(f"{source}.entries[{i}]: expected one entry per (kernel, target, device), got a "
                              f"second for kernel {entry.kernel[:12]} on {entry.target}")
        table.put(entry)
    return table


def load(path: str | Path) -> TuningTable:
    """The tuning file at ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TuningError(f"tuning file: expected a readable file, got {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise TuningError(f"tuning file: expected UTF-8 JSON, got undecodable bytes in {path}") from None
    return loads(text, str(path))
