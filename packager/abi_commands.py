"""The ``abi-check`` and ``abi-diff`` commands.

abi-check MODEL --vehicle NAME|PATH [--role ROLE] [--json]: what the model needs vs what the vehicle runtime
provides for the role; exit 0 when every row is ok, 1 on any mismatch, 2 on bad usage or a bad file.
abi-diff OLD NEW [--json]: every change, breaking or compatible; exit 0 no change, 1 breaking, 3 only
compatible changes, 2 on bad usage or a bad file. MODEL/OLD/NEW: .onnx, .abi.json (or .dpk once packages exist).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

PROG = "drivepack"
EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_COMPATIBLE = 0, 1, 2, 3


def add_abi_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx model, an .abi.json ABI (or a .dpk package, issue 8)")
    parser.add_argument("--vehicle", required=True, help="a profile name from vehicles/ or a path to a .yaml")
    parser.add_argument("--role", choices=("vision", "policy", "dmonitoring"),
                        help="model role (default: found by matching input names)")
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
    from abi.check import check_role, match_role, passed
    from abi.errors import AbiError, AbiFileError, ProfileError
    from abi.load import load_abi
    from abi.vehicle import load_vehicle

    try:
        profile = load_vehicle(args.vehicle)
        model = load_abi(args.model)
        role_name = args.role or match_role(model, profile)
        if role_name not in profile.roles:
            return _fail(f"--role: expected one of {', '.join(profile.roles)} for {profile.name}, got {role_name}")
        role = profile.roles[role_name]
        if role.model_overrides:
            model = load_abi(args.model, overrides=role.model_overrides)
    except (ProfileError, AbiFileError, AbiError) as e:
        return _fail(str(e))
    rows = check_role(model, role)
    ok = passed(rows)
    if args.json:
        print(json.dumps({"model": args.model, "vehicle": profile.name, "role": role_name, "ok": ok,
                          "rows": [asdict(r) for r in rows]}, indent=1))
    else:
        print(f"{args.model} on {profile.name} ({profile.target}), role {role_name}")
        _table(["input", "expected", "provided", "verdict"],
               [[r.input, r.expected, r.provided, r.verdict] for r in rows])
        bad = sum(r.verdict != "ok" for r in rows)
        print("abi-check: ok" if ok else f"abi-check: {bad} mismatch{'es' if bad != 1 else ''}")
    return EXIT_OK if ok else EXIT_MISMATCH


def run_abi_diff(args: argparse.Namespace) -> int:
    from abi.diff import diff, is_breaking
    from abi.errors import AbiError, AbiFileError
    from abi.load import load_abi

    try:
        old, new = load_abi(args.old), load_abi(args.new)
    except (AbiFileError, AbiError) as e:
        return _fail(str(e))
    changes = diff(old, new)
    breaking = is_breaking(changes)
    verdict = "breaking" if breaking else "compatible" if changes else "identical"
    if args.json:
        print(json.dumps({"old": args.old, "new": args.new, "verdict": verdict,
                          "changes": [asdict(c) for c in changes]}, indent=1))
    else:
        _table(["severity", "kind", "io", "name", "field", "old", "new"],
               [[c.severity, c.kind, c.io, c.name, c.field, c.old, c.new] for c in changes])
        print(f"abi-diff: {verdict} ({len(changes)} change{'s' if len(changes) != 1 else ''})")
    return EXIT_MISMATCH if breaking else EXIT_COMPATIBLE if changes else EXIT_OK


def _table(header: list[str], rows: list[list[str]]) -> None:
    if not rows:
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
