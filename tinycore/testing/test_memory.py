"""Conformance, memory: the device allocator (alloc, free, reuse, out of memory), Buffers, views and offsets."""
from __future__ import annotations

import numpy
import pytest

from tinycore.device.allocator import Allocator, LRUAllocator
from tinycore.device.buffer import Buffer
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.testing.support import assert_matches, not_applicable, sample
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

pytestmark = pytest.mark.conformance_category("memory")


def _allocator(device: str) -> Allocator:
    from tinycore.device.registry import Device
    return Device[device].allocator


def test_alloc_copy_free(device: str) -> None:
    """alloc gives memory that holds what copyin wrote; free takes it back."""
    allocator = _allocator(device)
    payload = bytes(range(256)) * 3
    handle = allocator.alloc(len(payload))
    allocator.copyin(handle, memoryview(payload))
    back = memoryview(bytearray(len(payload)))
    allocator.copyout(back, handle)
    if bytes(back) != payload:
        first = next(index for index, (a, b) in enumerate(zip(bytes(back), payload, strict=True)) if a != b)
        raise AssertionError(f"{device} allocator: copyout after copyin differs first at byte {first}: "
                             f"got {back[first]}, expected {payload[first]}")
    allocator.free(handle, len(payload))


def test_freed_memory_is_reused(device: str) -> None:
    """An LRU allocator hands a freed allocation out again for the same size."""
    allocator = _allocator(device)
    if not isinstance(allocator, LRUAllocator):
        not_applicable(f"{type(allocator).__name__} keeps no cache of freed memory (not an LRUAllocator)")
    first = allocator.alloc(4096)
    allocator.free(first, 4096)
    second = allocator.alloc(4096)
    allocator.free(second, 4096)
    if second is not first and second != first:
        raise AssertionError(f"{device}: after freeing a 4096-byte allocation, the next one of that size was new "
                             "memory instead of the cached one")


def test_out_of_memory_raises_a_clear_error(device: str, capabilities: DeviceCapabilities) -> None:
    """Asking for more memory than the device has raises MemoryError naming the device and the size."""
    size = capabilities.out_of_memory_bytes
    if size is None:
        not_applicable("the device does not declare an allocation size it refuses (out_of_memory_bytes=None)")
        return
    allocator = _allocator(device)
    try:
        handle = allocator.alloc(size)
    except MemoryError as error:
        message = str(error)
        if str(size) not in message or device.split(":")[0] not in message:
            raise AssertionError(f"the MemoryError for {size} bytes on {device} does not name the device and the "
                                 f"size: {message!r}") from error
        return
    allocator.free(handle, size)
    raise AssertionError(f"allocating {size} bytes on {device} succeeded; it must raise MemoryError")


def test_bad_allocation_size_is_refused(device: str) -> None:
    """alloc(0) and negative sizes raise ValueError instead of returning unusable memory."""
    allocator = _allocator(device)
    for size in (0, -8):
        with pytest.raises(ValueError, match="size"):
            allocator.alloc(size)


@pytest.mark.parametrize("size", [0, 1, 17])
def test_buffer_sizes(device: str, size: int) -> None:
    """Buffers of 0, 1 and an odd number of elements allocate and round-trip."""
    data = sample((size,), seed=110)
    buffer = Buffer(device, size, dtypes.float32).allocate()
    buffer.copyin(memoryview(data.tobytes()))
    assert_matches(buffer.numpy(), data, f"Buffer of {size} float32 on {device}")


def test_views_and_offsets(device: str) -> None:
    """Views at element offsets read and write their own part of the base; a view of a view adds offsets."""
    data = numpy.arange(32, dtype=numpy.float32)
    base = Buffer(device, 32, dtypes.float32).allocate()
    base.copyin(memoryview(data.tobytes()))
    view = base.view(10, dtypes.float32, 7)
    assert_matches(view.numpy(), data[7:17], f"view of 10 elements at offset 7 on {device}")
    inner = view.view(4, dtypes.float32, 3)
    assert_matches(inner.numpy(), data[10:14], f"view at offset 3 of the view at offset 7 on {device}")
    retyped = base.view(3, dtypes.int32, 5)
    assert_matches(retyped.numpy(), data[5:8].view(numpy.int32), f"int32 view at offset 5 of float32 on {device}")
    replacement = numpy.full(10, -1.0, dtype=numpy.float32)
    view.copyin(memoryview(replacement.tobytes()))
    expected = data.copy()
    expected[7:17] = -1.0
    assert_matches(base.numpy(), expected, f"base after writing through the view at offset 7 on {device}")


@pytest.mark.runs_kernels
def test_kernels_read_buffer_views(device: str) -> None:
    """A kernel reading a view at an offset of a realized buffer sees the view's elements."""
    data = sample((24,), seed=111)
    tensor = Tensor(data, device=device).realize()
    buffer_node = tensor.uop
    while buffer_node.op is not Ops.BUFFER:
        buffer_node = buffer_node.src[0]
    view = Tensor(UOp(Ops.BUFFER_VIEW, dtypes.float32, (buffer_node,), (9, 11)))
    assert_matches(view * 3.0, data[11:20] * numpy.float32(3.0),
                   f"kernel reading a view of 9 elements at offset 11 on {device}")


@pytest.mark.runs_kernels
def test_assign_into_a_slice(device: str) -> None:
    """assign() into a slice of a realized tensor changes only that slice."""
    data = sample((4, 5), seed=112)
    target = Tensor(data, device=device).realize()
    target[1:3, 2:4].assign(Tensor(numpy.zeros((2, 2), numpy.float32), device=device)).realize()
    expected = data.copy()
    expected[1:3, 2:4] = 0
    assert_matches(target, expected, f"assign into [1:3, 2:4] on {device}")
