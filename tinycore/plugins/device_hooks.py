"""The hooks of a plugin that provides one device, written from its specs.

A device plugin's hooks module answers `tiny_devices` with its device and `tiny_renderers` / `tiny_interfaces` with
its lists for that device and nothing for any other. `device_hooks` writes those three hook implementations:

    from tinycore.plugins import DeviceSpec, RendererSpec, device_hooks
    TINYCORE_PLUGIN_API = 1
    tiny_devices, tiny_renderers, tiny_interfaces = device_hooks(
        DeviceSpec("MYDEV", 40, "tiny_mydev.device:MyDevice", "what it is", probe="tiny_mydev.hooks:probe"),
        renderers=[RendererSpec("C", "tiny_mydev.renderer:make_renderer", "C compiled by the vendor's compiler")])

The module-level names are what pluggy registers, so a hook the plugin does not need is simply not assigned (DISK:
`tiny_devices, _, _ = device_hooks(...)`). Hooks that need the opened device (`tiny_allocator`, `tiny_hcq_queues`)
stay written in the plugin; `device_family` reads the family from the device they are given.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from tinycore.plugins.specs import DeviceSpec, InterfaceSpec, RendererSpec


class DeviceHooks(NamedTuple):
    """The three hook implementations of a one-device plugin, in the order a hooks module unpacks them."""

    tiny_devices: Callable[[], list[DeviceSpec]]
    tiny_renderers: Callable[[str], list[RendererSpec]]
    tiny_interfaces: Callable[[str], list[InterfaceSpec]]


def device_hooks(spec: DeviceSpec, renderers: Sequence[RendererSpec] = (),
                 interfaces: Sequence[InterfaceSpec] = ()) -> DeviceHooks:
    """`tiny_devices` answering [spec], and `tiny_renderers` / `tiny_interfaces` answering `renderers` /
    `interfaces` for the device `spec.name` and [] for any other device, each marked as a hook implementation."""
    import pluggy  # here, not at the top: importing the plugin-facing API stays cheap
    hookimpl = pluggy.HookimplMarker("tinycore")
    renderer_list, interface_list = list(renderers), list(interfaces)

    @hookimpl
    def tiny_devices() -> list[DeviceSpec]:
        return [spec]

    @hookimpl
    def tiny_renderers(device: str) -> list[RendererSpec]:  # the hook spec names its argument `device`
        return list(renderer_list) if device == name else []

    @hookimpl
    def tiny_interfaces(device: str) -> list[InterfaceSpec]:
        return list(interface_list) if device == name else []

    name = spec.name
    tiny_devices.__doc__ = f"The {name} device: {spec.description}"
    tiny_renderers.__doc__ = f"The renderers of {name}, best first: {', '.join(r.name for r in renderer_list)}."
    tiny_interfaces.__doc__ = f"The interfaces of {name}, best first: {', '.join(i.name for i in interface_list)}."
    return DeviceHooks(tiny_devices, tiny_renderers, tiny_interfaces)


def device_family(device: object) -> str:
    """The family ("CPU") of an opened device or of the name it is opened under ("CPU:1"), for the hooks that are
    given the device (`tiny_allocator`, `tiny_hcq_queues`); "" for an object that has no device name."""
    name = device if isinstance(device, str) else getattr(device, "device", "")
    return str(name).split(":")[0]
