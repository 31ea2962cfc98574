"""The hooks of the DISK plugin: the DISK device (files as device memory, opened as `Device["DISK:/path"]`)."""
from __future__ import annotations

from tinycore.plugins import DeviceSpec, device_hooks

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "DISK"
PRIORITY = -1
"""Negative: DISK holds data but runs no kernels, so it is never chosen as the default device."""


def probe() -> tuple[bool, str, int]:
    """DISK needs nothing but a file system: always available."""
    return (True, "files are always available", 1)


tiny_devices, _, _ = device_hooks(DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_disk.device:DiskDevice",
                                              "files as device memory (mmap, pread), opened as DISK:/path/to/file",
                                              probe="tiny_disk.hooks:probe"))
