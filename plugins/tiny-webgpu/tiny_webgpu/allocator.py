"""The WEBGPU allocator: GPU storage buffers (STORAGE | COPY_SRC | COPY_DST) kept in an LRU cache.

Handles are `WebGPUHandle`s (buffer, byte offset, size), so views share their base's buffer. WebGPU copies move
whole 4-byte words at 4-byte aligned offsets; unaligned copies into a view read the words at its edges first.
"""
from __future__ import annotations

from typing import Any

from tiny_webgpu.runtime import WebGPUContext, WebGPUHandle
from tinycore.device.allocator import BufferSpec, LRUAllocator


class WebGPUAllocator(LRUAllocator):
    """Storage buffers on one adapter's GPU device."""

    def __init__(self, device: str, context: WebGPUContext):
        super().__init__(device)
        self.context = context
        # every live GPU buffer stays reachable from here: a Buffer freed inside a garbage cycle hands its handle back
        # to the LRU cache from its finalizer, and wgpu's buffer object, were it part of the same cycle, would have
        # been finalized (released) already
        self._live: dict[int, Any] = {}

    def _alloc(self, size: int, options: BufferSpec | None) -> WebGPUHandle:
        from tiny_webgpu.environment import prepare_driver_environment
        prepare_driver_environment()
        import wgpu
        if options is not None and options.external_ptr is not None:
            raise ValueError(f"{self.device}: WebGPU buffers cannot wrap external memory (external_ptr)")
        limit = self.context.limit("max-buffer-size")
        rounded = (size + 3) // 4 * 4
        if rounded > limit:
            raise MemoryError(f"{self.device}: a buffer of {size} bytes exceeds the adapter's maxBufferSize ({limit} "
                             f"bytes, {self.context.description}); use smaller tensors on WEBGPU")
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        buffer = self.context.device.create_buffer(size=rounded, usage=usage)
        self._live[id(buffer)] = buffer
        return WebGPUHandle(buffer, 0, size)

    def _free(self, opaque: WebGPUHandle, size: int, options: BufferSpec | None) -> None:
        self._live.pop(id(opaque.buffer), None)
        self.context.forget_buffer(opaque.buffer)
        opaque.buffer.destroy()

    def _copyin(self, dest: WebGPUHandle, src: memoryview) -> None:
        queue = self.context.device.queue
        start, end = dest.byte_offset, dest.byte_offset + src.nbytes
        aligned_start, aligned_end = start - start % 4, (end + 3) // 4 * 4
        if (aligned_start, aligned_end) == (start, end):
            queue.write_buffer(dest.buffer, start, src)
            return
        words = bytearray(queue.read_buffer(dest.buffer, aligned_start, aligned_end - aligned_start))
        words[start - aligned_start:end - aligned_start] = src
        queue.write_buffer(dest.buffer, aligned_start, words)

    def _copyout(self, dest: memoryview, src: WebGPUHandle) -> None:
        start, end = src.byte_offset, src.byte_offset + dest.nbytes
        aligned_start, aligned_end = start - start % 4, (end + 3) // 4 * 4
        words = self.context.device.queue.read_buffer(src.buffer, aligned_start, aligned_end - aligned_start)
        dest[:] = memoryview(words).cast("B")[start - aligned_start:end - aligned_start]

    def _offset(self, opaque: WebGPUHandle, size: int, offset: int) -> Any:
        return WebGPUHandle(opaque.buffer, opaque.byte_offset + offset, size)
