"""The eager path's buffers: made with Buffer.allocated and freed by their last reference, the memory counters move
by exactly the buffer's bytes, and the values read back match numpy."""
import gc

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.counters import GlobalCounters
from tinycore.device.buffer import Buffer
from tinycore.engine.memory import _allocator_of


def test_allocated_counts_and_frees_its_bytes() -> None:
    device = Tensor([0.0]).device
    before, before_device = GlobalCounters.mem_used, GlobalCounters.mem_used_per_device[device]
    buffer = Buffer.allocated(device, 6, dtypes.float32, _allocator_of(device))
    assert buffer.is_allocated() and buffer.nbytes == 24 and buffer.base is buffer and buffer.offset == 0
    assert GlobalCounters.mem_used == before + 24
    assert GlobalCounters.mem_used_per_device[device] == before_device + 24
    values = np.arange(6, dtype=np.float32) * 1.5
    buffer.copyin(memoryview(values.tobytes()))
    np.testing.assert_array_equal(buffer.numpy(), values)
    del buffer
    gc.collect()
    assert GlobalCounters.mem_used == before
    assert GlobalCounters.mem_used_per_device[device] == before_device


def test_allocated_zero_size_gets_a_valid_allocation() -> None:
    device = Tensor([0.0]).device
    before = GlobalCounters.mem_used
    buffer = Buffer.allocated(device, 0, dtypes.int32, _allocator_of(device))
    assert buffer.is_allocated() and buffer.nbytes == 0 and GlobalCounters.mem_used == before
    del buffer
    gc.collect()
    assert GlobalCounters.mem_used == before


def test_eager_ops_leave_memory_as_they_found_it() -> None:
    Tensor([1.0, 2.0]).add(1).realize()  # the structure's first run takes the general path
    gc.collect()
    before = GlobalCounters.mem_used
    for step in range(5):
        result = (Tensor([1.0, 2.0]) + step).realize()
        np.testing.assert_array_equal(result.numpy(), np.array([1.0, 2.0], dtype=np.float32) + step)
        del result
    gc.collect()
    assert GlobalCounters.mem_used == before


def test_eager_result_node_knows_its_device_and_shape() -> None:
    values = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    (Tensor(values) * 2).realize()  # the general path first, then the shortcut
    for _ in range(2):
        tensor = Tensor(values)
        result = (tensor * 2).realize()
        base = result.uop.base
        assert base.device == tensor.device and base.shape == (6,) and result.shape == (2, 3)
        np.testing.assert_array_equal(result.numpy(), values * 2)
