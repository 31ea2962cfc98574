"""The DISK plugin's registration: entry point, API level, device spec, the device class and the
availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import tiny_disk.hooks as hooks

from tinycore.plugins import PLUGIN_API_LEVEL, load_object

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_api_level_matches_the_core() -> None:
    assert hooks.TINYCORE_PLUGIN_API == PLUGIN_API_LEVEL


def test_pyproject_declares_entry_point_and_core_range() -> None:
    text = (PLUGIN_ROOT / "pyproject.toml").read_text()
    assert 'name = "tiny-disk"' in text
    assert 'dependencies = ["tinycore>=0.1,<0.2"]' in text
    assert '[project.entry-points."tinycore.plugins"]\ndisk = "tiny_disk.hooks"' in text


def test_installed_entry_point() -> None:
    points = {point.name: point for point in importlib.metadata.entry_points(group="tinycore.plugins")}
    assert "disk" in points, "tiny-disk is not installed: pip install -e plugins/tiny-disk"
    assert points["disk"].value == "tiny_disk.hooks"
    assert points["disk"].dist is not None and points["disk"].dist.metadata["Name"] == "tiny-disk"


def test_device_spec() -> None:
    (spec,) = hooks.tiny_devices()
    assert (spec.name, spec.device_class, spec.probe) == (
        "DISK", "tiny_disk.device:DiskDevice", "tiny_disk.hooks:probe")
    assert load_object(spec.probe) is hooks.probe


def test_device_opens() -> None:
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    assert device_class("DISK").device == "DISK"


def test_real_probe_answers_quickly() -> None:
    started = time.perf_counter()
    ok, reason, count = hooks.probe()
    assert time.perf_counter() - started < 15
    assert isinstance(ok, bool) and isinstance(reason, str) and reason and isinstance(count, int)
    assert (count > 0) == ok


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    environment = {**os.environ, "TINYCORE_PLUGINS": "disk", "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (device,) = [row for row in json.loads(result.stdout)["devices"] if row["name"] == "DISK"]
    assert (device["distribution"], device["plugin"]) == ("tiny-disk", "disk")
    ok, reason, _count = hooks.probe()
    if ok:
        assert device["status"] == "ok"
    else:
        assert (device["status"], device["reason"]) == ("unavailable", reason)


def test_probe_is_always_ok() -> None:
    assert hooks.probe() == (True, "files are always available", 1)


def test_never_the_default_device() -> None:
    assert hooks.tiny_devices()[0].priority < 0
