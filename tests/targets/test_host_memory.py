"""Host memory on transparent huge pages (targets/host_memory.py): aligned, zero-filled, advised, packed in order."""

from __future__ import annotations

import numpy as np
import pytest

from targets.host_memory import HUGE_PAGE_BYTES, aligned_in_place, huge_page_array, huge_page_slices, pack
from tests.helpers import mapping_flags


@pytest.mark.parametrize("nbytes", [1, 4096, HUGE_PAGE_BYTES - 1, HUGE_PAGE_BYTES, 2 * HUGE_PAGE_BYTES + 3])
def test_huge_page_array_starts_a_huge_page_zero_filled_and_advised_from_one_huge_page_on(nbytes: int) -> None:
    a = huge_page_array(nbytes)
    assert a.dtype == np.uint8 and a.shape == (nbytes,) and a.flags.writeable
    assert a.ctypes.data % HUGE_PAGE_BYTES == 0
    assert not a.any()
    a[:] = 7  # writable to its last byte
    # MADV_HUGEPAGE (the kernel then backs it with the huge pages it has), not where it would waste most of one
    assert ("hg" in mapping_flags(a.ctypes.data)) == (nbytes >= HUGE_PAGE_BYTES)


def test_an_empty_huge_page_array() -> None:
    assert huge_page_array(0).shape == (0,)


def test_slices_are_aligned_in_order_in_one_block() -> None:
    sizes = [10, 0, 300, 64, 1]
    got = huge_page_slices(sizes, 128)
    assert [s.nbytes for s in got] == sizes
    starts = [s.ctypes.data for s in got]
    assert all(a % 128 == 0 for a in starts)
    assert starts[0] % HUGE_PAGE_BYTES == 0
    assert starts == sorted(starts) and starts[-1] - starts[0] == 128 + 0 + 384 + 128  # each rounded up, no gap
    assert mapping_flags(starts[0]) == mapping_flags(starts[-1])
    big = huge_page_slices([HUGE_PAGE_BYTES // 2, HUGE_PAGE_BYTES // 2], 64)  # together a huge page
    assert "hg" in mapping_flags(big[0].ctypes.data)


def test_pack_copies_each_array_bytes() -> None:
    arrays = [np.arange(5, dtype=np.float32), np.array([[1, 2], [3, 4]], np.int64).T, np.zeros(0, np.uint8)]
    copies = pack(arrays, 64)
    for a, c in zip(arrays, copies, strict=True):
        assert c.dtype == np.uint8 and c.ctypes.data % 64 == 0
        np.testing.assert_array_equal(c, np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        assert not np.shares_memory(a, c)


@pytest.mark.parametrize("alignment", [0, 3, 96])
def test_alignment_must_be_a_power_of_two(alignment: int) -> None:
    with pytest.raises(ValueError, match=f"alignment: expected a power of two, got {alignment}"):
        huge_page_slices([4], alignment)


def test_aligned_arrays_stay_in_place_and_the_others_are_packed_together() -> None:
    block = huge_page_array(4096)
    block[:] = np.arange(4096) % 251
    arrays = {0: block[:64], 1: block[65:100], 2: block[128:200], 3: block[201:300]}
    got = aligned_in_place(arrays, 64)
    assert got[0] is arrays[0] and got[2] is arrays[2]
    for k in (1, 3):
        assert got[k].ctypes.data % 64 == 0 and not np.shares_memory(got[k], block)
        np.testing.assert_array_equal(got[k], arrays[k])
    assert got[3].ctypes.data - got[1].ctypes.data == 64  # one block, in order
