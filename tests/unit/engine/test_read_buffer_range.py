"""Reading a realized tensor's contiguous range (t[10:20].numpy()) copies the range out of its buffer, with no kernel:
so it works on a device that runs none (DISK). Values checked against numpy."""
from __future__ import annotations

import numpy as np

from tinycore import GlobalCounters, Tensor


def test_range_of_a_realized_disk_tensor_reads_without_a_kernel(tmp_path):
    values = np.arange(30, dtype=np.float32) * 0.5
    on_disk = Tensor(values).to(f"disk:{tmp_path / 'range.bin'}").realize()
    np.testing.assert_equal(on_disk[10:20].numpy(), values[10:20])
    np.testing.assert_equal(on_disk[10:20].to("CPU").numpy(), values[10:20])


def test_range_of_a_realized_tensor_reads_without_a_kernel():
    grid = Tensor(np.arange(32, dtype=np.int32).reshape(4, 8)).realize()
    GlobalCounters.reset()
    np.testing.assert_equal(grid[1:3].numpy(), np.arange(32, dtype=np.int32).reshape(4, 8)[1:3])
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_equal(grid[:, 2:4].numpy(), np.arange(32, dtype=np.int32).reshape(4, 8)[:, 2:4])  # strided
    assert grid[3:3].numpy().shape == (0, 8)
