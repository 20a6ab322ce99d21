"""Command-line entry point: `drivepack <command> ...`.

Each subcommand is one entry in COMMANDS: name -> Command(help, add_args, run).
To add one, write an `add_<name>_args(parser)` and a `run_<name>(args) -> int`
and register them; `main` does the rest. Exit codes: 0 ok, 1 a check failed
(VerifyError), 2 usage or input error (any other DrivepackError, an unreadable
file); the error is one line on stderr, with a traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jit.common.errors import DrivepackError
from packager import __version__
from packager.abi_commands import add_abi_check_args, add_abi_diff_args, run_abi_check, run_abi_diff
from packager.commands import (
    EXIT_CHECK_FAILED,
    EXIT_USAGE,
    add_demo_args,
    add_inspect_args,
    add_package_args,
    add_replay_args,
    add_verify_args,
    run_demo,
    run_inspect,
    run_package,
    run_replay,
    run_verify,
)
from packager.errors import VerifyError
from packager.key_commands import add_keygen_args, run_keygen

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


COMMANDS: dict[str, Command] = {
    "demo": Command("package the built-in sample vision model for a profile that runs here, verify and replay it",
                    add_demo_args, run_demo),
    "package": Command("compile one or more ONNX models for a vehicle into a verified .dpk package (one entry "
                       "each)", add_package_args, run_package),
    "verify": Command("replay each entry's golden inputs and compare with its golden outputs", add_verify_args,
                      run_verify),
    "replay": Command("benchmark a package: latency percentiles, deadline misses, per-kernel time",
                      add_replay_args, run_replay),
    "inspect": Command("show a package's manifest and entries: ABI, kernels, command buffer (text, JSON, Graphviz)",
                       add_inspect_args, run_inspect),
    "keygen": Command("make an Ed25519 signing key: a private key file (mode 0600) and PATH.pub",
                      add_keygen_args, run_keygen),
    "abi-check": Command("check a model's input/output ABI against a vehicle profile's runtime",
                         add_abi_check_args, run_abi_check),
    "abi-diff": Command("list ABI changes between two models/packages: breaking or compatible",
                        add_abi_diff_args, run_abi_diff),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Package, check and replay driving models for embedded GPUs.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="print a traceback with errors")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_args(p)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print a traceback with errors")
    return parser


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
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
