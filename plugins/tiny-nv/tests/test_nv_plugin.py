"""The NV plugin's registration: entry point, API level, device spec, the "not built yet" device class and
the availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

from pathlib import Path

import pytest
import tiny_nv.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_api_level_matches_the_core() -> None:
    registration.check_api_level(hooks)


def test_pyproject_declares_entry_point_and_core_range() -> None:
    registration.check_pyproject(PLUGIN_ROOT, "tiny-nv", "nv", "tiny_nv.hooks")


def test_installed_entry_point() -> None:
    registration.check_installed_entry_point("nv", "tiny_nv.hooks", "tiny-nv", plugin_root=PLUGIN_ROOT)


def test_device_spec() -> None:
    registration.check_device_spec(hooks, "NV", "tiny_nv.device:NVDevice", "tiny_nv.hooks:probe")


def test_opening_says_not_built_yet() -> None:
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    with pytest.raises(RuntimeError) as caught:
        device_class("NV")
    assert str(caught.value).startswith("tiny-nv is installed but its NV device is not built yet")


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    registration.check_tiny_devices_row("nv", "NV", "tiny-nv", hooks.probe, fails_to_open_with="not built yet")


class FakeCuda:
    """Stands in for libcuda: cuInit returns `init_status`; cuDeviceGetCount reports `count`."""

    def __init__(self, count: int, init_status: int = 0) -> None:
        self.count, self.init_status = count, init_status

    def cuInit(self, flags: int) -> int:
        return self.init_status

    def cuDeviceGetCount(self, pointer: object) -> int:
        pointer._obj.value = self.count  # type: ignore[attr-defined]
        return 0


@pytest.mark.parametrize("library, expected", [
    (FakeCuda(2), (True, "2 CUDA device(s)", 2)),
    (FakeCuda(0), (False, "the CUDA driver reports no device (cuDeviceGetCount status 0)", 0)),
    (FakeCuda(1, init_status=100), (False, "cuInit failed with CUDA error 100 (driver loaded from fake)", 0)),
])
def test_probe_with_a_fake_driver(monkeypatch: pytest.MonkeyPatch, library: FakeCuda,
                                  expected: tuple[bool, str, int]) -> None:
    monkeypatch.setattr(hooks, "load_library", lambda names: (library, "fake"))
    assert hooks.probe() == expected


def test_probe_without_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "libcuda.so.1: not found"))
    assert hooks.probe() == (False, "the CUDA driver library (libcuda) is not installed (libcuda.so.1: not found)", 0)


def test_priority_is_not_negative() -> None:
    assert hooks.tiny_devices()[0].priority >= 0
