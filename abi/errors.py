"""Typed ABI errors: every entry names the input, the field, the expected and the actual value."""

from __future__ import annotations

from dataclasses import dataclass

from jit.common.errors import DrivepackError


@dataclass(frozen=True)
class AbiIssue:
    """One ABI problem: ``input``'s ``field`` was expected to be ``expected`` but is ``actual``."""

    input: str
    field: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.input}: {self.field} expected {self.expected}, got {self.actual}"


class AbiError(DrivepackError, ValueError):
    """One or more ABI problems, all reported together (``.errors`` holds them in the order found)."""

    def __init__(self, errors: list[AbiIssue]) -> None:
        self.errors = list(errors)
        if len(self.errors) == 1:
            msg = str(self.errors[0])
        else:
            msg = f"{len(self.errors)} ABI errors:\n" + "\n".join(f"  {e}" for e in self.errors)
        super().__init__(msg)


class AbiFileError(DrivepackError, ValueError):
    """A file that cannot yield an ABI (unknown kind, unreadable, bad JSON); names the path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ProfileError(DrivepackError, ValueError):
    """A bad vehicle profile: names the file, the line (1-based, 0 if unknown) and the dotted key."""

    def __init__(self, file: str, line: int, key: str, message: str) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.detail = message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {excerpt(key) or '<top>'}: {message}")


EXCERPT_CHARS = 80  # the most of a file's own text (a value, a key) that an error message repeats


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (marked with its full length): a hostile file's megabyte string never
    ends up whole in a message or a log."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def quoted(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut the same way."""
    return excerpt(repr(value), limit)


def issue(input_name: str, field: str, expected: object, actual: object) -> AbiIssue:
    """An AbiIssue with both values rendered the way the messages show them."""
    return AbiIssue(input_name, field, _fmt(expected), _fmt(actual))


def _fmt(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)
