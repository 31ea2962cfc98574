"""Process-wide counters of the work done by realize: kernels launched, operations, bytes moved, time."""
from __future__ import annotations

from collections import defaultdict
from typing import ClassVar


class Totals:
    """The values of GlobalCounters' counters (`totals`, the one instance). The engine adds to them here on every
    launch and allocation: a write to an instance's attribute, where a write to a class attribute also invalidates
    the class's attribute caches (several such writes per eager op, measured at 0.04-0.06 us each beyond the add)."""

    __slots__ = ("global_ops", "global_mem", "kernel_count", "time_sum_s", "mem_used")

    def __init__(self) -> None:
        self.global_ops, self.global_mem, self.kernel_count, self.mem_used = 0, 0, 0, 0
        self.time_sum_s = 0.0


totals = Totals()


class _CountersType(type):
    """GlobalCounters' metaclass: each counter is a class-level property over `totals`, so that
    `GlobalCounters.kernel_count` reads and `GlobalCounters.global_ops = 0` writes it as a class attribute."""

    @property
    def global_ops(cls) -> int:
        """Arithmetic operations of the kernels launched."""
        return totals.global_ops

    @global_ops.setter
    def global_ops(cls, value: int) -> None:
        totals.global_ops = value

    @property
    def global_mem(cls) -> int:
        """Bytes read and written by the kernels and copies launched."""
        return totals.global_mem

    @global_mem.setter
    def global_mem(cls, value: int) -> None:
        totals.global_mem = value

    @property
    def kernel_count(cls) -> int:
        """Kernels launched."""
        return totals.kernel_count

    @kernel_count.setter
    def kernel_count(cls, value: int) -> None:
        totals.kernel_count = value

    @property
    def time_sum_s(cls) -> float:
        """Measured kernel time in seconds (when timing is on)."""
        return totals.time_sum_s

    @time_sum_s.setter
    def time_sum_s(cls, value: float) -> None:
        totals.time_sum_s = value

    @property
    def mem_used(cls) -> int:
        """Bytes of device memory held by live buffers."""
        return totals.mem_used

    @mem_used.setter
    def mem_used(cls, value: int) -> None:
        totals.mem_used = value


class GlobalCounters(metaclass=_CountersType):
    """Running totals that the engine increments for every kernel it launches (reset with `reset()`).

    `global_ops` counts arithmetic operations, `global_mem` bytes read and written, `kernel_count` kernels
    launched, `time_sum_s` the measured kernel time in seconds (when timing is on), `mem_used` the bytes of
    device memory held by live buffers (DISK files and wrapped external memory not counted) and
    `mem_used_per_device` the same per device name. Buffers count from allocation to deallocation, so memory kept
    in an allocator's reuse cache is not counted. The counters are read and set as class attributes; their values
    live in `totals`, where the engine's hot paths add to them.
    """

    mem_used_per_device: ClassVar[defaultdict[str, int]] = defaultdict(int)

    @staticmethod
    def reset() -> None:
        """Zero every counter except `mem_used` and `mem_used_per_device`, which track live allocations."""
        totals.global_ops = 0
        totals.global_mem = 0
        totals.kernel_count = 0
        totals.time_sum_s = 0.0
