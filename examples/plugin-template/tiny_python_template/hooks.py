"""The hooks tinycore calls: which devices and renderers this plugin provides.

This module is imported whenever tinycore discovers plugins, so it imports nothing heavy and touches no hardware:
every class is named by an import path string and loaded only when the device is opened.
"""
from __future__ import annotations

from typing import Any

from tinycore.plugins import DeviceSpec, HCQQueues, RendererSpec, hookimpl

TINYCORE_PLUGIN_API = 1
"""The plugin API level this plugin was written for (tinycore refuses plugins from a future level)."""

DEVICE_NAME = "PYTHON"
"""The device's name, as DEV and Device[...] spell it."""

DESCRIPTION = "PYTHON: kernels interpreted as UOps, or compiled as C by the system compiler"
"""The one line `tiny devices` shows for the device."""

PRIORITY = 1
"""Low: PYTHON is the default device only when no faster device is installed. Use it with DEV=PYTHON."""

C_RENDERER = False
"""Offer the C renderer (c_renderer.py: C compiled by the system compiler) ahead of the UOps interpreter."""


def probe() -> tuple[bool, str, int]:
    """Always available, one device: the UOps interpreter needs nothing but Python (the probe is cheap: it only
    looks for the C compiler on PATH, it does not run it)."""
    if C_RENDERER:
        from tiny_python_template.c_renderer import find_c_compiler
        compiler = find_c_compiler()
        if compiler is not None:
            return (True, f"C compiler {compiler}", 1)
        return (True, "no C compiler found (install cc, gcc or clang, or set CC): kernels run in the interpreter", 1)
    return (True, "kernels run in the UOps interpreter", 1)


@hookimpl
def tiny_devices() -> list[DeviceSpec]:
    """The device this plugin provides."""
    return [DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_python_template.device:PythonDevice", DESCRIPTION,
                       probe="tiny_python_template.hooks:probe")]


@hookimpl
def tiny_renderers(device: str) -> list[RendererSpec]:
    """The renderers for the device, preferred first: C when enabled (its factory raises without a compiler, and
    the next one is used), then UOPS (the interpreter's packed program; nothing is compiled)."""
    if device != DEVICE_NAME:
        return []
    uops = RendererSpec("UOPS", "tiny_python_template.renderer:make_renderer",
                        "the linear UOps as a listing plus a packed copy the interpreter runs")
    if not C_RENDERER:
        return [uops]
    c = RendererSpec("C", "tiny_python_template.c_renderer:make_c_renderer",
                     "portable C compiled to a shared object by the system C compiler")
    return [c, uops]


@hookimpl
def tiny_hcq_queues(device: Any) -> HCQQueues | None:
    """The device's queues: tuples run by a Python thread per queue (tiny_python_template.queue)."""
    if str(getattr(device, "device", "")).split(":")[0] != DEVICE_NAME:
        return None
    from tiny_python_template.queue import PythonCopyQueue, PythonQueue, PythonSignal
    return HCQQueues(PythonQueue, PythonCopyQueue, PythonSignal)
