"""Memory planning: intermediate buffers get byte offsets in one arena, sharing bytes when their lifetimes do not
overlap.

A buffer lives from the first dispatch that writes it to the last dispatch that reads it (both inclusive), so a
kernel's output never shares bytes with anything that kernel reads. A buffer local to one lane of a segment that
runs lanes concurrently (streams.py) also conflicts with every buffer local to another lane of that segment.
Placement is greedy by size with best fit: the largest buffers are placed first, each at the smallest gap
(between buffers whose lifetimes overlap its own) that holds it, else at the end; a lane's local buffers are
placed among themselves first and then as one block. Every offset and every reserved size is a multiple of the
alignment.

What holds after ``plan_memory``: two buffers whose lifetimes overlap occupy disjoint byte ranges
(``check_plan`` verifies it), ``arena_bytes`` is the end of the last placed buffer, and ``naive_bytes`` is the
sum of the buffers' own sizes (what one allocation per buffer would take, alignment padding not counted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from jit.common.errors import DrivepackError

MIN_ALIGNMENT = 64  # a cache line: never hand a kernel a buffer that starts mid-line


class MemoryPlanError(DrivepackError, ValueError):
    """A lifetime or alignment that cannot be planned (names the field, the expected and the actual value)."""


@dataclass(frozen=True)
class Lifetime:
    """One buffer to place: ``key`` identifies it, it is live in dispatches ``first``..``last``; ``lane`` is
    (segment, lane) when only that lane of a concurrent segment uses it."""

    key: int
    nbytes: int
    first: int
    last: int
    lane: tuple[int, int] | None = None

    def overlaps(self, other: Lifetime) -> bool:
        if self.lane and other.lane and self.lane[0] == other.lane[0] and self.lane[1] != other.lane[1]:
            return True  # the two lanes run at the same time, whatever their order in the dispatch list
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class MemoryPlan:
    """Offsets into one arena by buffer key, the arena size and what separate allocations would take."""

    offsets: dict[int, int]
    arena_bytes: int
    naive_bytes: int
    alignment: int

    @property
    def ratio(self) -> float:
        """arena / naive (1.0 when nothing is planned)."""
        return self.arena_bytes / self.naive_bytes if self.naive_bytes else 1.0


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def plan_alignment(target_alignment: int) -> int:
    """The arena alignment for a target: its own buffer alignment, at least ``MIN_ALIGNMENT`` bytes."""
    if target_alignment < 1:
        raise MemoryPlanError(f"alignment: expected a positive byte count, got {target_alignment}")
    return max(MIN_ALIGNMENT, target_alignment)


def _validate(lifetimes: Sequence[Lifetime]) -> None:
    seen: set[int] = set()
    for lt in lifetimes:
        if lt.key in seen:
            raise MemoryPlanError(f"buffer {lt.key}: key expected unique, got it twice")
        seen.add(lt.key)
        if lt.nbytes < 0:
            raise MemoryPlanError(f"buffer {lt.key}: nbytes expected >= 0, got {lt.nbytes}")
        if not 0 <= lt.first <= lt.last:
            raise MemoryPlanError(f"buffer {lt.key}: lifetime expected 0 <= first <= last, got "
                                  f"first {lt.first}, last {lt.last}")


def best_offset(size: int, busy: list[tuple[int, int]], align: int) -> int:
    """The start of the smallest gap of at least ``size`` bytes between the ``busy`` (start, end) ranges, or the
    first aligned offset after all of them."""
    best: tuple[int, int] | None = None  # (gap size, offset)
    cursor = 0
    for start, end in sorted(busy):
        gap = start - cursor
        if gap >= size and (best is None or gap < best[0]):
            best = (gap, cursor)
        cursor = max(cursor, round_up(end, align))
    return best[1] if best is not None else cursor


def _place(lifetimes: Sequence[Lifetime], align: int) -> dict[int, int]:
    placed: list[tuple[Lifetime, int, int]] = []  # (lifetime, offset, reserved bytes)
    # largest first: big buffers fix the arena's shape, small ones fill the gaps they leave
    for lt in sorted(lifetimes, key=lambda x: (-x.nbytes, x.first, x.key)):
        size = round_up(max(lt.nbytes, 1), align)
        busy = [(off, off + sz) for other, off, sz in placed if other.overlaps(lt)]
        placed.append((lt, best_offset(size, busy, align), size))
    return {lt.key: off for lt, off, _ in placed}


def plan_memory(lifetimes: Sequence[Lifetime], alignment: int) -> MemoryPlan:
    """Place every buffer; see the module docstring for the rule and what holds afterwards. The buffers local
    to one lane are placed among themselves into one block, live for the whole segment, so a lane's working set
    stays as compact as it would be run alone."""
    align = plan_alignment(alignment)
    _validate(lifetimes)
    by_lane: dict[tuple[int, int], list[Lifetime]] = {}
    top: list[Lifetime] = []
    for lt in lifetimes:
        (by_lane.setdefault(lt.lane, []) if lt.lane else top).append(lt)
    blocks: dict[int, tuple[dict[int, int], list[Lifetime]]] = {}
    next_key = max((lt.key for lt in lifetimes), default=0) + 1
    for (segment, lane), local in sorted(by_lane.items()):
        offsets = _place([dataclasses.replace(lt, lane=None) for lt in local], align)
        size = max(offsets[lt.key] + lt.nbytes for lt in local)
        span = Lifetime(next_key, size, min(lt.first for lt in local), max(lt.last for lt in local), (segment, lane))
        blocks[next_key] = (offsets, local)
        top.append(span)
        next_key += 1
    offsets = _place(top, align)
    for key, (local_offsets, local) in blocks.items():
        offsets.update({lt.key: offsets[key] + local_offsets[lt.key] for lt in local})
        del offsets[key]
    arena = max((offsets[lt.key] + lt.nbytes for lt in lifetimes), default=0)
    return MemoryPlan(offsets, round_up(arena, align), sum(lt.nbytes for lt in lifetimes), align)


def check_plan(lifetimes: Sequence[Lifetime], plan: MemoryPlan) -> None:
    """MemoryPlanError unless every buffer is aligned, inside the arena, and disjoint from every buffer whose
    lifetime overlaps its own."""
    for lt in lifetimes:
        off = plan.offsets.get(lt.key)
        if off is None:
            raise MemoryPlanError(f"buffer {lt.key}: offset expected in the plan, got none")
        if off % plan.alignment:
            raise MemoryPlanError(f"buffer {lt.key}: offset expected a multiple of {plan.alignment}, got {off}")
        if off + lt.nbytes > plan.arena_bytes:
            raise MemoryPlanError(f"buffer {lt.key}: end expected <= arena {plan.arena_bytes}, got "
                                  f"{off + lt.nbytes}")
    ordered = sorted(lifetimes, key=lambda x: x.key)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if a.overlaps(b) and a.nbytes and b.nbytes:
                oa, ob = plan.offsets[a.key], plan.offsets[b.key]
                if oa < ob + b.nbytes and ob < oa + a.nbytes:
                    raise MemoryPlanError(f"buffers {a.key} and {b.key}: bytes expected disjoint (lifetimes "
                                          f"overlap), got [{oa}, {oa + a.nbytes}) and [{ob}, {ob + b.nbytes})")
