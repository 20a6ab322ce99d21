"""Command-line entry point: `drivepack <command> ...`.

Each subcommand is one entry in COMMANDS: name -> Command(help, add_args, run[, exit_codes]).
To add one, write an `add_<name>_args(parser)` and a `run_<name>(args) -> int`
and register them; `main` does the rest. Exit codes (listed in every --help): 0 ok, 1 a check failed
(VerifyError, an ABI mismatch), 2 usage or input error (any other DrivepackError, an unreadable file), 141 the
output pipe closed early (`| head`: nothing more is written, as for any tool SIGPIPE ends); abi-diff adds 3.
The error is one line on stderr, with a traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jit.common.errors import DrivepackError
from packager import __version__
from packager.abi_commands import (
    ABI_CHECK_CODES,
    ABI_DIFF_CODES,
    add_abi_check_args,
    add_abi_diff_args,
    run_abi_check,
    run_abi_diff,
)
from packager.cli_parser import Parser, UsageError, exit_codes_epilog
from packager.commands import (
    EXIT_CHECK_FAILED,
    EXIT_USAGE,
    INSPECT_CODES,
    PACKAGE_CODES,
    VERIFY_CODES,
    add_inspect_args,
    add_package_args,
    add_verify_args,
    run_inspect,
    run_package,
    run_verify,
)
from packager.demo_command import DEMO_CODES, add_demo_args, run_demo
from packager.errors import VerifyError
from packager.key_commands import KEYGEN_CODES, add_keygen_args, run_keygen
from packager.replay_command import add_replay_args, run_replay
from packager.vehicle_commands import VEHICLE_CODES, add_vehicle_args, run_vehicle

PROG = "drivepack"
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool a closed pipe ended
CHECK_CODES = {0: "ok", 1: "a check failed", 2: "usage or input error (bad option, unreadable or corrupt file)",
               EXIT_BROKEN_PIPE: "the output pipe closed early (e.g. `| head`); nothing more is written"}


@dataclass(frozen=True)
class Command:
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    exit_codes: dict[int, str] | None = None  # what its --help lists; None: CHECK_CODES


COMMANDS: dict[str, Command] = {
    "demo": Command("write the built-in sample vision model here, package it for a profile that runs here, verify "
                    "and replay it", add_demo_args, run_demo, DEMO_CODES),
    "package": Command("compile one or more ONNX models for a vehicle into a verified .dpk package (one entry "
                       "each)", add_package_args, run_package, PACKAGE_CODES),
    "verify": Command("replay each entry's golden inputs and compare with its golden outputs", add_verify_args,
                      run_verify, VERIFY_CODES),
    "replay": Command("benchmark a package: latency percentiles, deadline misses, per-kernel time",
                      add_replay_args, run_replay),
    "inspect": Command("show a package's manifest and entries: ABI, kernels, command buffer (text, JSON, Graphviz)",
                       add_inspect_args, run_inspect, INSPECT_CODES),
    "keygen": Command("make an Ed25519 signing key: a private key file (mode 0600) and PATH.pub",
                      add_keygen_args, run_keygen, KEYGEN_CODES),
    "abi-check": Command("check a model's input/output ABI against a vehicle profile's runtime",
                         add_abi_check_args, run_abi_check, ABI_CHECK_CODES),
    "abi-diff": Command("list ABI changes between two models/packages: breaking or compatible",
                        add_abi_diff_args, run_abi_diff, ABI_DIFF_CODES),
    "vehicle": Command("vehicle profile helpers: list the shipped ones, check files (every problem in one run), "
                       "copy one under a new name, print NV12 camera buffer geometry", add_vehicle_args, run_vehicle,
                       VEHICLE_CODES),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Package, check and replay driving models for embedded GPUs.",
                    epilog=exit_codes_epilog({**CHECK_CODES, 3: "abi-diff: only compatible changes"}))
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="print a traceback with errors")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=Parser)
    parser.commands = list(COMMANDS)
    for name, cmd in COMMANDS.items():
        codes = {**(cmd.exit_codes or CHECK_CODES), EXIT_BROKEN_PIPE: CHECK_CODES[EXIT_BROKEN_PIPE]}
        p = sub.add_parser(name, help=cmd.help, description=cmd.help, epilog=exit_codes_epilog(codes))
        cmd.add_args(p)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print a traceback with errors")
    return parser


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _quiet_broken_pipe() -> int:
    """The reader went away (``| head``): point stdout and stderr at devnull so that the interpreter's final
    flush does not raise again (Python's documented SIGPIPE recipe), and end with 128 + SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (captured in tests)
            pass
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe surfaces here for the last buffered lines
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version finish inside argparse
            return e.code if isinstance(e.code, int) else 0
        if args.command is None:
            raise UsageError(f"no command given (try '{PROG} --help')")
        try:
            return COMMANDS[args.command].run(args)
        except BrokenPipeError:
            raise
        except (DrivepackError, OSError) as e:
            if args.debug:
                traceback.print_exc()
            failed = isinstance(e, VerifyError)
            print(f"{PROG}: {'check failed' if failed else 'error'}: {_one_line(e)}", file=sys.stderr)
            return EXIT_CHECK_FAILED if failed else EXIT_USAGE
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
