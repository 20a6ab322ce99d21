"""Prefetch of the next slice: a slice that one output iteration reads several times asks for the next one meanwhile.

Before: a kernel graph after the optimizer, where a reduce loads a buffer at an index affine in its ranges (constant
strides, none negative) whose innermost output range is ``G`` and which does not move with the output ranges inside
``G`` (``M``: a matmul's row chunks inside its column block). Each iteration of ``G`` then reads one slice of that
buffer (its column block of weights) once per iteration of ``M``: the first pass fetches it from the caches below
or memory, the other passes find it in L1 or L2, and for them the memory system has nothing to do.

After: one of those loads (one per buffer and reduce) is ``PREFETCH(load, index, gate)``: at reduce step ``t`` of
pass ``m`` (``q = m * steps + t``) the renderer asks for line ``q`` of the slice of iteration ``G + 1`` (the last
iteration asks for its own) while ``q`` is below the slice's line count, so the next slice arrives during this
iteration's later passes instead of stalling the next iteration's first. Applied where the slice is at least a
quarter of L1 (shorter streams the hardware prefetchers follow in the first pass) and the passes but the last
have a step for each of its lines. The loaded values and every result are the same bit for bit; the prefetched
address is always one the next (or this) iteration reads itself.

Why: a transformer's feed-forward products over 25 tokens read 2 MiB of weights per call, a 64 KiB block per
column block five times over: without, the block's first pass ran at memory speed and the rest at L2 speed, one
after the other.
"""

from __future__ import annotations

from collections.abc import Iterable

from jit.codegen.stats import range_deps
from jit.common.dtype import PtrDType
from jit.ir.uop import Ops, UOp, toposort

MIN_PASSES = 2  # iterations of the ranges inside G that re-read the slice: one pass leaves memory no idle time
# uses of each slice element in one iteration of G (passes x accumulators it feeds x lanes a broadcast fills) below
# which its iteration waits on memory: 2 FLOPs per 4 bytes per use, under the 20-40 FLOP/byte a CPU core does
# to what memory delivers; more uses (a conv's 4x8 output planes, squeezenet's classifier) hide the fetch in work
MAX_USES = 32


def _affine(idx: UOp) -> tuple[int, dict[UOp, int]] | None:
    """``idx`` as a constant plus a constant stride per RANGE, or None where it is not such a sum."""
    if idx.op is Ops.CONST:
        return int(idx.arg), {}
    if idx.op is Ops.RANGE:
        return 0, {idx: 1}
    if idx.op is Ops.ADD:
        parts = [_affine(s) for s in idx.src]
        if any(p is None for p in parts):
            return None
        const, strides = 0, {}
        for c, st in parts:  # type: ignore[misc]
            const += c
            for r, s in st.items():
                strides[r] = strides.get(r, 0) + s
        return const, strides
    if idx.op is Ops.MUL and any(s.op is Ops.CONST for s in idx.src):
        k = next(s for s in idx.src if s.op is Ops.CONST)
        inner = _affine(idx.src[1] if idx.src[0] is k else idx.src[0])
        if inner is None:
            return None
        return inner[0] * int(k.arg), {r: s * int(k.arg) for r, s in inner[1].items()}
    return None


def _trips(rng: UOp) -> int | None:
    return int(rng.src[0].arg) if rng.src[0].op is Ops.CONST else None


def _linear(ranges: Iterable[UOp], like: UOp) -> tuple[UOp, int]:
    """The flat iteration number of ``ranges`` (constant trip counts, the first outermost) and their trip count
    together; ``like``'s constant 0 and 1 for none."""
    flat: UOp | None = None
    total = 1
    for rng in ranges:
        trips = int(rng.src[0].arg)
        flat = rng if flat is None else flat * trips + rng
        total *= trips
    return (like.const_like(0) if flat is None else flat), total


def _prefetch(loads: list[UOp], reduce_ranges: tuple[UOp, ...], outputs: list[UOp], uses: int, l1_bytes: int,
              line_bytes: int) -> tuple[UOp, UOp] | None:
    """One of ``loads`` (a reduce's loads of one buffer) and its PREFETCH (module docstring), or None where they do
    not qualify. The slice spans every load of the first one's strides."""
    index = loads[0].src[0]
    forms = [(ld, _affine(ld.src[0].src[1])) for ld in loads if len(ld.src[0].src) == 2]
    if not forms or forms[0][0] is not loads[0] or forms[0][1] is None or not isinstance(index.dtype, PtrDType):
        return None
    strides = forms[0][1][1]
    consts = {ld: form[0] for ld, form in forms if form is not None and form[1] == strides}
    itemsize = index.dtype.base.itemsize
    if line_bytes % itemsize or any(s < 0 or _trips(r) is None for r, s in strides.items()) or \
            not set(reduce_ranges) & set(strides):
        return None
    moving_outputs = [r for r in outputs if strides.get(r)]
    if not moving_outputs:
        return None
    g = moving_outputs[-1]
    inner = outputs[outputs.index(g) + 1:]
    in_slice = [r for r in strides if r not in outputs]  # the reduce's ranges and the vector lanes
    if any(_trips(r) is None for r in (g, *inner, *reduce_ranges)) or \
            any(r.arg[1] not in ("reduce", "vector") for r in in_slice):
        return None
    first = min(consts, key=consts.__getitem__)
    slice_elems = 1 + max(consts.values()) - consts[first] + sum((_trips(r) - 1) * strides[r]  # type: ignore[operator]
                                                                  for r in in_slice)
    line_elems = line_bytes // itemsize
    lines = -(-slice_elems // line_elems)
    passes, steps = _linear(inner, g)[1], _linear(reduce_ranges, g)[1]
    if passes < MIN_PASSES or passes * uses >= MAX_USES or 4 * slice_elems * itemsize < l1_bytes or \
            lines > (passes - 1) * steps:
        return None
    q = _linear((*inner, *reduce_ranges), g)[0]
    base = (g + 1).minimum(_trips(g) - 1) * strides[g]  # type: ignore[operator]
    for r in moving_outputs[:-1]:
        base = base + r * strides[r]
    if consts[first]:
        base = base + consts[first]
    address = UOp(Ops.INDEX, index.dtype, (index.src[0], base + q.minimum(lines - 1) * line_elems))
    return first, UOp(Ops.PREFETCH, first.dtype, (first, address, q < lines))


def prefetch_next_slices(sink: UOp, l1_bytes: int, line_bytes: int) -> UOp:
    """``sink`` with the prefetches of the module docstring; the same node when no load qualifies."""
    nodes = toposort([sink])
    outputs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "global"), key=lambda u: u.arg[0])
    if not outputs or any(u.op is Ops.PREFETCH for u in nodes):
        return sink
    lanes = next((int(u.src[0].arg) for u in nodes if u.op is Ops.RANGE and u.arg[1] == "vector"), 1)
    deps = range_deps(sink)
    by_buffer: dict[tuple[tuple[UOp, ...], UOp], list[UOp]] = {}  # loads by the reduce's ranges and their buffer
    uses: dict[UOp, int] = {}  # per load: the values of accumulators it feeds each step (a broadcast fills lanes)
    for red in (u for u in nodes if u.op is Ops.REDUCE):
        for load in toposort([red.src[0]]):
            if load.op is Ops.LOAD and load.src[0].op is Ops.INDEX:
                group = by_buffer.setdefault((red.src[1:], load.src[0].src[0]), [])
                if load not in group:
                    group.append(load)
                broadcast = lanes > 1 and any(r.arg[1] == "vector" for r in deps[red]) and \
                    not any(r.arg[1] == "vector" for r in deps[load])
                uses[load] = uses.get(load, 0) + (lanes if broadcast else 1)
    wrapped: dict[UOp, UOp] = {}
    for (ranges, _), loads in by_buffer.items():
        if not any(ld in wrapped for ld in loads) and \
                (found := _prefetch(loads, ranges, outputs, uses[loads[0]], l1_bytes, line_bytes)) is not None:
            wrapped[found[0]] = found[1]
    return sink.substitute(wrapped) if wrapped else sink
