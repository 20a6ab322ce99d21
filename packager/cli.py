"""Command-line entry point: `drivepack <command> ...`.

Each subcommand is one entry in COMMANDS: name -> Command(help, add_args, run).
To add one, write an `add_<name>_args(parser)` and a `run_<name>(args) -> int`
and register them; `main` does the rest. Usage errors exit 2 with one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packager import __version__
from packager.abi_commands import add_abi_check_args, add_abi_diff_args, run_abi_check, run_abi_diff

PROG = "drivepack"


class UsageError(Exception):
    """A command-line mistake; `main` prints it as one line and exits 2."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and raise UsageError."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _no_args(parser: argparse.ArgumentParser) -> None:
    """For commands that take no arguments."""


def run_demo(args: argparse.Namespace) -> int:
    """Run two small programs through the jit and check them against numpy, then the sample vision model."""
    import numpy as np

    from jit.tensor import Tensor

    out = (Tensor([1, 2, 3, 4]) + 3 + 4).tolist()
    print(f"Tensor([1, 2, 3, 4]) + 3 + 4 = {out}")
    if out != [8, 9, 10, 11]:
        print(f"{PROG}: error: elementwise: expected [8, 9, 10, 11], got {out}", file=sys.stderr)
        return 1

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    got = Tensor(a).matmul(Tensor(b)).numpy()
    want = a @ b
    err = float(np.max(np.abs(got - want)))
    print(f"64x64 matmul: max |jit - numpy| = {err:.3g}")
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        print(f"{PROG}: error: matmul: result differs from numpy (max abs error {err:.3g})", file=sys.stderr)
        return 1
    return run_sample_vision()


def run_sample_vision() -> int:
    """Load the built-in openpilot-shaped vision model through the ONNX frontend and run it once."""
    import json
    import time

    import numpy as np

    from jit.device import Device
    from jit.onnx import load_onnx
    from jit.realize import run_schedule
    from jit.schedule import create_schedule
    from packager.samples import sample_inputs, vision_model

    proto = vision_model()
    start = time.perf_counter()
    model = load_onnx(proto)
    outputs = model(sample_inputs(proto))
    kernels, _ = create_schedule([t.uop for t in outputs.values()], Device.DEFAULT)
    run_schedule(kernels)
    elapsed = time.perf_counter() - start
    flat = outputs["outputs"].numpy().reshape(-1)
    print(f"sample vision model: {len(kernels)} kernels on {Device.DEFAULT}, load + compile + run {elapsed:.2f} s")
    for name, (lo, hi) in json.loads(model.metadata["output_slices"]).items():
        print(f"  {name:16s} [{lo:4d}:{hi:4d}]  first values {np.array2string(flat[lo:lo + 3], precision=4)}")
    print("demo ok (set DEBUG=2 to print each kernel as it runs, DEBUG=4 for its source)")
    return 0


COMMANDS: dict[str, Command] = {
    "demo": Command("run small programs checked against numpy, then the built-in sample vision model",
                    _no_args, run_demo),
    "abi-check": Command("check a model's input/output ABI against a vehicle profile's runtime",
                         add_abi_check_args, run_abi_check),
    "abi-diff": Command("list ABI changes between two models/packages: breaking or compatible",
                        add_abi_diff_args, run_abi_diff),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Package, check and replay driving models for embedded GPUs.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        cmd.add_args(sub.add_parser(name, help=cmd.help, description=cmd.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version finish inside argparse
            return e.code if isinstance(e.code, int) else 0
        if args.command is None:
            raise UsageError(f"no command given (try '{PROG} --help')")
        return COMMANDS[args.command].run(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
