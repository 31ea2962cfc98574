"""What the scheduler needs to know about a device, handed to it by the caller: the scheduler never opens a device.

The engine builds these facts from the opened device (`tinycore.engine.memory.device_facts`); tests and tools that
schedule without devices pass none and get `DeviceFacts()` for every device (no buffer limit, no views).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceFacts:
    """The scheduling facts of one device."""

    max_buffers: int | None = None
    """The most buffers (outputs and inputs together) one kernel may take there; None is no limit."""
    supports_views: bool = False
    """True when its allocator can make a buffer that is a sub-range of another (copies of ranges need no kernel)."""
    renderer_name: str = "renderer"
    """The renderer's class name, for error messages that say where a limit comes from."""
    loops_over_rows: bool = False
    """True when its kernels run their output axes as loops on each worker (CPU renderers, `has_threads`): a reduce
    broadcast back over the axes it reduced can then be computed once per row inside its consumer's kernel."""
    workers: int = 1
    """How many workers a kernel's output axes are shared among (a CPU renderer's threads): a reduce into fewer
    outputs than that is split in two kernels (split_reduce.py)."""


DeviceFactsLookup = Callable[[object], DeviceFacts]
"""The facts of a device name (a tuple of names for a node on several devices)."""


def no_device_facts(device: object) -> DeviceFacts:
    """The facts assumed when the caller gives none: no buffer limit, no views."""
    return DeviceFacts()
