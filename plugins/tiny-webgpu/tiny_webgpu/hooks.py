"""The hooks of the WebGPU plugin: the WEBGPU device, its WGSL renderer and its interfaces (wgpu backends).

The probe asks wgpu (when installed) for adapters and names each with its backend and type (CPU/GPU).
"""
from __future__ import annotations

import importlib.util

from tinycore.plugins import DeviceSpec, InterfaceSpec, RendererSpec, device_hooks
from tinycore.plugins.probing import bounded_probe

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "WEBGPU"
PRIORITY = 50

INTERFACES = (("VULKAN", "open_vulkan", "Vulkan (Linux, Windows, Android; Mesa lavapipe without a GPU)"),
              ("METAL", "open_metal", "Metal (macOS)"), ("DX12", "open_dx12", "Direct3D 12 (Windows)"),
              ("GL", "open_gl", "OpenGL / GLES (Mesa llvmpipe without a GPU)"))
"""The wgpu backends, best first, as DEV interface names."""


def _describe(adapter: object) -> str:
    """An adapter's device name, with '[backend, type]' when wgpu reports them."""
    info = getattr(adapter, "info", None) or getattr(adapter, "request_adapter_info", dict)()
    if not isinstance(info, dict) and not hasattr(info, "get"):
        return ""
    description = str(info.get("device", "") or "")
    details = [str(info.get(key)) for key in ("backend_type", "adapter_type") if info.get(key)]
    return f"{description} [{', '.join(details)}]".strip() if details else description


def _find_adapter() -> tuple[bool, str, int]:
    """Ask wgpu-native for its adapters (all of them where wgpu can enumerate, else the preferred one)."""
    from tiny_webgpu.environment import prepare_driver_environment
    prepare_driver_environment()
    import wgpu

    enumerate_adapters = getattr(wgpu.gpu, "enumerate_adapters_sync", None)
    if enumerate_adapters is not None:
        found = list(enumerate_adapters())
        if not found:
            return (False, "wgpu found no WebGPU adapter", 0)
        label = "WebGPU adapter" if len(found) == 1 else "WebGPU adapters"
        return (True, f"{label} {'; '.join(_describe(adapter) for adapter in found)}".strip(), len(found))
    request = getattr(wgpu.gpu, "request_adapter_sync", None) or wgpu.gpu.request_adapter
    adapter = request(power_preference="high-performance")
    if adapter is None:
        return (False, "wgpu found no WebGPU adapter", 0)
    return (True, f"WebGPU adapter {_describe(adapter)}".strip(), 1)


def probe() -> tuple[bool, str, int]:
    """WEBGPU is available when wgpu is installed and finds an adapter."""
    if importlib.util.find_spec("wgpu") is None:
        return (False, "wgpu is not installed: pip install wgpu", 0)
    return bounded_probe(_find_adapter, timeout_s=10.0)


# the wgpu backends that reach a WEBGPU adapter: DEV=VULKAN+WEBGPU, DEV=GL+WEBGPU, ...
tiny_devices, tiny_renderers, tiny_interfaces = device_hooks(
    DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_webgpu.device:WebGPUDevice",
               "WebGPU adapters through wgpu-native (WGSL compiled by the driver)", probe="tiny_webgpu.hooks:probe"),
    renderers=[RendererSpec("WGSL", "tiny_webgpu.runtime:make_wgsl_renderer",
                            "WGSL compute shaders compiled by the adapter's driver")],
    interfaces=[InterfaceSpec(name, f"tiny_webgpu.runtime:{factory}", description=description)
                for name, factory, description in INTERFACES])
