"""Inputs of 1x1 convs laid out with planes of whole vectors, where no vector width divides the merged row.

A stride-1 unpadded 1x1 conv tiles its output plane as one merged row (jit/codegen/opt/merge.py); where its output
channels do not fill the target's wide vectors, that row runs as whole vectors with an overlapped last one
(jit/codegen/opt/overlap.py: squeezenet's 512 -> 1000 classifier over 13 x 13 = 169 outputs a channel). Each reduce
step loads the row's vectors from one input plane, and planes of 169 floats start at 16 different offsets within a
64-byte line: most of those loads split across two lines, and a split load costs two.

Before: the conv reads its input ``x`` (N, Cin, *spatial) as it is. After: it reads ``x`` through a view of a copy
whose planes are padded to a whole number of wide vectors ((N, Cin, plane) -> (N, Cin, padded plane), zeros after
each plane), so every plane starts on a vector boundary. The copy costs its producer nothing where the scheduler
lets that producer store into it (jit/schedule/padded_stores.py, including a concat's pieces: squeezenet's fire
modules): what remains is a border kernel zeroing the pads. The values the conv reads are exactly ``x``'s.

The conv itself then runs over the padded planes (``plane_aligned_rows``: a 1x1 conv over rows of whole vectors),
and its output is stored with planes padded alike and read back through a view of their first ``plane`` values.
Over the padded row the overlapped last tile (jit/codegen/opt/overlap.py) ends on the row's last vector, so it
starts on a vector boundary too: over 169 outputs a plane, three-vector tiles start at 0, 48, 96 and 128, where
the last started at 121 before and each of its loads split across two cache lines. The outputs past ``plane`` are
the conv of the zero pads (the bias alone, where there is one), which nothing reads.
"""

from __future__ import annotations

import math

from jit.codegen.opt import target_default_opts
from jit.codegen.opt.tiling import OVERLAP_ROW_MIN
from jit.frontend.tensor import Tensor
from targets.registry import Device

# a conv reads each input plane once per tile of output channels (8 of them): below this many output channels the
# copy's pass over memory, where its producer cannot store into it, weighs more than the split loads it saves
ALIGNED_ROWS_MIN_COUT = 256


def plane_aligned_rows(x: Tensor, cout: int) -> Tensor | None:
    """``x`` (N, Cin, *spatial) of a stride-1 unpadded 1x1 conv with ``cout`` output channels as a copy (N, Cin,
    padded plane) whose planes are whole wide vectors, zeros after each (module docstring), or None where that does
    not apply: the device has no wide vectors (``OptOptions.wide_channel_vector``), its channels fill them (the conv
    then tiles across channels), the plane is a whole number of them already or shorter than an overlapped row
    (``OVERLAP_ROW_MIN``), or the conv has fewer than ``ALIGNED_ROWS_MIN_COUT`` output channels."""
    assert x.shape is not None
    wide = target_default_opts(Device[x.device]).wide_channel_vector
    batch, cin, *spatial = x.shape
    plane = math.prod(spatial)
    if not wide or cout % wide == 0 or plane % wide == 0 or plane < OVERLAP_ROW_MIN or cout < ALIGNED_ROWS_MIN_COUT:
        return None
    padded = -(-plane // wide) * wide
    return x.reshape(batch, cin, plane).pad(((0, 0), (0, 0), (0, padded - plane))).contiguous()


def plane_of_padded_rows(out: Tensor, spatial: tuple[int, ...]) -> Tensor:
    """``out`` (N, Cout, padded plane), the conv over ``plane_aligned_rows``, stored as it is (its own kernel
    output, planes padded), read back as (N, Cout, *spatial): each plane's first values (module docstring)."""
    assert out.shape is not None
    batch, cout, _ = out.shape
    return out.contiguous().shrink(((0, batch), (0, cout), (0, math.prod(spatial)))).reshape(batch, cout, *spatial)
