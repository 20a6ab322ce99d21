"""A CPU replay checks a set of kernel sources once per process (targets/replay_cpu.py ``_check_kernels_once``):
the same set is not parsed again, any change to it is, and a set that fails fails every time."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

import targets.replay_cpu as replay_cpu
from jit import capture
from targets.source_check import KernelSourceError


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = replay_cpu.check_kernels

    def counting(cmdbuf: object, dialect: str, flags: object) -> None:
        seen.append(len(cmdbuf.kernels))  # type: ignore[attr-defined]
        real(cmdbuf, dialect, flags)  # type: ignore[arg-type]
    monkeypatch.setattr(replay_cpu, "check_kernels", counting)
    monkeypatch.setattr(replay_cpu, "_checked", set())
    return seen


def _run() -> object:
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    return capture(lambda x: {"y": (x * 2).exp().sum(axis=1)}, {"x": x}, target="CPU")


def test_same_kernels_checked_once(calls: list[int]) -> None:
    run = _run()
    assert calls == [len(run.cmdbuf.kernels)]  # type: ignore[attr-defined]
    replay_cpu.CPUReplay(run.cmdbuf, run.weights, run.replay.target)  # type: ignore[attr-defined]
    _run()
    assert len(calls) == 1


def test_changed_source_is_checked_again(calls: list[int]) -> None:
    k = _run().cmdbuf.kernels[0]  # type: ignore[attr-defined]
    replay_cpu._check_kernels_once(SimpleNamespace(kernels=[k]))  # noqa: SLF001
    n = len(calls)
    replay_cpu._check_kernels_once(SimpleNamespace(kernels=[k]))  # noqa: SLF001
    assert len(calls) == n
    for changed in (dataclasses.replace(k, source=k.source + "\n"), dataclasses.replace(k, name=k.name + "x")):
        replay_cpu._check_kernels_once(SimpleNamespace(kernels=[changed]))  # noqa: SLF001
    assert len(calls) == n + 2


def test_failing_set_fails_every_time(calls: list[int]) -> None:
    k = _run().cmdbuf.kernels[0]  # type: ignore[attr-defined]
    bad = dataclasses.replace(k, source=k.source.replace("#include <math.h>", "#include <stdio.h>"))
    for _ in range(2):
        with pytest.raises(KernelSourceError):
            replay_cpu._check_kernels_once(SimpleNamespace(kernels=[bad]))  # noqa: SLF001
    wrong = dataclasses.replace(k, flags=1)
    with pytest.raises(Exception):  # noqa: B017,PT011 - check_kernels' own refusal of a non-text field
        replay_cpu._check_kernels_once(SimpleNamespace(kernels=[wrong]))  # noqa: SLF001
