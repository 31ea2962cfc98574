"""Allocators: the device memory interface a Buffer uses, and an LRU cache of freed allocations."""
from __future__ import annotations

from collections import defaultdict

from tinycore.plugins.contract import AllocatorContract, BufferSpec, Handle

__all__ = ["Allocator", "LRUAllocator", "BufferSpec"]


class Allocator(AllocatorContract[Handle]):
    """The memory interface of one device.

    Subclasses implement `_alloc(size, options)` and `_free(opaque, size, options)` and the copies
    `_copyin(dest, src)` / `_copyout(dest, src)`; `_offset` (views), `_as_memoryview` (host-visible memory) and
    `copy_to_buffer` are optional (see `tinycore.plugins.contract.AllocatorContract`).
    """

    def __init__(self, device: str = "?"):
        self.device = device

    def _settle(self) -> None:
        if self.before_host_access is not None:
            self.before_host_access()

    def alloc(self, size: int, options: BufferSpec | None = None) -> Handle:
        """A new allocation of `size` bytes (size > 0), or a clear MemoryError."""
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"{self.device}: allocation size must be a positive int, got {size!r}")
        try:
            return self._alloc(size, options)
        except MemoryError as error:
            raise MemoryError(f"{self.device}: out of memory allocating {size} bytes ({error}); free tensors or "
                              f"use a smaller size") from error

    # the public methods below run `_settle` inline: a host copy is on every new tensor's path, and a Python call
    # is a tenth of a microsecond or more there

    def free(self, opaque: Handle, size: int, options: BufferSpec | None = None) -> None:
        """Release an allocation made by `alloc` with the same size and options."""
        if self.before_host_access is not None:
            self.before_host_access()
        self._free(opaque, size, options)

    def copyin(self, dest: Handle, src: memoryview) -> None:
        """Copy host bytes `src` into the device allocation `dest`."""
        if self.before_host_access is not None:
            self.before_host_access()
        self._copyin(dest, src)

    def copyout(self, dest: memoryview, src: Handle) -> None:
        """Copy the device allocation `src` into the writable host memoryview `dest`."""
        if self.before_host_access is not None:
            self.before_host_access()
        self._copyout(dest, src)

    def offset(self, opaque: Handle, size: int, offset: int) -> Handle:
        """A handle to `size` bytes starting `offset` bytes into the allocation `opaque` (a view, not a copy)."""
        return self._offset(opaque, size, offset)

    def as_memoryview(self, opaque: Handle, size: int) -> memoryview:
        """The host-visible bytes of `opaque` as a writable memoryview (only on devices with host memory)."""
        if self.before_host_access is not None:
            self.before_host_access()
        return self._as_memoryview(opaque, size)


class LRUAllocator(Allocator[Handle]):
    """An Allocator that keeps freed allocations and hands them out again for the same size and options.

    When the device runs out of memory, the cache is emptied and the allocation retried once before a
    MemoryError naming the device and the size is raised.
    """

    def __init__(self, device: str = "?"):
        super().__init__(device)
        self.cache: dict[tuple[int, BufferSpec | None], list[Handle]] = defaultdict(list)

    def alloc(self, size: int, options: BufferSpec | None = None) -> Handle:
        """A cached allocation of the same size and options if one is free, else a new one."""
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"{self.device}: allocation size must be a positive int, got {size!r}")
        cached = self.cache.get((size, options))
        if cached:
            return cached.pop()
        try:
            return self._alloc(size, options)
        except MemoryError:
            self.free_cache()
        try:
            return self._alloc(size, options)
        except MemoryError as error:
            raise MemoryError(f"{self.device}: out of memory allocating {size} bytes, even after releasing the "
                              f"allocation cache ({error}); free tensors or use a smaller size") from error

    def free(self, opaque: Handle, size: int, options: BufferSpec | None = None) -> None:
        """Keep the allocation for reuse (unless options forbid it)."""
        if options is not None and (options.nolru or options.external_ptr is not None):
            self._settle()
            self._free(opaque, size, options)
            return
        self.cache[(size, options)].append(opaque)

    def free_cache(self) -> None:
        """Release every cached allocation to the device."""
        self._settle()
        for (size, options), handles in self.cache.items():
            for opaque in handles:
                self._free(opaque, size, options)
        self.cache.clear()

    @property
    def cached_bytes(self) -> int:
        """Bytes currently held in the cache."""
        return sum(size * len(handles) for (size, _), handles in self.cache.items())
