"""The ``vehicle`` command: helpers for writing and checking vehicle profiles (vehicles/README.md).

vehicle list [--json]: the shipped profiles, each with its device, target, cameras and roles.
vehicle check FILE... [--json]: every problem of each profile in one run, one line each (FILE:LINE: key: message);
exit 0 none, 1 problems found, 2 a file that cannot be read or parsed (or an unknown profile name).
vehicle new NAME --from BASE [-o PATH] [--json]: a copy of a shipped profile under a new name; it never
overwrites a file, and what it writes passes ``vehicle check``.
vehicle nv12 W H [--json]: the VisionIPC NV12 buffer geometry of a W x H camera (abi/frames.py).

abi.vehicle (and so yaml) is imported only when a sub-command runs: the runtime commands never load it.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jit.common.errors import DrivepackError
from packager.cli_parser import exit_codes_epilog, suggestion

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 141  # as packager/cli.py: 128 + SIGPIPE, the output pipe closed early
_PIPE = "the output pipe closed early (e.g. `| head`); nothing more is written"
VEHICLE_CODES = {EXIT_OK: "ok", EXIT_PROBLEMS: "vehicle check found problems",
                 EXIT_USAGE: "usage or input error (unreadable profile, unknown vehicle, bad option)"}
LIST_CODES = {EXIT_OK: "listed", EXIT_USAGE: "a shipped profile does not load, or a bad option",
              EXIT_BROKEN_PIPE: _PIPE}
CHECK_CODES = {EXIT_OK: "every profile is sound", EXIT_PROBLEMS: "problems found (each printed)",
               EXIT_USAGE: "a file cannot be read or parsed, an unknown profile name, or a bad option",
               EXIT_BROKEN_PIPE: _PIPE}
NEW_CODES = {EXIT_OK: "written, and it passes vehicle check",
             EXIT_USAGE: "a bad NAME or -o, an unknown --from profile, an existing file, or a bad option",
             EXIT_BROKEN_PIPE: _PIPE}
NV12_CODES = {EXIT_OK: "printed", EXIT_USAGE: "W or H not a positive even integer, or a bad option",
              EXIT_BROKEN_PIPE: _PIPE}


class VehicleCommandError(DrivepackError, ValueError):
    """A bad argument to a vehicle sub-command: names the argument, what was expected and what was given."""


def add_vehicle_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    actions = (("list", "list the shipped profiles: device, target, cameras, roles", LIST_CODES, None),
               ("check", "check profiles and report every problem in one run (FILE:LINE: key: message)",
                CHECK_CODES, _add_check),
               ("new", "write a new profile copied from a shipped one under a new name", NEW_CODES, _add_new),
               ("nv12", "print the VisionIPC NV12 buffer geometry of a W x H camera", NV12_CODES, _add_nv12))
    for name, text, codes, add in actions:
        p = sub.add_parser(name, help=text, description=text, epilog=exit_codes_epilog(codes))
        if add is not None:
            add(p)
        p.add_argument("--json", action="store_true", help="print a JSON report")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print a traceback with errors")


def _add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="a profile .yaml (or the name of a shipped one)")


def _add_new(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="the new profile's name (also its file name, NAME.yaml)")
    p.add_argument("--from", dest="base", required=True, metavar="BASE", help="the shipped profile to copy")
    p.add_argument("-o", "--output", metavar="PATH", help="where to write it (default ./NAME.yaml; to use it by "
                                                          "name, write vehicles/NAME.yaml)")


def _add_nv12(p: argparse.ArgumentParser) -> None:
    p.add_argument("width", type=int, metavar="W", help="frame width in pixels (even)")
    p.add_argument("height", type=int, metavar="H", help="frame height in pixels (even)")


def run_vehicle(args: argparse.Namespace) -> int:
    run = {"list": _run_list, "check": _run_check, "new": _run_new, "nv12": _run_nv12}[args.action]
    return run(args)


def _run_list(args: argparse.Namespace) -> int:
    from abi.vehicle import available_vehicles, load_vehicle

    docs = [_profile_doc(load_vehicle(name)) for name in available_vehicles()]
    if args.json:
        print(json.dumps({"vehicles": docs}, indent=1))
        return EXIT_OK
    for d in docs:
        dev, tgt = d["device"], d["target"]
        extra = "/".join(dev[k] for k in ("soc", "gpu") if k in dev)
        print(f"{d['name']}: device {dev['name']}{f' ({extra})' if extra else ''}, target {tgt['name']}"
              f"{':' + tgt['arch'] if tgt['arch'] else ''}")
        print("  cameras: " + ", ".join(f"{c['name']} {c['width']}x{c['height']}" for c in d["cameras"]))
        print("  roles: " + ", ".join(r["name"] for r in d["roles"]))
    return EXIT_OK


def _profile_doc(profile: Any) -> dict[str, Any]:
    return {"name": profile.name, "path": str(profile.path), "device": dict(profile.device),
            "target": {"name": profile.target, "arch": profile.target_arch,
                       "emulated_dtypes": list(profile.emulated_dtypes), "images": profile.images,
                       "float16": profile.float16},
            "cameras": [{"name": c.name, "width": c.width, "height": c.height} for c in profile.cameras.values()],
            "roles": [{"name": r.name, "generation": r.generation} for r in profile.roles.values()]}


def _run_check(args: argparse.Namespace) -> int:
    from abi.errors import ProfileError
    from abi.vehicle import ProfileProblem, check_vehicle

    files, problems = [], []
    for f in args.files:
        try:
            _, found = check_vehicle(f)
            readable = True
        except ProfileError as e:  # nothing to check in it: the reason is its one problem
            found = [ProfileProblem(e.file, e.line, e.key, "a readable YAML profile", e.detail, e.detail)]
            readable = False
        files.append({"file": f, "readable": readable, "ok": not found, "problems": len(found)})
        problems += found
    unreadable = sum(not d["readable"] for d in files)
    code = EXIT_USAGE if unreadable else EXIT_PROBLEMS if problems else EXIT_OK
    if args.json:
        print(json.dumps({"ok": code == EXIT_OK, "files": files, "problems": [asdict(p) for p in problems]},
                         indent=1))
        return code
    for p in problems:
        print(p)
    for d in files:
        if d["ok"]:
            print(f"{d['file']}: ok")
    bad = sum(not d["ok"] for d in files)
    summary = "ok" if code == EXIT_OK else f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {bad} " \
                                           f"of {len(files)} file{'s' if len(files) != 1 else ''}"
    print(f"vehicle check: {summary}{f' ({unreadable} unreadable)' if unreadable else ''}")
    return code


def _run_new(args: argparse.Namespace) -> int:
    import yaml

    from abi.vehicle import SCHEMA_PATH, VEHICLES_DIR, available_vehicles, check_vehicle

    names = available_vehicles()
    if args.base not in names:
        raise VehicleCommandError(f"--from: expected a shipped profile ({', '.join(names)}), got {args.base!r}"
                                  f"{suggestion(args.base, names)}")
    pattern = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]["name"]["pattern"]
    if not re.fullmatch(pattern, args.name):
        raise VehicleCommandError(f"NAME: expected a profile name matching {pattern!r}, got {args.name!r}")
    path = Path(args.output) if args.output else Path(f"{args.name}.yaml")
    if path.name != f"{args.name}.yaml":
        raise VehicleCommandError(f"-o: expected a file named {args.name}.yaml (a profile's name is its file name), "
                                  f"got {path.name!r}")
    if not path.parent.is_dir():
        raise VehicleCommandError(f"-o: expected a path in an existing folder, got {str(path)!r}")
    text = (VEHICLES_DIR / f"{args.base}.yaml").read_text(encoding="utf-8")
    name_line = re.compile(rf"^name:[ \t]*{re.escape(args.base)}[ \t]*$", re.MULTILINE)
    if len(name_line.findall(text)) != 1:
        raise VehicleCommandError(f"--from: expected one line 'name: {args.base}' in {args.base}.yaml, got "
                                  f"{len(name_line.findall(text))}")
    header = (f"# {args.name}: made by `drivepack vehicle new {args.name} --from {args.base}`; the comments below "
              f"are {args.base}'s.\n# Edit it, then run `drivepack vehicle check {path}` (vehicles/README.md).\n")
    try:
        with path.open("x", encoding="utf-8") as f:  # "x": never overwrite
            f.write(header + name_line.sub(f"name: {args.name}", text))
    except FileExistsError:
        raise VehicleCommandError(f"-o: expected a path that does not exist (vehicle new never overwrites), got "
                                  f"{str(path)!r}") from None
    _, problems = check_vehicle(path)
    if problems:  # a shipped profile always passes, so its copy should too: never leave a broken one behind
        path.unlink()
        raise VehicleCommandError(f"--from: expected a copy that passes vehicle check, got {problems[0]}")
    if args.json:
        print(json.dumps({"name": args.name, "base": args.base, "path": str(path), "ok": True}, indent=1))
    else:
        print(f"wrote {path} (a copy of {args.base}); edit it, then: drivepack vehicle check {path}")
    return EXIT_OK


def _run_nv12(args: argparse.Namespace) -> int:
    from abi.frames import nv12_geometry

    g = nv12_geometry(args.width, args.height)
    if args.json:
        print(json.dumps(asdict(g), indent=1))
        return EXIT_OK
    rows = [("stride", g.stride, f"align(width {g.width}, 128)"),
            ("y_height", g.y_height, f"align(height {g.height}, 32)"),
            ("uv_height", g.uv_height, f"align(height/2 {g.height // 2}, 16)"),
            ("uv_offset", g.uv_offset, "stride * y_height"),
            ("size", g.size, "Venus NV12 allocation (vehicles/README.md)")]
    print(f"VisionIPC NV12 buffer for {g.width}x{g.height}:")
    for name, value, how in rows:
        print(f"  {name:<10}{value:>10}  {how}")
    print("profile: nv12: {" + ", ".join(f"{name}: {value}" for name, value, _ in rows) + "}")
    return EXIT_OK
