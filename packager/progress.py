"""Progress on stderr: one line per stage with its time, and a redrawn bar for stages with countable steps."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    """Stage timer and progress printer; ``times`` maps each finished stage to its seconds."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.times: dict[str, float] = {}
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def _print(self, text: str, end: str = "\n") -> None:
        if self.enabled:
            print(text, end=end, file=self.stream, flush=True)

    @contextmanager
    def stage(self, name: str, what: str = "") -> Iterator[None]:
        """Time the block as stage ``name``; prints when it starts and when it ends."""
        self._print(f"[{name}] {what}".rstrip())
        start = time.perf_counter()
        yield
        self.times[name] = time.perf_counter() - start
        self._print(f"[{name}] done in {self.times[name]:.2f} s")

    def note(self, name: str, text: str) -> None:
        self._print(f"[{name}] {text}")

    def bar(self, name: str, done: int, total: int, label: str = "") -> None:
        """Draw ``done`` of ``total``: redrawn in place on a terminal, one line per step otherwise."""
        filled = BAR_WIDTH * done // max(total, 1)
        text = f"[{name}] [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} {label}".rstrip()
        if self._tty:
            self._print("\r" + text + ("\n" if done >= total else ""), end="")
        else:
            self._print(text)
