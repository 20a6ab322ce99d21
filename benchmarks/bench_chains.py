"""Teams and chains of kernels on an OpenCL CPU device (jit/schedule/chains.py): zoo models' OPENCL replays captured
two ways, in one process.

    python3 benchmarks/bench_chains.py [--mode teams|chains] [--models a,b] [--repeat N] [--json]

``--mode teams`` (the default): with teams (the default there) against without them (chains of small kernels, what
a capture did before teams); ``--mode chains``: with chains and no teams against every kernel a dispatch of its own.
Per model (default: a mix of the zoo's convnets and attention models): the dispatches each capture records, and the
median ms of a replay call of each, timed in alternating blocks (bench_core's ``interleaved_medians``); their ratio
(with / without: lower is better) and the geometric mean of the ratios. Both captures' outputs are checked to be
the same bytes first: a team or chain runs the same kernels' code. The zoo is exported as ``bench_zoo.py`` does
(benchmarks/zoo_models.py, the ``.[bench]`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import onnx

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_core import interleaved_medians  # noqa: E402
from bench_zoo import feeds_for  # noqa: E402
from zoo_models import ensure  # noqa: E402

from jit import Device, capture_onnx, load_onnx  # noqa: E402

DEFAULT_MODELS = ("mobilenet_v3_small", "mobilenetv3_large_op", "efficientnet_b0", "efficientnet_b0_op",
                  "efficientnet_b2_op", "transformer", "deit_tiny_128", "convnext_atto", "squeezenet1_1",
                  "shufflenet_v2_x0_5", "resnet18")


def compare(path: str, repeat: int, mode: str = "teams") -> dict[str, float]:
    """Dispatches and median seconds per call of ``path``'s OPENCL capture with ``mode`` (teams or chains) and
    without (the module docstring)."""
    feeds = feeds_for(onnx.load(path, load_external_data=False), seed=0)
    target = Device["OPENCL"]
    limits = target.chain_limits, target.team_limits
    if None in limits:
        raise SystemExit(f"bench_chains: {target.info.name} is no CPU device: its kernels never run as teams")
    settings = {"teams": {"with": limits, "without": (limits[0], None)},
                "chains": {"with": (limits[0], None), "without": (None, None)}}[mode]
    runs = {}
    for name, (chains, teams) in settings.items():
        target.chain_limits, target.team_limits = chains, teams
        try:
            runs[name] = capture_onnx(load_onnx(path, device="OPENCL"), feeds, target="OPENCL")
        finally:
            target.chain_limits, target.team_limits = limits
    outs = [runs[name](feeds) for name in runs]
    for key in outs[0]:
        if outs[0][key].tobytes() != outs[1][key].tobytes():
            raise SystemExit(f"bench_chains: {path}: output {key} differs with and without {mode}")
    medians = interleaved_medians({name: (lambda r=r: r(feeds)) for name, r in runs.items()}, repeat, warmup=3)
    return {"dispatches_with": runs["with"].n_dispatches, "dispatches_without": runs["without"].n_dispatches,
            "ms_with": medians["with"] * 1e3, "ms_without": medians["without"] * 1e3,
            "ratio": medians["with"] / medians["without"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("teams", "chains"), default="teams", help="what to compare (default teams)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma list of zoo models")
    parser.add_argument("--repeat", type=int, default=60, help="timed calls per capture (default 60)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line after the table")
    args = parser.parse_args()
    names = args.models.split(",")
    paths = ensure(names)
    rows = {name: compare(paths[name], args.repeat, args.mode) for name in names}
    print(f"\n{'model':22s} {'dispatches':>17s} {'ms without':>11s} {'ms with':>9s} {'ratio':>7s}")
    for name, r in rows.items():
        print(f"{name:22s} {r['dispatches_without']:8d} -> {r['dispatches_with']:4d} {r['ms_without']:11.3f} "
              f"{r['ms_with']:9.3f} {r['ratio']:6.3f}x")
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows.values()) / len(rows))
    print(f"geometric mean OPENCL with {args.mode} / without: {geo:.3f}x over {len(rows)} models")
    if args.json:
        print(json.dumps({"models": rows, "geomean": geo}))


if __name__ == "__main__":
    main()
