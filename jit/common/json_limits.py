"""Bounded JSON reading for untrusted files: nesting depth and integer length proven before ``json.loads`` runs.

A deep document is a RecursionError inside the parser and a 5,000-digit integer a ValueError of ``int()``;
both are refused here as the caller's typed error naming the limit. NaN and Infinity are refused too (every
drivepack document is written with ``allow_nan=False``).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 64  # the deepest drivepack document (a manifest's ABI) nests 6 levels
MAX_INT_DIGITS = 20  # every uint64 fits
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def bounded_json(data: bytes, where: str, error: type[Exception]) -> Any:
    """``json.loads`` of UTF-8 ``data`` after proving it nests at most MAX_JSON_DEPTH deep, with integer
    literals of at most MAX_INT_DIGITS digits and no NaN/Infinity; ``error`` (a DrivepackError) otherwise."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)  # brackets inside strings do not nest
    depth = 0
    while brackets and depth < MAX_JSON_DEPTH:  # each pass removes the innermost pairs: passes = nesting depth
        inner = _PAIR.sub(b"", brackets)
        if inner == brackets:
            raise error(f"{where}: expected UTF-8 JSON, got unbalanced brackets")
        brackets, depth = inner, depth + 1
    if brackets:
        raise error(f"{where}: nesting expected at most MAX_JSON_DEPTH = {MAX_JSON_DEPTH} levels, got more")

    def parse_int(text: str) -> int:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise error(f"{where}: integer literal expected at most MAX_INT_DIGITS = {MAX_INT_DIGITS} digits, got "
                        f"{len(text.lstrip('-'))} digits")
        return int(text)

    def parse_constant(text: str) -> Any:
        raise error(f"{where}: number expected finite JSON, got {text}")

    try:
        return json.loads(data.decode("utf-8"), parse_int=parse_int, parse_constant=parse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{where}: expected UTF-8 JSON, got {type(e).__name__}: {e}") from None
