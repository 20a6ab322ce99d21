"""Memory planning: liveness sharing, best fit, alignment, and the checker that guards every plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jit import DrivepackError
from jit.schedule.memory_plan import (
    Lifetime,
    MemoryPlan,
    MemoryPlanError,
    best_offset,
    check_plan,
    plan_alignment,
    plan_memory,
)


def test_chain_reuses_bytes_of_dead_buffers() -> None:
    # a -> b -> c -> d: dispatch 1 reads a and writes b, so a is dead when c is written at dispatch 2
    lts = [Lifetime(0, 1000, 0, 1), Lifetime(1, 1000, 1, 2), Lifetime(2, 1000, 2, 3), Lifetime(3, 1000, 3, 4)]
    plan = plan_memory(lts, 64)
    check_plan(lts, plan)
    assert plan.naive_bytes == 4000
    assert plan.arena_bytes == 2048  # two 1024-byte slots alternate
    assert plan.offsets[0] == plan.offsets[2] and plan.offsets[1] == plan.offsets[3] != plan.offsets[0]
    assert plan.ratio == pytest.approx(2048 / 4000)


def test_overlapping_lifetimes_get_disjoint_bytes() -> None:
    lts = [Lifetime(0, 100, 0, 5), Lifetime(1, 100, 2, 3), Lifetime(2, 100, 3, 6)]
    plan = plan_memory(lts, 64)
    check_plan(lts, plan)
    assert len(set(plan.offsets.values())) == 3


def test_best_fit_takes_the_smallest_gap_that_holds_the_buffer() -> None:
    busy = [(1536, 2560), (0, 1024), (2816, 3840)]  # gaps: 512 bytes at 1024, 256 bytes at 2560
    assert best_offset(256, busy, 64) == 2560
    assert best_offset(300, busy, 64) == 1024
    assert best_offset(600, busy, 64) == 3840
    assert best_offset(100, [], 64) == 0
    assert best_offset(64, [(0, 100)], 64) == 128  # after a busy range, aligned


def test_alignment_is_the_target_s_and_at_least_64() -> None:
    assert plan_alignment(8) == 64 and plan_alignment(128) == 128
    lts = [Lifetime(i, 10 * i + 1, i, i + 1) for i in range(6)]
    plan = plan_memory(lts, 128)
    check_plan(lts, plan)
    assert plan.alignment == 128 and all(off % 128 == 0 for off in plan.offsets.values())
    assert plan.arena_bytes % 128 == 0


def test_empty_plan() -> None:
    plan = plan_memory([], 64)
    assert (plan.arena_bytes, plan.naive_bytes, plan.ratio) == (0, 0, 1.0)


@pytest.mark.parametrize(("lts", "alignment", "message"), [
    ([Lifetime(0, 8, 3, 2)], 64, "buffer 0: lifetime expected 0 <= first <= last, got first 3, last 2"),
    ([Lifetime(0, -1, 0, 0)], 64, "buffer 0: nbytes expected >= 0, got -1"),
    ([Lifetime(5, 8, 0, 0), Lifetime(5, 8, 1, 1)], 64, "buffer 5: key expected unique, got it twice"),
    ([], 0, "alignment: expected a positive byte count, got 0"),
])
def test_bad_lifetimes_are_typed_errors(lts: list[Lifetime], alignment: int, message: str) -> None:
    with pytest.raises(MemoryPlanError) as e:
        plan_memory(lts, alignment)
    assert str(e.value) == message and isinstance(e.value, DrivepackError)


def test_checker_rejects_overlapping_live_buffers() -> None:
    lts = [Lifetime(0, 100, 0, 2), Lifetime(1, 100, 1, 3)]
    with pytest.raises(MemoryPlanError, match="buffers 0 and 1: bytes expected disjoint"):
        check_plan(lts, MemoryPlan({0: 0, 1: 64}, 256, 200, 64))
    with pytest.raises(MemoryPlanError, match="offset expected a multiple of 64, got 32"):
        check_plan(lts, MemoryPlan({0: 0, 1: 32}, 256, 200, 64))
    with pytest.raises(MemoryPlanError, match="end expected <= arena 128, got 228"):
        check_plan(lts, MemoryPlan({0: 0, 1: 128}, 128, 200, 64))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 30), st.integers(0, 10)), max_size=40),
       st.sampled_from([1, 64, 128, 256]))
def test_random_plans_are_valid_and_never_worse_than_naive(raw: list[tuple[int, int, int]], align: int) -> None:
    lts = [Lifetime(i, n, a, a + d) for i, (n, a, d) in enumerate(raw)]
    plan = plan_memory(lts, align)
    check_plan(lts, plan)
    step = plan.alignment
    assert plan.arena_bytes <= sum(-(-max(lt.nbytes, 1) // step) * step for lt in lts)
    # never below what is live at once at the busiest dispatch
    peak = max((sum(lt.nbytes for lt in lts if lt.first <= t <= lt.last) for t in range(41)), default=0)
    assert plan.arena_bytes >= peak
