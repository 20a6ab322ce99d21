"""The ``abi-check`` and ``abi-diff`` commands.

abi-check MODEL --vehicle NAME|PATH [--role ROLE] [--json]: what the model needs vs what the vehicle runtime
provides for the role (found by matching the model's inputs, which also says the openpilot generation), and the
first field that differs; exit 0 when every row is ok, 1 on any mismatch, 2 on bad usage or a bad file. Its JSON
rows are objects (``abi_rows_json``): the item, its io / name / field / slice, and the expected and provided
values as data (lists, ints, objects; null where a side has none) next to the table's text.
abi-diff OLD NEW [--json]: every change, breaking or compatible; exit 0 no change, 1 breaking, 3 only
compatible changes, 2 on bad usage or a bad file. MODEL/OLD/NEW: .onnx, .abi.json or .dpk (abi-check checks
every entry of a package against its role).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

PROG = "drivepack"
EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_COMPATIBLE = 0, 1, 2, 3
ABI_CHECK_CODES = {EXIT_OK: "every row ok", EXIT_MISMATCH: "a mismatch (the table names each field)",
                   EXIT_USAGE: "usage or input error (bad option, unknown vehicle or role, unreadable file)"}
ABI_DIFF_CODES = {EXIT_OK: "identical interfaces", EXIT_MISMATCH: "a breaking change",
                  EXIT_USAGE: "usage or input error", EXIT_COMPATIBLE: "only compatible changes"}


def add_abi_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx model, an .abi.json ABI or a .dpk package (each entry vs its role)")
    parser.add_argument("--vehicle", required=True, help="a profile name from vehicles/ or a path to a .yaml")
    # no argparse choices: the roles are the profile's, and a wrong one is reported with the profile's list
    parser.add_argument("--role", help="model role, e.g. vision, policy, vision_pipeline, policy_pipeline, "
                                       "supercombo, dmonitoring (default: the role the model's inputs match)")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of the table")


def add_abi_diff_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", help="the ABI currently deployed (.onnx / .abi.json / .dpk)")
    parser.add_argument("new", help="the candidate (.onnx / .abi.json / .dpk)")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of text")


def _fail(message: str) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_USAGE


def run_abi_check(args: argparse.Namespace) -> int:
    # imported here so that `drivepack --version` and other commands do not load onnx
    from abi.errors import AbiError, AbiFileError, ProfileError
    from abi.load import load_abi
    from abi.records import Abi
    from abi.vehicle import load_vehicle

    try:
        profile = load_vehicle(args.vehicle)
        if str(args.model).endswith(".dpk"):  # each entry against its role (the recorded one unless --role)
            from packager.errors import PackageError
            from packager.package import read_package_abis

            try:
                entries = [(f"{args.model} entry {name}", Abi.from_dict(abi), args.role or role,
                            "--role" if args.role else "the entry's role", False)
                           for name, (role, abi) in read_package_abis(args.model).items()]
            except PackageError as e:
                raise AbiFileError(str(args.model), f"not a trusted drivepack package: {e}") from None
        else:
            entries = [(str(args.model), load_abi(args.model), args.role, "--role", True)]
        reports = [role_report(label, abi, role, why, profile, args.model if reloadable else None)
                   for label, abi, role, why, reloadable in entries]
    except (ProfileError, AbiFileError, AbiError) as e:
        return _fail(str(e))
    if any(r is None for r in reports):
        return _fail(f"--role: expected one of {', '.join(profile.roles)} for {profile.name}, got {args.role}")
    if args.json:
        docs = [r.doc for r in reports if r is not None]
        print(json.dumps(docs[0] if len(docs) == 1 else {"model": args.model, "ok": all(d["ok"] for d in docs),
                                                            "entries": docs}, indent=1))
    else:
        for r in reports:
            assert r is not None
            print("\n".join(r.lines))
    return EXIT_OK if all(r is not None and r.doc["ok"] for r in reports) else EXIT_MISMATCH


@dataclass
class RoleReport:
    """One model ABI checked against one role: the JSON document and the table's lines."""

    doc: dict[str, Any]
    lines: list[str]

    @property
    def ok(self) -> bool:
        return bool(self.doc["ok"])


def role_report(label: str, model: Any, role_name: str | None, why: str, profile: Any,
                reload_from: str | None) -> RoleReport | None:
    """One model ABI against its role (matched when ``role_name`` is None, else chosen by ``why``); None for a
    role the profile lacks. ``reload_from``: the model file, read again with the role's model overrides (not for
    a package's ABI)."""
    from abi.check import check_role, first_difference, match_role_detail, passed
    from abi.load import load_abi

    matched = None if role_name else match_role_detail(model, profile)
    role_name = matched.role if matched else role_name
    if role_name not in profile.roles:
        return None
    role = profile.roles[role_name]
    if role.model_overrides and reload_from is not None:
        model = load_abi(reload_from, overrides=role.model_overrides)
    rows = check_role(model, role)
    ok = passed(rows)
    first = first_difference(rows)
    doc = {"model": label, "vehicle": profile.name, "role": role_name, "generation": role.generation,
           "matched": matched.reason if matched else None, "ok": ok,
           "first_difference": abi_rows_json([first], model, role)[0] if first else None,
           "rows": abi_rows_json(rows, model, role)}
    gen = f"generation {role.generation_text()}"
    how = f"matched role {role_name} ({gen}) by {matched.reason}" if matched else f"role {role_name} ({why}; {gen})"
    lines = [f"{label} on {profile.name} ({profile.target}), {how}",
             *_table(["input", "expected", "provided", "verdict"],
                     [[r.input, r.expected, r.provided, r.verdict] for r in rows])]
    bad = sum(r.verdict != "ok" for r in rows)
    if first is None:
        lines.append("abi-check: ok")
    else:
        lines.append(f"abi-check: {bad} mismatch{'es' if bad != 1 else ''}; first: {first.input}: {first.verdict}: "
                     f"expected {first.expected}, provided {first.provided}")
    return RoleReport(doc, lines)


def run_abi_diff(args: argparse.Namespace) -> int:
    from abi.diff import diff, interface_changes, is_breaking
    from abi.errors import AbiError, AbiFileError
    from abi.load import load_abi

    try:
        old, new = load_abi(args.old), load_abi(args.new)
    except (AbiFileError, AbiError) as e:
        return _fail(str(e))
    changes = diff(old, new)
    breaking = is_breaking(changes)
    # metadata_props rows are shown, but a change of metadata alone leaves the interface identical
    verdict = "breaking" if breaking else "compatible" if interface_changes(changes) else "identical"
    if args.json:
        print(json.dumps({"old": args.old, "new": args.new, "verdict": verdict,
                          "changes": [asdict(c) for c in changes]}, indent=1))
    else:
        print("\n".join(_table(["severity", "kind", "io", "name", "field", "old", "new"],
                                [[c.severity, c.kind, c.io, c.name, c.field, c.old, c.new] for c in changes])))
        print(f"abi-diff: {verdict} ({len(changes)} change{'s' if len(changes) != 1 else ''})")
    return EXIT_MISMATCH if breaking else EXIT_COMPATIBLE if interface_changes(changes) else EXIT_OK


def abi_rows_json(rows: list[Any], model: Any, role: Any) -> list[dict[str, Any]]:
    """abi.check rows as data: ``input`` (the table's first column, the item checked), ``io``, ``name``,
    ``field`` (null: the whole input or output), ``slice``, ``expected`` / ``provided`` as values (the model's
    side / the runtime's; null: that side has none), ``expected_text`` / ``provided_text`` as the table shows
    them, and ``verdict``."""
    specs = {"model": {s.name: s for s in model.inputs}, "runtime": {s.name: s for s in role.abi.inputs}}
    outputs = {o.name: o for o in model.outputs}
    needs = {n.name: n for n in role.outputs}
    out = []
    for r in rows:
        doc: dict[str, Any] = {"input": r.input, "io": "input", "name": r.input, "field": None, "slice": None}
        if r.input.startswith("output "):
            doc.update(_output_row(r.input.removeprefix("output "), outputs, needs))
        else:
            name = next((n for n in sorted({*specs["model"], *specs["runtime"]}, key=len, reverse=True)
                         if r.input == n or r.input.startswith(f"{n}.")), r.input)
            fld = r.input[len(name) + 1:] or None
            doc.update(name=name, field=fld, expected=_input_value(specs["model"].get(name), fld, "expected"),
                       provided=_input_value(specs["runtime"].get(name), fld, "provided"))
        out.append({**doc, "expected_text": r.expected, "provided_text": r.provided, "verdict": r.verdict})
    return out


def _input_value(spec: Any, fld: str | None, side: str) -> Any:
    """One side of an input row as data: the whole spec, or the field (``camera.frames``: one key of it)."""
    from abi.records import camera_to_dict, history_to_dict

    if spec is None:
        return None
    meanings = {"camera": (spec.camera, camera_to_dict), "history": (spec.history, history_to_dict)}

    def meaning(kind: str) -> Any:
        value, to_dict = meanings[kind]
        return to_dict(value) if value is not None else None

    if fld is None:
        return {"dtype": spec.dtype, "shape": list(spec.shape), "byte_size": spec.byte_size,
                "strides": list(spec.strides), "buffer": spec.buffer, "offset": spec.offset,
                "alignment": spec.alignment, "device": spec.device, "camera": meaning("camera"),
                "history": meaning("history")}
    if fld == "alignment":  # the runtime's alignment must be a multiple of the model's
        return {"multiple_of": spec.alignment} if side == "expected" else spec.alignment
    kind, _, key = fld.partition(".")
    if kind in meanings:
        whole = meaning(kind)
        return whole.get(key) if key and whole is not None else whole
    value = getattr(spec, fld, None)
    return list(value) if isinstance(value, tuple) else value


def _output_row(item: str, outputs: dict[str, Any], needs: dict[str, Any]) -> dict[str, Any]:
    """io/name/field/slice and both values of an output row (``outputs[plan]``, ``outputs.dtype``, ...)."""
    name, sep, rest = item.partition("[")
    if sep:
        sname = rest.removesuffix("]")
        have, need = outputs.get(name), needs.get(name)
        span = have.slice_map().get(sname) if have is not None else None
        return {"io": "output", "name": name, "slice": sname,
                "expected": {"start": span[0], "stop": span[1], "length": span[1] - span[0]} if span else None,
                "provided": {"length": need.slices[sname]} if need is not None and sname in need.slices else None}
    name, _, fld = item.partition(".")
    have, need = outputs.get(name), needs.get(name)
    if fld == "dtype":
        return {"io": "output", "name": name, "field": fld, "expected": have.dtype if have else None,
                "provided": need.dtype if need else None}
    if fld == "size":
        import math

        return {"io": "output", "name": name, "field": fld,
                "expected": math.prod(have.shape) if have else None, "provided": need.size if need else None}
    return {"io": "output", "name": name, "field": None,
            "expected": {"dtype": have.dtype, "shape": list(have.shape)} if have else None,
            "provided": {"dtype": need.dtype, "size": need.size} if need else None}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
            for r in [header, ["-" * w for w in widths], *rows]]
