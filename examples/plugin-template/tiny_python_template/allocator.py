"""Device memory of PYTHON: host bytearrays. A handle is a writable memoryview; a view is a slice of it."""
from __future__ import annotations

from tinycore.device.allocator import BufferSpec, LRUAllocator


class PythonAllocator(LRUAllocator):
    """Memory for PYTHON buffers, cached for reuse by LRUAllocator. Handles are memoryviews of bytearrays.

    Freeing needs no code (the default `_free` does nothing): Python reclaims a bytearray when its last view goes.
    """

    def _alloc(self, size: int, options: BufferSpec | None) -> memoryview:
        try:
            return memoryview(bytearray(size))
        except (MemoryError, OverflowError) as error:
            raise MemoryError(f"cannot allocate {size} bytes of host memory") from error

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:src.nbytes] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src[:dest.nbytes]

    def _offset(self, opaque: memoryview, size: int, offset: int) -> memoryview:
        return opaque[offset:offset + size]

    def _as_memoryview(self, opaque: memoryview, size: int) -> memoryview:
        return opaque[:size]
