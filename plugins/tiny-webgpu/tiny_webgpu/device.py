"""The WEBGPU device. Not built yet: opening it raises an error saying so."""
from __future__ import annotations


class WebGPUDevice:
    """Placeholder for the WebGPU device until its backend is written; constructing it raises RuntimeError."""

    def __init__(self, device: str) -> None:
        raise RuntimeError(f"tiny-webgpu is installed but its WEBGPU device is not built yet (asked to open "
                           f"{device!r}); use another device for now, e.g. DEV=CPU")
