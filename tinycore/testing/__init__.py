"""The device conformance suite: what every tinycore device backend must get right, checked on one device.

Run it with `tiny conformance DEVICE` (a summary by category, `--json` for tools) or
`pytest --pyargs tinycore.testing --tiny-device=DEVICE`. Categories: ops, dtypes, autograd, jit, memory, copies,
renderers, queues (devices whose plugin answers tiny_hcq_queues). A device declares what it supports
(`tinycore.testing.capabilities.DeviceCapabilities`); checks that do not apply are reported as "not applicable
(declared)", separately from failures.

`tinycore.testing.registration` holds the checks a plugin's own tests make of its registration (API level,
pyproject entry point, installed distribution, device spec, probe, `tiny devices` row).

Importing this package is cheap and does not import pytest.
"""
from __future__ import annotations

CATEGORIES = ("ops", "dtypes", "autograd", "indexing", "jit", "memory", "copies", "renderers", "queues")
"""The summary categories, in the order they are printed."""

NOT_APPLICABLE = "not applicable (declared)"
"""The prefix of the reason of every check a device's declared capabilities rule out."""

NOT_BUILT = "not applicable (core)"
"""The prefix of the reason of every check whose core feature (e.g. TinyJit) is not in this tinycore."""

__all__ = ["CATEGORIES", "NOT_APPLICABLE", "NOT_BUILT"]
