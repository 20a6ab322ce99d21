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
"""

from __future__ import annotations

from jit.ir.uop import Ops, UOp, toposort

UNROLL_HINT_TRIPS = 4
UNROLL_HINT_MAX_LOADS = 12  # loads in a reduce's body (vector loads count once) above which its loops stay rolled
UNROLL = "unroll"  # the hint's element of a RANGE arg


def hint_unrolls(sink: UOp) -> UOp:
    """``sink`` with the short loops of its reduces marked (module docstring); the same node when none is."""
    loads: dict[UOp, set[UOp]] = {}
    for u in toposort([sink]):
        if u.op is Ops.REDUCE:
            body = {x for x in toposort([u.src[0]]) if x.op is Ops.LOAD}
            for rng in u.src[1:]:
                loads.setdefault(rng, set()).update(body)
    marked = {rng: rng.replace(arg=(*rng.arg[:2], UNROLL)) for rng, body in loads.items()
              if rng.arg[1] == "reduce" and rng.src[0].op is Ops.CONST and int(rng.src[0].arg) <= UNROLL_HINT_TRIPS
              and len(body) <= UNROLL_HINT_MAX_LOADS}
    return sink.substitute(marked) if marked else sink
