"""GlobalCounters: a class whose counters are read and set as class attributes (tinygrad's interface) while the
engine adds to their values in `tinycore.counters.totals`. Each count is compared with a hand-computed value."""
from __future__ import annotations

import gc

import pytest

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")
from tinycore import Tensor, TinyJit  # noqa: E402
from tinycore.counters import GlobalCounters, totals  # noqa: E402
from tinycore.helpers import GlobalCounters as ReExported  # noqa: E402


def test_the_counters_are_class_attributes_over_totals() -> None:
    assert isinstance(GlobalCounters, type) and ReExported is GlobalCounters
    GlobalCounters.global_ops = 7
    assert totals.global_ops == 7 and GlobalCounters.global_ops == 7
    GlobalCounters.kernel_count += 2
    totals.kernel_count += 3
    assert GlobalCounters.kernel_count == totals.kernel_count
    GlobalCounters.reset()
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.kernel_count,
            GlobalCounters.time_sum_s) == (0, 0, 0, 0.0)


def test_eager_ops_and_replays_count_kernels_and_memory() -> None:
    data = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    for _ in range(3):  # the general path, then the launch plan, then the eager shortcut
        GlobalCounters.reset()
        (data + 1).realize()
        assert GlobalCounters.kernel_count == 1
        assert GlobalCounters.global_mem == 2 * 4 * 4  # four float32 read, four written

    def step(value: Tensor) -> Tensor:
        return ((value + 1).contiguous() * 2).contiguous().realize()

    jitted = TinyJit(step)
    for _ in range(4):
        GlobalCounters.reset()
        jitted(data)
        assert GlobalCounters.kernel_count == 2
    gc.collect()
    before = (GlobalCounters.mem_used, GlobalCounters.mem_used_per_device[data.device])
    extra = Tensor([0.0] * 10).realize()  # ten float32: 40 bytes held while it lives
    assert GlobalCounters.mem_used == before[0] + 40
    assert GlobalCounters.mem_used_per_device[data.device] == before[1] + 40
    del extra
    gc.collect()
    assert (GlobalCounters.mem_used, GlobalCounters.mem_used_per_device[data.device]) == before
