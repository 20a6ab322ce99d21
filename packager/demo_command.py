"""The ``demo`` command: write the built-in sample model(s) into the current directory (or ``--out DIR``),
package them for a profile that runs here, verify, replay, summarise, and print the commands to try next on the
files it wrote. ``--json``: one JSON document on stdout (progress stays on stderr).

Exit codes (DEMO_CODES): 0 ok, 1 a check failed (the package does not reproduce its golden outputs), 2 usage or
input error.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

EXIT_OK = 0
DEMO_ITERS, DEMO_WARMUP = 3, 1
DEMO_FRAMES = 40  # 2 s of 20 Hz camera frames
DEMO_CODES = {0: "the sample packaged, verified and replayed", 1: "a check failed (verify)",
              2: "usage or input error (bad option, unknown vehicle, a directory that cannot be written)"}


def add_demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vehicle", default="pc-cpu", help="profile to package for (default pc-cpu; pc-opencl needs "
                                                       "an OpenCL device)")
    p.add_argument("--out", metavar="DIR", default=".", help="write the sample model(s) and the package here "
                                                             "(default: the current directory)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the package here instead of DIR/sample_vision.dpk "
                                                          "(DIR/sample_modeld.dpk with --modeld)")
    p.add_argument("--modeld", action="store_true",
                   help="the whole modeld step instead: the split pipeline samples packaged with --modeld and fed "
                        "synthetic NV12 camera frames at 20 Hz")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the text summary")


def _next_commands(package: Path, modeld: bool) -> list[str]:
    replay = f"drivepack replay {package} --rate 20" if modeld else f"drivepack replay {package} --profile"
    return [f"drivepack inspect {package}", replay, f"drivepack verify {package}"]


def run_demo(args: argparse.Namespace) -> int:
    """Write the sample model(s), package, verify, replay, summarise (text or JSON)."""
    import onnx

    from packager.build import BuildOptions, build_package
    from packager.commands import summary_json, summary_lines
    from packager.errors import PackageError
    from packager.progress import Progress
    from packager.samples import policy_pipeline_model, vision_model, vision_pipeline_model
    from packager.verify import verify_package

    start = time.perf_counter()
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PackageError(f"--out: expected a directory that can be written, got {out_dir}: {e.strerror}") from None
    if args.modeld:
        models = {"sample_vision_pipeline.onnx": vision_pipeline_model(),
                  "sample_policy_pipeline.onnx": policy_pipeline_model()}
        package = Path(args.output) if args.output else out_dir / "sample_modeld.dpk"
    else:
        models = {"sample_vision.onnx": vision_model()}
        package = Path(args.output) if args.output else out_dir / "sample_vision.dpk"
    paths = [out_dir / name for name in models]
    for path, proto in zip(paths, models.values(), strict=True):
        onnx.save(proto, str(path))
    text: list[str] = [f"wrote {', '.join(map(str, paths))}; packaging "
                       f"{'the modeld step' if args.modeld else 'the sample vision model'} for {args.vehicle}"]
    if not args.json:
        print(text[0], flush=True)
    result = build_package(paths if args.modeld else paths[0], args.vehicle, package,
                           BuildOptions(golden_sets=1, modeld=args.modeld, refuse_abi_mismatch=True), Progress())
    report = verify_package(result.package)
    doc: dict[str, Any] = {"ok": True, "vehicle": args.vehicle, "models": [str(p) for p in paths],
                           "package": summary_json(result, args.vehicle), "verify": report.to_json()}
    lines = [*summary_lines(result), *report.lines()]
    if args.modeld:
        from packager.rate_replay import run_rate_benchmark

        rated = run_rate_benchmark(result.package, 20.0, DEMO_FRAMES)
        doc["replay"], lines = rated.to_json(), [*lines, *rated.lines()]
    else:
        doc["replay"], doc["outputs"], more = _vision_replay(result.package)
        lines += more
    seconds = time.perf_counter() - start
    nxt = _next_commands(package, args.modeld)
    doc.update(seconds=seconds, next=nxt)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print("\n".join([*lines, f"demo ok in {seconds:.1f} s; files in {out_dir}", "next:",
                         *(f"  {c}" for c in nxt)]))
    return EXIT_OK


def _vision_replay(pkg: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The replay benchmark's JSON, each output slice's first values, and their lines."""
    import numpy as np

    from packager.replay_stats import run_replay_benchmark
    from packager.samples import VISION_OUTPUT_SLICES

    stats = run_replay_benchmark(pkg, DEMO_ITERS, DEMO_WARMUP)
    flat = pkg.golden(0).target["outputs"].reshape(-1)
    outputs = {name: {"start": lo, "stop": hi, "first": [float(v) for v in flat[lo:lo + 3]]}
               for name, (lo, hi) in VISION_OUTPUT_SLICES.items()}
    lines = [*stats.lines(), *(f"  {name:16s} [{lo:4d}:{hi:4d}]  first values "
                               f"{np.array2string(flat[lo:lo + 3], precision=4)}"
                               for name, (lo, hi) in VISION_OUTPUT_SLICES.items())]
    return stats.to_json(), outputs, lines
