"""The plugin-facing API of tinycore: the plugin API level, the hook marker and the spec dataclasses.

A device plugin's hooks module imports from here:

    from tinycore.plugins import DeviceSpec, RendererSpec, InterfaceSpec, hookimpl
    TINYCORE_PLUGIN_API = 1

(a plugin of one device writes its `tiny_devices`, `tiny_renderers` and `tiny_interfaces` with `device_hooks`)

The hook specifications (the contract, with what each hook must and must not do) are in
`tinycore.plugins.hookspecs`; discovery, isolation and the allow and block lists are in `tinycore.plugins.manager`.
Importing this package is cheap: pluggy and the manager are imported only when first needed.
"""
from __future__ import annotations

from typing import Any

from tinycore.plugins.api_level import PLUGIN_API_LEVEL, core_version
from tinycore.plugins.device_hooks import DeviceHooks, device_family, device_hooks
from tinycore.plugins.specs import DeviceSpec, HCQQueues, InterfaceSpec, RendererSpec, load_object

__all__ = ["PLUGIN_API_LEVEL", "DeviceSpec", "RendererSpec", "InterfaceSpec", "HCQQueues", "load_object",
           "hookimpl", "get_plugin_manager", "core_version", "DeviceHooks", "device_hooks", "device_family"]


def __getattr__(name: str) -> Any:
    """Lazy attributes: `hookimpl` (the pluggy marker) and `get_plugin_manager`, so importing stays cheap."""
    if name == "hookimpl":
        import pluggy
        marker = pluggy.HookimplMarker("tinycore")
        globals()["hookimpl"] = marker
        return marker
    if name == "get_plugin_manager":
        from tinycore.plugins.manager import get_plugin_manager
        return get_plugin_manager
    raise AttributeError(f"module 'tinycore.plugins' has no attribute {name!r}")
