"""The DISK plugin's registration: entry point, API level, device spec, the device class and the
availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

from pathlib import Path

import tiny_disk.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_api_level_matches_the_core() -> None:
    registration.check_api_level(hooks)


def test_pyproject_declares_entry_point_and_core_range() -> None:
    registration.check_pyproject(PLUGIN_ROOT, "tiny-disk", "disk", "tiny_disk.hooks")


def test_installed_entry_point() -> None:
    registration.check_installed_entry_point("disk", "tiny_disk.hooks", "tiny-disk", plugin_root=PLUGIN_ROOT)


def test_device_spec() -> None:
    registration.check_device_spec(hooks, "DISK", "tiny_disk.device:DiskDevice", "tiny_disk.hooks:probe")


def test_device_opens() -> None:
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    assert device_class("DISK").device == "DISK"


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    registration.check_tiny_devices_row("disk", "DISK", "tiny-disk", hooks.probe)


def test_probe_is_always_ok() -> None:
    assert hooks.probe() == (True, "files are always available", 1)


def test_never_the_default_device() -> None:
    assert hooks.tiny_devices()[0].priority < 0
