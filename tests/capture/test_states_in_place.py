"""A state's new value stored straight into the state's buffer (jit/schedule/in_place.py): taken for queue pushes,
refused where a read would see a value already overwritten, and in every case the same values as numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import jit.trace as trace
from jit import Tensor
from jit.ir.uop import UOp
from jit.schedule.in_place import in_place_problem
from jit.trace import capture

TARGETS = ["CPU", "OPENCL"]
Step = Callable[..., dict[str, Tensor]]


def push(x: Tensor, history: Tensor) -> dict[str, Tensor]:
    """The oldest row dropped, ``x`` appended; the output reads the new queue."""
    new = Tensor.cat(history[1:], x.reshape(1, *history.shape[1:]), dim=0)
    return {"history": new, "total": new.sum(0)}


def push_reading_both(x: Tensor, history: Tensor) -> dict[str, Tensor]:
    """An output of the old and the materialised new queue: it runs after the push and needs the old values."""
    new = Tensor.cat(history[1:], x.reshape(1, *history.shape[1:]), dim=0).contiguous()
    return {"history": new, "total": (new + history).sum(0)}


def reverse(x: Tensor, history: Tensor) -> dict[str, Tensor]:
    """Every row moved to the mirrored place: slot k reads slot n-1-k, which another slot's store overwrites."""
    return {"history": history.flip(0) + x.reshape(1, *history.shape[1:]), "total": history.sum(0)}


def push_front(x: Tensor, history: Tensor) -> dict[str, Tensor]:
    """The newest row first: each slot reads the slot before it."""
    new = Tensor.cat(x.reshape(1, *history.shape[1:]), history[:-1], dim=0)
    return {"history": new, "total": new.sum(0)}


def reference(fn: Step, x: np.ndarray, history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if fn is push:
        new = np.concatenate([history[1:], x[None]])
        return new, new.sum(0)
    if fn is push_reading_both:
        new = np.concatenate([history[1:], x[None]])
        return new, (new + history).sum(0)
    if fn is reverse:
        return history[::-1] + x[None], history.sum(0)
    new = np.concatenate([x[None], history[:-1]])
    return new, new.sum(0)


def run_steps(fn: Step, target: str, shape: tuple[int, ...], steps: int = 6) -> tuple[int, int]:
    """Capture ``fn``, replay it ``steps`` times against numpy; (dispatches writing the state, all dispatches)."""
    init = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    cap = capture(fn, {"x": np.zeros(shape[1:], np.float32)}, target=target, state={"history": init})
    hist = init.copy()
    for step in range(steps):
        x = (np.arange(int(np.prod(shape[1:]))).reshape(shape[1:]) + 100 * step).astype(np.float32)
        hist, total = reference(fn, x, hist)
        np.testing.assert_array_equal(cap(x=x)["total"], total)
        np.testing.assert_array_equal(cap.read_state("history"), hist)
    cap.reset_state()
    np.testing.assert_array_equal(cap.read_state("history"), init)
    writes = sum(d.bindings[0] == "state:history" for d in cap.cmdbuf.dispatches)
    return writes, cap.n_dispatches


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(5, 3), (5, 6, 32, 64)], ids=["unrolled", "looped"])
def test_a_queue_push_is_computed_in_the_state_without_a_copy(target: str, shape: tuple[int, ...]) -> None:
    writes, dispatches = run_steps(push, target, shape)
    assert (writes, dispatches) == (1, 2)  # the push, into the state, and the sum: no write-back copy


@pytest.mark.parametrize("target", TARGETS)
def test_a_state_read_after_its_update_keeps_the_copy(target: str) -> None:
    writes, dispatches = run_steps(push_reading_both, target, (5, 6, 32, 64))
    assert writes == 1 and dispatches == 3  # the push into a temporary, the sum of both, the copy


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [reverse, push_front], ids=["reverse", "push front"])
def test_an_update_whose_reads_would_see_new_values_matches_numpy(target: str, fn: Step) -> None:
    """A reversal can never run in place (its loads and stores use mirrored indices); a push at the front reads
    every slot after the store over it in the order the rows are stored. Either way the values are numpy's."""
    writes, _ = run_steps(fn, target, (5, 6, 32, 64))
    assert writes == 1


def test_the_proof_names_why_it_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusals come with a reason (the capture keeps the copy for any of them)."""
    reasons: list[str | None] = []

    def spy(sink: UOp, param: int = 0) -> str | None:
        reasons.append(in_place_problem(sink, param))
        return reasons[-1]

    monkeypatch.setattr(trace, "in_place_problem", spy)
    run_steps(reverse, "CPU", (5, 6, 32, 64), steps=1)
    run_steps(push, "CPU", (5, 6, 32, 64), steps=1)
    assert reasons == ["accesses at different index expressions", None]
