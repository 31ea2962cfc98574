"""Devices: the registry (`Device`), DEV targets, and the selection of a device's renderer, interface and allocator.

Importing this package is cheap: plugins are discovered, and device code imported, only when a device is asked for.
"""
from __future__ import annotations

from tinycore.device.allocator import Allocator, BufferSpec, LRUAllocator
from tinycore.device.buffer import Buffer
from tinycore.device.compiled import Compiled
from tinycore.device.compiler import CompileError, Compiler
from tinycore.device.registry import (
    KNOWN_DISTRIBUTIONS,
    Device,
    DeviceNotInstalledError,
    DeviceOpenError,
    SelectionError,
    hcq_queues,
    interface_specs,
    renderer_specs,
    select_allocator,
    select_interface,
    select_renderer,
    target_for,
)
from tinycore.device.target import DevError, Target, canonicalize, format_dev, parse_dev


def canonicalize_device(device: str | tuple[str, ...] | list[str] | None) -> str | tuple[str, ...]:
    """The canonical name of `device` ("cpu:0" -> "CPU"; None -> the default device), as tinygrad's
    `canonicalize_device`; a tuple or list of names gives a tuple, or the one name when it has a single entry."""
    if not isinstance(device, (tuple, list)):
        return Device.DEFAULT if device is None else Device.canonicalize(device)
    names = tuple(Device.canonicalize(name) for name in device)
    return names[0] if len(names) == 1 else names

__all__ = ["Device", "canonicalize_device",
           "Buffer", "BufferSpec", "Allocator", "LRUAllocator", "Compiled", "Compiler", "CompileError",
           "Target", "DevError", "DeviceNotInstalledError", "DeviceOpenError", "SelectionError",
           "KNOWN_DISTRIBUTIONS", "canonicalize", "parse_dev", "format_dev", "target_for", "select_renderer",
           "select_interface", "select_allocator", "hcq_queues", "renderer_specs", "interface_specs"]
