"""Compare two ABIs: every input/output added, removed, renamed, retyped, reshaped, moved or changed in meaning,
each classified breaking or compatible.

Breaking means a runtime built for OLD can no longer feed or read NEW correctly. Runtimes bind inputs by name
at fixed offsets in a packed buffer (the vehicle profiles), so for inputs: added, removed (the runtime still
writes it where NEW may keep something else), renamed, retyped, reshaped, moved (buffer, offset or device),
changed meaning, and a stricter alignment are breaking; a looser alignment is compatible. For outputs: added
outputs and added slices are compatible; everything else that changes is breaking. The model's own metadata
(``vision_model``, ``policy_model``...) changes no bytes: each key added, removed or changed is an informational
row (severity ``info``), listed last, and never breaking. States (queues a package keeps on the device) are
compared like inputs: added, removed, retyped, reshaped or with another meaning is breaking, since what the state
holds between calls is part of what the model was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

from abi.errors import excerpt
from abi.records import Abi, OutputSpec, StateSpec, TensorSpec, camera_to_dict, history_to_dict

BREAKING = "breaking"
COMPATIBLE = "compatible"
INFO = "info"
KINDS = ("added", "removed", "renamed", "retyped", "reshaped", "moved", "meaning", "realigned", "metadata")


@dataclass(frozen=True)
class Change:
    """One difference: ``kind`` of change to ``io`` (input/output) ``name``, ``field`` old -> new, its severity."""

    kind: str
    io: str
    name: str
    field: str
    old: str
    new: str
    severity: str

    def __str__(self) -> str:
        return f"{self.severity:10s} {self.kind:9s} {self.io} {self.name}: {self.field} {self.old} -> {self.new}"


def diff(old: Abi, new: Abi) -> list[Change]:
    """Every change from ``old`` to ``new``, inputs first, in ``old``'s order then ``new``'s; metadata last."""
    return _diff_inputs(old, new) + _diff_outputs(old, new) + _diff_states(old, new) + _diff_metadata(old, new)


def _state_summary(t: StateSpec) -> str:
    return f"{t.dtype} {t.shape}"


def _diff_states(old: Abi, new: Abi) -> list[Change]:
    out: list[Change] = []
    olds, news = {t.name: t for t in old.states}, {t.name: t for t in new.states}
    for name, t in olds.items():
        if name not in news:
            out.append(Change("removed", "state", name, "presence", _state_summary(t), "absent", BREAKING))
            continue
        n = news[name]
        for kind, fld, a, b in (("retyped", "dtype", t.dtype, n.dtype), ("reshaped", "shape", t.shape, n.shape),
                                ("meaning", "meaning", t.meaning, n.meaning)):
            if a != b:
                out.append(Change(kind, "state", name, fld, excerpt(str(a)), excerpt(str(b)), BREAKING))
    for name, n in news.items():
        if name not in olds:
            out.append(Change("added", "state", name, "presence", "absent", _state_summary(n), BREAKING))
    return out


def is_breaking(changes: list[Change]) -> bool:
    return any(c.severity == BREAKING for c in changes)


def interface_changes(changes: list[Change]) -> list[Change]:
    """The changes that touch the bytes a runtime reads or writes (all but the informational metadata rows)."""
    return [c for c in changes if c.severity != INFO]


def _signature(s: TensorSpec) -> tuple:
    """What makes two inputs 'the same spec' apart from their name and place."""
    return (s.dtype, s.shape, s.device, s.camera, s.history)


def _diff_inputs(old: Abi, new: Abi) -> list[Change]:
    out: list[Change] = []
    new_names = set(new.input_names())
    old_names = set(old.input_names())
    removed = [s for s in old.inputs if s.name not in new_names]
    added = [s for s in new.inputs if s.name not in old_names]
    for r in list(removed):
        match = next((a for a in added if _signature(a) == _signature(r)), None)
        if match is not None:
            removed.remove(r)
            added.remove(match)
            out.append(Change("renamed", "input", r.name, "name", r.name, match.name, BREAKING))
    for r in removed:
        out.append(Change("removed", "input", r.name, "presence", _summary(r), "absent", BREAKING))
    for a in added:
        out.append(Change("added", "input", a.name, "presence", "absent", _summary(a), BREAKING))
    for o in old.inputs:
        if o.name in new_names:
            out += _diff_input(o, new.input(o.name))
    return out


def _diff_input(o: TensorSpec, n: TensorSpec) -> list[Change]:
    out = []

    def add(kind: str, fld: str, a: object, b: object, sev: str = BREAKING) -> None:
        out.append(Change(kind, "input", o.name, fld, str(a), str(b), sev))

    if o.dtype != n.dtype:
        add("retyped", "dtype", o.dtype, n.dtype)
    if o.shape != n.shape:
        add("reshaped", "shape", o.shape, n.shape)
    for fld in ("buffer", "offset", "device"):
        if getattr(o, fld) != getattr(n, fld):
            add("moved", fld, getattr(o, fld), getattr(n, fld))
    if o.alignment != n.alignment:
        looser = o.alignment % n.alignment == 0
        add("realigned", "alignment", o.alignment, n.alignment, COMPATIBLE if looser else BREAKING)
    for kind, to_dict in (("camera", camera_to_dict), ("history", history_to_dict)):
        a, b = getattr(o, kind), getattr(n, kind)
        if a == b:
            continue
        if a is None or b is None:
            add("meaning", kind, "none" if a is None else to_dict(a), "none" if b is None else to_dict(b))
            continue
        da, db = to_dict(a), to_dict(b)
        for k in da:
            if da[k] != db[k]:
                add("meaning", f"{kind}.{k}", da[k], db[k])
    return out


def _diff_outputs(old: Abi, new: Abi) -> list[Change]:
    out: list[Change] = []
    new_by = {o.name: o for o in new.outputs}
    old_by = {o.name: o for o in old.outputs}
    for o in old.outputs:
        if o.name not in new_by:
            out.append(Change("removed", "output", o.name, "presence", _out_summary(o), "absent", BREAKING))
            continue
        n = new_by[o.name]
        if o.dtype != n.dtype:
            out.append(Change("retyped", "output", o.name, "dtype", o.dtype, n.dtype, BREAKING))
        if o.shape != n.shape:
            out.append(Change("reshaped", "output", o.name, "shape", str(o.shape), str(n.shape), BREAKING))
        os_, ns = o.slice_map(), n.slice_map()
        for s, (a, b) in os_.items():
            if s not in ns:
                out.append(Change("removed", "output", f"{o.name}[{s}]", "slice", f"[{a}:{b}]", "absent", BREAKING))
            elif ns[s] != (a, b):
                na, nb = ns[s]
                kind = "moved" if nb - na == b - a else "reshaped"
                out.append(Change(kind, "output", f"{o.name}[{s}]", "slice", f"[{a}:{b}]", f"[{na}:{nb}]", BREAKING))
        for s, (a, b) in ns.items():
            if s not in os_:
                out.append(Change("added", "output", f"{o.name}[{s}]", "slice", "absent", f"[{a}:{b}]", COMPATIBLE))
    for n in new.outputs:
        if n.name not in old_by:
            out.append(Change("added", "output", n.name, "presence", "absent", _out_summary(n), COMPATIBLE))
    return out


def _diff_metadata(old: Abi, new: Abi) -> list[Change]:
    a, b = dict(old.metadata), dict(new.metadata)
    out = []
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            was = excerpt(a[key]) if key in a else "absent"
            now = excerpt(b[key]) if key in b else "absent"
            out.append(Change("metadata", "model", key, "metadata_props", was, now, INFO))
    return out


def _summary(s: TensorSpec) -> str:
    return f"{s.dtype}{list(s.shape)}@{s.buffer}+{s.offset}"


def _out_summary(o: OutputSpec) -> str:
    return f"{o.dtype}{list(o.shape)}"
