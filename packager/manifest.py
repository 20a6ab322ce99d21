"""The package manifest: what its plain-data fields are, checked field by field into a typed ``Manifest``.

Every field the loader, verify and replay rely on is checked for presence, type and range here, before any
section is interpreted; a problem is a PackageError naming the dotted field, the expected and the actual value.
Fields only shown to people (dtype-policy report, settings, ABI check result) are checked for type only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packager.errors import PackageError

FORMAT_NAME = "drivepack-package"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
TARGETS = ("CPU", "OPENCL", "QCOM")
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


@dataclass(frozen=True)
class Manifest:
    """The checked manifest; ``raw`` is the whole plain-data document (inspect prints it)."""

    raw: dict[str, Any]
    drivepack_version: str
    model_name: str
    model_sha256: str
    target_device: str
    target_name: str
    vehicle_name: str
    role: str | None
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
    reference: dict[str, str] | None = None  # golden.reference (packager/reference.py); optional: None if absent


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
    model, target, vehicle = f.obj_("model"), f.obj_("target"), f.obj_("vehicle")
    kern, golden = f.obj_("kernels"), f.obj_("golden")
    entries = []
    for i, k in enumerate(kern.list("list")):
        kf = _Fields(k, f"{where}.kernels.list[{i}]")
        entries.append(KernelEntry(kf.str("name"), kf.str("entry"), kf.str("section"), kf.int("flops"),
                                   kf.int("bytes")))
    traced, kept = kern.int("traced"), kern.int("kept")
    if kept != len(entries):
        raise PackageError(f"{where}.kernels.kept: expected {len(entries)} (the kernel list's length), got {kept}")
    pruned = kern.int("pruned")
    if pruned != traced - kept:
        raise PackageError(f"{where}.kernels.pruned: expected traced - kept = {traced - kept}, got {pruned}")
    outputs = []
    for i, o in enumerate(golden.list("outputs")):
        of = _Fields(o, f"{where}.golden.outputs[{i}]")
        shape = tuple(of.list("shape"))
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in shape):
            raise PackageError(f"{where}.golden.outputs[{i}].shape: expected non-negative integers, got {list(shape)}")
        outputs.append(OutputTolerance(of.str("name"), of.str("dtype"), shape, of.num("rtol"), of.num("atol")))
    checked = golden.obj_("checked_on").obj
    reference = golden.obj.get("reference")
    if reference is not None and (not isinstance(reference, dict) or reference.get("kind") not in REFERENCE_KINDS
                                  or any(not isinstance(v, str) for v in reference.values())):
        raise PackageError(f"{where}.golden.reference: expected an object with string values and kind one of "
                           f"{list(REFERENCE_KINDS)}, got {reference!r:.120}")
    if any(not isinstance(v, str) for v in checked.values()):
        raise PackageError(f"{where}.golden.checked_on: expected string values, got {checked!r}")
    role = vehicle.raw("role")
    if role is not None and not isinstance(role, str):
        raise PackageError(f"{where}.vehicle.role: expected a string or null, got {type(role).__name__}")
    for key in ("settings", "dtype_policy"):
        f.obj_(key)
    return Manifest(
        raw=doc, drivepack_version=f.str("drivepack_version"), model_name=model.str("name"),
        model_sha256=model.str("sha256", pattern=_SHA256), target_device=target.str("device"),
        target_name=target.str("name", TARGETS), vehicle_name=vehicle.str("name"), role=role,
        budget_mean_ms=vehicle.num("budget_mean_ms"), budget_max_ms=vehicle.num("budget_max_ms"),
        kernels=tuple(entries), kernels_traced=traced, kernels_pruned=pruned, arena_bytes=f.int("arena_bytes"),
        golden_sets=golden.int("sets", 1, 64), outputs=tuple(outputs), checked_on=dict(checked),
        abi=f.obj_("abi").obj, reference=reference)
