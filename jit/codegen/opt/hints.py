"""Unroll hints: short reduce loops marked for the target's compiler to unroll.

Before: a REDUCE over RANGEs of kind "reduce" with a constant trip count of at most ``UNROLL_HINT_TRIPS`` (a conv's
kernel rows, a stride-2 conv's phase taps), which the renderer opens as plain ``for`` loops.

After: each such RANGE whose reduces load at most ``UNROLL_HINT_MAX_LOADS`` times a trip (a tile's accumulators are
reduces of their own over the same loops: their loads together) carries ``"unroll"`` as the third element of its
arg (jit/ir/uop.py), and the renderer puts the language's unroll line (``CStyleLanguage.unroll_hint``: OpenCL's
``#pragma unroll``) before its loop. The graph computes the same values in the same order; only the loop's
spelling changes.

Why: a GPU compiler may leave a stride-2 conv's 2- and 3-trip loops rolled; the GPU targets' defaults turn this
on (targets/opencl.py ``GPU_OPTS``). GCC unrolls them itself, so the C target's defaults leave it off, and so do a
CPU OpenCL device's: PoCL's LLVM once left such loops rolled (conv2 of the vision model: 0.78 -> 0.66 ms with the
hint), but on buffers holding data (not untouched pages, which every load finds in the same cached zero page) the
hinted and rolled kernels of five models ran within noise of each other while PoCL compiled the hinted ones 2.5-3.5x
as long. A body of many loads (a 3x3 depthwise conv's tile of 16 channel vectors) stays rolled everywhere: PoCL took
about a second to compile each such kernel unrolled.

``shared_only`` (``OptOptions.unroll_shared_loads``, a CPU OpenCL device's defaults): only a short loop reduced
inside a longer one (a conv's column taps inside its input channels) whose trips share loads, at most
``UNROLL_SHARED_MAX_LOADS`` of them counted once each, is marked. A 3x3 conv tiled across output channels over a
row of 13 loads 13 broadcast inputs a tap; its three column taps read 15 distinct ones, which PoCL's LLVM loads
once each only from the unrolled loop (squeezenet's 13x13 expands, resnet18's 7x7 convs).
A depthwise conv's taps (no longer loop around them) stay rolled: unrolled they ran no faster.
"""

from __future__ import annotations

from jit.codegen.opt.tiling import row_stride
from jit.codegen.stats import range_deps
from jit.ir.uop import Ops, UOp, add_terms, toposort

UNROLL_HINT_TRIPS = 4
UNROLL_HINT_MAX_LOADS = 12  # loads in a reduce's body (vector loads count once) above which its loops stay rolled
# loads of a loop's trips together, once each, above which even a loop whose trips share loads stays rolled
UNROLL_SHARED_MAX_LOADS = 24
UNROLL = "unroll"  # the hint's element of a RANGE arg


def _short(rng: UOp) -> bool | None:
    """Whether ``rng`` runs at most ``UNROLL_HINT_TRIPS`` trips; None where its trip count is not a constant."""
    return int(rng.src[0].arg) <= UNROLL_HINT_TRIPS if rng.src[0].op is Ops.CONST else None


def _distinct_loads(rng: UOp, body: set[UOp], deps: dict[UOp, frozenset[UOp]]) -> tuple[int, int]:
    """Loads of ``body`` over every trip of the loop ``rng``: how many there are, and how many of distinct addresses
    (a load that does not depend on ``rng`` once). An address is its buffer, its terms that do not move with
    ``rng`` and its constant plus the trip times its stride along ``rng``; one that is not affine in ``rng`` counts
    as its own at every trip."""
    trips = int(rng.src[0].arg)
    moving = [ld.src[0] for ld in body if rng in deps[ld.src[0]]]
    addresses: set[object] = set()
    for index in moving:
        stride, terms = row_stride(index.src[1], rng, deps), add_terms(index.src[1])
        # every term that moves with ``rng`` must be ``rng`` times a constant: no constant hides inside one
        if stride is None or not all(t.op is Ops.CONST or rng not in deps[t] or t is rng or
                                     (t.op is Ops.MUL and {s.op for s in t.src} == {Ops.CONST, Ops.RANGE})
                                     for t in terms):
            addresses.update((id(index), i) for i in range(trips))
            continue
        fixed = tuple(sorted(id(t) for t in terms if t.op is not Ops.CONST and rng not in deps[t]))
        offset = sum(int(t.arg) for t in terms if t.op is Ops.CONST)
        addresses.update((id(index.src[0]), fixed, offset + i * stride) for i in range(trips))
    return len(body) + (trips - 1) * len(moving), len(body) - len(moving) + len(addresses)


def hint_unrolls(sink: UOp, shared_only: bool = False) -> UOp:
    """``sink`` with the short loops of its reduces marked (module docstring); the same node when none is.
    ``shared_only``: only a loop whose trips share loads, at most ``UNROLL_SHARED_MAX_LOADS`` of them once each
    (module docstring)."""
    loads: dict[UOp, set[UOp]] = {}
    nested: set[UOp] = set()  # ranges reduced together with a longer one
    deps = range_deps(sink) if shared_only else {}
    for u in toposort([sink]):
        if u.op is Ops.REDUCE:
            body = {x for x in toposort([u.src[0]]) if x.op is Ops.LOAD}
            for rng in u.src[1:]:
                loads.setdefault(rng, set()).update(body)
                if any(_short(other) is False for other in u.src[1:] if other is not rng):
                    nested.add(rng)

    def wanted(rng: UOp, body: set[UOp]) -> bool:
        if rng.arg[1] != "reduce" or not _short(rng):
            return False
        if not shared_only:
            return len(body) <= UNROLL_HINT_MAX_LOADS
        if rng not in nested:
            return False
        total, distinct = _distinct_loads(rng, body, deps)
        return distinct < total and distinct <= UNROLL_SHARED_MAX_LOADS

    marked = {rng: rng.replace(arg=(*rng.arg[:2], UNROLL)) for rng, body in loads.items() if wanted(rng, body)}
    return sink.substitute(marked) if marked else sink
