"""Lanes: runs of kernels that split into independent groups, run side by side, one core per lane.

A driving model's vision part is often two identical towers (one per camera frame) that meet only at the head.
Every kernel of a tower spread over both cores pays a fork/join and splits rows unevenly; the two towers on one
core each pay neither. ``find_segments`` looks for such runs in a kernel list: a segment ``[start, end)`` whose
kernels fall into two or more groups with no dependency between groups, packed onto lanes (largest group first,
onto the least loaded lane) with the most loaded lane within ``BALANCE_SLACK`` of an even split. Lopsided splits
(a residual block's shortcut beside its main path) are refused: with one core per lane they would be slower
than every kernel on all cores.

What holds after ``find_segments``: segments are disjoint and in order; within a segment, two kernels in
different lanes neither read nor write a buffer the other writes; each lane keeps the kernels' order. Running
each lane's kernels in order, lanes concurrently, and segments (and the kernels between them) in order gives
the results of running every kernel in order.

``segment_lifetime`` turns a buffer's sequential lifetime into one the memory planner can place safely when
lanes run concurrently: a buffer used only inside one segment by one lane keeps its span and conflicts with
every buffer of the segment's other lanes; any other buffer that meets a segment is live for all of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from jit.schedule.memory_plan import Lifetime
from targets.cmdbuf import Segment

BALANCE_SLACK = 0.05  # the most loaded lane may take this much more than an even split
# a segment must hold about this much work (flops + BYTE_COST * bytes): a fork and join costs a few microseconds
MIN_SEGMENT_COST = 4e6
BYTE_COST = 4.0  # a byte moved costs about four flops on the CPUs drivepack targets (FMA peak / bandwidth)
MAX_SEGMENT_KERNELS = 512  # longest segment searched for, so the search stays linear in long kernel lists


def dependencies(reads: Sequence[Iterable[Hashable]], writes: Sequence[Iterable[Hashable]]) -> list[set[int]]:
    """For each kernel, the earlier kernels it must follow: the last writer of every buffer it reads or writes,
    and every reader since that write of a buffer it writes."""
    last_writer: dict[Hashable, int] = {}
    readers: dict[Hashable, list[int]] = {}
    preds: list[set[int]] = []
    for i, (rs, ws) in enumerate(zip(reads, writes, strict=True)):
        rs, ws = set(rs), set(ws)
        p = {last_writer[b] for b in rs | ws if b in last_writer}
        for b in ws:
            p.update(readers.pop(b, ()))
        for b in rs:
            readers.setdefault(b, []).append(i)
        for b in ws:
            last_writer[b] = i
        p.discard(i)
        preds.append(p)
    return preds


def pack(costs: Sequence[float], lanes: int) -> tuple[list[int], float]:
    """Largest-first packing of groups onto ``lanes``: the lane of each group and the most loaded lane's cost."""
    load = [0.0] * lanes
    lane_of = [0] * len(costs)
    for g in sorted(range(len(costs)), key=lambda g: -costs[g]):
        lane = min(range(lanes), key=load.__getitem__)
        lane_of[g] = lane
        load[lane] += costs[g]
    return lane_of, max(load)


class _Groups:
    """Union-find over the kernels of a growing segment, with each group's cost."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.cost: dict[int, float] = {}

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def add(self, x: int, cost: float, joins: Iterable[int]) -> None:
        self.parent[x], self.cost[x] = x, cost
        for y in joins:
            a, b = self.find(x), self.find(y)
            if a != b:
                self.parent[b] = a
                self.cost[a] += self.cost.pop(b)


def _best_end(start: int, preds: Sequence[set[int]], costs: Sequence[float], lanes: int,
              last_pred: Sequence[int]) -> tuple[int, float]:
    """The end of the costliest balanced segment from ``start`` and its cost; (start, 0) when there is none.
    ``last_pred``: each kernel's latest predecessor (-1 for none)."""
    groups = _Groups()
    best = (start, 0.0)
    total = 0.0
    stop = min(len(costs), start + MAX_SEGMENT_KERNELS)
    # after the last kernel that follows none from ``start`` on, each kernel joins a group: one group stays one
    last_root = max((e for e in range(start + 1, stop) if last_pred[e] < start), default=start)
    for e in range(start, stop):
        groups.add(e, costs[e], (p for p in preds[e] if p >= start))
        total += costs[e]
        if e >= last_root and len(groups.cost) == 1:
            break
        if len(groups.cost) < 2 or total < MIN_SEGMENT_COST or total <= best[1]:
            continue
        even = total / min(lanes, len(groups.cost))
        if max(groups.cost.values()) <= (1 + BALANCE_SLACK) * even:
            if pack(list(groups.cost.values()), lanes)[1] <= (1 + BALANCE_SLACK) * even:
                best = (e + 1, total)
    return best


def find_segments(preds: Sequence[set[int]], costs: Sequence[float], lanes: int) -> list[Segment]:
    """Balanced segments of independent groups for ``lanes`` cores (none when ``lanes`` < 2); see the module
    docstring for what holds afterwards."""
    if lanes < 2:
        return []
    segments: list[Segment] = []
    last_pred = [max(p, default=-1) for p in preds]
    start = 0
    while start < len(costs):
        end, _ = _best_end(start, preds, costs, lanes, last_pred)
        if end == start:
            start += 1
            continue
        groups = _Groups()
        for e in range(start, end):
            groups.add(e, costs[e], (p for p in preds[e] if p >= start))
        roots = list(groups.cost)
        lane_of, _ = pack([groups.cost[r] for r in roots], lanes)
        by_root = dict(zip(roots, lane_of, strict=True))
        # lanes numbered by first kernel, so the lane holding the segment's first kernel is lane 0
        order = list(dict.fromkeys(by_root[groups.find(e)] for e in range(start, end)))
        segments.append(Segment(start, tuple(order.index(by_root[groups.find(e)]) for e in range(start, end))))
        start = end
    return segments


def segment_lifetime(key: int, nbytes: int, users: Sequence[int], segments: Sequence[Segment]) -> Lifetime:
    """The lifetime of a buffer used by kernels ``users`` (first use first), safe under concurrent lanes."""
    first, last = min(users), max(users)
    lane = None
    for i, seg in enumerate(segments):
        if last < seg.start or first >= seg.end:
            continue
        lanes = {seg.lanes[u - seg.start] for u in users if seg.start <= u < seg.end}
        if seg.start <= first and last < seg.end and len(lanes) == 1:
            lane = (i, lanes.pop())
        else:
            first, last = min(first, seg.start), max(last, seg.end - 1)
    return Lifetime(key, nbytes, first, last, lane)
