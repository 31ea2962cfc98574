"""The WEBGPU plugin's registration: entry point, API level, device spec, the device class and the
availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tiny_webgpu.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "WEBGPU", "tiny_webgpu.device:WebGPUDevice")


def test_device_opens_when_an_adapter_is_found() -> None:
    ok, reason, _count = hooks.probe()
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    if ok:
        device = device_class("WEBGPU")
        assert device.device == "WEBGPU"
    else:
        with pytest.raises(RuntimeError):
            device_class("WEBGPU")


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    registration.check_tiny_devices_row("webgpu", "WEBGPU", "tiny-webgpu", hooks.probe)


def fake_wgpu(adapter: object) -> object:
    """A stand-in wgpu module whose gpu.request_adapter_sync returns `adapter`."""
    module = type(sys)("wgpu")
    module.gpu = type("GPU", (), {"request_adapter_sync": staticmethod(lambda **options: adapter)})()
    return module


def test_probe_finds_an_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = type("Adapter", (), {"info": {"device": "llvmpipe (LLVM 17.0.6, 256 bits)"}})()
    monkeypatch.setitem(sys.modules, "wgpu", fake_wgpu(adapter))
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: object())
    assert hooks.probe() == (True, "WebGPU adapter llvmpipe (LLVM 17.0.6, 256 bits)", 1)


def test_probe_without_an_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wgpu", fake_wgpu(None))
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: object())
    assert hooks.probe() == (False, "wgpu found no WebGPU adapter", 0)


def test_probe_without_wgpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: None)
    assert hooks.probe() == (False, "wgpu is not installed: pip install wgpu", 0)
