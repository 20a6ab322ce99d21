"""The modeld step of a ``--modeld`` package as one object: ``run`` and ``prepare`` of one camera size sharing
their frame queues on the device (openpilot's dropped-frame path pushes a frame without running the models)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packager.errors import PackageError
from targets.replay import Replay

_STEP_ENTRY = re.compile(r"^(run|prepare)@(\d+x\d+)$")


def step_sizes(entries: Sequence[str]) -> list[str]:
    """The camera sizes (``1928x1208``) that have both a run@ and a prepare@ entry, in entry order."""
    kinds: dict[str, set[str]] = {}
    for name in entries:
        m = _STEP_ENTRY.match(name)
        if m:
            kinds.setdefault(m.group(2), set()).add(m.group(1))
    return [size for size, k in kinds.items() if k == {"run", "prepare"}]


class StepReplay:
    """``run(inputs)``: one whole step; ``prepare(inputs)``: warp and push the frames only (the run's inputs may be
    passed, the ones prepare does not take are ignored); ``reset()``: every queue back to zero. Calls of the two
    never interleave (one lock), and the queues never leave the device between calls."""

    def __init__(self, run: Replay, prepare: Replay, size: str) -> None:
        self.size, self.run_replay, self.prepare_replay = size, run, prepare
        self._prepare_inputs = frozenset(prepare.input_names)

    def run(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        return self.run_replay({**(inputs or {}), **kwargs})

    def prepare(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        given = {**(inputs or {}), **kwargs}
        return self.prepare_replay({k: v for k, v in given.items() if k in self._prepare_inputs})

    def reset(self) -> None:
        self.run_replay.reset_state()

    def read_state(self, name: str) -> np.ndarray:
        return self.run_replay.read_state(name)

    @property
    def input_names(self) -> list[str]:
        return self.run_replay.input_names


def make_step(pkg: Any, size: str | None = None, device: str | None = None) -> StepReplay:
    """The step of camera size ``size`` (may be omitted when the package has one) of a loaded package."""
    sizes = step_sizes(pkg.entries)
    if not sizes:
        raise PackageError(f"{pkg.path}: entries: expected run@WxH and prepare@WxH (a --modeld package), got "
                           f"{list(pkg.entries)}")
    if size is None and len(sizes) > 1:
        raise PackageError(f"size: expected one of {sizes} (the package has {len(sizes)} camera sizes), got none")
    size = size or sizes[0]
    if size not in sizes:
        raise PackageError(f"size: expected one of {sizes}, got {size!r}")
    run = pkg.make_replay(device, entry=f"run@{size}")
    return StepReplay(run, pkg.make_replay(device, entry=f"prepare@{size}", share_states_with=run), size)
