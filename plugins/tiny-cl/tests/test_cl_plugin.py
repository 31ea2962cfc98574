"""The CL plugin's registration: entry point, API level, device spec, renderer spec, and
the availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import tiny_cl.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "CL", "tiny_cl.device:CLDevice")


def test_device_class_and_renderer_are_named_by_import_path() -> None:
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    assert isinstance(device_class, type) and device_class.__name__ == "CLDevice"
    (renderer,) = hooks.tiny_renderers("CL")
    assert (renderer.name, renderer.factory) == ("OPENCL", "tiny_cl.renderer:make_cl_renderer")
    assert callable(load_object(renderer.factory))
    assert hooks.tiny_renderers("CPU") == []


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    device = registration.check_tiny_devices_row("cl", "CL", "tiny-cl", hooks.probe)
    if device["status"] == "ok":
        assert [row["name"] for row in device["renderers"] if row["selected"]] == ["OPENCL"]


class FakeOpenCL:
    """Stands in for libOpenCL: `devices_per_platform` lists how many devices each platform has."""

    def __init__(self, devices_per_platform: list[int]) -> None:
        self.devices_per_platform = devices_per_platform

    def clGetPlatformIDs(self, count: int, platforms: object, count_pointer: object) -> int:
        if count_pointer is not None:
            count_pointer._obj.value = len(self.devices_per_platform)  # type: ignore[attr-defined]
        if platforms is not None:
            for index in range(count):
                platforms[index] = index + 1  # type: ignore[index]
        return 0

    def clGetDeviceIDs(self, platform: ctypes.c_void_p, kinds: object, count: int, devices: object,
                       count_pointer: object) -> int:
        count_pointer._obj.value = self.devices_per_platform[platform.value - 1]  # type: ignore[attr-defined]
        return 0


def test_ctypes_probe_counts_devices_on_every_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "load_library", lambda names: (FakeOpenCL([2, 3]), "fake"))
    assert hooks._count_with_ctypes() == (True, "5 OpenCL device(s) on 2 platform(s)", 5)
    monkeypatch.setattr(hooks, "load_library", lambda names: (FakeOpenCL([]), "fake"))
    assert hooks._count_with_ctypes() == (False, "libOpenCL loaded from fake but reports no OpenCL platform (status 0)",
                                          0)
    monkeypatch.setattr(hooks, "load_library", lambda names: (FakeOpenCL([0]), "fake"))
    assert hooks._count_with_ctypes() == (False, "1 OpenCL platform(s) but no device", 0)


def test_probe_without_a_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "OpenCL: not found"))
    ok, reason, count = hooks.probe()
    assert (ok, count) == (False, 0) and "no OpenCL ICD loader (libOpenCL) found (OpenCL: not found)" in reason


def test_probe_prefers_pyopencl(monkeypatch: pytest.MonkeyPatch) -> None:
    class Platform:
        def __init__(self, name: str, devices: int) -> None:
            self.name, self.devices = name, devices

        def get_devices(self) -> list[int]:
            return list(range(self.devices))

    fake = type(sys)("pyopencl")
    fake.get_platforms = lambda: [Platform("Portable Computing Language", 1)]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyopencl", fake)
    monkeypatch.setattr(hooks.importlib.util, "find_spec", lambda name: object())
    assert hooks.probe() == (True, "1 OpenCL device(s) on Portable Computing Language", 1)
