"""The ``package``, ``verify`` and ``inspect`` commands (argument parsers and runners); ``demo`` is
packager/demo_command.py's.

``package`` takes one or more models (one entry each) and refuses a model whose ABI does not match its vehicle
role (exit 1, the abi-check table on stderr) unless ``--allow-abi-mismatch``; ``verify`` checks every entry and
reports each; ``inspect`` lists the entries.

Exit codes (PACKAGE_CODES, VERIFY_CODES, INSPECT_CODES: what each --help lists): 0 ok, 1 a check failed (ABI
mismatch, verify mismatch), 2 usage or input error (bad or corrupt file, bad option). Errors are raised as
DrivepackError subclasses and turned into one line by packager/cli.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from packager.key_commands import add_trust_args

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
USAGE_TEXT = "usage or input error (bad option, unknown vehicle, unreadable or corrupt file)"
PACKAGE_CODES = {EXIT_OK: "packaged, and the written file reproduces its golden outputs",
                 EXIT_CHECK_FAILED: "a model's ABI does not match its vehicle role (without --allow-abi-mismatch), "
                                    "or the written package does not reproduce its golden outputs",
                 EXIT_USAGE: USAGE_TEXT}
VERIFY_CODES = {EXIT_OK: "every entry reproduces its golden outputs", EXIT_CHECK_FAILED: "an output differs",
                EXIT_USAGE: USAGE_TEXT}
INSPECT_CODES = {EXIT_OK: "shown", EXIT_USAGE: USAGE_TEXT + "; a file that is not a package is named"}


def add_package_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="+", metavar="MODEL", help="the .onnx model(s) to package: one entry each, named "
                                                              "by the vehicle role it matches (else its file name)")
    p.add_argument("--vehicle", required=True, help="a profile name from vehicles/ or a path to a .yaml")
    p.add_argument("-o", "--output", required=True, help="the .dpk file to write")
    p.add_argument("--target", help="device to build for (CPU, OPENCL, QCOM, QCOM:650); default: the vehicle's")
    p.add_argument("--emulate", help="EMULATED_DTYPES for this build, e.g. long,half; default: the vehicle's")
    p.add_argument("--modeld", action="store_true",
                   help="package the whole modeld step (NV12 camera buffers in, warp, queues kept on the device, "
                        "vision and policy, sliced outputs out) as entries run@WxH and prepare@WxH per camera size")
    p.add_argument("--cpu-threads", type=int, metavar="N",
                   help="threads a CPU replay of this package uses (default: the machine's; $DRIVEPACK_CPU_THREADS "
                        "where it runs overrides both)")
    p.add_argument("--float16", action=argparse.BooleanOptionalAction, default=None,
                   help="compute float32 models in float16, as openpilot's compile3 FLOAT16=1 (default: the "
                        "vehicle's target.options.float16)")
    p.add_argument("--golden-sets", type=int, default=2, help="golden input sets to bundle (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (problems and refusals are still "
                                                        "printed)")
    p.add_argument("--role", help="the vehicle role of the (only) model, checked like abi-check --role (default: the "
                                  "role its inputs match)")
    p.add_argument("--allow-abi-mismatch", action="store_true",
                   help="package a model whose ABI does not match its vehicle role (or matches none); the problems "
                        "are printed and recorded in the manifest's abi_check")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (stdout; progress stays on stderr)")
    p.add_argument("--tuning", metavar="FILE", help="compile with the kernel options stored in this tuning file "
                                                    "(no search: deterministic)")
    p.add_argument("--tune", action="store_true", help="search each kernel the tuning file lacks (timed, beam "
                                                       "width BEAM or 2) and write the file (default "
                                                       "<output>.tuning.json)")
    p.add_argument("--sign", metavar="KEY", help="sign with this private key file (default: your own key, made "
                                                 "on first use; see `drivepack keygen`)")


def add_verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="a .dpk package")
    p.add_argument("--device", help="replay on this device instead of the package's")
    p.add_argument("--mode", choices=("auto", "exact", "tolerance"), default="auto",
                   help="auto: bit-exact on the machine it was built and checked on, tolerance elsewhere")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    add_trust_args(p)


def add_inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="a .dpk package")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print everything as JSON")
    fmt.add_argument("--dot", action="store_true", help="print a Graphviz graph of dispatches and buffers (render "
                                                         "it by piping it into: dot -Tsvg -o graph.svg)")
    add_trust_args(p, allow_unsigned=False)  # inspect runs nothing: it shows any package, and whether it is trusted


def summary_lines(result: Any) -> list[str]:
    """The human summary of a build (packager/build.py's BuildResult); kernel numbers are the manifest's
    KernelCounts, as inspect shows them."""
    pkg, m = result.package, result.package.manifest
    times = "  ".join(f"{k} {v:.2f} s" for k, v in result.times.items())
    out = [f"package {result.path}: {result.size} bytes ({result.size / 1e6:.1f} MB), {len(pkg.entries)} "
           f"entr{'y' if len(pkg.entries) == 1 else 'ies'}: {', '.join(pkg.entries)}",
           f"  target {m.target_device}, vehicle {m.vehicle_name}"]
    for name in pkg.entries:
        e = pkg.entry(name).manifest
        raw = e.raw
        check = raw["abi_check"]
        out += [f"  entry {name}: model {e.model_name}, role {e.role}",
                *([f"    abi-check: not ok, packaged anyway: {'; '.join(check['problems'])}"] if not check["ok"]
                  else []),
                f"    kernels: {e.kernel_counts.text()}",
                f"    arena {e.arena_bytes} bytes, weights {raw['weights']['bytes']} bytes",
                *("    " + line for line in result.dtype_summaries.get(name, "").splitlines())]
    return [*out, *([f"  {result.tuning_summary} ({result.tuning_path})"] if result.tuning_summary else []),
            f"  time per stage: {times}"]


def summary_json(result: Any, vehicle: str) -> dict[str, Any]:
    """The build summary as data: path, size, target, vehicle, per entry its role, kernel counts, arena, weights
    and abi-check (rows as objects), stage times in seconds, tuning and ABI warnings."""
    from abi.records import Abi
    from abi.vehicle import load_vehicle
    from packager.abi_commands import role_report

    pkg, m = result.package, result.package.manifest
    profile = load_vehicle(vehicle)
    entries = []
    for name in pkg.entries:
        e = pkg.entry(name).manifest
        check = e.raw["abi_check"]
        report = role_report(name, Abi.from_dict(e.abi), e.role, "the entry's role", profile, None) \
            if e.role in profile.roles else None
        entries.append({"name": name, "role": e.role, "model": e.raw["model"], "kernels": e.kernel_counts.to_json(),
                        "arena_bytes": e.arena_bytes, "weights": dict(e.raw["weights"]),
                        "budget_ms": {"mean": e.budget_mean_ms, "max": e.budget_max_ms},
                        "abi_check": {"role": check["role"], "ok": check["ok"], "problems": list(check["problems"]),
                                      "rows": report.doc["rows"] if report else []},
                        "dtype_policy": e.raw["dtype_policy"]})
    return {"path": str(result.path), "size": result.size, "target": m.target_device, "vehicle": m.vehicle_name,
            "entries": entries, "times_s": {k: float(v) for k, v in result.times.items()},
            "tuning": {"path": str(result.tuning_path), "summary": result.tuning_summary}
            if result.tuning_summary else None, "abi_warnings": list(result.abi_warnings)}


def run_package(args: argparse.Namespace) -> int:
    from packager.build import BuildOptions, build_package
    from packager.errors import AbiMismatchError
    from packager.progress import Progress

    try:
        result = build_package(args.models, args.vehicle, args.output,
                               BuildOptions(target=args.target, emulate=args.emulate, float16=args.float16,
                                            golden_sets=args.golden_sets, tuning=args.tuning, tune=args.tune,
                                            sign=args.sign, modeld=args.modeld, cpu_threads=args.cpu_threads,
                                            refuse_abi_mismatch=not args.allow_abi_mismatch, role=args.role),
                               Progress(enabled=not args.quiet))
    except AbiMismatchError as e:
        print("\n".join(e.details), file=sys.stderr)  # the table, whatever --quiet says; main adds the error line
        raise
    print(json.dumps(summary_json(result, args.vehicle), indent=1) if args.json else "\n".join(summary_lines(result)))
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    from packager.package import load_package
    from packager.verify import verify_package

    pkg = load_package(args.package, args.trust, args.allow_unsigned)
    report = verify_package(pkg, args.device, args.mode)  # every entry
    if args.json:
        print(json.dumps({"package": args.package, **report.to_json()}))
    else:
        print("\n".join(report.lines()))
    return EXIT_OK


def run_inspect(args: argparse.Namespace) -> int:
    from packager.inspect_pkg import inspect_dot, inspect_json, inspect_text
    from packager.package import load_package

    pkg = load_package(args.package, args.trust, allow_unsigned=True)
    if args.json:
        print(json.dumps(inspect_json(pkg), indent=1, sort_keys=True))
    elif args.dot:
        sys.stdout.write(inspect_dot(pkg))
        # on stderr: stdout stays a graph that pipes straight into dot
        print(f"render with: drivepack inspect {args.package} --dot | dot -Tsvg -o {pkg.path.stem}.svg",
              file=sys.stderr)
    else:
        print("\n".join(inspect_text(pkg)))
    return EXIT_OK
