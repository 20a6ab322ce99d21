"""Compare what a model needs (its ABI) with what a vehicle's runtime provides for one role.

Inputs are matched by name only. For each input present on both sides every field is compared: dtype, shape,
byte size, strides, buffer, offset, device, meaning (camera / history), and alignment (the runtime's offset
alignment must be a multiple of what the model asks). Outputs: every slice the runtime reads must exist in the
model's ``output_slices`` with the same length, and a flat size the runtime reads must match.

``match_role_detail`` picks the role (and so the openpilot generation) a model is for; ``first_difference``
names the first field where a model and a role disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abi.errors import AbiError, issue
from abi.records import Abi, TensorSpec, camera_to_dict, history_to_dict
from abi.vehicle import Role, VehicleProfile

OK, MISMATCH, MISSING, EXTRA = "ok", "MISMATCH", "MISSING", "EXTRA"


@dataclass(frozen=True)
class Row:
    """One line of the abi-check table: the item, the model's side, the runtime's side, the verdict."""

    input: str
    expected: str
    provided: str
    verdict: str


def check_role(model: Abi, role: Role) -> list[Row]:
    """Rows for every input and every output the runtime reads; all ``ok`` exactly when compatible."""
    rows: list[Row] = []
    provided = {s.name: s for s in role.abi.inputs}
    for spec in model.inputs:
        if spec.name not in provided:
            rows.append(Row(spec.name, _summary(spec), "not provided", MISSING))
            continue
        diffs = _field_diffs(spec, provided[spec.name])
        if not diffs:
            rows.append(Row(spec.name, _summary(spec), _summary(provided[spec.name]), OK))
        rows += [Row(f"{spec.name}.{fld}", want, got, MISMATCH) for fld, want, got in diffs]
    model_names = set(model.input_names())
    for spec in role.abi.inputs:
        if spec.name not in model_names:
            rows.append(Row(spec.name, "not an input of the model", _summary(spec), EXTRA))
    outputs = {o.name: o for o in model.outputs}
    for need in role.outputs:
        out = outputs.get(need.name)
        if out is None:
            rows.append(Row(f"output {need.name}", "absent", f"{need.dtype} read by the runtime", MISSING))
            continue
        if out.dtype != need.dtype:
            rows.append(Row(f"output {need.name}.dtype", out.dtype, need.dtype, MISMATCH))
        size = math.prod(out.shape)
        if need.size is not None:
            verdict = OK if size == need.size else MISMATCH
            rows.append(Row(f"output {need.name}.size", str(size), str(need.size), verdict))
        have = out.slice_map()
        for sname, length in need.slices.items():
            if sname not in have:
                rows.append(Row(f"output {need.name}[{sname}]", "absent", f"{length} values", MISSING))
                continue
            a, b = have[sname]
            rows.append(Row(f"output {need.name}[{sname}]", f"[{a}:{b}] ({b - a} values)", f"{length} values",
                            OK if b - a == length else MISMATCH))
    return rows


def passed(rows: list[Row]) -> bool:
    return all(r.verdict == OK for r in rows)


def first_difference(rows: list[Row]) -> Row | None:
    """The first row that is not ``ok`` (model inputs in graph order, then extra runtime inputs, then outputs),
    or None when every row is: the field a report names when a model is checked against the wrong role."""
    return next((r for r in rows if r.verdict != OK), None)


@dataclass(frozen=True)
class RoleMatch:
    """The role a model matched: its name, its openpilot generation (None: not a driving model) and why."""

    role: str
    generation: str | None
    reason: str


def match_role(model: Abi, profile: VehicleProfile) -> str:
    """The profile role whose inputs match the model's (see ``match_role_detail``); AbiError when none does or
    several match equally."""
    return match_role_detail(model, profile).role


def match_role_detail(model: Abi, profile: VehicleProfile) -> RoleMatch:
    """The role whose inputs match the model's: by names first (the same set of names, else the most names in
    common), then by how many of the shared inputs have the same dtype and shape. Generations reuse names
    (``features_buffer``, ``traffic_convention``), so the names alone may not decide; ties are refused."""
    names = set(model.input_names())
    ranked = sorted(((_match_key(model, role), r) for r, role in profile.roles.items()), reverse=True)
    if not ranked or ranked[0][0][1] == 0:
        raise AbiError([issue("<model>", "role", f"one role of {profile.name} matching inputs "
                              f"{', '.join(sorted(names))} (pass --role)", "no role shares an input name")])
    best = ranked[0][0]
    winners = sorted(r for key, r in ranked if key == best)
    if len(winners) != 1:
        raise AbiError([issue("<model>", "role", f"one role of {profile.name} matching inputs "
                              f"{', '.join(sorted(names))} (pass --role)",
                              f"roles {', '.join(winners)} match equally")])
    exact, shared, same = best
    role = profile.roles[winners[0]]
    how = "the same input names" if exact else f"{shared} of {len(names)} input names"
    return RoleMatch(role.name, role.generation, f"{how}, {same} with the same dtype and shape")


def _match_key(model: Abi, role: Role) -> tuple[bool, int, int]:
    provided = {s.name: s for s in role.abi.inputs}
    names = set(model.input_names())
    same = sum(1 for s in model.inputs if s.name in provided
               and (s.dtype, s.shape) == (provided[s.name].dtype, provided[s.name].shape))
    return names == set(provided), len(names & set(provided)), same


def _field_diffs(want: TensorSpec, got: TensorSpec) -> list[tuple[str, str, str]]:
    out = []
    for fld in ("dtype", "shape", "byte_size", "strides", "buffer", "offset", "device"):
        a, b = getattr(want, fld), getattr(got, fld)
        if a != b:
            out.append((fld, str(a), str(b)))
    if got.alignment % want.alignment:
        out.append(("alignment", f"a multiple of {want.alignment}", str(got.alignment)))
    for kind, to_dict in (("camera", camera_to_dict), ("history", history_to_dict)):
        a, b = getattr(want, kind), getattr(got, kind)
        if a == b:
            continue
        if a is None or b is None:
            out.append((kind, "none" if a is None else str(to_dict(a)), "none" if b is None else str(to_dict(b))))
            continue
        da, db = to_dict(a), to_dict(b)
        out += [(f"{kind}.{k}", str(da[k]), str(db[k])) for k in da if da[k] != db[k]]
    return out


def _summary(s: TensorSpec) -> str:
    text = f"{s.dtype}{list(s.shape)} {s.byte_size}B @{s.buffer}+{s.offset}"
    if s.camera:
        text += f" {s.camera.camera} {s.camera.layout} x{s.camera.frames}/{s.camera.skip}"
    if s.history:
        text += f" hist {s.history.length}/{s.history.skip}"
    return text
