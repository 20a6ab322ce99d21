"""Comparing replayed outputs with a package's golden outputs: bit-exact, or within a per-output tolerance.

``verify_package`` replays every golden set of every entry on a device. When the replaying machine's fingerprint
(packager/environment.py) equals the one recorded at package time and the device is the package's, the
outputs must equal the target's recorded outputs bit for bit; in every mode they must be within each output's
recorded rtol/atol of the reference outputs (integer outputs: exact), and so must the bundled target outputs.
The reference is independent of the target (``golden.reference``: onnxruntime, else a NOOPT drivepack build,
packager/reference.py); the report names it, the replay mode the device used, and the replay's per-slice
accuracy against it (packager/accuracy.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from packager.accuracy import accuracy_lines, slice_rows
from packager.errors import VerifyError


def compare_exact(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], where: str) -> None:
    """VerifyError unless every output has exactly the bytes of ``want`` (NaN payloads included)."""
    for name, w in want.items():
        g = got[name]
        gb = np.ascontiguousarray(g).reshape(-1).view(np.uint8)
        wb = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
        if g.shape != w.shape or g.dtype != w.dtype or not np.array_equal(gb, wb):
            if g.shape != w.shape or g.dtype != w.dtype:
                raise VerifyError(f"{where}: {name}: expected {w.dtype} {w.shape}, got {g.dtype} {g.shape}")
            gf, wf = g.reshape(-1), w.reshape(-1)
            diff = np.flatnonzero((gb.reshape(gf.size, -1) != wb.reshape(wf.size, -1)).any(axis=1))
            i = int(diff[0])
            raise VerifyError(f"{where}: {name}: expected bit-exact, got {diff.size} of {gf.size} elements "
                              f"differing (first at {i}: expected {wf[i]!r}, got {gf[i]!r})")


def compare_tolerance(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                      tolerances: list[dict[str, Any]], where: str) -> float:
    """VerifyError unless |got - want| <= atol + rtol * |want| per output (exact where both are 0; NaN must
    meet NaN); returns the largest absolute difference seen."""
    worst = 0.0
    for t in tolerances:
        name, rtol, atol = t["name"], float(t["rtol"]), float(t["atol"])
        g, w = got[name], want[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            raise VerifyError(f"{where}: {name}: expected {w.dtype} {w.shape}, got {g.dtype} {g.shape}")
        if rtol == 0 and atol == 0:
            compare_exact({name: g}, {name: w}, where)
            continue
        gf, wf = g.astype(np.float64).reshape(-1), w.astype(np.float64).reshape(-1)
        nan_ok = np.isnan(gf) == np.isnan(wf)
        with np.errstate(invalid="ignore"):
            diff = np.abs(gf - wf)
            ok = nan_ok & ((diff <= atol + rtol * np.abs(wf)) | np.isnan(wf) | (gf == wf))
        finite = diff[np.isfinite(diff)]
        worst = max(worst, float(finite.max()) if finite.size else 0.0)
        if not ok.all():
            bad = np.flatnonzero(~ok)
            i = int(bad[np.argmax(np.where(np.isnan(diff[bad]), np.inf, diff[bad]))])  # NaN against a number: worst
            raise VerifyError(f"{where}: {name}: expected |got - want| <= {atol:g} + {rtol:g}*|want|, got "
                              f"{bad.size} of {gf.size} elements outside, worst |diff| {diff[i]:.3g} at {i} "
                              f"(expected {wf[i]!r}, got {gf[i]!r})")
    return worst


@dataclass(frozen=True)
class VerifyReport:
    """What verify compared for one entry: the mode (``exact`` / ``tolerance``), why, sets checked, the largest
    |replay - reference| over every set and output, the entry's reference (``golden.reference``), how the replay
    ran (``replay_mode``: ``cpu_driver``, ``command_buffer`` or ``enqueue_loop``, and why) and the replay's
    per-slice accuracy against the reference (packager/accuracy.py rows)."""

    entry: str
    device: str
    mode: str
    reason: str
    sets: int
    max_abs_diff: float
    reference: dict[str, str] | None = None
    replay_mode: str = ""
    replay_mode_reason: str = ""
    accuracy: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry, "ok": True, "device": self.device, "mode": self.mode, "reason": self.reason,
                "sets": self.sets, "max_abs_diff": self.max_abs_diff, "reference": self.reference,
                "replay_mode": self.replay_mode, "replay_mode_reason": self.replay_mode_reason,
                "accuracy": {"reference": self.reference.get("kind") if self.reference else None,
                             "slices": list(self.accuracy)}}

    def lines(self) -> list[str]:
        return [f"verify ok: entry {self.entry}: {self.sets} golden set(s) on {self.device}, {self.mode} "
                f"({self.reason})",
                f"  reference: {describe_reference(self.reference)}; max |replay - reference| "
                f"{self.max_abs_diff:.3g}",
                f"  replay mode: {self.replay_mode} ({self.replay_mode_reason})",
                *("  " + line for line in accuracy_lines(self.accuracy, accuracy_against(self.reference)))]


@dataclass(frozen=True)
class PackageReport:
    """verify's report of a whole package: one VerifyReport per entry, in the package's order."""

    entries: tuple[VerifyReport, ...]

    def entry(self, name: str) -> VerifyReport:
        return next(r for r in self.entries if r.entry == name)

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, "entries": [r.to_json() for r in self.entries]}

    def lines(self) -> list[str]:
        return [line for r in self.entries for line in r.lines()]


def accuracy_against(record: Mapping[str, str] | None) -> str:
    """What an accuracy report is against, in words; a NOOPT reference says it is not onnxruntime's."""
    if record is None:
        return "no recorded reference"
    if record.get("kind") == "onnxruntime":
        return f"the onnxruntime {record.get('version')} reference (float32 for a float32 model)"
    return f"the NOOPT drivepack {record.get('version')} reference, not onnxruntime ({record.get('reason', '')})"


def describe_reference(record: Mapping[str, str] | None) -> str:
    """One line naming a package's reference (``not recorded`` for a package written before the field)."""
    if record is None:
        return "not recorded"
    text = f"{record.get('kind')} {record.get('version')}"
    return f"{text} ({record['reason']})" if record.get("reason") else text


def choose_mode(recorded: Mapping[str, str], here: Mapping[str, str], package_device: str, device: str) -> tuple[
        str, str]:
    """``exact`` when replaying on the package's device on a machine with the recorded fingerprint, else
    ``tolerance``; and the reason, for the report."""
    if device != package_device:
        return "tolerance", f"device {device} differs from the package's {package_device}"
    changed = sorted(k for k in set(recorded) | set(here) if recorded.get(k) != here.get(k))
    if changed:
        return "tolerance", "fingerprint differs in " + ", ".join(
            f"{k} ({recorded.get(k)!r} vs {here.get(k)!r})" for k in changed)
    return "exact", f"same device {device} and fingerprint as at package time"


def verify_package(pkg: Any, device: str | None = None, mode: str = "auto") -> PackageReport:
    """Replay every golden set of every entry of ``pkg`` (a packager.package.Package) on ``device`` and compare
    (see the module docstring); VerifyError, naming the entry, on the first mismatch."""
    return PackageReport(tuple(verify_entry(pkg.entry(name), device, mode) for name in pkg.entries))


def verify_entry(entry: Any, device: str | None = None, mode: str = "auto") -> VerifyReport:
    """verify_package for one entry (a packager.package.Entry)."""
    from packager.environment import fingerprint

    m, name = entry.manifest, entry.name
    dev = device or entry.target_device
    replay = entry.make_replay(dev)
    auto_mode, reason = choose_mode(m.checked_on, fingerprint(replay.target), entry.target_device, dev)
    if mode == "auto":
        mode = auto_mode
    elif mode != auto_mode:
        reason = f"forced by --mode {mode} ({reason})"
    if mode not in ("exact", "tolerance"):
        raise VerifyError(f"mode: expected auto, exact or tolerance, got {mode!r}")
    tolerances = [{"name": o.name, "rtol": o.rtol, "atol": o.atol} for o in m.outputs]
    ref = f"the {describe_reference(m.reference)} reference"
    worst, replayed, references = 0.0, [], []
    for i in range(m.golden_sets):
        g = entry.golden(i)
        # the bundled target outputs were checked against the reference at package time: a package whose target
        # outputs were replaced (and re-checksummed) is caught here even where the replay reproduces them
        compare_tolerance(g.target, g.reference, tolerances, f"{name}: golden set {i}: the bundled target outputs "
                                                             f"vs {ref}")
        replay.reset_state()
        got = replay(g.inputs)
        if mode == "exact":
            compare_exact(got, g.target, f"{name}: golden set {i}")
        worst = max(worst, compare_tolerance(got, g.reference, tolerances, f"{name}: golden set {i}: replay vs {ref}"))
        replayed.append(got)
        references.append(g.reference)
    rows = slice_rows([(o.name, o.slices) for o in entry.abi.outputs],
                      {o.name: (o.rtol, o.atol) for o in m.outputs}, replayed, references)
    return VerifyReport(name, dev, mode, reason, m.golden_sets, worst, m.reference, replay.mode, replay.mode_reason,
                        tuple(rows))
