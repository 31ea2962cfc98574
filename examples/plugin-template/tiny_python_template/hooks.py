"""The hooks tinycore calls: which devices and renderers this plugin provides.

This module is imported whenever tinycore discovers plugins, so it imports nothing heavy and touches no hardware:
every class is named by an import path string and loaded only when the device is opened.
"""
from __future__ import annotations

from tinycore.plugins import DeviceSpec, RendererSpec, hookimpl

TINYCORE_PLUGIN_API = 1
"""The plugin API level this plugin was written for (tinycore refuses plugins from a future level)."""

DEVICE_NAME = "PYTHON"
PRIORITY = 1
"""Low: PYTHON is the default device only when no faster device is installed. Use it with DEV=PYTHON."""


def probe() -> tuple[bool, str, int]:
    """PYTHON needs nothing but the interpreter: always available, one device."""
    return (True, "runs in the Python interpreter", 1)


@hookimpl
def tiny_devices() -> list[DeviceSpec]:
    """The PYTHON device."""
    return [DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_python_template.device:PythonDevice",
                       "pure-Python device: linear UOps run in an interpreter (slow; a second opinion on codegen)",
                       probe="tiny_python_template.hooks:probe")]


@hookimpl
def tiny_renderers(device: str) -> list[RendererSpec]:
    """The UOPS renderer for PYTHON (its 'compiler' checks the program and packs it; nothing is compiled)."""
    if device != DEVICE_NAME:
        return []
    return [RendererSpec("UOPS", "tiny_python_template.renderer:make_renderer",
                         "the linear UOps as a listing plus a packed copy the interpreter runs")]
