"""Packed input buffers: where each input sits in its named shared buffer, and whether a layout is sound.

``pack_offsets`` lays inputs out the way a runtime's ``pack_inputs`` does: in the given order, each at the
next offset that is a multiple of its alignment. ``layout_issues`` reports misaligned offsets and overlaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from abi.errors import AbiError, AbiIssue, issue
from abi.records import Abi, TensorSpec


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``value``."""
    return (value + alignment - 1) // alignment * alignment


def pack_offsets(sizes: Sequence[tuple[str, int, int]]) -> dict[str, int]:
    """Offsets for (name, byte_size, alignment) entries packed in order into one buffer."""
    offsets, cursor = {}, 0
    for name, size, alignment in sizes:
        cursor = align_up(cursor, alignment)
        offsets[name] = cursor
        cursor += size
    return offsets


def layout_issues(abi: Abi) -> list[AbiIssue]:
    """Misaligned offsets and overlapping inputs of one ABI (empty when the layout is sound)."""
    errs = [issue(s.name, "offset", f"a multiple of alignment {s.alignment}", s.offset)
            for s in abi.inputs if s.offset % s.alignment]
    by_buffer: dict[str, list[TensorSpec]] = {}
    for s in abi.inputs:
        by_buffer.setdefault(s.buffer, []).append(s)
    for specs in by_buffer.values():
        ordered = sorted(specs, key=lambda s: (s.offset, s.name))
        for a, b in zip(ordered, ordered[1:], strict=False):
            if b.offset < a.end:
                errs.append(issue(b.name, "offset", f">= {a.end} (end of {a.name}; no overlap)", b.offset))
    return errs


def pack_inputs(arrays: Mapping[str, np.ndarray], abi: Abi) -> dict[str, bytearray]:
    """Copy each named array into its place in freshly allocated shared buffers (one per buffer name).

    Arrays are bound by name; their dtype and shape must already match the ABI (AbiError lists every
    mismatch). Bytes between inputs are zero.
    """
    errs = []
    for spec in abi.inputs:
        arr = arrays.get(spec.name)
        if arr is None:
            errs.append(issue(spec.name, "presence", "an array", "missing"))
        elif arr.dtype != np.dtype(spec.dtype) or arr.shape != spec.shape:
            errs.append(issue(spec.name, "dtype/shape", f"{spec.dtype}{spec.shape}", f"{arr.dtype}{arr.shape}"))
    if errs:
        raise AbiError(errs)
    out = {name: bytearray(size) for name, size in abi.buffer_sizes().items()}
    for spec in abi.inputs:
        raw = np.ascontiguousarray(arrays[spec.name]).tobytes()
        out[spec.buffer][spec.offset:spec.end] = raw
    return out
