"""The CPU allocator: 64-byte aligned host memory from libc, kept in an LRU cache; handles are raw addresses.

Buffers of at least HUGE_PAGE_BYTES start on a 2 MiB boundary and are marked for transparent huge pages (Linux's
madvise(MADV_HUGEPAGE), as numpy does for its arrays of 4 MiB and more). A kernel that walks a big buffer along a
stride of a row (a matmul's second operand, a panel copy, a transpose) touches a new 4 KiB page per row; with 2 MiB
pages those are a few TLB entries instead of a miss per row. Measured on the development machine (2-vCPU AVX-512
Xeon, THP in madvise mode): a 1024^2 float32 matmul called in full went from 0.94-0.95x numpy to 0.97-0.98x.
Where the kernel has THP off ("never"), or the call fails, the memory is used as it is.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

from tinycore.device.allocator import BufferSpec, LRUAllocator

ALIGNMENT = 64
HUGE_PAGE_BYTES = 2 << 20
"""Buffers this large or larger are aligned to it and advised onto huge pages (one huge page: 2 MiB on x86-64)."""
MADV_HUGEPAGE = 14  # Linux's value on every architecture (asm-generic/mman-common.h)
_LINUX = sys.platform.startswith("linux")


def _load_libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
        libc.posix_memalign.restype = ctypes.c_int
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free.restype = None
        if _LINUX:
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.madvise.restype = ctypes.c_int
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
        # each allocation's bytes as a memoryview, made once when allocated: a host copy into or out of a whole
        # allocation is then one slice assignment, not a ctypes array type, an instance and two memoryviews per copy
        # (every new tensor copies its data in); handles inside an allocation (views) take the general path
        self._views: dict[int, memoryview] = {}

    def _alloc(self, size: int, options: BufferSpec | None) -> int:
        if options is not None and options.external_ptr is not None:
            return options.external_ptr
        if _LIBC is not None:
            huge = _LINUX and size >= HUGE_PAGE_BYTES
            pointer = ctypes.c_void_p()
            if _LIBC.posix_memalign(ctypes.byref(pointer), HUGE_PAGE_BYTES if huge else ALIGNMENT, size) != 0 \
                    or not pointer.value:
                raise MemoryError(f"posix_memalign of {size} bytes failed")
            if huge:
                # advice only: a kernel without THP refuses it and the buffer keeps its small pages
                _LIBC.madvise(pointer.value, size, MADV_HUGEPAGE)
            self._views[pointer.value] = memoryview((ctypes.c_uint8 * size).from_address(pointer.value)).cast("B")
            return pointer.value
        try:
            array = (ctypes.c_uint8 * (size + ALIGNMENT))()
        except (MemoryError, OverflowError) as error:
            raise MemoryError(f"cannot allocate {size} bytes of host memory") from error
        address = ctypes.addressof(array)
        aligned = (address + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        self._arrays[aligned] = array
        self._views[aligned] = memoryview((ctypes.c_uint8 * size).from_address(aligned)).cast("B")
        return aligned

    def _free(self, opaque: int, size: int, options: BufferSpec | None) -> None:
        if options is not None and options.external_ptr is not None:
            return
        self._views.pop(opaque, None)
        if _LIBC is not None:
            _LIBC.free(opaque)
        else:
            self._arrays.pop(opaque, None)

    def _as_memoryview(self, opaque: int, size: int) -> memoryview:
        return memoryview((ctypes.c_uint8 * size).from_address(opaque)).cast("B")

    def _copyin(self, dest: int, src: memoryview) -> None:
        view = self._views.get(dest)
        if view is not None and view.nbytes == src.nbytes:
            view[:] = src
            return
        # _as_memoryview's work inline: every new tensor copies its data in
        memoryview((ctypes.c_uint8 * src.nbytes).from_address(dest)).cast("B")[:] = src

    def _copyout(self, dest: memoryview, src: int) -> None:
        view = self._views.get(src)
        if view is not None and view.nbytes == dest.nbytes:
            dest[:] = view
            return
        dest[:] = memoryview((ctypes.c_uint8 * dest.nbytes).from_address(src)).cast("B")

    def _offset(self, opaque: int, size: int, offset: int) -> int:
        return opaque + offset
