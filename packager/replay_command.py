"""The ``replay`` command: benchmark one entry of a package (startup, latency percentiles, throughput, memory,
deadline misses, per-kernel time mapped to ONNX nodes, the context it ran in), or, with ``--rate`` on a ``--modeld``
package, feed it synthetic camera frames at a fixed rate (on any other package, ``--rate`` runs one inference per
tick).

Exit codes: 0 ok, 1 a check failed (``--budget-check`` with deadline misses), 2 usage or input error
(packager/cli.py turns errors into one line).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from packager.errors import PackageError
from packager.key_commands import add_trust_args

EXIT_OK, EXIT_CHECK_FAILED = 0, 1  # packager/commands.py's values (imported from there it would close a cycle)


def add_replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="a .dpk package")
    p.add_argument("--iters", type=int, default=100, help="timed replays (default 100); ticks with --rate")
    p.add_argument("--warmup", type=int, default=10, help="untimed replays after the first inference (default 10)")
    p.add_argument("--min-secs", type=float, metavar="S",
                   help="keep timing replays until at least S seconds have passed (and --iters are done)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU replay: run its parallel kernels on N threads")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="replay these inputs (one array per input name, numpy .npz) instead of golden set 0")
    p.add_argument("--profile", action="store_true",
                   help="also time each kernel (its ONNX nodes, GFLOP/s and GB/s against the machine's peaks)")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace of one profiled replay: one span per dispatch")
    p.add_argument("--budget-check", action="store_true",
                   help="exit 1 when any replay misses its deadline: the vehicle's budget max (the frame "
                        "period for a --modeld package at --rate)")
    p.add_argument("--entry", metavar="NAME", help="the entry to replay (needed when the package has several; "
                                                   "`drivepack inspect` lists them)")
    p.add_argument("--device", help="replay on this device instead of the package's")
    p.add_argument("--rate", type=float, metavar="HZ",
                   help="fixed-rate mode: one inference per tick (--iters ticks), deadline accounting against the "
                        "vehicle budget; a --modeld package is fed synthetic NV12 frames at this camera rate (20 for "
                        "openpilot), taking the prepare entry for frames that arrive while a step runs")
    p.add_argument("--frames", type=int, default=200, help="frames fed with --rate to a --modeld package "
                                                           "(default 200)")
    p.add_argument("--size", metavar="WxH", help="with --rate: the camera size (needed when there are several)")
    p.add_argument("--json", action="store_true", help="print the JSON document (docs/package-format.md)")
    add_trust_args(p)


def load_inputs(path: str) -> dict[str, Any]:
    """The arrays of a numpy ``.npz`` file by name; PackageError for anything else (pickled object arrays are
    refused, never loaded). The replay checks names, dtypes, shapes and byte sizes."""
    import numpy as np

    try:
        found = np.load(path, allow_pickle=False)
    except (ValueError, zipfile.BadZipFile, EOFError) as e:
        raise PackageError(f"--inputs: expected a .npz archive of plain arrays, got {type(e).__name__}: "
                           f"{' '.join(str(e).split())[:160]}") from None
    if not isinstance(found, np.lib.npyio.NpzFile):
        raise PackageError(f"--inputs: expected a .npz archive (one array per input name), got a single "
                           f"{type(found).__name__} in {path}")
    try:
        return {name: np.ascontiguousarray(found[name]) for name in found.files}
    except (ValueError, zipfile.BadZipFile, EOFError) as e:  # a member holding a pickle, or a damaged member
        raise PackageError(f"--inputs: expected plain arrays in {path}, got {type(e).__name__}: "
                           f"{' '.join(str(e).split())[:160]}") from None
    finally:
        found.close()


def _is_modeld(pkg: Any, entry: str | None) -> bool:
    from packager.step_replay import step_sizes

    return entry is None and bool(step_sizes(pkg.entries))


def _budget_verdict(misses: int, runs: int, deadline: str) -> int:
    if misses:
        print(f"drivepack: check failed: budget: {misses} deadline miss(es) of {runs} against {deadline}",
              file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK


def run_replay(args: argparse.Namespace) -> int:
    from packager.package import load_package
    from packager.replay_stats import run_replay_benchmark

    start = time.perf_counter()
    pkg = load_package(args.package, args.trust, args.allow_unsigned)
    load_s = time.perf_counter() - start
    if args.rate is not None and _is_modeld(pkg, args.entry):
        from packager.rate_replay import run_rate_benchmark

        for option in ("inputs", "threads", "min_secs", "trace"):  # the frame-feeding mode takes none of them
            if getattr(args, option) is not None:
                raise PackageError(f"--{option.replace('_', '-')}: expected none with --rate on a --modeld package "
                                   f"(it feeds synthetic frames; --entry NAME replays one entry), got "
                                   f"{getattr(args, option)}")
        if args.profile:
            raise PackageError("--profile: expected none with --rate on a --modeld package (--entry NAME profiles "
                               "one entry), got --profile")

        rated = run_rate_benchmark(pkg, args.rate, args.frames, args.size, args.device)
        print(json.dumps(rated.to_json(), indent=1) if args.json else "\n".join(rated.lines()))
        period = f"the frame period {rated.deadline_ms:g} ms"
        return _budget_verdict(rated.deadline_misses, rated.runs, period) if args.budget_check else EXIT_OK
    inputs = load_inputs(args.inputs) if args.inputs else None
    stats = run_replay_benchmark(pkg, args.iters, args.warmup, args.profile, args.device, entry=args.entry,
                                 threads=args.threads, min_secs=args.min_secs, rate_hz=args.rate, inputs=inputs,
                                 inputs_label=Path(args.inputs).name if args.inputs else "golden set 0",
                                 trace=args.trace is not None, load_s=load_s)
    if args.trace is not None:
        from packager.replay_trace import write_trace

        assert stats.trace_doc is not None
        stats.trace = str(write_trace(args.trace, stats.trace_doc))
    print(json.dumps(stats.to_json(), indent=1) if args.json else "\n".join(stats.lines()))
    budget = f"the vehicle's budget max {stats.deadline_ms:g} ms"
    return _budget_verdict(stats.deadline_misses, stats.iters, budget) if args.budget_check else EXIT_OK
