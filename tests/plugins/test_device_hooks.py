"""device_hooks (tinycore.plugins): the hooks of a one-device plugin written from its specs, answering for that
device only, and registered by pluggy under the hook specifications' names."""
from __future__ import annotations

import types

import pluggy
import pytest

from tinycore.plugins import DeviceSpec, InterfaceSpec, RendererSpec, device_family, device_hooks, hookspecs

SPEC = DeviceSpec("MYDEV", 40, "tiny_mydev.device:MyDevice", "a device of tests", probe="tiny_mydev.hooks:probe")
RENDERERS = [RendererSpec("C", "tiny_mydev.renderer:make_renderer", "C")]
INTERFACES = [InterfaceSpec("MOCK", "tiny_mydev.mock:open_mock", is_mock=True, description="a mock")]


def test_the_hooks_answer_for_their_device_only() -> None:
    tiny_devices, tiny_renderers, tiny_interfaces = device_hooks(SPEC, renderers=RENDERERS, interfaces=INTERFACES)
    assert tiny_devices() == [SPEC]
    assert tiny_renderers("MYDEV") == RENDERERS and tiny_renderers("CPU") == []
    assert tiny_interfaces("MYDEV") == INTERFACES and tiny_interfaces("CPU") == []
    tiny_renderers("MYDEV").clear()  # a caller's list is its own
    assert tiny_renderers("MYDEV") == RENDERERS


def test_pluggy_registers_them_against_the_hook_specifications() -> None:
    manager = pluggy.PluginManager("tinycore")
    manager.add_hookspecs(hookspecs)
    hooks = device_hooks(SPEC, renderers=RENDERERS)
    module = types.SimpleNamespace(tiny_devices=hooks.tiny_devices, tiny_renderers=hooks.tiny_renderers)
    manager.register(module, name="mydev")
    assert manager.hook.tiny_devices() == [[SPEC]]
    assert manager.hook.tiny_renderers(device="MYDEV") == [RENDERERS]
    assert manager.hook.tiny_renderers(device="CL") == [[]]


@pytest.mark.parametrize(("device", "family"), [("CPU:1", "CPU"), ("NV", "NV"), (types.SimpleNamespace(device="CL:2"),
                                                                                 "CL"), (object(), "")])
def test_device_family_reads_a_name_or_an_opened_device(device: object, family: str) -> None:
    assert device_family(device) == family
