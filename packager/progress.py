"""Progress on stderr: one line per stage with its time, and a redrawn bar for stages with countable steps.

``enabled=False`` (``--quiet``) silences progress only: ``warn`` lines (problems a build continues past) are
always printed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

BAR_WIDTH = 24
HEARTBEAT_S = 10.0  # how often a long step without countable sub-steps says it is still running


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

    def warn(self, name: str, text: str) -> None:
        """A problem the build goes on past: printed even when progress is off."""
        print(f"[{name}] {text}", file=self.stream, flush=True)

    @contextmanager
    def step(self, name: str, what: str, every: float = HEARTBEAT_S) -> Iterator[None]:
        """One step of a stage that has no countable parts (a C compiler run): ``what ...`` when it starts,
        ``what: still running, N s`` every ``every`` seconds while it runs, ``what: N s`` when it ends."""
        self._print(f"[{name}] {what} ...")
        start = time.perf_counter()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(every):
                self._print(f"[{name}] {what}: still running, {time.perf_counter() - start:.0f} s")

        ticker = threading.Thread(target=beat, daemon=True) if self.enabled else None
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if ticker is not None:
                ticker.join()
        self._print(f"[{name}] {what}: {time.perf_counter() - start:.2f} s")

    def bar(self, name: str, done: int, total: int, label: str = "") -> None:
        """Draw ``done`` of ``total``: redrawn in place on a terminal, one line per step otherwise."""
        filled = BAR_WIDTH * done // max(total, 1)
        text = f"[{name}] [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} {label}".rstrip()
        if self._tty:
            self._print("\r" + text + ("\n" if done >= total else ""), end="")
        else:
            self._print(text)
