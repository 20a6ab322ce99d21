"""The ``package``, ``verify``, ``replay``, ``inspect`` and ``demo`` commands (argument parsers and runners).

``package`` takes one or more models (one entry each); ``verify`` checks every entry and reports each; ``replay``
runs one entry (``--entry NAME``, needed when there are several); ``inspect`` lists the entries.

Exit codes: 0 ok, 1 a check failed (verify mismatch), 2 usage or input error (bad or corrupt file, bad
option). Errors are raised as DrivepackError subclasses and turned into one line by packager/cli.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from packager.key_commands import add_trust_args

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
DEMO_ITERS, DEMO_WARMUP = 3, 1
DEMO_FRAMES = 40  # 2 s of 20 Hz camera frames


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
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
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


def add_replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="a .dpk package")
    p.add_argument("--iters", type=int, default=100, help="timed replays (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed replays first (default 10)")
    p.add_argument("--profile", action="store_true", help="also time each kernel and its share")
    p.add_argument("--entry", metavar="NAME", help="the entry to replay (needed when the package has several; "
                                                   "`drivepack inspect` lists them)")
    p.add_argument("--device", help="replay on this device instead of the package's")
    p.add_argument("--rate", type=float, metavar="HZ",
                   help="a --modeld package: feed synthetic NV12 frames at this camera rate (20 for openpilot), "
                        "taking the prepare entry for frames that arrive while a step runs")
    p.add_argument("--frames", type=int, default=200, help="frames fed with --rate (default 200)")
    p.add_argument("--size", metavar="WxH", help="with --rate: the camera size (needed when there are several)")
    p.add_argument("--json", action="store_true", help="print the JSON document (docs/package-format.md)")
    add_trust_args(p)


def add_inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="a .dpk package")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print everything as JSON")
    fmt.add_argument("--dot", action="store_true", help="print a Graphviz graph of dispatches and buffers")
    add_trust_args(p, allow_unsigned=False)  # inspect runs nothing: it shows any package, and whether it is trusted


def add_demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vehicle", default="pc-cpu", help="profile to package for (default pc-cpu; pc-opencl needs "
                                                       "an OpenCL device)")
    p.add_argument("-o", "--output", help="keep the package here (default: a temporary directory)")
    p.add_argument("--modeld", action="store_true",
                   help="the whole modeld step instead: the split pipeline samples packaged with --modeld and fed "
                        "synthetic NV12 camera frames at 20 Hz")


def _summary(result: object) -> list[str]:
    from packager.build import BuildResult

    assert isinstance(result, BuildResult)
    pkg, m = result.package, result.package.manifest
    times = "  ".join(f"{k} {v:.2f} s" for k, v in result.times.items())
    out = [f"package {result.path}: {result.size} bytes ({result.size / 1e6:.1f} MB), {len(pkg.entries)} "
           f"entr{'y' if len(pkg.entries) == 1 else 'ies'}: {', '.join(pkg.entries)}",
           f"  target {m.target_device}, vehicle {m.vehicle_name}"]
    for name in pkg.entries:
        e = pkg.entry(name).manifest
        raw = e.raw
        out += [f"  entry {name}: model {e.model_name}, role {e.role}",
                f"    kernels {raw['kernels']['kept']} (pruned {e.kernels_pruned} of {e.kernels_traced} traced), "
                f"{raw['kernels']['dispatches']} dispatches, arena {e.arena_bytes} bytes, weights "
                f"{raw['weights']['bytes']} bytes",
                *("    " + line for line in result.dtype_summaries.get(name, "").splitlines())]
    return [*out, *([f"  {result.tuning_summary} ({result.tuning_path})"] if result.tuning_summary else []),
            f"  time per stage: {times}"]


def run_package(args: argparse.Namespace) -> int:
    from packager.build import BuildOptions, build_package
    from packager.progress import Progress

    result = build_package(args.models, args.vehicle, args.output,
                           BuildOptions(target=args.target, emulate=args.emulate, float16=args.float16,
                                        golden_sets=args.golden_sets, tuning=args.tuning, tune=args.tune,
                                        sign=args.sign, modeld=args.modeld, cpu_threads=args.cpu_threads),
                           Progress(enabled=not args.quiet))
    print("\n".join(_summary(result)))
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


def run_replay(args: argparse.Namespace) -> int:
    from packager.package import load_package
    from packager.replay_stats import run_replay_benchmark

    pkg = load_package(args.package, args.trust, args.allow_unsigned)
    if args.rate is not None:
        from packager.rate_replay import run_rate_benchmark

        rated = run_rate_benchmark(pkg, args.rate, args.frames, args.size, args.device)
        print(json.dumps(rated.to_json(), indent=1) if args.json else "\n".join(rated.lines()))
        return EXIT_OK
    stats = run_replay_benchmark(pkg, args.iters, args.warmup, args.profile, args.device, entry=args.entry)
    print(json.dumps(stats.to_json(), indent=1) if args.json else "\n".join(stats.lines()))
    return EXIT_OK


def run_inspect(args: argparse.Namespace) -> int:
    from packager.inspect_pkg import inspect_dot, inspect_json, inspect_text
    from packager.package import load_package

    pkg = load_package(args.package, args.trust, allow_unsigned=True)
    if args.json:
        print(json.dumps(inspect_json(pkg), indent=1, sort_keys=True))
    elif args.dot:
        sys.stdout.write(inspect_dot(pkg))
    else:
        print("\n".join(inspect_text(pkg)))
    return EXIT_OK


def run_demo(args: argparse.Namespace) -> int:
    """Write the sample vision model, package it for a profile that runs here, verify, replay, summarise."""
    import numpy as np
    import onnx

    from packager.build import BuildOptions, build_package
    from packager.progress import Progress
    from packager.replay_stats import run_replay_benchmark
    from packager.samples import VISION_OUTPUT_SLICES, vision_model
    from packager.verify import verify_package

    start = time.perf_counter()
    if args.modeld:
        return _demo_modeld(args, start)
    with tempfile.TemporaryDirectory(prefix="drivepack-demo-") as tmp:
        model_path = Path(tmp) / "sample_vision.onnx"
        onnx.save(vision_model(), str(model_path))
        out = Path(args.output) if args.output else Path(tmp) / "sample_vision.dpk"
        print(f"sample vision model written to {model_path.name}; packaging for {args.vehicle}")
        result = build_package(model_path, args.vehicle, out, BuildOptions(golden_sets=1), Progress())
        print("\n".join(_summary(result)))
        report = verify_package(result.package)
        print("\n".join(report.lines()))
        stats = run_replay_benchmark(result.package, DEMO_ITERS, DEMO_WARMUP)
        print("\n".join(stats.lines()))
        flat = result.package.golden(0).target["outputs"].reshape(-1)
        for name, (lo, hi) in VISION_OUTPUT_SLICES.items():
            print(f"  {name:16s} [{lo:4d}:{hi:4d}]  first values {np.array2string(flat[lo:lo + 3], precision=4)}")
        del result, report, stats, flat  # release the file mapping before the directory goes
    print(f"demo ok in {time.perf_counter() - start:.1f} s (next: drivepack inspect / replay --profile on a "
          f"package written with -o)")
    return EXIT_OK


def _demo_modeld(args: argparse.Namespace, start: float) -> int:
    """Package the split pipeline samples as a modeld step, verify, feed 20 Hz synthetic frames, summarise."""
    import onnx

    from packager.build import BuildOptions, build_package
    from packager.progress import Progress
    from packager.rate_replay import run_rate_benchmark
    from packager.samples import policy_pipeline_model, vision_pipeline_model
    from packager.verify import verify_package

    with tempfile.TemporaryDirectory(prefix="drivepack-demo-") as tmp:
        paths = [Path(tmp) / "sample_vision_pipeline.onnx", Path(tmp) / "sample_policy_pipeline.onnx"]
        onnx.save(vision_pipeline_model(), str(paths[0]))
        onnx.save(policy_pipeline_model(), str(paths[1]))
        out = Path(args.output) if args.output else Path(tmp) / "sample_modeld.dpk"
        print(f"sample vision and policy models written to a temporary directory; packaging the modeld step for "
              f"{args.vehicle}")
        result = build_package(paths, args.vehicle, out, BuildOptions(golden_sets=1, modeld=True), Progress())
        print("\n".join(_summary(result)))
        print("\n".join(verify_package(result.package).lines()))
        stats = run_rate_benchmark(result.package, 20.0, DEMO_FRAMES)
        print("\n".join(stats.lines()))
        del result, stats  # release the file mapping before the directory goes
    kept = f" (package kept in {args.output})" if args.output else ""
    print(f"demo ok in {time.perf_counter() - start:.1f} s{kept}")
    return EXIT_OK
