"""The NV plugin's registration: entry point, API level, device spec, renderers and interfaces, and the availability
probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

from pathlib import Path

import pytest
import tiny_nv.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "NV", "tiny_nv.device:NVDevice")


def test_renderers_and_interfaces() -> None:
    assert [spec.name for spec in hooks.tiny_renderers("NV")][:1] == ["CUDA"]
    assert hooks.tiny_renderers("CPU") == [] and hooks.tiny_interfaces("CPU") == []
    interfaces = {spec.name: spec for spec in hooks.tiny_interfaces("NV")}
    assert not interfaces["CUDA"].is_mock
    for spec in [*hooks.tiny_renderers("NV"), *interfaces.values()]:
        assert callable(load_object(spec.factory))


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    row = registration.check_tiny_devices_row("nv", "NV", "tiny-nv", hooks.probe)
    if row["status"] == "unavailable":
        assert "DEV=NV::sm_90" in row["reason"]


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
    monkeypatch.setattr(hooks, "_nvrtc_note", lambda: "")
    assert hooks.probe() == expected


def test_probe_without_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "libcuda.so.1: not found"))
    monkeypatch.setattr(hooks, "_nvrtc_note", lambda: "; NVRTC is not installed (x); pip install 'tiny-nv[nvrtc]'")
    assert hooks.probe() == (False, "the CUDA driver library (libcuda) is not installed (libcuda.so.1: not found); "
                                    "DEV=NV::sm_90 compiles kernels without a GPU, DEV=MOCK+NV runs them on the "
                                    "simulated GPU; NVRTC is not installed (x); pip install 'tiny-nv[nvrtc]'", 0)


def test_priority_is_not_negative() -> None:
    assert hooks.tiny_devices()[0].priority >= 0
