"""The CL allocator: cl.Buffer objects kept in the core's LRU cache; views are sub-buffers where alignment allows.

OpenCL places a sub-buffer only at an origin that is a multiple of the device's base address alignment
(CL_DEVICE_MEM_BASE_ADDR_ALIGN). A view at another offset is an `UnalignedView`: copies in and out of it address the
parent at the offset, and the runtime stages it through a temporary buffer when a kernel takes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiny_cl.driver import OpenedDevice, import_pyopencl
from tinycore.device.allocator import BufferSpec, LRUAllocator


@dataclass(frozen=True)
class UnalignedView:
    """`size` bytes at byte `offset` of the cl.Buffer `parent`, where OpenCL cannot make a sub-buffer."""

    parent: Any
    offset: int
    size: int
    alignment: int


def _parent_and_offset(handle: Any) -> tuple[Any, int]:
    """The cl.Buffer to address and the byte offset into it for a buffer handle or an UnalignedView."""
    if isinstance(handle, UnalignedView):
        return handle.parent, handle.offset
    return handle, 0


class CLAllocator(LRUAllocator):
    """Device memory of one OpenCL device. The opaque handle of a buffer is a pyopencl Buffer (or sub-buffer)."""

    def __init__(self, device: str, opened: OpenedDevice):
        super().__init__(device)
        self.opened = opened

    def _alloc(self, size: int, options: BufferSpec | None) -> Any:
        pyopencl = import_pyopencl()
        if options is not None and options.external_ptr is not None:
            raise ValueError(f"{self.device} cannot wrap external memory (external_ptr): OpenCL buffers are made by "
                             "the driver; copy the data in instead")
        if size > int(self.opened.device.max_mem_alloc_size):
            raise MemoryError(f"{size} bytes is more than the largest single allocation of "
                              f"{self.opened.describe()} ({int(self.opened.device.max_mem_alloc_size)} bytes)")
        try:
            return pyopencl.Buffer(self.opened.context, pyopencl.mem_flags.READ_WRITE, size)
        except pyopencl.MemoryError as error:
            raise MemoryError(str(error)) from error

    def _free(self, opaque: Any, size: int, options: BufferSpec | None) -> None:
        opaque.release()

    def _copyin(self, dest: Any, src: memoryview) -> None:
        pyopencl = import_pyopencl()
        parent, offset = _parent_and_offset(dest)
        pyopencl.enqueue_copy(self.opened.queue, parent, src, dst_offset=offset, is_blocking=True)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        pyopencl = import_pyopencl()
        parent, offset = _parent_and_offset(src)
        pyopencl.enqueue_copy(self.opened.queue, dest, parent, src_offset=offset, is_blocking=True)

    def _offset(self, opaque: Any, size: int, offset: int) -> Any:
        parent, parent_offset = _parent_and_offset(opaque)
        offset += parent_offset
        alignment = self.opened.base_address_alignment
        if offset % alignment:
            return UnalignedView(parent, offset, size, alignment)
        if offset == 0 and size == int(parent.size):
            return parent
        return parent.get_sub_region(offset, size)
