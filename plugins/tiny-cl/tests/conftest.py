"""The CL tests' shared fixture: the opened CL device."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def cl_device() -> Any:
    """The opened CL device (CL:0); the tests need an OpenCL driver such as PoCL (pocl-binary-distribution)."""
    from tinycore.device.registry import Device
    return Device["CL"]
