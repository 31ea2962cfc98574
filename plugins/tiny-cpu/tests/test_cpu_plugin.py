"""The CPU plugin's registration: entry point, API level, device and renderer specs, and the C-compiler probe."""
from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path

import pytest
import tiny_cpu.hooks as hooks

from tinycore.plugins import RendererSpec
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def make_program(directory: Path, name: str) -> Path:
    """An executable file `name` in `directory`."""
    program = directory / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "CPU", "tiny_cpu.device:CPUDevice")


def test_cpu_has_the_highest_priority_of_the_installed_devices() -> None:
    from tinycore.plugins.manager import PluginManager
    specs = PluginManager().device_specs()
    cpu_priority = next(spec.priority for spec, _record in specs if spec.name == "CPU")
    assert all(spec.priority < cpu_priority for spec, _record in specs if spec.name != "CPU")


def test_renderers() -> None:
    offered = hooks.tiny_renderers("CPU")
    assert offered == [RendererSpec("C", "tiny_cpu.renderer:make_c_renderer", offered[0].description,
                                    probe="tiny_cpu.hooks:c_probe"),
                       RendererSpec("LLVM", "tiny_cpu.llvm_compiler:make_llvm_renderer", offered[1].description,
                                       probe="tiny_cpu.hooks:llvm_probe"),
                       RendererSpec("X86", "tiny_cpu.x86.renderer:make_x86_renderer", offered[2].description,
                                    probe="tiny_cpu.hooks:x86_probe")]
    assert hooks.tiny_renderers("CL") == []


def test_allocator_comes_through_the_tiny_allocator_hook() -> None:
    from types import SimpleNamespace

    from tiny_cpu.allocator import CPUAllocator

    from tinycore import Device
    from tinycore.device.registry import select_allocator
    from tinycore.plugins.manager import get_plugin_manager
    allocator = hooks.tiny_allocator(SimpleNamespace(device="CPU:2"))
    assert isinstance(allocator, CPUAllocator) and allocator.device == "CPU:2"
    assert hooks.tiny_allocator(SimpleNamespace(device="CL")) is None
    assert isinstance(select_allocator(SimpleNamespace(device="CPU")), CPUAllocator), "answered through the manager"
    assert isinstance(Device["CPU"].allocator, CPUAllocator)
    assert "tiny_allocator" in next(record.hooks for record in get_plugin_manager().records if record.name == "cpu")


def test_probe_uses_cc_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "x86_probe", lambda: (False, "not x86-64"))  # the C compiler alone decides
    monkeypatch.setenv("CC", f"{sys.executable} -O2")
    assert hooks.probe() == (True, f"C compiler {sys.executable}", 1)
    monkeypatch.setenv("CC", "/nonexistent/compiler-xyz")
    ok, reason, count = hooks.probe()
    assert (ok, count) == (False, 0) and "CC='/nonexistent/compiler-xyz'" in reason


def test_probe_prefers_gcc_then_clang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "x86_probe", lambda: (False, "not x86-64"))  # the C compiler alone decides
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hooks.probe() == (False, "no C compiler found: install gcc or clang, or set CC", 0)
    clang = make_program(tmp_path, "clang")
    assert hooks.probe() == (True, f"C compiler {clang}", 1)
    gcc = make_program(tmp_path, "gcc")
    assert hooks.probe() == (True, f"C compiler {gcc}", 1)


def test_tiny_devices_lists_cpu_consistently_with_its_probe() -> None:
    device_missing = importlib.util.find_spec("tiny_cpu.device") is None
    missing_reason = "No module named 'tiny_cpu.device'" if device_missing else None
    cpu = registration.check_tiny_devices_row("cpu", "CPU", "tiny-cpu", hooks.probe, fails_to_open_with=missing_reason)
    assert [row["dev"] for row in cpu["renderers"]][0] == "DEV=CPU:C"
