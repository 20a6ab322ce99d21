"""Lanes: independent kernel groups found in a kernel list, planned apart in the arena, run side by side on the
CPU, and refused in a command buffer when two lanes touch the same bytes."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import jit.common.helpers as helpers
from jit import Captured, Device, Tensor, capture
from jit.schedule.memory_plan import Lifetime, MemoryPlan, MemoryPlanError, check_plan, plan_memory
from jit.schedule.streams import MIN_SEGMENT_COST, dependencies, find_segments, pack, segment_lifetime
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer, Dispatch, KernelSpec, Scalar, Segment

BIG = MIN_SEGMENT_COST  # one kernel's cost that alone makes a segment worth a fork


# --- dependencies and segments -------------------------------------------------------------------------------
def test_dependencies_follow_writes_reads_and_overwrites() -> None:
    # 0 writes a; 1 reads a writes b; 2 writes a again (after 1 read it); 3 reads c only
    preds = dependencies([[], ["a"], [], ["c"]], [["a"], ["b"], ["a"], ["d"]])
    assert preds == [set(), {0}, {0, 1}, set()]


def two_chains(n: int, join: bool = True) -> list[set[int]]:
    """Kernels 0..n-1 a chain, n..2n-1 another, then (``join``) one kernel reading both ends."""
    preds = [set() if i in (0, n) else {i - 1} for i in range(2 * n)]
    return preds + ([{n - 1, 2 * n - 1}] if join else [])


def test_two_balanced_chains_become_one_segment_of_two_lanes() -> None:
    preds = two_chains(3)
    (seg,) = find_segments(preds, [BIG] * 7, lanes=2)
    assert (seg.start, seg.end, seg.lanes) == (0, 6, (0, 0, 0, 1, 1, 1))  # the join runs after the segment


def test_a_shared_prologue_stays_outside_the_segment() -> None:
    # kernel 0 feeds both chains: the segment starts after it
    preds = [set()] + [{i - 1} if i not in (1, 4) else {0} for i in range(1, 7)] + [{3, 6}]
    (seg,) = find_segments(preds, [BIG] * 8, lanes=2)
    assert (seg.start, seg.end, seg.lanes) == (1, 7, (0, 0, 0, 1, 1, 1))


@pytest.mark.parametrize("costs, lanes", [
    ([BIG] * 3 + [BIG / 4] * 3 + [BIG], 2),  # lopsided: one lane would run 4x the other
    ([BIG / 100] * 7, 2),  # too little work for a fork and join
    ([BIG] * 7, 1),  # one lane: nothing runs side by side
])
def test_unbalanced_cheap_or_single_lane_lists_get_no_segment(costs: list[float], lanes: int) -> None:
    assert find_segments(two_chains(3), costs, lanes) == []


def test_a_dependent_chain_gets_no_segment() -> None:
    preds = [set()] + [{i - 1} for i in range(1, 8)]
    assert find_segments(preds, [BIG] * 8, lanes=2) == []


def test_the_search_stops_where_no_group_can_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start whose later kernels all follow it is given up at once, and a search past the last kernel that could
    start a group stops once everything is one group: linear in a long chain, not quadratic."""
    import jit.schedule.streams as streams
    added: list[int] = []
    real = streams._Groups.add

    def counted(self: object, x: int, cost: float, joins: object) -> None:
        added.append(x)
        real(self, x, cost, joins)
    monkeypatch.setattr(streams._Groups, "add", counted)
    n = 400
    chain = [set()] + [{i - 1} for i in range(1, n)]
    assert find_segments(chain, [BIG] * n, lanes=2) == [] and len(added) == n
    added.clear()
    towers = two_chains(3)  # then a long chain after the join: the towers' segment is still found
    towers += [{i - 1} for i in range(len(towers), len(towers) + n)]
    (seg,) = find_segments(towers, [BIG] * len(towers), lanes=2)
    assert (seg.start, seg.end) == (0, 6) and len(added) < 4 * len(towers)


def test_many_small_groups_are_packed_evenly() -> None:
    lane_of, most = pack([5, 4, 3, 3, 2, 1], lanes=2)
    loads = [sum(c for c, lane in zip([5, 4, 3, 3, 2, 1], lane_of, strict=True) if lane == x) for x in (0, 1)]
    assert sorted(loads) == [9, 9] and most == 9
    (seg,) = find_segments([set()] * 6, [BIG * c for c in (5, 4, 3, 3, 2, 1)], lanes=2)
    assert sorted(seg.lanes.count(x) for x in (0, 1)) == [3, 3]


# --- lifetimes and the arena ---------------------------------------------------------------------------------
SEG = Segment(2, (0, 0, 1, 1))  # kernels 2, 3 in lane 0; 4, 5 in lane 1


def test_a_buffer_used_by_one_lane_only_is_local_to_it() -> None:
    assert segment_lifetime(0, 8, [2, 3], [SEG]) == Lifetime(0, 8, 2, 3, (0, 0))
    assert segment_lifetime(1, 8, [4, 5], [SEG]) == Lifetime(1, 8, 4, 5, (0, 1))


@pytest.mark.parametrize("users, span", [
    ([0, 3], (0, 5)),  # made before the segment, last read in lane 0: live until the segment ends
    ([4, 7], (2, 7)),  # made in lane 1, read after the segment: live from the segment's start
    ([2, 5], (2, 5)),  # read by both lanes
    ([0, 7], (0, 7)),  # live across the whole segment
    ([0, 1], (0, 1)),  # before the segment: unchanged
])
def test_other_buffers_meeting_a_segment_live_for_all_of_it(users: list[int], span: tuple[int, int]) -> None:
    lt = segment_lifetime(0, 8, users, [SEG])
    assert (lt.first, lt.last, lt.lane) == (*span, None)


def test_concurrent_lanes_never_share_bytes_and_each_lane_is_one_compact_block() -> None:
    # each lane a chain of three buffers: alone, a chain needs two slots; lanes run at once, so four in all
    lanes = [Lifetime(3 * lane + i, 1000, 2 * lane + i, 2 * lane + i + 1, (0, lane)) for lane in (0, 1)
             for i in range(3)]
    plan = plan_memory(lanes, 64)
    check_plan(lanes, plan)
    assert plan.arena_bytes == 4 * 1024
    for lane in (0, 1):
        offs = sorted(plan.offsets[lt.key] for lt in lanes if lt.lane == (0, lane))
        assert offs[-1] - offs[0] == 1024  # the lane's own two slots, side by side
    assert not Lifetime(0, 1, 0, 0, (0, 0)).overlaps(Lifetime(1, 1, 5, 5, (1, 1)))  # other segment: by time
    assert Lifetime(0, 1, 0, 0, (0, 0)).overlaps(Lifetime(1, 1, 5, 5, (0, 1)))  # same segment, other lane


def test_checker_rejects_lanes_sharing_bytes() -> None:
    a, b = Lifetime(0, 100, 0, 0, (0, 0)), Lifetime(1, 100, 1, 1, (0, 1))
    with pytest.raises(MemoryPlanError, match="buffers 0 and 1: bytes expected disjoint"):
        check_plan([a, b], MemoryPlan({0: 0, 1: 64}, 192, 200, 64))


# --- the command buffer --------------------------------------------------------------------------------------
SCALE_C = "void scale(float* restrict data0, const float* restrict data1, float s) {\n" \
          "  for (int i = 0; i < 4; i++) data0[i] = data1[i] * s;\n}\n"
BITS = struct.unpack("<I", struct.pack("<f", 3.0))[0]


def lanes_cmdbuf(segments: tuple[Segment, ...] = (Segment(0, (0, 1, 0, 1)),),
                 arena: tuple[str, str] = ("arena:0+16", "arena:64+16")) -> CommandBuffer:
    """y = 9x through one lane's temporary and z = 9x through the other's; ``arena`` names the temporaries."""
    a, b = arena

    def d(out: str, src: str) -> Dispatch:
        return Dispatch(0, (1,), None, (out, src), (Scalar("float32", BITS),))

    return CommandBuffer(
        target="CPU", kernels=(KernelSpec("scale", SCALE_C, "scale", "CPU"),),
        dispatches=(d(a, "input:x"), d(b, "input:x"), d("output:y", a), d("output:z", b)),
        buffers=(BufferSpec("input:x", "float32", (4,), 16), BufferSpec("output:y", "float32", (4,), 16),
                 BufferSpec("output:z", "float32", (4,), 16),
                 *{BufferSpec(x, "uint8", (16,), 16) for x in (a, b)}),
        arena_bytes=arena_end(a, b), alignment=64, segments=segments)


def arena_end(*bindings: str, alignment: int = 64) -> int:
    """The arena size a command buffer must declare: the end of its last arena binding, rounded up."""
    end = max(sum(int(x) for x in b.removeprefix("arena:").split("+")) for b in bindings)
    return -(-end // alignment) * alignment


def test_segments_round_trip_and_documents_without_them_stay_as_before() -> None:
    cb = lanes_cmdbuf()
    data = cb.to_bytes()
    assert CommandBuffer.from_bytes(data) == cb and CommandBuffer.from_bytes(data).to_bytes() == data
    assert json.loads(data)["segments"] == [{"start": 0, "lanes": [0, 1, 0, 1]}]
    assert "segments" not in json.loads(lanes_cmdbuf(segments=()).to_bytes())


def test_hand_written_lanes_replay_on_the_cpu() -> None:
    x = np.arange(4, dtype=np.float32)
    cap = Captured.from_cmdbuf(lanes_cmdbuf(), {}, "CPU")
    assert "dp_lanes0" in cap.replay.source  # the lanes run as one region of the thread pool
    for threads in (2, 1):
        cap.replay.set_threads(threads)
        out = cap(x=x)
        np.testing.assert_array_equal(out["y"], 9 * x)
        np.testing.assert_array_equal(out["z"], 9 * x)


@pytest.mark.parametrize("segments, arena, message", [
    ((Segment(0, (0, 1, 0, 1)),), ("arena:0+16", "arena:0+16"),
     "lanes 0 and 1 expected disjoint bytes where one writes, got arena:0\\+16 \\(written\\)"),
    ((Segment(0, (0, 1, 1, 1)),), ("arena:0+16", "arena:64+16"), "lanes 0 and 1 expected disjoint bytes"),
    ((Segment(0, (0, 0)),), ("arena:0+16", "arena:64+16"), "segments\\[0\\].lanes: expected every lane 0..L-1"),
    ((Segment(0, (0, 2)),), ("arena:0+16", "arena:64+16"), "got lanes \\[0, 2\\]"),
    ((Segment(2, (0, 1, 0)),), ("arena:0+16", "arena:64+16"), "segments\\[0\\]: end expected <= 4"),
    ((Segment(0, (0, 1)), Segment(1, (0, 1))), ("arena:0+16", "arena:64+16"),
     "segments\\[1\\].start: expected >= 2"),
])
def test_unsafe_or_malformed_segments_are_refused(segments: tuple[Segment, ...], arena: tuple[str, str],
                                                   message: str) -> None:
    with pytest.raises(CmdbufError, match=message):
        lanes_cmdbuf(segments, arena)


def test_overlapping_arena_ranges_count_as_the_same_bytes() -> None:
    cb = lanes_cmdbuf(segments=())
    doc = json.loads(cb.to_bytes())
    doc["segments"] = [{"start": 0, "lanes": [0, 1]}]
    doc["arena_bytes"] = arena_end("arena:0+128", "arena:64+16")
    doc["dispatches"][0]["bindings"][0] = "arena:0+128"  # lane 0 writes bytes 0..127, lane 1 writes 64..79
    doc["buffers"].append({"binding": "arena:0+128", "dtype": "uint8", "shape": [128], "nbytes": 128,
                           "init": None, "image": None})
    with pytest.raises(CmdbufError, match="arena:0\\+128 \\(written\\) in lane 0 and arena:64\\+16"):
        CommandBuffer.from_dict(doc)


# --- end to end ----------------------------------------------------------------------------------------------
RNG = np.random.default_rng(3)
TOWERS = [[RNG.standard_normal((256, 256)).astype(np.float32) / 16 for _ in range(3)] for _ in range(2)]


def two_towers(a: Tensor, b: Tensor) -> dict[str, Tensor]:
    """Two independent three-layer towers, one per input, joined by the last kernel."""
    ends = []
    for x, weights in zip((a, b), TOWERS, strict=True):
        for w in weights:
            x = (x @ Tensor(w)).relu()
        ends.append(x)
    return {"y": ends[0] - ends[1]}


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ends = []
    for x, weights in zip((a.astype(np.float64), b.astype(np.float64)), TOWERS, strict=True):
        for w in weights:
            x = np.maximum(x @ w, 0)
        ends.append(x)
    return ends[0] - ends[1]


@pytest.fixture
def two_threads():
    cpu = Device["CPU"]
    old = cpu.threads
    cpu.set_threads(2)
    yield
    cpu.set_threads(old)


def test_two_towers_run_in_two_lanes_with_the_sequential_results(two_threads: None) -> None:
    feeds = {n: RNG.standard_normal((64, 256)).astype(np.float32) for n in ("a", "b")}
    cap = capture(two_towers, feeds, target="CPU")
    (seg,) = cap.cmdbuf.segments
    assert cap.report.summary().endswith(f"; {len(seg.lanes)} dispatches in 1 segment(s) of concurrent lanes")
    assert seg.start == 0 and seg.end == len(cap.cmdbuf.dispatches) - 1  # the join is not in it
    assert seg.lanes.count(0) == seg.lanes.count(1) >= 2  # a tower's last layer may fuse into the join
    out = cap(feeds)["y"]
    np.testing.assert_allclose(out, reference(feeds["a"], feeds["b"]), rtol=1e-4, atol=1e-4)
    with helpers.Context(STREAMS=0):
        plain = capture(two_towers, feeds, target="CPU")
    assert plain.cmdbuf.segments == () and "omp_get_thread_num" not in plain.replay.source
    np.testing.assert_array_equal(out, plain(feeds)["y"])  # each kernel computes the same, on any thread
    cap.replay.set_threads(1)
    np.testing.assert_array_equal(out, cap(feeds)["y"])
    again = Captured.from_cmdbuf(CommandBuffer.from_bytes(cap.cmdbuf.to_bytes()), cap.weights, "CPU")
    assert again.cmdbuf.segments == cap.cmdbuf.segments
    np.testing.assert_array_equal(out, again(feeds)["y"])


def test_one_thread_captures_no_segments() -> None:
    cpu = Device["CPU"]
    old = cpu.threads
    cpu.set_threads(1)
    try:
        feeds = {n: RNG.standard_normal((64, 256)).astype(np.float32) for n in ("a", "b")}
        assert capture(two_towers, feeds, target="CPU").cmdbuf.segments == ()
    finally:
        cpu.set_threads(old)
