"""The CPU replay's measured choice of parallel dispatches run on the caller alone (targets/cpu_split.py)."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Tensor, capture
from targets.cpu_split import (
    CANDIDATE_SLACK,
    INLINE_MARGIN,
    PROBE_ENV,
    candidates,
    keep_choice,
    split_choice,
    split_key,
    store_choice,
    stored_choice,
)
from targets.kernel_cache import cache_dir
from targets.replay_cpu import CPUReplay

RNG = np.random.default_rng(8)
W = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)


def _model(x: Tensor, total: Tensor) -> dict[str, Tensor]:
    """Parallel kernels of several sizes (a conv, its pool, a small product) and a state every call adds to."""
    y = x.conv2d(Tensor(W), padding=1).relu()
    pooled = y.mean(axis=(2, 3))
    return {"y": y, "p": pooled @ Tensor(RNG.standard_normal((32, 8)).astype(np.float32)), "total": total + pooled}


def _captured():
    x = RNG.standard_normal((1, 16, 48, 48)).astype(np.float32)
    cap = capture(_model, {"x": x}, target="CPU", state={"total": np.zeros((1, 32), np.float32)})
    return cap, x


def test_split_choice_takes_parallel_dispatches_clearly_faster_inline() -> None:
    split, inline = [10e-6, 10e-6, 10e-6, 10e-6], [5e-6, 10e-6 * (1 - INLINE_MARGIN / 2), 2e-6, 30e-6]
    assert split_choice(split, inline, [True, True, False, True]) == [True, False, False, False]
    assert keep_choice(1.0e-3, 0.9e-3) and not keep_choice(1.0e-3, 1.0e-3)


def test_only_dispatches_near_their_split_time_inline_are_timed_again() -> None:
    split = [10e-6, 10e-6, 10e-6, 1e-3]
    inline = [9e-6, 10e-6 * CANDIDATE_SLACK * 0.99, 5e-6, 1e-3 * CANDIDATE_SLACK]  # the last: a big conv's 2x
    assert candidates(split, inline, [True, True, False, True]) == [0, 1]


def test_the_first_call_on_two_threads_measures_and_keeps_results_and_states() -> None:
    cap, x = _captured()
    replay = cap.replay
    want = replay.run({"x": x}, threads=1)
    pooled = cap.read_state("total").copy()  # one update
    assert replay.inline_dispatches == {}  # one thread: nothing to choose
    got = replay.run({"x": x}, threads=2)  # the measured call: every dispatch ran several times
    assert set(replay.inline_dispatches) == {2}
    parallel = {i for i, d in enumerate(replay.cmdbuf.dispatches) if d.global_size[0] > 1}
    assert set(replay.inline_dispatches[2]) <= parallel
    for name in ("y", "p"):
        np.testing.assert_array_equal(got[name], want[name])  # the same chunks, whoever runs them
    np.testing.assert_allclose(cap.read_state("total"), 2 * pooled, rtol=1e-6)  # one update per call, not per run
    again = replay.run({"x": x}, threads=2)
    np.testing.assert_array_equal(again["y"], want["y"])
    np.testing.assert_allclose(cap.read_state("total"), 3 * pooled, rtol=1e-6)


def test_the_probe_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_ENV, "0")
    cap, x = _captured()
    cap.replay.run({"x": x}, threads=2)
    assert cap.replay.inline_dispatches == {2: ()}


def _counting_measure(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """CPUReplay._measure_split wrapped to count its calls (the count is the list's length)."""
    calls: list[int] = []
    measure = CPUReplay._measure_split

    def counted(self: CPUReplay, inputs: list[np.ndarray]) -> list[bool]:
        calls.append(1)
        return measure(self, inputs)

    monkeypatch.setattr(CPUReplay, "_measure_split", counted)
    return calls


def test_a_later_capture_of_the_same_model_takes_the_stored_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cap, x = _captured()
    stored = cache_dir() / f"{split_key(cap.replay.source, 2)}.split"
    stored.unlink(missing_ok=True)
    calls = _counting_measure(monkeypatch)
    want = cap.replay.run({"x": x}, threads=2)
    assert len(calls) == 1 and stored.exists()
    again, _ = _captured()
    got = again.replay.run({"x": x}, threads=2)
    assert len(calls) == 1  # not measured again
    assert again.replay.inline_dispatches == cap.replay.inline_dispatches
    np.testing.assert_array_equal(got["y"], want["y"])
    again.replay.run({"x": x}, threads=1)  # one thread: nothing to choose, nothing measured
    assert len(calls) == 1


def test_a_stored_choice_that_does_not_fit_is_measured_over(monkeypatch: pytest.MonkeyPatch) -> None:
    cap, x = _captured()
    key = split_key(cap.replay.source, 2)
    n = cap.replay.n_dispatches
    for bad in ("", "0" * (n - 1), "0" * (n - 1) + "2", "1" * (n + 1)):
        (cache_dir() / f"{key}.split").write_text(bad)
        assert stored_choice(key, n) is None
    calls = _counting_measure(monkeypatch)
    cap.replay.run({"x": x}, threads=2)
    assert len(calls) == 1
    assert stored_choice(key, n) == [i in cap.replay.inline_dispatches[2] for i in range(n)]


def test_a_choice_is_stored_per_driver_and_thread_count() -> None:
    assert len({split_key("driver a", 2), split_key("driver b", 2), split_key("driver a", 3)}) == 3
    store_choice(split_key("driver a", 2), [True, False, True])
    assert stored_choice(split_key("driver a", 2), 3) == [True, False, True]
    assert stored_choice(split_key("driver a", 3), 3) is None
