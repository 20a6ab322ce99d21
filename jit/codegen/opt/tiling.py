"""Register tiling of reduce kernels: upcast output axes so each reduce-loop pass updates a tile of outputs.

Before: a kernel graph (SINK of STOREs) with REDUCEs over their reduce RANGEs and one RANGE per output axis
(kind "global"), the last of which is the contiguous output axis. After: each upcast axis ``r`` of size ``n``
is a RANGE of size ``n // u`` (same id), and every STORE is copied ``u`` times with ``r`` replaced by
``r' * u + c`` for ``c`` in ``0..u-1``; the copies' REDUCEs share the same reduce RANGEs, so the renderer runs
them in one loop with ``u_inner * u_reuse`` accumulators: a load that does not depend on an upcast axis is
read once per tile instead of once per output. Every output element is still stored exactly once with the
same value (each copy evaluates the original expression at one index of the tile, and each accumulator sums
its own terms in the original order).

Axes: the *inner* axis is the contiguous output axis (so a tile row is a contiguous run of loads and
stores the C compiler vectorises); the *reuse* axis is another output axis that some load of the reduce body
does not depend on while depending on the inner axis (a conv's output channel: the input window is shared
by every channel of the tile; a matmul's row: the row of B is shared by every row of the tile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

from jit.codegen.opt.options import DEFAULT_OPTS, OptOptions
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.stats import range_deps
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp, toposort

# fill_tile stops doubling a reuse height here: 8 rows of one 4-lane vector are 8 accumulators, 16 would spill
MAX_FILL_HEIGHT = 8
# vector registers assumed when the target says nothing (AVX2's and SSE's 16)
DEFAULT_VECTOR_REGISTERS = 16
# registers a channel-vector tile keeps free of accumulators: a broadcast and a load per reduce step
SPARE_VECTOR_REGISTERS = 2
# fewer vector accumulators than this leave the FMA units waiting on the previous FMA's result
MIN_VECTOR_ACCUMULATORS = 4
# multiply-add units a core issues to each cycle (two on the x86 cores since Haswell): a tile needs that many times
# MIN_VECTOR_ACCUMULATORS independent chains to keep them all busy
FMA_UNITS = 2
# channel vectors per tile row, per 8 registers: each is one more weight load per reduce step (2 on AVX2's 16
# registers: 14 accumulators for a row of 7; 4 on AVX-512's 32: 28)
CHANNEL_VECTORS_PER_8_REGISTERS = 1
# a channel-vector tile row of more outputs than this keeps the 16-register budget whatever the target has: each
# output's broadcast input is live across the reduce step next to the accumulators, and GCC spills a 13-wide row
# of two vectors (squeezenet's 13x13 1x1 convs) where a 7-wide row of four does not
SHORT_CHANNEL_ROW = 8
# below this many reduce trips the core overlaps the next tile's short chain with this one: no wider row needed
WIDE_MIN_TRIPS = 16
# a kernel with fewer outputs than ``min_outputs`` is still tiled when its reduce runs this many trips (a global
# pool, a squeeze-and-excitation matrix-vector product): untiled, each output's long sum is one accumulator that
# waits on its last add every step, and the tile's independent accumulators are what hide that latency
LONG_REDUCE_TRIPS = 256
# nor when its multiply-adds reach this: a squeeze-and-excitation's 240 -> 64 matrix-vector product, untiled, walks
# its weights a whole row apart every step with one accumulator an output (17 us against 2 us tiled)
SMALL_KERNEL_WORK = 1 << 13
# a kernel whose only output axis is a matrix-vector row, with this much work (multiply-adds or adds), keeps two
# tiles or more: enough to pay for sharing them out over threads (the CPU language's parallel_min_work)
SHARED_ROW_WORK = 1 << 15
# a row at least this long loses little to an overlapped last vector (jit/codegen/opt/overlap.py): at most one
# vector in four computed twice with 16 lanes
OVERLAP_ROW_MIN = 64
# a reuse axis no height divides is tiled overlapped where the rows computed twice are at most this share of it,
# and at least this high: a tile of 2 or 3 rows shares each load too little to beat one wide row's accumulators
OVERLAP_MAX_WASTE = 1 / 16
OVERLAP_MIN_HEIGHT = 4
# registers a wide row tile over an overlapped reuse axis leaves free of accumulators: its row's vectors and a
# broadcast live across a reduce step
OVERLAP_TILE_SPARE_REGISTERS = 8
# the narrowest vector (jit.codegen.opt.vectorize.MIN_LANES, which imports this module)
WIDE_MIN_LANES = 4
# a channel-vector tile stores lane by lane (the channels of one pixel are a plane apart): below this many reduce
# trips a row of 4 that vectorizes as it is costs less than the scattered stores (Winograd's output transform), and
# so does a long row as whole vectors with an overlapped last one (squeezenet's 111-wide first conv, 27 trips)
CHANNEL_MIN_TRIPS = 32
# strides along the row that vector loads read without a gather: contiguous, and two loads and a shuffle
VECTOR_LOAD_STRIDES = (0, 1, 2)


@dataclass(frozen=True)
class TilePlan:
    """Which output ranges to upcast and by how much: ``((range, factor), ...)``, inner axis first; ``max_lanes``
    caps the vector lanes of the inner axis where its loads are contiguous only in runs that long (0: no cap);
    ``overlap``: the inner factor need not divide its axis, whose last tile is shifted back to end at the axis's
    end (jit/codegen/opt/overlap.py); ``overlap_reuse``: the same for the reuse axis (``overlap_height``);
    ``window_first``: ``tile_kernel`` orders the third upcast's copies (a window's rows) before the reuse axis's;
    ``overlap_window``: the third upcast need not divide its axis either (overlapped like ``overlap``)."""

    upcasts: tuple[tuple[UOp, int], ...]
    max_lanes: int = 0
    overlap: bool = False
    overlap_reuse: bool = False
    window_first: bool = False
    overlap_window: bool = False


def _size(r: UOp) -> int:
    return int(r.src[0].arg)


def _first_divisor(n: int, options: tuple[int, ...]) -> int | None:
    return next((u for u in options if n % u == 0 and n // u >= 1 and n >= u), None)


def row_stride(idx: UOp, row: UOp, deps: dict[UOp, frozenset[UOp]]) -> int | None:
    """How far apart in memory ``idx`` reads for consecutive ``row`` values (0: independent of it), or None when
    ``idx`` is not affine in ``row``."""
    if row not in deps[idx]:
        return 0
    if idx is row:
        return 1
    if idx.op is Ops.ADD:
        parts = [row_stride(s, row, deps) for s in idx.src]
        return None if None in parts else sum(p for p in parts if p is not None)
    if idx.op is Ops.MUL and (const := next((s for s in idx.src if s.op is Ops.CONST), None)) is not None:
        inner = row_stride(idx.src[1] if idx.src[0] is const else idx.src[0], row, deps)
        return None if inner is None else inner * int(const.arg)
    return None


def stores_read_back(nodes: list[UOp]) -> bool:
    """Whether a kernel (its ``nodes``) loads from a buffer it stores to (a state updated in place): storing an
    output twice (an overlapped tile) is then not the same as storing it once."""
    stored = {u.src[0].src[0] for u in nodes if u.op is Ops.STORE}
    return any(u.op is Ops.LOAD and u.src[0].src[0] in stored for u in nodes)


def overlap_height(n: int, heights: tuple[int, ...], tallest: int) -> int | None:
    """The tile height for a reuse axis of ``n`` that none of ``heights`` divides (a matmul over 197 tokens): the
    tallest of them, or of their doublings, from ``OVERLAP_MIN_HEIGHT`` up to ``tallest`` and ``MAX_FILL_HEIGHT``,
    whose ``ceil(n / h)`` overlapped tiles compute at most ``OVERLAP_MAX_WASTE`` of the axis twice; None where none
    does. Without it such an axis gets no reuse at all: every output row re-reads the whole weight matrix."""
    cands = {h << i for h in heights for i in range(4) if h << i <= min(tallest, MAX_FILL_HEIGHT)}
    fits = [h for h in cands if OVERLAP_MIN_HEIGHT <= h <= n and -(-n // h) * h - n <= n * OVERLAP_MAX_WASTE]
    return max(fits, default=None)


def _wide_row(row: int, width: int, opts: OptOptions, registers: int) -> tuple[int, int] | None:
    """The widest of ``opts.wide_upcasts`` past ``width`` that divides ``row`` in whole wide vectors, and how many
    rows of it the registers hold as accumulators (all but ``OVERLAP_TILE_SPARE_REGISTERS``); None on 16
    registers, without wide vectors, or where none divides the row."""
    lanes = opts.wide_channel_vector
    if not lanes or registers <= DEFAULT_VECTOR_REGISTERS:
        return None
    wider = [w for w in opts.wide_upcasts if w > width and row % w == 0 and w % lanes == 0]
    return (wider[0], (registers - OVERLAP_TILE_SPARE_REGISTERS) * lanes // wider[0]) if wider else None


def _wider_row_tile(row: int, width: int, n: int, height: int, opts: OptOptions,
                    registers: int) -> tuple[int, int] | None:
    """A row tile ``width`` wide and ``height`` high over a reuse axis of ``n`` (a 1x1 conv's rows by its output
    channels) made wider (``_wide_row``) and as tall as the registers leave room for, where that holds more
    accumulators: the tallest divisor of ``n`` among the reuse heights and their doublings. On 32 registers
    (AVX-512) a 144 -> 24 1x1 conv over 56x56 takes 4 vectors by 6 channels, 24 accumulators, where 2 vectors by 8
    were 16; None where nothing wider fits."""
    if (wide := _wide_row(row, width, opts, registers)) is None:
        return None
    lanes = opts.wide_channel_vector
    tall = [h << i for h in opts.reuse_upcasts for i in range(4) if (h << i) <= wide[1] and n % (h << i) == 0]
    if not tall or wide[0] // lanes * max(tall) <= max(1, width // lanes) * height:
        return None
    return wide[0], max(tall)


def _overlap_reuse_tile(row: int, u_inner: int, n: int, heights: tuple[int, ...], opts: OptOptions,
                        registers: int) -> tuple[int, int] | None:
    """(width, height) of a row tile over a reuse axis of ``n`` that none of ``heights`` divides (``overlap_height``):
    the row's ``u_inner`` by the tallest height up to ``opts.fill_upcast`` elements; or, where the registers hold
    more accumulators than that tile (32 on AVX-512), a wider row (``_wide_row``) as tall as they leave room for:
    a ViT's 197-token products were 2 vectors by 8 rows, 16 accumulators, each step's two vectors half a row of
    the weights' 64-wide blocks (jit/frontend/weight_layout.py); 4 vectors by 6 rows are 24, over whole block
    rows. None where no height fits."""
    height = overlap_height(n, heights, (opts.fill_upcast or opts.max_upcast) // u_inner)
    best = (u_inner, height) if height is not None else None
    if (wide := _wide_row(row, u_inner, opts, registers)) is not None and \
            (tall := overlap_height(n, opts.reuse_upcasts, wide[1])) is not None:
        lanes = opts.wide_channel_vector
        if best is None or wide[0] // lanes * tall > best[0] // lanes * best[1]:
            best = (wide[0], tall)
    return best


def _reads_lanes_contiguously(idx: UOp, axis: UOp, lanes: int) -> bool:
    """Whether address ``idx`` is ``base + lane`` once ``axis`` is split into blocks of ``lanes``: ``axis =
    block * lanes + lane`` substituted and simplified (a channel-blocked weight's ``(c // 8) * K + c % 8`` folds)."""
    ids = [u.arg[0] for u in toposort([idx]) if u.op is Ops.RANGE]
    block = UOp(Ops.RANGE, axis.dtype, (axis.src[0].const_like(_size(axis) // lanes),), (max(ids) + 1, "global"))
    lane = UOp(Ops.RANGE, axis.dtype, (axis.src[0].const_like(lanes),), (max(ids) + 2, "vector"))
    split = graph_rewrite(idx.substitute({axis: block * lanes + lane}), pm_symbolic, name="lane split")
    return row_stride(split, lane, range_deps(split)) == 1


def _channel_vector_axis(outer: list[UOp], loads: list[UOp], deps: dict[UOp, frozenset[UOp]],
                         opts: OptOptions) -> tuple[UOp, int] | None:
    """The innermost output axis (not the row) that a channel vector divides and that every load depending on it
    reads in contiguous runs of that many (a conv's output channels over channel-blocked weights), with those
    lanes: ``opts.wide_channel_vector`` where it fits, else ``opts.channel_vector``; None where neither does."""
    for lanes in (opts.wide_channel_vector, opts.channel_vector):
        for cand in reversed(outer) if lanes else ():
            reads = [ld for ld in loads if cand in deps[ld]]
            if reads and _size(cand) % lanes == 0 and \
                    all(_reads_lanes_contiguously(ld.src[0].src[1], cand, lanes) for ld in reads):
                return cand, lanes
    return None


def _overlap_row_first(opts: OptOptions, channel_lanes: int, row: int, u_inner: int, row_strides: set[int | None],
                       trips: int, tile: tuple[int, int]) -> bool:
    """Whether a long row that no wide vector divides tiles as whole vectors with an overlapped last one
    (jit/codegen/opt/overlap.py) instead of across output channels in ``tile`` (outputs by channel vectors):
    * where the row's loads are contiguous and either the channels take vectors narrower than the target's wide
      ones (squeezenet's 512 -> 1000 classifier over 13x13 = 169 outputs: 1000 channels are no multiple of 16), so
      each FMA would do half the work the row's full-width vectors do, or the channel tile has too few
      accumulators to keep every FMA unit busy (its 128 -> 16 squeezes over 55x55 = 3025 outputs: one channel
      vector by 5 outputs), or holds one channel vector: each of its multiply-adds then loads a broadcast input of
      its own, where the row's vectors share one broadcast weight (its 256 -> 32 squeezes over 27x27 = 729
      outputs, one vector by 9);
    * where the row's loads are vectors (``VECTOR_LOAD_STRIDES``) and the reduce is shorter than
      ``CHANNEL_MIN_TRIPS``: the channel tile's lane-by-lane stores cost more than its multiply-adds (squeezenet's
      first conv, 64 channels over a 111-wide row at stride 2 from 27 taps). A strided row over a longer reduce
      keeps its channel tile: two loads and a shuffle a vector cost about what its stores save."""
    wide = opts.wide_channel_vector
    if not (opts.overlap_rows and wide and row >= OVERLAP_ROW_MIN and u_inner % wide):
        return False
    outputs, vectors = tile
    if row_strides <= {0, 1} and (channel_lanes < wide or vectors == 1 or
                                  outputs * vectors < FMA_UNITS * MIN_VECTOR_ACCUMULATORS):
        return True
    return trips < CHANNEL_MIN_TRIPS and row_strides <= set(VECTOR_LOAD_STRIDES)


def _channel_vectors(blocks: int, max_vectors: int, max_accumulators: int, row: int) -> int:
    """Channel vectors per tile row: the largest power of two <= ``max_vectors`` that divides the axis's
    ``blocks`` of channel_vector channels and keeps ``row`` x vectors accumulators within ``max_accumulators``
    (within the 16-register budget for a row longer than ``SHORT_CHANNEL_ROW``)."""
    n = 1
    if row > SHORT_CHANNEL_ROW:  # a long row's broadcasts are live across the step too: the 16-register budget
        max_accumulators = min(max_accumulators, DEFAULT_VECTOR_REGISTERS - SPARE_VECTOR_REGISTERS)
    while 2 * n <= max_vectors and 2 * n * row <= max_accumulators and blocks % (2 * n) == 0:
        n *= 2
    return n


def vector_registers(vector_width: int) -> int:
    """The vector registers of a target whose widest float32 vector has ``vector_width`` lanes: 32 for 16 lanes
    (AVX-512, which also gives its 8-lane vectors 32 registers), else ``DEFAULT_VECTOR_REGISTERS``."""
    return 32 if vector_width >= 16 else DEFAULT_VECTOR_REGISTERS


# a reduce at least this long takes a second output row sharing its broadcast loads (``_broadcast_sharing_axis``):
# there the loads per multiply-add bind; a shorter one's stores and epilogue weigh as much, and the second row's
# input streams cost more than the loads it saves (a 1x1 conv of 32 input channels over 112-wide rows)
BROADCAST_SHARING_MIN_TRIPS = 48
# rows of a tile over a sliding window's axis (``_window_axis``): h output rows of a 3-tap window load h + 2 input
# rows instead of 3h, and h x the row's vectors are accumulators
WINDOW_HEIGHTS = (4, 2)
# rows of a tile over a row read at a stride (a stride-2 conv's), whatever its reduce's length: each row vector costs
# two unaligned loads and a shuffle and each channel a broadcast weight, so a tile of one row is bound by its loads;
# rows sharing the weights halve (two) or third (three) the broadcasts a multiply-add needs. The first that divides
# the axis (squeezenet's 111 output rows: three)
STRIDED_WINDOW_HEIGHTS = (2, 3)
# rows of a conv tile one wide vector across, over taps of several input rows, that share each broadcast weight where
# the row would take two vectors instead (``_tap_rows_fit``: openpilot-shaped resnet18's 7x7 stem over 128-wide rows):
# 24 accumulators load three vectors and the weights a step, where two vectors by the same channels held 16
TAP_WINDOW_HEIGHT = 3
# rows of another output axis a tile takes where its reduce is short and nothing is shared (``plan_chains``): each
# is one more independent chain of accumulators
CHAIN_HEIGHTS = (4, 2)


def _window_axis(outer: list[UOp], loads: list[UOp], reduces: list[UOp],
                 deps: dict[UOp, frozenset[UOp]]) -> UOp | None:
    """The innermost of the ``outer`` output axes that some load reads as a sliding window: at the same stride as
    one of the reduce's own ranges (a stride-1 conv's ``y + ky``), so consecutive outputs along it read the same
    input at neighbouring taps; None where no load does."""
    red_ranges = [r for red in reduces for r in red.src[1:]]
    for cand in reversed(outer):
        for ld in loads:
            idx = ld.src[0].src[1]
            step = row_stride(idx, cand, deps) if cand in deps[ld] else None
            if step and any(row_stride(idx, r, deps) == step for r in red_ranges if r in deps[ld]):
                return cand
    return None


def _broadcast_sharing_axis(outer: list[UOp], loads: list[UOp], reduces: list[UOp],
                            deps: dict[UOp, frozenset[UOp]]) -> UOp | None:
    """The innermost of the ``outer`` output axes that a load moving with the reduce does not depend on while another
    load does: two outputs along it read the same value of the first (a conv's weight, broadcast to the tile row)
    at each reduce step, so a tile two high along it loads that value once for twice the multiply-adds. Where no
    sliding window shares the input (``_window_axis``: a strided conv's rows, Winograd's batched products over tile
    positions), a tile of one row loads a broadcast weight for every vector it multiplies, and the loads bind."""
    red_ranges = [r for red in reduces for r in red.src[1:]]
    for cand in reversed(outer):
        if any(cand in deps[ld] for ld in loads) and \
                any(cand not in deps[ld] and any(r in deps[ld] for r in red_ranges) for ld in loads):
            return cand
    return None


def _tap_rows_fit(opts: OptOptions, u_inner: int, u_reuse: int, reduces: list[UOp], registers: int) -> bool:
    """Whether a tile two wide vectors across (``u_inner``) by ``u_reuse`` channels, over a reduce of taps (every
    reduce runs over several ranges: kernel rows and columns besides the input channels), takes ``TAP_WINDOW_HEIGHT``
    output rows of one vector instead (``TilePlan.overlap_window`` where they do not divide the axis): on a target
    with room for such window rows (``OptOptions.window_tile``) whose registers hold the tile. Not for a 1x1
    conv: its output rows read input rows a plane apart, which ran slower three at a time."""
    wide = opts.wide_channel_vector
    return bool(opts.window_tile and wide) and u_inner == 2 * wide and all(len(red.src) > 2 for red in reduces) and \
        (u_reuse + 1) * TAP_WINDOW_HEIGHT + 1 <= registers  # the accumulators, each row's vector and a broadcast


def plan_tiles(sink: UOp, opts: OptOptions = DEFAULT_OPTS,
               registers: int = DEFAULT_VECTOR_REGISTERS) -> TilePlan | None:
    """The tile plan for ``sink``, or None when it is not a reduce kernel worth tiling (one STORE; every reduce
    long enough: a conv's epilogue may add a second reduce, resnet's projection shortcut, which is tiled alike).
    ``registers``: the target's vector registers (``vector_registers``), which bound a channel-vector tile."""
    max_accumulators = registers - SPARE_VECTOR_REGISTERS
    max_vectors = max(1, CHANNEL_VECTORS_PER_8_REGISTERS * registers // 8)
    nodes = toposort([sink])
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    if not reduces or len(sink.src) != 1:
        return None
    trips = min(math.prod(_size(r) for r in red.src[1:]) for red in reduces)
    if trips < opts.min_reduce_trips:
        return None
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    outputs = math.prod(_size(r) for r in outs)
    if not outs or outputs < opts.min_outputs and trips < LONG_REDUCE_TRIPS and outputs * trips < SMALL_KERNEL_WORK:
        return None
    inner = outs[-1]
    deps = range_deps(sink)
    loads = [u for u in toposort([red.src[0] for red in reduces]) if u.op is Ops.LOAD]
    inner_upcasts, reuse_upcasts = opts.inner_upcasts, opts.reuse_upcasts
    if opts.strided_tile and any((row_stride(ld.src[0].src[1], inner, deps) or 0) > 1 for ld in loads):
        inner_upcasts, reuse_upcasts = (opts.strided_tile[0], *inner_upcasts), (opts.strided_tile[1], *reuse_upcasts)
    u_inner = _first_divisor(_size(inner), inner_upcasts)
    if u_inner is None:
        # a row no width divides (resnet's 14, 7 and 7x7 = 49): its widest divisor up to the widest width
        u_inner = max(d for d in range(1, min(_size(inner), max(inner_upcasts)) + 1) if _size(inner) % d == 0)
    # a row of 4 vectorizes as it is only where its loads read it contiguously: a channels-last input (a depthwise
    # conv's, jit/frontend/nn_ops.py) gathers it lane by lane, which costs more than the channel tile's stores
    row_strides = {row_stride(ld.src[0].src[1], inner, deps) for ld in loads}
    row_contiguous = row_strides <= {0, 1}
    if u_inner == 1 and not (opts.overlap_rows and _size(inner) >= 2 * WIDE_MIN_LANES):
        # a prime row past the widths (a ViT's 197 tokens) is still planned: the optimizer widens it to overlapped
        # vectors, or overlapped scalars where its loads cannot be vectors (jit/codegen/opt/overlap.py)
        return None
    # a whole row narrower than the target's wide vectors (openpilot-shaped inputs' 8-wide rows at 1/32 scale)
    # fills them across channels instead, where the weights are blocked to match
    narrow_row = _size(inner) == u_inner < opts.wide_channel_vector
    # and so does a row read at a stride over a long reduce (``OptOptions.strided_channel_trips``)
    strided_long = 0 < opts.strided_channel_trips <= trips and any((st or 0) > 1 for st in row_strides)
    # and so does a row whose stores lie apart (a conv's slice of a channels-last concat,
    # jit/schedule/channels_last.py): along it every vector would scatter, across channels each stores whole
    row_scatters = any((row_stride(u.src[0].src[1], inner, deps) or 2) > 1 for u in nodes if u.op is Ops.STORE)
    if opts.channel_vector and (u_inner % opts.channel_vector or narrow_row or strided_long or row_scatters) and \
            (u_inner % 4 or trips >= CHANNEL_MIN_TRIPS or not row_contiguous or row_scatters) and \
            (found := _channel_vector_axis(outs[:-1], loads, deps, opts)) is not None:
        # a row too short for vectors (resnet's 14 and 7): the tile row runs across output channels, whose weights
        # conv2d stores channels-last so they load contiguously; the spatial row becomes the reuse axis
        across, lanes = found
        u_row = max(d for d in range(1, opts.max_upcast // lanes + 1) if _size(inner) % d == 0)
        # several channel vectors when the row leaves room: 7 accumulators cannot hide the FMA latency, 14 can;
        # more than the registers hold would spill. Half as many where a reduce runs over several ranges (a stride-2
        # 3x3 conv's channels, kernel rows and column phases): GCC unrolls the short inner loops and keeps their
        # loads live next to the accumulators, which on 16 registers leaves room for one vector only
        single = all(len(red.src) == 2 for red in reduces)
        vectors = partial(_channel_vectors, _size(across) // lanes,
                          max_vectors if single else max_vectors // 2, max_accumulators)
        nvec = vectors(u_row)
        if u_row == 1 or u_row * nvec < MIN_VECTOR_ACCUMULATORS:
            # a row of a prime past the cap (squeezenet's 13): one accumulator waits on the last FMA every step (a
            # 512 -> 1000 1x1 conv at 14 GFLOP/s), and a tile one output wide is a few channel vectors at best;
            # the row's widest divisor that still fits the registers instead
            u_row = max(d for d in range(1, DEFAULT_VECTOR_REGISTERS - SPARE_VECTOR_REGISTERS + 1)
                        if _size(inner) % d == 0)
            nvec = vectors(u_row)
        if row_scatters or not _overlap_row_first(opts, lanes, _size(inner), u_inner, row_strides, trips,
                                                  (u_row, nvec)):
            # no wider than the runs the loads read contiguously (the weights' channel block): a wider vector would
            # gather every tap's weights lane by lane
            return TilePlan(((across, lanes * nvec), (inner, u_row)), lanes)
    upcasts: list[tuple[UOp, int]] = [(inner, u_inner)]
    heights = tuple(u for u in reuse_upcasts if u * u_inner <= opts.max_upcast)
    fill_upcast = opts.fill_upcast or opts.max_upcast
    strided = any((st or 0) > 1 for st in row_strides)
    shared = [cand for cand in reversed(outs[:-1])  # innermost first: its loads are the nearest in memory
              if any(inner in deps[ld] and cand not in deps[ld] for ld in loads)]
    for cand in shared:
        u_reuse = _first_divisor(_size(cand), heights)
        if u_reuse is not None:
            while u_inner * u_reuse < opts.fill_tile and u_reuse < MAX_FILL_HEIGHT and \
                    u_inner * u_reuse * 2 <= fill_upcast and _size(cand) % (u_reuse * 2) == 0:
                u_reuse *= 2
            while opts.fill_upcast and u_inner * u_reuse < opts.fill_tile and not strided and \
                    u_inner * 2 * u_reuse <= opts.fill_upcast and _size(inner) % (u_inner * 2) == 0:
                # a height that cannot double (a transformer's 25 tokens, 5 high): the row doubles instead, so
                # the tile still holds enough accumulators (its 256 -> 2048 feed-forward: 2 vectors by 5 rows are
                # 10 accumulators, 4 by 5 are 20)
                u_inner *= 2
                upcasts[0] = (inner, u_inner)
            upcasts.append((cand, u_reuse))
            others = [o for o in outs[:-1] if o is not cand]
            window = sliding = _window_axis(others, loads, reduces, deps)
            if window is None and (trips >= BROADCAST_SHARING_MIN_TRIPS or strided):
                window = _broadcast_sharing_axis(others, loads, reduces, deps)
            if window is not None and sliding is None and not strided and \
                    _tap_rows_fit(opts, u_inner, u_reuse, reduces, registers) and not stores_read_back(nodes):
                upcasts[0] = (inner, opts.wide_channel_vector)
                upcasts.append((window, TAP_WINDOW_HEIGHT))
                return TilePlan(tuple(upcasts), window_first=True,
                                overlap_window=_size(window) % TAP_WINDOW_HEIGHT != 0)
            rows = _first_divisor(_size(window), STRIDED_WINDOW_HEIGHTS if strided else WINDOW_HEIGHTS[-1:]) \
                if window is not None else None
            if rows is not None and u_inner * u_reuse * rows <= opts.window_tile:
                upcasts.append((window, rows))  # opts.window_tile's two rows (three of a strided row's)
                return TilePlan(tuple(upcasts), window_first=strided)
            if row_contiguous and (wider := _wider_row_tile(_size(inner), u_inner, _size(cand), u_reuse, opts,
                                                              registers)) is not None:
                upcasts = [(inner, wider[0]), (cand, wider[1])]
            break
    if len(upcasts) == 1 and shared and opts.overlap_rows and not stores_read_back(nodes) and \
            (tile := _overlap_reuse_tile(_size(inner), u_inner, _size(shared[0]), heights, opts, registers)):
        return TilePlan(((inner, tile[0]), (shared[0], tile[1])), overlap_reuse=True)
    if len(upcasts) == 1:  # nothing to share across rows (a matrix-vector product): more independent accumulators
        wide = _first_divisor(_size(inner), tuple(u for u in opts.wide_upcasts if u_inner < u <= opts.max_upcast))
        if wide is None and opts.wide_upcasts and trips >= WIDE_MIN_TRIPS:
            # a row none of them divides (a depthwise conv's 56): its widest divisor that is still whole vectors,
            # so several accumulators share the taps instead of one waiting on the last FMA every tap
            wide = max((d for d in range(u_inner + 1, opts.max_upcast + 1)
                        if _size(inner) % d == 0 and d % WIDE_MIN_LANES == 0), default=None)
        if wide == outputs and outputs * trips >= SHARED_ROW_WORK:
            # the whole kernel one tile (squeeze-and-excitation's 576 -> 144 product, a global pool over 144
            # channels): no loop is left for threads to share, so the widest that leaves two tiles or more
            wide = max((d for d in range(u_inner, outputs // 2 + 1, u_inner) if outputs % d == 0), default=None)
        upcasts[0] = (inner, wide or u_inner)
        if not shared and (window := _window_axis(outs[:-1], loads, reduces, deps)) is not None and \
                (height := _first_divisor(_size(window), tuple(h for h in WINDOW_HEIGHTS
                                                              if h * upcasts[0][1] <= opts.max_upcast))) is not None:
            # a depthwise conv's rows: nothing is read by one row alone, but the window of row y at tap ky + 1 is
            # row y + 1's at tap ky (the same load, built once), so a tile of rows loads fewer rows than it computes
            upcasts.append((window, height))
    return TilePlan(tuple(upcasts))


def plan_chains(sink: UOp, plan: TilePlan, lanes: int, opts: OptOptions = DEFAULT_OPTS) -> TilePlan:
    """``plan`` with rows of another output axis added as independent chains of accumulators, where its tile is
    one row of at most two vectors of ``lanes`` and nothing else (no axis shares its loads) over a reduce shorter
    than ``WIDE_MIN_TRIPS`` that loads nothing the row does not move (a max pool's 9 taps): there each tap waits on
    the one before it. The axis: the innermost other output axis that one of ``CHAIN_HEIGHTS`` divides within
    ``opts.max_upcast``. ``plan`` itself otherwise: a row of scalars is as many chains already, and a stride-2
    depthwise conv (its weights do not move with the row) ran slower in chains."""
    (row, width), *others = plan.upcasts
    if others or lanes < WIDE_MIN_LANES or width > 2 * lanes:
        return plan
    nodes = toposort([sink])
    reduces = [u for u in nodes if u.op is Ops.REDUCE]
    if not reduces or min(math.prod(_size(r) for r in red.src[1:]) for red in reduces) >= WIDE_MIN_TRIPS:
        return plan
    deps = range_deps(sink)
    if any(row not in deps[u] for u in toposort([red.src[0] for red in reduces]) if u.op is Ops.LOAD):
        return plan
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global" and u is not row),
                  key=lambda u: u.arg[0])
    heights = tuple(h for h in CHAIN_HEIGHTS if h * width <= opts.max_upcast)
    for axis in reversed(outs):
        if (height := _first_divisor(_size(axis), heights)) is not None:
            return replace(plan, upcasts=(*plan.upcasts, (axis, height)))
    return plan


def plan_vector_row(sink: UOp, opts: OptOptions = DEFAULT_OPTS, width: int = 0) -> TilePlan | None:
    """An elementwise kernel's innermost output axis upcast by ``width`` (the language's vector lanes), so the
    renderer computes it as one vector per copy; None for reduce kernels (``plan_tiles``' business), small kernels
    (fewer than ``min_outputs``), rows ``width`` does not divide and rows no load or store walks contiguously."""
    nodes = toposort([sink])
    if width < 2 or not opts.vectorize or any(u.op is Ops.REDUCE for u in nodes):
        return None
    outs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if not outs or _size(outs[-1]) % width or math.prod(_size(r) for r in outs) < opts.min_outputs:
        return None
    # where every load and store is strided along the row (an NCHW pad whose small spatial axes were unrolled,
    # leaving the channels innermost), vectors gain nothing: each lane is moved on its own both ways
    deps = range_deps(sink)
    if all(row_stride(u.src[0].src[1], outs[-1], deps) != 1 for u in nodes if u.op in (Ops.LOAD, Ops.STORE)):
        return None
    return TilePlan(((outs[-1], width),))


def tile_sink(sink: UOp, keys: tuple[UOp, ...], mappings: list[dict[UOp, UOp]]) -> UOp:
    """``sink`` with each source ``s`` replaced by ``s.substitute(m)`` for every ``m`` in ``mappings`` (each maps
    exactly ``keys``), source by source, walking the graph once: only the nodes that depend on a key are rebuilt
    per copy (once for every source sharing them), the rest are shared by every copy as they are."""
    dependent: set[UOp] = set(keys)
    order: list[tuple[UOp, list[int]]] = []  # each rebuilt node with the positions of its sources that are rebuilt
    for node in toposort([sink]):
        if node is not sink and node not in dependent and \
                (rebuilt := [j for j, s in enumerate(node.src) if s in dependent]):
            dependent.add(node)
            order.append((node, rebuilt))
    copies = []
    for mapping in mappings:
        done = dict(mapping)
        for node, rebuilt in order:
            src = list(node.src)
            for j in rebuilt:
                src[j] = done[src[j]]
            done[node] = UOp(node.op, node.dtype, tuple(src), node.arg)
        copies.append(done)
    return sink.replace(src=tuple(done[s] if s in dependent else s for s in sink.src for done in copies))


def lane_range(sink: UOp, lanes: int) -> UOp:
    """A fresh RANGE of kind "vector" over ``lanes`` (an id no range of ``sink`` has): the renderer computes every
    value depending on it as one value of a vector type instead of running a loop."""
    ids = [u.arg[0] for u in toposort([sink]) if u.op is Ops.RANGE]
    size = next(u for u in toposort([sink]) if u.op is Ops.RANGE).src[0].const_like(lanes)
    return UOp(Ops.RANGE, size.dtype, (size,), (max(ids) + 1, "vector"))


def tile_kernel(sink: UOp, plan: TilePlan, lanes: int = 0) -> UOp:
    """``sink`` with every upcast of ``plan`` applied, in one substitution per tile element; the copies are ordered
    with the inner axis fastest (adjacent STOREs are adjacent in memory). The index arithmetic ``r' * u + c`` is
    left for the symbolic pass that the pipeline runs right after the optimizer (running it here too would walk
    the 16x-copied bodies twice).

    ``lanes`` > 1 (a divisor of the inner upcast): the inner axis becomes ``r' * u + c * lanes + v`` with ``v`` a
    vector range (``lane_range``) and ``u // lanes`` copies ``c``, so each copy is one vector of ``lanes`` outputs;
    the values of every output are the same expressions as with plain copies.

    ``plan.overlap``: the inner axis runs over ``ceil(n / u)`` tiles starting at ``min(t * u, n - u)`` (its last tile
    stores again some outputs of the one before, with the same values: jit/codegen/opt/overlap.py);
    ``plan.overlap_reuse``: the reuse axis alike (``overlap_height``), ``plan.overlap_window`` the window's rows."""
    keys = tuple(rng for rng, _ in plan.upcasts)
    flags = (plan.overlap, plan.overlap_reuse, plan.overlap_window)
    overlapped = [i < len(flags) and flags[i] for i in range(len(keys))]
    outers = [UOp(Ops.RANGE, rng.dtype, (rng.src[0].const_like(-(-_size(rng) // u) if overlapped[i]
                                                               else _size(rng) // u),), rng.arg)
              for i, (rng, u) in enumerate(plan.upcasts)]
    mappings: list[dict[UOp, UOp]] = [{}]
    for i in (0, 2, 1) if plan.window_first else range(len(keys)):
        rng, outer, (_, u) = keys[i], outers[i], plan.upcasts[i]
        start = (outer * u).minimum(_size(rng) - u) if overlapped[i] else outer * u
        if i == 0 and lanes > 1:
            lane = lane_range(sink, lanes)
            mappings = [{rng: start + lane + c * lanes if c else start + lane} for c in range(u // lanes)]
            continue
        mappings = [{**m, rng: start + c if c else start} for c in range(u) for m in mappings]
    return tile_sink(sink, keys, mappings)
