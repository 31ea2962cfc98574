"""The hooks of the WebGPU plugin: the WEBGPU device. The probe asks wgpu (when installed) for an adapter."""
from __future__ import annotations

import importlib.util

from tinycore.plugins import DeviceSpec, hookimpl
from tinycore.plugins.probing import bounded_probe

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "WEBGPU"
PRIORITY = 50


def _find_adapter() -> tuple[bool, str, int]:
    """Ask wgpu-native for an adapter."""
    import wgpu

    request = getattr(wgpu.gpu, "request_adapter_sync", None) or wgpu.gpu.request_adapter
    adapter = request(power_preference="high-performance")
    if adapter is None:
        return (False, "wgpu found no WebGPU adapter", 0)
    info = getattr(adapter, "info", None) or getattr(adapter, "request_adapter_info", dict)()
    description = info.get("device", "") if isinstance(info, dict) else ""
    return (True, f"WebGPU adapter {description}".strip(), 1)


def probe() -> tuple[bool, str, int]:
    """WEBGPU is available when wgpu is installed and finds an adapter."""
    if importlib.util.find_spec("wgpu") is None:
        return (False, "wgpu is not installed: pip install wgpu", 0)
    return bounded_probe(_find_adapter, timeout_s=10.0)


@hookimpl
def tiny_devices() -> list[DeviceSpec]:
    """The WEBGPU device."""
    return [DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_webgpu.device:WebGPUDevice",
                       "WebGPU adapters through wgpu-native (WGSL compiled by the driver)",
                       probe="tiny_webgpu.hooks:probe")]
