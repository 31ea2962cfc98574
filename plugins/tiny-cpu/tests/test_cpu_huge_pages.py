"""Big CPU buffers start on a huge-page boundary and carry Linux's huge-page advice (VmFlags "hg" in smaps)."""
from __future__ import annotations

import numpy as np
from tiny_cpu.allocator import HUGE_PAGE_BYTES, CPUAllocator

from tinycore import Tensor


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds address {address:#x}")


def test_big_buffers_are_aligned_and_advised_onto_huge_pages():
    allocator = CPUAllocator()
    address = allocator._alloc(3 * HUGE_PAGE_BYTES + 4096, None)
    try:
        assert address % HUGE_PAGE_BYTES == 0
        assert "hg" in _vm_flags(address)
    finally:
        allocator._free(address, 3 * HUGE_PAGE_BYTES + 4096, None)


def test_small_buffers_keep_the_plain_alignment():
    allocator = CPUAllocator()
    address = allocator._alloc(1000, None)
    try:
        assert address % 64 == 0
    finally:
        allocator._free(address, 1000, None)


def test_a_matmul_on_huge_page_buffers_matches_numpy():
    rng = np.random.default_rng(3)
    left = rng.standard_normal((1024, 1024), dtype=np.float32)  # 4 MiB: on huge pages
    right = rng.standard_normal((1024, 600), dtype=np.float32)
    found = (Tensor(left, device="CPU") @ Tensor(right, device="CPU")).numpy()
    np.testing.assert_allclose(found, left.astype(np.float64) @ right, rtol=2e-4, atol=2e-3)
