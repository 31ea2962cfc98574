"""The DISK plugin's registration: entry point, API level, device spec, the device class and the
availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

from pathlib import Path

import tiny_disk.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "DISK", "tiny_disk.device:DiskDevice")


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
