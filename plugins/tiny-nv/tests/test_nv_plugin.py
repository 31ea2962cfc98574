"""The NV plugin's registration: entry point, API level, device spec, the "not built yet" device class and
the availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_nv.hooks as hooks

from tinycore.plugins import PLUGIN_API_LEVEL, load_object

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_api_level_matches_the_core() -> None:
    assert hooks.TINYCORE_PLUGIN_API == PLUGIN_API_LEVEL


def test_pyproject_declares_entry_point_and_core_range() -> None:
    text = (PLUGIN_ROOT / "pyproject.toml").read_text()
    assert 'name = "tiny-nv"' in text
    assert 'dependencies = ["tinycore>=0.1,<0.2"]' in text
    assert '[project.entry-points."tinycore.plugins"]\nnv = "tiny_nv.hooks"' in text


def test_installed_entry_point() -> None:
    points = {point.name: point for point in importlib.metadata.entry_points(group="tinycore.plugins")}
    assert "nv" in points, "tiny-nv is not installed: pip install -e plugins/tiny-nv"
    assert points["nv"].value == "tiny_nv.hooks"
    assert points["nv"].dist is not None and points["nv"].dist.metadata["Name"] == "tiny-nv"


def test_device_spec() -> None:
    (spec,) = hooks.tiny_devices()
    assert (spec.name, spec.device_class, spec.probe) == (
        "NV", "tiny_nv.device:NVDevice", "tiny_nv.hooks:probe")
    assert load_object(spec.probe) is hooks.probe


def test_opening_says_not_built_yet() -> None:
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    with pytest.raises(RuntimeError) as caught:
        device_class("NV")
    assert str(caught.value).startswith("tiny-nv is installed but its NV device is not built yet")


def test_real_probe_answers_quickly() -> None:
    started = time.perf_counter()
    ok, reason, count = hooks.probe()
    assert time.perf_counter() - started < 15
    assert isinstance(ok, bool) and isinstance(reason, str) and reason and isinstance(count, int)
    assert (count > 0) == ok


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    environment = {**os.environ, "TINYCORE_PLUGINS": "nv", "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (device,) = [row for row in json.loads(result.stdout)["devices"] if row["name"] == "NV"]
    assert (device["distribution"], device["plugin"]) == ("tiny-nv", "nv")
    ok, reason, _count = hooks.probe()
    if ok:
        assert device["status"] == "fails to open" and "not built yet" in device["reason"]
    else:
        assert (device["status"], device["reason"]) == ("unavailable", reason)


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
