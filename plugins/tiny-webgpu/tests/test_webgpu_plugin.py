"""The WEBGPU plugin's registration: entry point, API level, device spec, the device class and the
availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_webgpu.hooks as hooks

from tinycore.plugins import PLUGIN_API_LEVEL, load_object

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_api_level_matches_the_core() -> None:
    assert hooks.TINYCORE_PLUGIN_API == PLUGIN_API_LEVEL


def test_pyproject_declares_entry_point_and_core_range() -> None:
    text = (PLUGIN_ROOT / "pyproject.toml").read_text()
    assert 'name = "tiny-webgpu"' in text
    assert 'dependencies = ["tinycore>=0.1,<0.2"]' in text
    assert '[project.entry-points."tinycore.plugins"]\nwebgpu = "tiny_webgpu.hooks"' in text


def test_installed_entry_point() -> None:
    points = {point.name: point for point in importlib.metadata.entry_points(group="tinycore.plugins")}
    assert "webgpu" in points, "tiny-webgpu is not installed: pip install -e plugins/tiny-webgpu"
    assert points["webgpu"].value == "tiny_webgpu.hooks"
    assert points["webgpu"].dist is not None and points["webgpu"].dist.metadata["Name"] == "tiny-webgpu"


def test_device_spec() -> None:
    (spec,) = hooks.tiny_devices()
    assert (spec.name, spec.device_class, spec.probe) == (
        "WEBGPU", "tiny_webgpu.device:WebGPUDevice", "tiny_webgpu.hooks:probe")
    assert load_object(spec.probe) is hooks.probe


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
    started = time.perf_counter()
    ok, reason, count = hooks.probe()
    assert time.perf_counter() - started < 15
    assert isinstance(ok, bool) and isinstance(reason, str) and reason and isinstance(count, int)
    assert (count > 0) == ok


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    environment = {**os.environ, "TINYCORE_PLUGINS": "webgpu", "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (device,) = [row for row in json.loads(result.stdout)["devices"] if row["name"] == "WEBGPU"]
    assert (device["distribution"], device["plugin"]) == ("tiny-webgpu", "webgpu")
    ok, reason, _count = hooks.probe()
    if ok:
        assert device["status"] == "ok"
    else:
        assert (device["status"], device["reason"]) == ("unavailable", reason)


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
