"""The bytes a kernel may touch through each buffer parameter, proven from its source for one launch.

A package's command buffer says which buffer each dispatch binds to each parameter; the kernel source says which
elements it reads and writes. ``access_extents`` evaluates the source (parsed by targets/index_parse.py) over intervals:
every integer is the range of values it may take given the launch (``get_global_id(d)`` lies in ``0 .. global_size[d] -
1``, ``get_local_id(d)`` below the work-group size, a loop variable between its start and its bound minus one, a scalar
argument is its recorded value, a parallel kernel's range parameters ``int dp_lo, int dp_hi`` lie in ``0 ..
global_size[0]``, the launch's n, which is all the launcher passes), through C's arithmetic (+ - * / % << >> & | ^,
casts and conversions with C's wrapping, min/max, ternaries, vector lanes), a branch of a ternary or an ``if`` evaluated
with its condition narrowing the variables it compares, a lane select (OpenCL's ``select``, the CPU renderer's
bit-select ``(a & -m) | (b & (m - 1))``: targets/index_select.py) one of its two values, narrowed the same way where it
picks the variable its mask compares; a variable assigned inside a loop may hold any value of its type there and after.
A float may hold any value, NaN included, except where targets/index_floats.py proves it NaN-free within a range (a
literal; a select or ternary that picks a variable only where a comparison held, which a NaN fails): converted to an
integer type, such a float gives its truncated range (the modeld warp's clamped coordinates, its frame index).
Each access through a pointer (``*(p)``, ``p[i]``, ``vloadN``/``vstoreN``, ``__builtin_memcpy`` of a vector) adds its
byte range, vector width included, to the parameter's extent; an image read (``dp_read_image``) adds its element range
and row width. ``check_extents`` then refuses a dispatch whose binding is smaller than that extent, or that reaches
before the buffer's start.

Never accept unknown: an access this evaluation cannot bound (a pointer stepped in a loop, an index loaded from
memory, a call outside the renderer's vocabulary, a form the grammar lacks) is an ``IndexRangeError`` too, as is
an access to a local or park array outside its declared length. tests/targets/test_index_ranges.py checks that
every kernel the renderers emit for the sample models, the supercombo sample, the modeld warp and ONNX node cases
is bounded by its own launch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from jit.common.errors import DrivepackError
from targets import extents_cache
from targets.index_parse import CType, IndexParseError, Kernel, parse_kernel, scalar_type
from targets.index_values import Img, Ints, Opaque, Ptr, Value
from targets.index_walk import Walker
from targets.kernel_params import KernelParamsError, range_kernel

RANGE_NAMES = ("dp_lo", "dp_hi")  # a parallel kernel's last two parameters, ``int dp_lo, int dp_hi``
MAX_CACHED = 256  # kernels (parsed) and launches (evaluated) kept between calls: one package's, several times over


class IndexRangeError(DrivepackError, ValueError):
    """A dispatch whose kernel may access bytes outside a buffer bound to it, or whose accesses cannot be bounded."""


@dataclass(frozen=True)
class Extents:
    """What one launch of a kernel touches: per buffer parameter the byte range ``[lo, hi)`` from its start, per
    image parameter the element range ``[lo, hi]`` and the row widths (texels) it reads with."""

    buffers: dict[int, tuple[int, int]]
    images: dict[int, tuple[int, int, frozenset[int]]]


@functools.lru_cache(maxsize=MAX_CACHED)
def _parsed(source: str, entry: str) -> Kernel | str:
    """The parsed kernel, or why it cannot be parsed (cached too: a package repeats its kernels)."""
    try:
        return parse_kernel(source, entry)
    except IndexParseError as e:
        return str(e)


@functools.lru_cache(maxsize=MAX_CACHED)
def access_extents(source: str, entry: str, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                   scalars: tuple[tuple[str, int], ...]) -> Extents | str:
    """The extents of ``entry`` launched over ``global_size`` / ``local_size`` with ``scalars`` (dtype, bits) as
    its value arguments, or why they cannot be bounded. Before: nothing of the source is trusted; after: every
    access the source can make in that launch lies within the returned ranges. A proof an earlier process made
    under the same checker code is read back (targets/extents_cache.py) instead of made again."""
    key = extents_cache.launch_key(source, entry, global_size, local_size, scalars) if extents_cache.enabled() \
        else None
    if key is not None and (stored := extents_cache.load(key)) is not None:
        return Extents(*stored)
    kernel = _parsed(source, entry)
    if isinstance(kernel, str):
        return kernel
    try:
        ranged = range_kernel(source, entry)  # what the launcher reads the parameters as, by the same test
    except KernelParamsError as e:
        return str(e)
    try:
        extents = _evaluate(kernel, global_size, local_size, scalars, ranged)
    except IndexParseError as e:
        return str(e)
    if key is not None:
        extents_cache.store(key, extents.buffers, extents.images)
    return extents


def _evaluate(kernel: Kernel, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
              scalars: tuple[tuple[str, int], ...], ranged: bool = False) -> Extents:
    walker = Walker(global_size, local_size)
    values = iter(scalars)
    if ranged and [(t.kind, t.size, t.lanes, name) for t, name in kernel.params[-2:]] != \
            [("int", 4, 1, n) for n in RANGE_NAMES]:
        raise IndexParseError(f"expected the range parameters int {RANGE_NAMES[0]}, int {RANGE_NAMES[1]} last")
    for k, (t, name) in enumerate(kernel.params):
        if ranged and k >= len(kernel.params) - 2:
            # a parallel kernel's range (targets/cstyle/walk.py): the launcher passes a subrange of
            # [0, global_size[0]] (targets/replay_cpu.py, targets/cpu_pool.py); only a 1-d launch has one
            n = global_size[0] if len(global_size) == 1 else None
            walker.declare(name, t, Ints(((0, n),), t) if n is not None and n < 1 << 31 else Ints.full(t))
        elif t.kind == "ptr":
            walker.declare(name, t, Ptr(k, 0, 0, t))
        elif t.kind == "image":
            walker.declare(name, t, Img(k))
        else:
            dtype, bits = next(values, ("", 0))
            walker.declare(name, t, _scalar_value(t, dtype, bits))
    walker.run(kernel.body)
    return Extents(dict(walker.extents), {k: (lo, hi, frozenset(w)) for k, (lo, hi, w) in walker.images.items()})


def _scalar_value(t: CType, dtype: str, bits: int) -> Value:
    """A scalar argument's value as the parameter's type reads the recorded bits (any value: when they disagree)."""
    if t.kind != "int" or t.lanes != 1:
        return Opaque(t)
    want = scalar_type({"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
                        "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
                        "bool": "_Bool"}.get(dtype, ""))
    if want is None or want.size != t.size or not 0 <= bits < 1 << (8 * t.size):
        return Ints.full(t)
    v = bits - (1 << (8 * t.size)) if t.signed and bits >> (8 * t.size - 1) else bits
    return Ints(((v, v),), t)


def check_kernel_text(source: str, entry: str, where: str) -> None:
    """IndexRangeError unless ``source`` is in the grammar this check evaluates: every kernel of a command buffer
    is, dispatched or not (kernels built as one file share their guarded helpers and typedefs)."""
    kernel = _parsed(source, entry)
    if isinstance(kernel, str):
        raise IndexRangeError(f"{where}: source expected in the grammar whose accesses can be bounded, got {kernel}")


def check_extents(source: str, entry: str, global_size: Sequence[int], local_size: Sequence[int] | None,
                  bindings: Sequence[tuple[str, int, tuple[int, int] | None]], scalars: Sequence[tuple[str, int]],
                  where: str) -> None:
    """IndexRangeError unless every access of ``entry`` launched so lies inside the buffer bound to its
    parameter: ``bindings`` are (binding, nbytes, image (height, width) or None) in parameter order."""
    got = access_extents(source, entry, tuple(global_size), None if local_size is None else tuple(local_size),
                         tuple((d, b) for d, b in scalars))
    if isinstance(got, str):
        raise IndexRangeError(f"{where}: accesses expected bounded by the launch, got {got}")
    for k, (lo, hi) in sorted(got.buffers.items()):
        binding, nbytes, _ = bindings[k] if k < len(bindings) else ("?", 0, None)
        if lo < 0:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected accesses from byte 0 on, got byte {lo}")
        if hi > nbytes:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected the {hi} bytes the kernel accesses, got "
                                  f"a binding of {nbytes} bytes")
    for k, (lo, hi, widths) in sorted(got.images.items()):
        binding, nbytes, image = bindings[k] if k < len(bindings) else ("?", 0, None)
        if image is None:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected an image binding, got a buffer")
        height, width = image
        if widths != {width}:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected reads with the image's row width {width}, "
                                  f"got {sorted(widths)}")
        if lo < 0:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected reads from element 0 on, got {lo}")
        if (hi >> 2) >= height * width:
            raise IndexRangeError(f"{where}: data{k} ({binding}) expected the {((hi >> 2) + 1) * 16} bytes the "
                                  f"kernel reads, got an image of {height * width * 16} bytes")
