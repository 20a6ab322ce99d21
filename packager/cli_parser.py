"""The CLI's argument parser: one-line usage errors, no abbreviations, "did you mean" for typos.

argparse would take ``--iter`` as ``--iters`` (abbreviations) and answer ``--vehical X`` with "the following
arguments are required: --vehicle", since required options are checked before unknown ones are reported; this
parser names the unknown option first and suggests the closest known one.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any

EXIT_CODES_TITLE = "exit codes:"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class UsageError(Exception):
    """A command-line mistake; packager/cli.py prints it as one line and exits 2."""


def suggestion(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices``, else an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors raise UsageError (one line, no usage dump), with abbreviations off and an
    unknown option reported (with a suggestion) before any missing required one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)  # keeps the epilog's lines
        self.options: list[str] = []  # every option string, recorded as added (argparse keeps them privately)
        self.commands: list[str] = []  # the subcommand names (set by packager/cli.py)
        self._argv: list[str] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        self._record(names)
        return super().add_argument(*names, **kwargs)

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        group = super().add_mutually_exclusive_group(**kwargs)
        add = group.add_argument

        def recorded(*names: Any, **kw: Any) -> argparse.Action:
            self._record(names)
            return add(*names, **kw)

        group.add_argument = recorded  # type: ignore[method-assign]
        return group

    def _record(self, names: Sequence[Any]) -> None:
        self.options += [n for n in names if isinstance(n, str) and n.startswith("-")]

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        ns, extras = super().parse_known_args(self._argv, namespace)
        unknown = self._unknown_options(extras)
        if unknown:
            self.error(self._unknown_message(unknown[0]))
        return ns, extras

    def _unknown_options(self, argv: Sequence[str]) -> list[str]:
        out = []
        for a in argv:
            if a == "--":
                break
            if a.startswith("-") and len(a) > 1 and not _NEGATIVE_NUMBER.match(a) \
                    and a.split("=", 1)[0] not in self.options:
                out.append(a.split("=", 1)[0])
        return out

    def _unknown_message(self, option: str) -> str:
        known = [s for s in self.options if s.startswith("--")]
        return f"unknown option {option}{suggestion(option, known)} (see '{self.prog} --help')"

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("the following arguments are required"):
            unknown = self._unknown_options(self._argv)
            if unknown:  # the typo is the cause: `--vehical X` leaves --vehicle missing
                message = self._unknown_message(unknown[0])
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)'", message)
        if choice and choice.group(1) == "<command>":
            names = self.commands
            message = (f"unknown command {choice.group(2)!r}{suggestion(choice.group(2), names)}; commands: "
                       f"{', '.join(names)}")
        raise UsageError(message)


def exit_codes_epilog(codes: dict[int, str]) -> str:
    """The ``exit codes:`` block every --help ends with."""
    return EXIT_CODES_TITLE + "".join(f"\n  {code:<4d}{text}" for code, text in sorted(codes.items()))
