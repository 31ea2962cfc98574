"""Shared fixtures of the WEBGPU tests: the opened device (a real adapter is required, e.g. Mesa's lavapipe)."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def webgpu() -> Any:
    """The opened WEBGPU device; fails with the setup instructions when no adapter is found."""
    import tiny_webgpu.hooks as hooks

    from tinycore.device.registry import Device
    ok, reason, _count = hooks.probe()
    if not ok:
        pytest.fail(f"the WEBGPU tests need a WebGPU adapter ({reason}): pip install wgpu and, without a GPU, "
                    f"apt-get install mesa-vulkan-drivers (lavapipe)")
    return Device["WEBGPU"]
