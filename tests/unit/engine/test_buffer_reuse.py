"""Buffers freed into an LRU allocator's cache and taken again (tinycore/device/buffer.py does the cache's hit and
its free inline for LRUAllocator's own methods): the handle comes back for the same size, a reused buffer holds the
new values (checked against numpy), and an allocator whose class changes alloc or free is still called."""
import gc

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.device.allocator import LRUAllocator
from tinycore.device.buffer import Buffer
from tinycore.engine.memory import _allocator_of


class _HostAllocator(LRUAllocator[int]):
    """Host memory by address (bytearrays kept here), counting the calls of the public methods."""

    def __init__(self) -> None:
        super().__init__("CPU")
        self.memory: dict[int, bytearray] = {}
        self.calls: list[str] = []

    def _alloc(self, size: int, options: object) -> int:
        self.calls.append("_alloc")
        handle = len(self.memory) + 1
        self.memory[handle] = bytearray(size)
        return handle

    def _free(self, opaque: int, size: int, options: object) -> None:
        self.calls.append("_free")

    def _copyin(self, dest: int, src: memoryview) -> None:
        self.memory[dest][:] = src

    def _copyout(self, dest: memoryview, src: int) -> None:
        dest[:] = self.memory[src]


class _CountingFree(_HostAllocator):
    def free(self, opaque: int, size: int, options: object = None) -> None:
        self.calls.append("free")
        super().free(opaque, size, options)  # type: ignore[arg-type]


class _CountingAlloc(_HostAllocator):
    def alloc(self, size: int, options: object = None) -> int:
        self.calls.append("alloc")
        return super().alloc(size, options)  # type: ignore[arg-type]


def test_freed_handle_is_taken_again_with_new_values() -> None:
    allocator = _HostAllocator()
    first = Buffer.allocated("CPU", 4, dtypes.float32, allocator)
    handle = first._buf
    first.copyin(memoryview(np.arange(4, dtype=np.float32).tobytes()))
    del first
    gc.collect()
    assert allocator.cache[(16, None)] == [handle] and allocator.calls == ["_alloc"]
    second = Buffer.allocated("CPU", 4, dtypes.float32, allocator)
    assert second._buf == handle and allocator.cache[(16, None)] == [] and allocator.calls == ["_alloc"]
    values = np.array([9.5, -1.0, 2.25, 7.0], dtype=np.float32)
    second.copyin(memoryview(values.tobytes()))
    np.testing.assert_array_equal(second.numpy(), values)
    other = Buffer.allocated("CPU", 2, dtypes.float32, allocator)  # another size: a new allocation
    assert other._buf != handle and allocator.calls == ["_alloc", "_alloc"]
    zero = Buffer.allocated("CPU", 0, dtypes.float32, allocator)  # one byte, as allocate() gives
    assert len(allocator.memory[zero._buf]) == 1
    del zero
    gc.collect()
    assert len(allocator.cache[(1, None)]) == 1


def test_an_allocator_that_changes_free_or_alloc_is_called() -> None:
    freeing = _CountingFree()
    buffer = Buffer.allocated("CPU", 3, dtypes.int32, freeing)
    del buffer
    gc.collect()
    assert freeing.calls == ["_alloc", "free"] and len(freeing.cache[(12, None)]) == 1
    allocating = _CountingAlloc()
    first = Buffer.allocated("CPU", 3, dtypes.int32, allocating)
    del first
    gc.collect()
    Buffer.allocated("CPU", 3, dtypes.int32, allocating)
    assert allocating.calls == ["alloc", "_alloc", "alloc"]


def test_eager_results_in_reused_buffers_match_numpy() -> None:
    device = Tensor([0.0]).device
    allocator = _allocator_of(device)
    rng = np.random.default_rng(3)
    for size in (1, 5, 64):
        for _ in range(6):  # the general path, then the eager shortcut, each result into a freed buffer
            values = rng.standard_normal(size).astype(np.float32)
            scale = float(rng.integers(1, 9))
            result = (Tensor(values) * scale).realize()
            np.testing.assert_allclose(result.numpy(), values * np.float32(scale), rtol=1e-6)
            del result
            gc.collect()
        assert allocator.cache.get((4 * size, None)), "the freed buffers went back to the cache"


class _CountingCopyin(_HostAllocator):
    def copyin(self, dest: int, src: memoryview) -> None:
        self.calls.append("copyin")
        super().copyin(dest, src)


def test_new_tensor_data_goes_through_an_allocator_that_changes_copyin(monkeypatch: object) -> None:
    from tinycore.engine import memory
    allocator = _CountingCopyin()
    monkeypatch.setitem(memory._allocators, "CPU:97", allocator)  # type: ignore[attr-defined]
    monkeypatch.setattr(memory, "_filling", {})  # type: ignore[attr-defined]
    for step in range(3):  # the first takes the general path, the later ones the kept allocator's
        values = np.arange(step, step + 4, dtype=np.float32)
        node = memory.uop_from_bytes(values.tobytes(), dtypes.float32, "CPU:97")
        assert allocator.calls.count("copyin") == step + 1
        stored = bytes(allocator.memory[memory.buffer_of(node)._buf])
        np.testing.assert_array_equal(np.frombuffer(stored, dtype=np.float32), values)
