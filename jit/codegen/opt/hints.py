"""Unroll hints: short reduce loops marked for the target's compiler to unroll.

Before: a REDUCE over RANGEs of kind "reduce" with a constant trip count of at most ``UNROLL_HINT_TRIPS`` (a conv's
kernel rows, a stride-2 conv's phase taps), which the renderer opens as plain ``for`` loops.

After: each such RANGE carries ``"unroll"`` as the third element of its arg (jit/ir/uop.py), and the renderer puts
the language's unroll line (``CStyleLanguage.unroll_hint``: OpenCL's ``#pragma unroll``) before its loop. The
graph computes the same values in the same order; only the loop's spelling changes.

Why: PoCL's LLVM left a stride-2 conv's 2- and 3-trip loops rolled (conv2 of the vision model: 0.78 -> 0.66 ms
with the hint); GCC unrolls them itself, so the C target's defaults leave this off.
"""

from __future__ import annotations

from jit.ir.uop import Ops, UOp, toposort

UNROLL_HINT_TRIPS = 4
UNROLL = "unroll"  # the hint's element of a RANGE arg


def hint_unrolls(sink: UOp) -> UOp:
    """``sink`` with the short loops of its reduces marked (module docstring); the same node when none is."""
    marked: dict[UOp, UOp] = {}
    for u in toposort([sink]):
        if u.op is not Ops.REDUCE:
            continue
        for rng in u.src[1:]:
            if rng.arg[1] == "reduce" and rng.src[0].op is Ops.CONST and int(rng.src[0].arg) <= UNROLL_HINT_TRIPS:
                marked[rng] = rng.replace(arg=(*rng.arg[:2], UNROLL))
    return sink.substitute(marked) if marked else sink
