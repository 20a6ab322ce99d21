"""Host memory on transparent huge pages, for what a replay streams through on every call: its weights and arena.

A model's weights are hundreds of separate allocations on 4 KiB pages: a call that reads them all misses the TLB on
nearly every page, and under a hypervisor each miss walks two page tables. Packed into one private anonymous
mapping that starts on a huge-page boundary and is advised ``MADV_HUGEPAGE``, the same bytes take one TLB entry
per 2 MiB. Where the kernel offers no transparent huge pages (``never``, another OS) the memory is ordinary
anonymous memory: only slower, never different.

Private, not shared: a shared anonymous mapping is shmem, whose huge pages follow another switch
(``shmem_enabled``, usually off)."""
from __future__ import annotations

import mmap
from collections.abc import Mapping, Sequence

import numpy as np

# the span one page-table entry above the last level maps with 4 KiB base pages (x86-64, arm64): a huge page
HUGE_PAGE_BYTES = 2 << 20


def huge_page_array(nbytes: int) -> np.ndarray:
    """A zero-filled, writable uint8 array of ``nbytes`` in private anonymous memory whose first byte starts a huge
    page, advised ``MADV_HUGEPAGE`` where the OS has it and ``nbytes`` fills a huge page at least (a smaller array
    would take a whole huge page of memory to save a few TLB entries). The array keeps its mapping alive."""
    mapping = mmap.mmap(-1, max(nbytes, 1) + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None and nbytes >= HUGE_PAGE_BYTES:
        try:
            mapping.madvise(advice)
        except OSError:  # a kernel built without transparent huge pages: EINVAL, and base pages it is
            pass
    whole = np.frombuffer(mapping, dtype=np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE_BYTES
    return whole[start:start + nbytes]


def huge_page_slices(sizes: Sequence[int], alignment: int) -> list[np.ndarray]:
    """Zero-filled uint8 arrays of ``sizes`` bytes, one after another in one ``huge_page_array``, each starting at
    a multiple of ``alignment`` bytes (a power of two)."""
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment: expected a power of two, got {alignment}")
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end = (end + size + alignment - 1) & -alignment
    block = huge_page_array(end)
    return [block[offset:offset + size] for offset, size in zip(offsets, sizes, strict=True)]


def pack(arrays: Sequence[np.ndarray], alignment: int) -> list[np.ndarray]:
    """Copies of ``arrays``' bytes in ``huge_page_slices``: the uint8 copies, in order."""
    copies = huge_page_slices([a.nbytes for a in arrays], alignment)
    for a, copy in zip(arrays, copies, strict=True):
        copy[:] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return copies


def aligned_in_place(arrays: Mapping[int, np.ndarray], alignment: int) -> dict[int, np.ndarray]:
    """``arrays`` (a replay's weights) each as given where it starts at a multiple of ``alignment``, the others
    ``pack``ed together: what a replay binds without a copy of its own."""
    moved = {k: a for k, a in arrays.items() if a.ctypes.data % alignment}
    return dict(arrays) | dict(zip(moved, pack(list(moved.values()), alignment), strict=True))
