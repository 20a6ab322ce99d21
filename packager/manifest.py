"""The package manifest: what its plain-data fields are, checked field by field into a typed ``Manifest``.

Every field the loader, verify and replay rely on is checked for presence, type and range here, before any
section is interpreted; a problem is a PackageError naming the dotted field, the expected and the actual value.
Fields only shown to people (dtype-policy report, settings, ABI check result) are checked for type only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packager.entries import MAX_ENTRIES, check_entry_name
from packager.errors import PackageError

FORMAT_NAME = "drivepack-package"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
TARGETS = ("CPU", "OPENCL", "QCOM")
MAX_CPU_THREADS = 1024
REFERENCE_KINDS = ("onnxruntime", "drivepack-noopt")  # where golden reference outputs come from


@dataclass(frozen=True)
class OutputTolerance:
    """How one output is compared across targets: |got - want| <= atol + rtol * |want|; 0/0 means bit-exact."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    rtol: float
    atol: float


@dataclass(frozen=True)
class KernelEntry:
    """One kernel as the manifest lists it: names, its source section, FLOPs and bytes per launch set."""

    name: str
    entry: str
    section: str
    flops: int
    bytes: int
    # the ONNX nodes it computes; None: a package written before the field existed (shown as "?")
    onnx_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class KernelCounts:
    """The one definition of an entry's kernel numbers that package, progress, inspect and the manifest use.

    ``traced``: kernels the capture scheduled, one launch each; ``pruned``: those that read only weights, run
    once at package time and folded into weights; ``dispatches``: the rest, the command buffer's launches
    (traced = pruned + dispatches); ``kept``: the distinct compiled kernels those dispatches run (launches of an
    identical kernel share one), the manifest's ``kernels.list``."""

    traced: int
    pruned: int
    dispatches: int
    kept: int

    @classmethod
    def of(cls, traced: int, dispatches: int, kept: int) -> KernelCounts:
        return cls(traced, traced - dispatches, dispatches, kept)

    def to_json(self) -> dict[str, int]:
        return {"traced": self.traced, "pruned": self.pruned, "dispatches": self.dispatches, "kept": self.kept}

    def text(self) -> str:
        return (f"{self.traced} kernels traced: {self.pruned} pruned (folded into weights), {self.dispatches} "
                f"dispatched, running {self.kept} distinct kernels")


@dataclass(frozen=True)
class EntryManifest:
    """One entry's checked fields (one captured model: its role, ABI, kernels, golden I/O, accuracy); ``raw`` is
    its plain-data object."""

    raw: dict[str, Any]
    name: str
    role: str | None
    model_name: str
    model_sha256: str
    budget_mean_ms: float
    budget_max_ms: float
    kernels: tuple[KernelEntry, ...]
    kernels_traced: int
    kernels_pruned: int
    arena_bytes: int
    golden_sets: int
    outputs: tuple[OutputTolerance, ...]
    checked_on: dict[str, str]
    abi: dict[str, Any]
    reference: dict[str, str]  # golden.reference (packager/reference.py)
    accuracy: tuple[dict[str, Any], ...]  # accuracy.slices (packager/accuracy.py), target vs reference
    kernel_counts: KernelCounts  # kernels.traced / pruned / dispatches / kept


@dataclass(frozen=True)
class Manifest:
    """The checked manifest: the file-level fields once, then the entries in order; ``raw`` is the whole
    plain-data document (inspect prints it). The per-entry attributes below (``role``, ``abi``, ``golden_sets``,
    ...) are those of the only entry, for single-entry packages; with several entries they raise PackageError
    listing the names (use ``entry(name)``)."""

    raw: dict[str, Any]
    drivepack_version: str
    target_device: str
    target_name: str
    vehicle_name: str
    entries: tuple[EntryManifest, ...]
    cpu_threads: int | None = None  # settings.cpu_threads: the CPU replay's thread count; None: the runtime's

    @property
    def entry_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def entry(self, name: str | None = None) -> EntryManifest:
        """Entry ``name``; ``None``: the only one (a PackageError listing the names when there are several)."""
        if name is None:
            if len(self.entries) != 1:
                raise PackageError(f"entry: expected one of {list(self.entry_names)} (the package has "
                                   f"{len(self.entries)} entries), got none")
            return self.entries[0]
        for e in self.entries:
            if e.name == name:
                return e
        raise PackageError(f"entry: expected one of {list(self.entry_names)}, got {name!r}")

    @property
    def only(self) -> EntryManifest:
        return self.entry(None)

    def __getattr__(self, name: str) -> Any:
        # the per-entry fields (role, abi, golden_sets, kernels, ...) of the only entry; called only for names
        # the dataclass itself lacks, so a typo is still an AttributeError
        if name in _ENTRY_FIELDS:
            return getattr(self.only, name)
        raise AttributeError(f"Manifest has no field {name!r}")


_ENTRY_FIELDS = frozenset(EntryManifest.__dataclass_fields__)


class _Fields:
    """Typed access to one JSON object; every error names the dotted path."""

    def __init__(self, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise PackageError(f"{where}: expected an object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def raw(self, key: str) -> Any:
        if key not in self.obj:
            raise PackageError(f"{self.where}.{key}: expected a value, got none (field missing)")
        return self.obj[key]

    def str(self, key: str, choices: tuple[str, ...] | None = None, pattern: re.Pattern[str] | None = None) -> str:
        v = self.raw(key)
        if not isinstance(v, str):
            raise PackageError(f"{self.where}.{key}: expected a string, got {type(v).__name__} {v!r}")
        if choices is not None and v not in choices:
            raise PackageError(f"{self.where}.{key}: expected one of {list(choices)}, got {v!r}")
        if pattern is not None and not pattern.match(v):
            raise PackageError(f"{self.where}.{key}: expected to match {pattern.pattern}, got {v!r}")
        return v

    def int(self, key: str, lo: int = 0, hi: int | None = None) -> int:
        v = self.raw(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise PackageError(f"{self.where}.{key}: expected an integer {rng}, got {v!r}")
        return v

    def num(self, key: str, lo: float = 0.0) -> float:
        v = self.raw(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= lo:
            raise PackageError(f"{self.where}.{key}: expected a number >= {lo}, got {v!r}")
        return float(v)

    def obj_(self, key: str) -> _Fields:
        return _Fields(self.raw(key), f"{self.where}.{key}")

    def list(self, key: str) -> list[Any]:
        v = self.raw(key)
        if not isinstance(v, list):
            raise PackageError(f"{self.where}.{key}: expected a list, got {type(v).__name__}")
        return v


def parse_manifest(doc: dict[str, Any], where: str = "manifest") -> Manifest:
    """A Manifest from plain data; PackageError naming the first field that is missing or out of range."""
    f = _Fields(doc, where)
    f.str("format", (FORMAT_NAME,))
    target, vehicle = f.obj_("target"), f.obj_("vehicle")
    settings = f.obj_("settings")
    # the package's own CPU thread count (``package --cpu-threads``): absent, or what the replay is made with
    cpu_threads = settings.int("cpu_threads", 1, MAX_CPU_THREADS) if "cpu_threads" in settings.obj else None
    raw_entries = f.list("entries")
    if not 1 <= len(raw_entries) <= MAX_ENTRIES:
        raise PackageError(f"{where}.entries: expected 1..MAX_ENTRIES = {MAX_ENTRIES} entries, got "
                           f"{len(raw_entries)}")
    entries: list[EntryManifest] = []
    for i, raw in enumerate(raw_entries):
        e = _entry(raw, where, i)
        if e.name in {x.name for x in entries}:
            raise PackageError(f"{where}.entries[{i}].name: expected a name no other entry has, got {e.name!r} "
                               "twice")
        entries.append(e)
    return Manifest(raw=doc, drivepack_version=f.str("drivepack_version"), target_device=target.str("device"),
                    target_name=target.str("name", TARGETS), vehicle_name=vehicle.str("name"),
                    entries=tuple(entries), cpu_threads=cpu_threads)


def _entry(doc: Any, manifest: str, index: int) -> EntryManifest:
    """Entry ``index`` of ``manifest.entries`` (docs/package-format.md, "Entries"); errors name the field as
    ``manifest.entries[NAME].field``."""
    f = _Fields(doc, f"{manifest}.entries[{index}]")
    name = check_entry_name(f.raw("name"), f"{manifest}.entries[{index}].name")
    where = f.where = f"{manifest}.entries[{name}]"
    model, kern, golden = f.obj_("model"), f.obj_("kernels"), f.obj_("golden")
    kernels = []
    for i, k in enumerate(kern.list("list")):
        kf = _Fields(k, f"{where}.kernels.list[{i}]")
        kernels.append(KernelEntry(kf.str("name"), kf.str("entry"), kf.str("section"), kf.int("flops"),
                                   kf.int("bytes"), _node_names(kf)))
    traced, kept = kern.int("traced"), kern.int("kept")
    if kept != len(kernels):
        raise PackageError(f"{where}.kernels.kept: expected {len(kernels)} (the kernel list's length), got {kept}")
    dispatches = kern.int("dispatches")
    if dispatches < kept or dispatches > traced:
        raise PackageError(f"{where}.kernels.dispatches: expected kept..traced = {kept}..{traced}, got {dispatches}")
    counts = KernelCounts.of(traced, dispatches, kept)
    pruned = kern.int("pruned")
    # drivepack before KernelCounts wrote traced - kept here; either is read, and every command shows the counts
    # computed from traced and dispatches
    if pruned not in (counts.pruned, traced - kept):
        raise PackageError(f"{where}.kernels.pruned: expected traced - dispatches = {counts.pruned}, got {pruned}")
    outputs = []
    for i, o in enumerate(golden.list("outputs")):
        of = _Fields(o, f"{where}.golden.outputs[{i}]")
        shape = tuple(of.list("shape"))
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in shape):
            raise PackageError(f"{where}.golden.outputs[{i}].shape: expected non-negative integers, got {list(shape)}")
        outputs.append(OutputTolerance(of.str("name"), of.str("dtype"), shape, of.num("rtol"), of.num("atol")))
    checked = golden.obj_("checked_on").obj
    if any(not isinstance(v, str) for v in checked.values()):
        raise PackageError(f"{where}.golden.checked_on: expected string values, got {checked!r}")
    reference = golden.raw("reference")
    if not isinstance(reference, dict) or reference.get("kind") not in REFERENCE_KINDS \
            or any(not isinstance(v, str) for v in reference.values()):
        raise PackageError(f"{where}.golden.reference: expected an object with string values and kind one of "
                           f"{list(REFERENCE_KINDS)}, got {reference!r:.120}")
    role = f.raw("role")
    if role is not None and not isinstance(role, str):
        raise PackageError(f"{where}.role: expected a string or null, got {type(role).__name__}")
    f.obj_("dtype_policy")
    return EntryManifest(
        raw=doc, name=name, role=role, model_name=model.str("name"),
        model_sha256=model.str("sha256", pattern=_SHA256), budget_mean_ms=f.num("budget_mean_ms"),
        budget_max_ms=f.num("budget_max_ms"), kernels=tuple(kernels), kernels_traced=traced, kernels_pruned=pruned,
        arena_bytes=f.int("arena_bytes"), golden_sets=golden.int("sets", 1, 64), outputs=tuple(outputs),
        checked_on=dict(checked), abi=f.obj_("abi").obj, reference=reference,
        accuracy=_accuracy(f.obj_("accuracy"), reference["kind"]), kernel_counts=counts)


def _node_names(kf: _Fields) -> tuple[str, ...] | None:
    """``onnx_nodes``: absent (an older package), or a list of strings."""
    if "onnx_nodes" not in kf.obj:
        return None
    names = kf.list("onnx_nodes")
    if any(not isinstance(n, str) for n in names):
        raise PackageError(f"{kf.where}.onnx_nodes: expected a list of strings, got {names!r:.120}")
    return tuple(names)


_ROW_KEYS = {"output": str, "start": int, "stop": int, "max_abs_err": (int, float), "max_rel_err": (int, float),
             "outside": int, "ok": bool}


def _accuracy(f: _Fields, kind: str) -> tuple[dict[str, Any], ...]:
    """``accuracy``: ``reference`` (the golden reference's kind) and its ``slices`` rows, each field typed."""
    f.str("reference", (kind,))
    rows = []
    for i, row in enumerate(f.list("slices")):
        rf = _Fields(row, f"{f.where}.slices[{i}]")
        for key, kind_ in _ROW_KEYS.items():
            v = rf.raw(key)
            if not isinstance(v, kind_) or (kind_ is not bool and isinstance(v, bool)):
                raise PackageError(f"{rf.where}.{key}: expected {getattr(kind_, '__name__', 'a number')}, got {v!r}")
        if rf.raw("slice") is not None and not isinstance(row["slice"], str):
            raise PackageError(f"{rf.where}.slice: expected a string or null, got {row['slice']!r}")
        rows.append(dict(row))
    return tuple(rows)
