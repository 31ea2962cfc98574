"""The CPU plugin's registration: entry point, API level, device and renderer specs, and the C-compiler probe."""
from __future__ import annotations

import importlib.metadata
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_cpu.hooks as hooks

from tinycore.plugins import PLUGIN_API_LEVEL, DeviceSpec, RendererSpec, load_object

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def make_program(directory: Path, name: str) -> Path:
    """An executable file `name` in `directory`."""
    program = directory / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def test_api_level_matches_the_core() -> None:
    assert hooks.TINYCORE_PLUGIN_API == PLUGIN_API_LEVEL


def test_pyproject_declares_entry_point_and_core_range() -> None:
    text = (PLUGIN_ROOT / "pyproject.toml").read_text()
    assert 'name = "tiny-cpu"' in text
    assert 'dependencies = ["tinycore>=0.1,<0.2"]' in text
    assert '[project.entry-points."tinycore.plugins"]\ncpu = "tiny_cpu.hooks"' in text


def test_installed_entry_point() -> None:
    points = {point.name: point for point in importlib.metadata.entry_points(group="tinycore.plugins")}
    assert "cpu" in points, "tiny-cpu is not installed: pip install -e plugins/tiny-cpu"
    assert points["cpu"].value == "tiny_cpu.hooks"
    assert points["cpu"].dist is not None and points["cpu"].dist.metadata["Name"] == "tiny-cpu"


def test_device_spec() -> None:
    (spec,) = hooks.tiny_devices()
    assert spec == DeviceSpec("CPU", spec.priority, "tiny_cpu.device:CPUDevice", spec.description,
                              probe="tiny_cpu.hooks:probe")
    assert load_object(spec.probe) is hooks.probe


def test_cpu_has_the_highest_priority_of_the_installed_devices() -> None:
    from tinycore.plugins.manager import PluginManager
    specs = PluginManager().device_specs()
    cpu_priority = next(spec.priority for spec, _record in specs if spec.name == "CPU")
    assert all(spec.priority < cpu_priority for spec, _record in specs if spec.name != "CPU")


def test_renderers() -> None:
    assert hooks.tiny_renderers("CPU") == [RendererSpec("C", "tiny_cpu.renderer:make_c_renderer",
                                                        hooks.tiny_renderers("CPU")[0].description)]
    assert hooks.tiny_renderers("CL") == []


def test_probe_uses_cc_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", f"{sys.executable} -O2")
    assert hooks.probe() == (True, f"C compiler {sys.executable}", 1)
    monkeypatch.setenv("CC", "/nonexistent/compiler-xyz")
    ok, reason, count = hooks.probe()
    assert (ok, count) == (False, 0) and "CC='/nonexistent/compiler-xyz'" in reason


def test_probe_prefers_gcc_then_clang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hooks.probe() == (False, "no C compiler found: install gcc or clang, or set CC", 0)
    clang = make_program(tmp_path, "clang")
    assert hooks.probe() == (True, f"C compiler {clang}", 1)
    gcc = make_program(tmp_path, "gcc")
    assert hooks.probe() == (True, f"C compiler {gcc}", 1)


def test_tiny_devices_lists_cpu_consistently_with_its_probe() -> None:
    environment = {**os.environ, "TINYCORE_PLUGINS": "cpu", "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (cpu,) = [device for device in json.loads(result.stdout)["devices"] if device["name"] == "CPU"]
    assert (cpu["distribution"], cpu["plugin"]) == ("tiny-cpu", "cpu")
    assert [row["dev"] for row in cpu["renderers"]][0] == "DEV=CPU:C"
    ok, reason, _count = hooks.probe()
    if not ok:
        assert (cpu["status"], cpu["reason"]) == ("unavailable", reason)
    elif importlib.util.find_spec("tiny_cpu.device") is None:
        assert cpu["status"] == "fails to open" and "No module named 'tiny_cpu.device'" in cpu["reason"]
    else:
        assert cpu["status"] == "ok", cpu["reason"]
