"""Host copies into and out of CPU allocations: a whole allocation goes through the view the allocator keeps for it,
anything else (a handle inside an allocation, a part of one) through a view made for the copy; both must move the
same bytes, also after an address is freed and handed out again for another size."""
from __future__ import annotations

import numpy as np
from tiny_cpu.allocator import CPUAllocator


def _read(allocator: CPUAllocator, handle: int, nbytes: int) -> np.ndarray:
    out = bytearray(nbytes)
    allocator.copyout(memoryview(out), handle)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def test_whole_allocation_round_trip_matches_numpy() -> None:
    allocator = CPUAllocator()
    values = np.arange(24, dtype=np.float32) * 1.5
    handle = allocator.alloc(values.nbytes)
    allocator.copyin(handle, memoryview(values.tobytes()))
    np.testing.assert_array_equal(_read(allocator, handle, values.nbytes).view(np.float32), values)
    allocator.free_cache()


def test_copies_into_a_part_and_at_an_offset_touch_only_those_bytes() -> None:
    allocator = CPUAllocator()
    handle = allocator.alloc(16)
    allocator.copyin(handle, memoryview(bytes(range(16))))
    allocator.copyin(allocator.offset(handle, 4, 8), memoryview(b"\xff" * 4))  # a view 8 bytes in
    allocator.copyin(handle, memoryview(b"\xee\xee"))  # the first two bytes only
    expected = np.arange(16, dtype=np.uint8)
    expected[8:12], expected[:2] = 0xff, 0xee
    np.testing.assert_array_equal(_read(allocator, handle, 16), expected)
    np.testing.assert_array_equal(_read(allocator, allocator.offset(handle, 4, 8), 4), expected[8:12])
    allocator.free_cache()


def test_an_address_freed_and_allocated_again_with_another_size_copies_that_size() -> None:
    allocator = CPUAllocator()
    for size in (64, 8, 200, 8):
        handle = allocator.alloc(size)
        data = np.arange(size, dtype=np.uint8)[::-1].copy()
        allocator.copyin(handle, memoryview(data.tobytes()))
        np.testing.assert_array_equal(_read(allocator, handle, size), data)
        allocator._free(handle, size, None)  # back to libc: the next allocation may reuse the address
