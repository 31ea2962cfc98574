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

__all__ = ["Device", "Buffer", "BufferSpec", "Allocator", "LRUAllocator", "Compiled", "Compiler", "CompileError",
           "Target", "DevError", "DeviceNotInstalledError", "DeviceOpenError", "SelectionError",
           "KNOWN_DISTRIBUTIONS", "canonicalize", "parse_dev", "format_dev", "target_for", "select_renderer",
           "select_interface", "select_allocator", "hcq_queues", "renderer_specs", "interface_specs"]
