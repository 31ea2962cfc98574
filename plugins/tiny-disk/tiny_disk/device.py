"""The DISK device. Not built yet: opening it raises an error saying so."""
from __future__ import annotations


class DiskDevice:
    """Placeholder for the DISK device until its backend is written; constructing it raises RuntimeError."""

    def __init__(self, device: str) -> None:
        raise RuntimeError(f"tiny-disk is installed but its DISK device is not built yet (asked to open {device!r}); "
                           "load data through another device for now, e.g. DEV=CPU")
