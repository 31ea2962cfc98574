"""Process-wide counters of the work done by realize: kernels launched, operations, bytes moved, time."""
from __future__ import annotations

from collections import defaultdict
from typing import ClassVar


class GlobalCounters:
    """Running totals that the engine increments for every kernel it launches (reset with `reset()`).

    `global_ops` counts arithmetic operations, `global_mem` bytes read and written, `kernel_count` kernels
    launched, `time_sum_s` the measured kernel time in seconds (when timing is on), `mem_used` the bytes of
    device memory held by live buffers (DISK files and wrapped external memory not counted) and
    `mem_used_per_device` the same per device name. Buffers count from allocation to deallocation, so memory kept
    in an allocator's reuse cache is not counted.
    """

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    kernel_count: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    mem_used: ClassVar[int] = 0
    mem_used_per_device: ClassVar[defaultdict[str, int]] = defaultdict(int)

    @staticmethod
    def reset() -> None:
        """Zero every counter except `mem_used` and `mem_used_per_device`, which track live allocations."""
        GlobalCounters.global_ops = 0
        GlobalCounters.global_mem = 0
        GlobalCounters.kernel_count = 0
        GlobalCounters.time_sum_s = 0.0
