"""tinycore.testing.registration.check_registration: the names it derives from the hooks module, and its refusal of a
hooks module named otherwise (the plugins' own tests run it on their real registrations)."""
from __future__ import annotations

import types
from pathlib import Path

import pytest
import tiny_disk.hooks

from tinycore.testing import registration

DISK_ROOT = Path(__file__).resolve().parents[2] / "plugins" / "tiny-disk"


def test_the_names_come_from_the_hooks_module() -> None:
    spec = registration.check_registration(tiny_disk.hooks, DISK_ROOT, "DISK", "tiny_disk.device:DiskDevice")
    assert (spec.name, spec.probe) == ("DISK", "tiny_disk.hooks:probe")


def test_a_wrong_device_class_fails() -> None:
    with pytest.raises(AssertionError, match="device_class='tiny_disk.device:Other'"):
        registration.check_registration(tiny_disk.hooks, DISK_ROOT, "DISK", "tiny_disk.device:Other")


def test_a_hooks_module_named_otherwise_is_refused_with_the_checks_to_call() -> None:
    hooks = types.ModuleType("vendor_plugin.registration_hooks")
    with pytest.raises(AssertionError, match="call check_api_level, check_pyproject"):
        registration.check_registration(hooks, DISK_ROOT, "DISK", "tiny_disk.device:DiskDevice")
