"""The optimizer's knobs, explicit and frozen: what ``optimize_kernel(sink, opts)`` may do to one kernel.

``OptOptions()`` (every field at its default) is the heuristic default the packager uses when nothing else is
asked for; a search (BEAM) or a tuning file builds other instances. The fields are stable: a tuning file stores
them by name (``to_dict`` / ``from_dict``), so renaming one breaks stored tunings.

What holds: every instance accepted by ``__post_init__`` yields a kernel with the same results as NOOPT (the
options change loop structure and code size, never arithmetic order within one output's reduction), except
``group_reduce`` and ``reduce_lanes``: a reduce shared by a work-group or by vector lanes adds in a different order,
so float sums agree within rounding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from jit.common.errors import DrivepackError


class OptOptionsError(DrivepackError, ValueError):
    """An ``OptOptions`` field with a value the optimizer cannot use."""


def _check_factors(name: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                               for v in value):
        raise OptOptionsError(f"OptOptions.{name}: expected a tuple of positive ints, got {value!r}")


def _check_positive(name: str, value: object, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise OptOptionsError(f"OptOptions.{name}: expected an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class OptOptions:
    """Per-kernel optimizer choices (all defaults = the built-in heuristic).

    * ``tile``: register-tile reduce kernels (matmul, conv) at all.
    * ``inner_upcasts``: widths tried, widest first, for the contiguous output axis (a tile row).
    * ``reuse_upcasts``: heights tried in order for the reuse axis (conv output channel, matmul row); 3 and 5
      serve row counts no power of two divides (the policy's 25).
    * ``strided_tile``: (row width, reuse height) tried first when the reduce reads the tile row at a stride > 1
      (a stride-2 conv: each row of inputs is two vector loads and a shuffle, so more output channels share it);
      ``()``: no special case.
    * ``channel_vector``: when the output row is too short for vectors (not a multiple of this), the tile row
      (and its vectors) runs across the innermost output axis that the reduce's loads read contiguously (conv
      output channels over channels-last weights), this many wide; 0: never.
    * ``wide_channel_vector``: lanes tried before ``channel_vector`` for such a tile, where the axis divides
      into them and the loads read that many contiguously (conv2d blocks its weights by 16 channels where they
      divide): a target whose widest vectors multiply-add as many per cycle as half-width ones sets it (the CPU
      target on a machine its probe finds so, targets/cpu_fma.py); 0: never.
    * ``wide_upcasts``: wider tile rows tried first when the kernel has no reuse axis (a matrix-vector product):
      more accumulators in flight hide the add latency that one short row cannot; where none divides the row (a
      depthwise conv's 56) and the reduce is long, the row's widest divisor of whole 4-lane vectors up to
      ``max_upcast`` instead; ``()``: neither.
    * ``max_upcast``: cap on the product of the upcasts (number of accumulators per tile).
    * ``fill_upcast``: the same cap where a tile's reuse height grows past its first choice (``fill_tile``'s
      doublings, an overlapped reuse axis's height): rows of whole vectors over a shared reduce, which hold more
      accumulators than a channel-vector tile or a wide row can without spilling; where the height cannot double
      (25 rows, 5 high), ``fill_tile`` doubles the row instead within this cap. 0: ``max_upcast``, rows never
      doubled.
    * ``fill_tile``: a tile of fewer elements than this doubles its reuse height (up to 8 rows) while the height
      divides the axis and the tile stays under ``max_upcast``: a one-vector row 4 high is 4 accumulators, too few
      to hide the FMA latency (resnet's 56-wide rows: 8 wide, now 8 high); 0: never.
    * ``window_tile``: cap on a conv tile's elements (row x reuse height x window rows) where the tile also takes
      two rows of a sliding window besides its reuse axis (``jit.codegen.opt.tiling.WINDOW_HEIGHTS``): two output
      rows load two input rows a tap but share the reuse axis's weights, so a tile of 16 accumulators loads 10
      values a step instead of 17 (the 3x3 convs over 16-wide rows of openpilot-shaped inputs); 0: never (a
      16-register target has no room for the second row).
    * ``strided_channel_trips``: a reduce at least this long that reads the tile row at a stride (a stride-2 3x3
      conv's Cin x 9 taps) tiles across output channels even where the row splits into vectors, over weights conv2d
      blocks by channel to match (jit/frontend/nn_ops.py): each reduce step loads one contiguous vector of weights
      per channel vector and broadcasts the strided inputs, where a row vector costs two unaligned loads and a
      shuffle and each channel a broadcast weight; 0: never.
    * ``min_reduce_trips``: below this many reduce iterations a tile costs more code than it saves.
    * ``min_outputs``: kernels with fewer output elements are not tiled (compile time is not worth it), unless
      their reduce is long (``jit.codegen.opt.tiling.LONG_REDUCE_TRIPS``: a global pool's one accumulator per output
      would wait on its last add every step) or their work is (``SMALL_KERNEL_WORK`` multiply-adds there).
    * ``unroll``: unroll small loops of kernels that are not tiled, and the small axes an elementwise kernel
      selects pieces by (jit/codegen/opt/select.py).
    * ``peel``: split the masked ends (padding) off the innermost loop of elementwise kernels that are not
      vectorized otherwise, leaving an unmasked interior loop (jit/codegen/opt/peel.py).
    * ``overlap_rows``: a reduce kernel's tile row that no multiple of 4 lanes divides (a pool's 55 outputs), or
      only narrower ones than ``wide_channel_vector``, runs as whole vectors, the last one shifted back to end at the
      row's end (jit/codegen/opt/overlap.py); a row of at least 64 does so before its channels take vectors narrower
      than ``wide_channel_vector``; a row whose loads cannot be vectors runs as 8 overlapped scalar outputs a tile;
      on loop targets an elementwise row computing exp or erf runs as overlapped vectors too.
    * ``line_reuse``: on loop targets, split an outer output axis read at ``c // d`` and contiguously at ``c % d``
      and open its ``c % d`` part innermost, where the loops inside it move that load by whole cache lines
      (Winograd's output transform; jit/codegen/opt/locality.py).
    * ``threads``: let the CPU renderer share the outermost output loops over threads (OpenMP).
    * ``vectorize``: render a tile row as explicit vector types where the language declares them.
    * ``group_reduce``: on targets with local memory (OpenCL), this many work-items share each output's reduce
      in kernels with few outputs and a long reduce (jit/codegen/opt/group.py), instead of register tiles; 0: never (the
      default: GPU targets turn it on in their ``default_opts``; on a CPU OpenCL device it only costs).
    * ``reduce_lanes``: a reduce that reads its input contiguously along its innermost range, and a plane apart along
      the contiguous output axis (a global pool over NCHW, a mean over a row), runs as vectors along the reduce with
      a lane combine at its end (jit/codegen/opt/reduce_lanes.py), instead of gathering each output lane on its own.
    * ``local_size``: work-group size on targets that launch work-groups (OpenCL), one entry per launch
      dimension; ``()`` lets the target choose. A size that does not divide the launch or exceeds the kernel's
      limits is replaced by the target's own choice (a tuning file never makes a launch invalid).
    * ``unroll_hints``: mark reduce loops of a few trips for the target's compiler to unroll
      (jit/codegen/opt/hints.py; OpenCL's defaults turn it on).
    * ``unroll_shared_loads``: mark only those whose trips share loads (a channel tile's broadcast inputs over a
      conv's taps), which the compiler then loads once (jit/codegen/opt/hints.py; the defaults of OpenCL on a CPU
      device turn it on).
    * ``hoist_base_pointers``: a reduce loop's scalar loads read through pointers set before the loop
      (jit/codegen/opt/hoist.py; OpenCL's defaults turn it on).
    * ``park_accumulators``: finished vector accumulators wait in a volatile array while a later reduce loop runs
      (jit/codegen/opt/park.py; the defaults of OpenCL on a CPU device turn it on).
    * ``prefetch_next_slices``: a slice of a buffer that one output iteration reads several times asks for the next
      iteration's slice meanwhile (jit/codegen/opt/prefetch.py; the C target's defaults turn it on).

    The last five shape how the renderer spells loops, addresses and accumulators, and apply under NOOPT too.
    """

    tile: bool = True
    inner_upcasts: tuple[int, ...] = (16, 8, 4)
    reuse_upcasts: tuple[int, ...] = (4, 3, 5, 2)
    wide_upcasts: tuple[int, ...] = (64, 32)
    strided_tile: tuple[int, ...] = (8, 8)
    channel_vector: int = 8
    wide_channel_vector: int = 0
    max_upcast: int = 80
    fill_upcast: int = 0
    fill_tile: int = 64
    window_tile: int = 0
    strided_channel_trips: int = 0
    min_reduce_trips: int = 2
    min_outputs: int = 256
    unroll: bool = True
    peel: bool = True
    overlap_rows: bool = True
    line_reuse: bool = True
    threads: bool = True
    vectorize: bool = True
    group_reduce: int = 0
    reduce_lanes: bool = True
    local_size: tuple[int, ...] = ()
    unroll_hints: bool = False
    unroll_shared_loads: bool = False
    hoist_base_pointers: bool = False
    park_accumulators: bool = False
    prefetch_next_slices: bool = False

    def __post_init__(self) -> None:
        for name in ("tile", "unroll", "peel", "overlap_rows", "line_reuse", "threads", "vectorize", "reduce_lanes",
                     "unroll_hints", "unroll_shared_loads", "hoist_base_pointers", "park_accumulators",
                     "prefetch_next_slices"):
            if not isinstance(getattr(self, name), bool):
                raise OptOptionsError(f"OptOptions.{name}: expected a bool, got {getattr(self, name)!r}")
        _check_factors("inner_upcasts", self.inner_upcasts)
        _check_factors("reuse_upcasts", self.reuse_upcasts)
        _check_factors("wide_upcasts", self.wide_upcasts)
        _check_factors("strided_tile", self.strided_tile)
        if len(self.strided_tile) not in (0, 2):
            raise OptOptionsError(f"OptOptions.strided_tile: expected () or (width, height), got {self.strided_tile!r}")
        _check_factors("local_size", self.local_size)
        _check_positive("max_upcast", self.max_upcast)
        _check_positive("fill_upcast", self.fill_upcast, minimum=0)
        _check_positive("fill_tile", self.fill_tile, minimum=0)
        _check_positive("window_tile", self.window_tile, minimum=0)
        _check_positive("strided_channel_trips", self.strided_channel_trips, minimum=0)
        _check_positive("group_reduce", self.group_reduce, minimum=0)
        _check_positive("channel_vector", self.channel_vector, minimum=0)
        _check_positive("wide_channel_vector", self.wide_channel_vector, minimum=0)
        if self.wide_channel_vector and (not self.channel_vector or self.wide_channel_vector % self.channel_vector):
            raise OptOptionsError(f"OptOptions.wide_channel_vector: expected 0 or a multiple of channel_vector "
                                  f"{self.channel_vector}, got {self.wide_channel_vector}")
        _check_positive("min_reduce_trips", self.min_reduce_trips)
        _check_positive("min_outputs", self.min_outputs)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able fields (tuples as lists), for a tuning file."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OptOptions:
        """The options stored by ``to_dict``; unknown names are refused (a typo must not silently mean default)."""
        if not isinstance(data, dict):
            raise OptOptionsError(f"OptOptions: expected a dict of fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise OptOptionsError(f"OptOptions: expected fields among {sorted(known)}, got unknown {unknown}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


DEFAULT_OPTS = OptOptions()
# a machine where 16-lane vectors pay (targets/cpu_fma.py probes its FMA throughput; the CPU target and
# OpenCL on a CPU device use these there): the same tiles in registers, each vector 16 wide (the default's caps
# count elements: a row of 2 vectors, 10 vectors of accumulators), short rows vectorized across 16 channels, and 32
# registers' room for a conv tile of two window rows (16 accumulators) and for rows of whole vectors over a shared
# reduce filled to 16-20 accumulators (``fill_upcast``: openpilot-shaped resnet18's stem, a transformer's
# feed-forward), and stride-2 convs over reduces of 128 steps or more tiled across 16 channels
# (``strided_channel_trips``: openpilot-shaped resnet18's and the vision sample's 16- and 64-wide rows)
WIDE_VECTOR_OPTS = replace(DEFAULT_OPTS, wide_channel_vector=16, inner_upcasts=(32, 16, 8, 4), max_upcast=160,
                           fill_upcast=320, fill_tile=256, window_tile=256, strided_channel_trips=128)
