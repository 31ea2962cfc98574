"""The NV device. Not built yet: opening it raises an error saying so."""
from __future__ import annotations


class NVDevice:
    """Placeholder for the NVIDIA device until its backend is written; constructing it raises RuntimeError."""

    def __init__(self, device: str) -> None:
        raise RuntimeError(f"tiny-nv is installed but its NV device is not built yet (asked to open {device!r}); "
                           "use another device for now, e.g. DEV=CPU")
