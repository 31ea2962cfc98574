"""The CPU allocator: 64-byte aligned host memory from libc, kept in an LRU cache; handles are raw addresses."""
from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from tinycore.device.allocator import BufferSpec, LRUAllocator

ALIGNMENT = 64


def _load_libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
        libc.posix_memalign.restype = ctypes.c_int
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free.restype = None
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


class CPUAllocator(LRUAllocator):
    """Host memory for CPU buffers. The opaque handle of a buffer is its address (an int)."""

    def __init__(self, device: str = "CPU"):
        super().__init__(device)
        # where libc has no posix_memalign, memory comes from ctypes arrays kept alive here by address
        self._arrays: dict[int, Any] = {}

    def _alloc(self, size: int, options: BufferSpec | None) -> int:
        if options is not None and options.external_ptr is not None:
            return options.external_ptr
        if _LIBC is not None:
            pointer = ctypes.c_void_p()
            if _LIBC.posix_memalign(ctypes.byref(pointer), ALIGNMENT, size) != 0 or not pointer.value:
                raise MemoryError(f"posix_memalign of {size} bytes failed")
            return pointer.value
        try:
            array = (ctypes.c_uint8 * (size + ALIGNMENT))()
        except (MemoryError, OverflowError) as error:
            raise MemoryError(f"cannot allocate {size} bytes of host memory") from error
        address = ctypes.addressof(array)
        aligned = (address + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        self._arrays[aligned] = array
        return aligned

    def _free(self, opaque: int, size: int, options: BufferSpec | None) -> None:
        if options is not None and options.external_ptr is not None:
            return
        if _LIBC is not None:
            _LIBC.free(opaque)
        else:
            self._arrays.pop(opaque, None)

    def _as_memoryview(self, opaque: int, size: int) -> memoryview:
        return memoryview((ctypes.c_uint8 * size).from_address(opaque)).cast("B")

    def _copyin(self, dest: int, src: memoryview) -> None:
        self._as_memoryview(dest, src.nbytes)[:] = src

    def _copyout(self, dest: memoryview, src: int) -> None:
        dest[:] = self._as_memoryview(src, dest.nbytes)

    def _offset(self, opaque: int, size: int, offset: int) -> int:
        return opaque + offset
