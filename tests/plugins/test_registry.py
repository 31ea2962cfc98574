"""The device registry with real throwaway plugin distributions (dist-info directories on sys.path), in process:
canonical names, one instance per name, default selection order, DEV, renderer and interface selection, errors."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path

import pytest
from plugin_builder import write_test_plugins

from tinycore.device import (
    Device,
    DeviceNotInstalledError,
    DeviceOpenError,
    SelectionError,
    Target,
    renderer_specs,
    select_allocator,
    select_interface,
    select_renderer,
)
from tinycore.helpers import DEV, Context
from tinycore.plugins.install import install_command
from tinycore.plugins.manager import PluginManager, reset_plugin_manager

CONTROLS = ("TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_TRACE_PLUGINS")


def forget_test_modules() -> None:
    """Drop the throwaway plugins' modules so that each test imports them afresh."""
    for name in [name for name in sys.modules if name.split(".")[0].startswith("tp_")]:
        del sys.modules[name]


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """A plugin manager over only the throwaway distributions, installed as the process-wide one."""
    write_test_plugins(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in CONTROLS:
        monkeypatch.delenv(name, raising=False)
    entry_points = [entry_point for distribution in distributions(path=[str(tmp_path)])
                    for entry_point in distribution.entry_points if entry_point.group == "tinycore.plugins"]
    plugin_manager = PluginManager(entry_points=entry_points)
    reset_plugin_manager(plugin_manager)
    Device.reset()
    forget_test_modules()
    with Context(DEV=""):
        yield plugin_manager
    reset_plugin_manager(None)
    Device.reset()
    forget_test_modules()


def test_one_instance_per_canonical_name(manager: PluginManager) -> None:
    first = Device["good"]
    assert Device["GOOD"] is first
    assert Device["Good:0"] is first
    second = Device["good:1"]
    assert second is not first
    assert Device["GOOD:1"] is second
    assert sys.modules["tp_good.device"].OPENED == ["GOOD", "GOOD:1"], "each class constructed once, canonical name"
    assert first.device == "GOOD" and second.device == "GOOD:1"
    assert Device.canonicalize("good:0") == "GOOD"


def test_default_is_highest_priority_device_that_opens(manager: PluginManager) -> None:
    # FLAKY (600) fails to open, ABSENT (550) has a failing probe, GOOD (500) opens; FILES (-1) is never chosen.
    assert Device.DEFAULT == "GOOD"
    assert "the flaky board did not answer" in (Device.open_error("FLAKY") or "")
    assert Device.probe("ABSENT") == (False, "the test hardware is unplugged", 0)
    opened = sys.modules["tp_good.device"].OPENED
    assert opened == ["GOOD"], "ABSENT (probe failed) and FILES (negative priority) are never opened"
    assert Device.DEFAULT == "GOOD"
    assert opened == ["GOOD"], "the choice is cached for the process"
    assert Device.default is Device["GOOD"]
    assert list(Device.get_available_devices()) == ["GOOD"]


def test_dev_chooses_the_default_and_switches_at_run_time(manager: PluginManager) -> None:
    with Context(DEV="GOOD:1"):
        assert Device.DEFAULT == "GOOD:1"
        with Context(DEV="files;GOOD"):
            assert Device.DEFAULT == "FILES"
    with Context(DEV=":GR2"):
        assert Device.DEFAULT == "GOOD", "a target without a device leaves the choice to priority"
    assert Device.DEFAULT == "GOOD"


def test_default_setter_puts_the_device_first_in_dev(manager: PluginManager) -> None:
    with Context(DEV=":GR2"):
        Device.DEFAULT = "good:1"
        assert DEV.value == "GOOD:1;:GR2"
        assert Device.DEFAULT == "GOOD:1"
    with Context(DEV=""), pytest.raises(DeviceNotInstalledError):
        Device.DEFAULT = "TPU"


def test_dev_naming_an_unknown_device_lists_installed_ones(manager: PluginManager) -> None:
    with pytest.raises(DeviceNotInstalledError) as caught, Context(DEV="CL"):
        pytest.fail("DEV is checked when it is set")
    message = str(caught.value)
    assert "no installed plugin provides device 'CL'" in message and "DEV='CL'" in message
    assert "GOOD (tiny-good 1.2.3)" in message and "FLAKY (tiny-good 1.2.3)" in message
    assert install_command("tiny-cl") in message, "the hint matches how tinycore was installed"
    with pytest.raises(DeviceNotInstalledError, match="no distribution shipped with tinycore provides TPU"):
        Device["tpu"]


def test_device_that_fails_to_open_says_why(manager: PluginManager) -> None:
    with pytest.raises(DeviceOpenError) as caught:
        Device["flaky"]
    message = str(caught.value)
    assert "could not open FLAKY" in message and "tiny-good" in message
    assert "OSError: the flaky board did not answer" in message


def test_renderer_preference_order_and_first_that_constructs(manager: PluginManager) -> None:
    names = [spec.name for spec, _record in renderer_specs("GOOD")]
    # GOOD's own plugin first, then the renderer BR that the tiny-blocked plugin adds, although "blocked" is
    # discovered before "good".
    assert names == ["BROKENR", "GR", "GR2", "BR"]
    device = Device["GOOD"]
    assert device.renderer_spec.name == "GR", "BROKENR cannot be built, so the next one wins"
    assert device.renderer == ("renderer", "GOOD", None)
    assert device.compiler == ("compiler", "GOOD")
    assert Device.selected_renderers["GOOD"] == "GR"


def test_dev_selects_renderer_and_arch(manager: PluginManager) -> None:
    with Context(DEV="GOOD:GR2:v9"):
        renderer, compiler, spec = select_renderer("good")
    assert spec.name == "GR2" and renderer == ("renderer", "GOOD", "v9") and compiler == ("compiler", "GOOD")
    with Context(DEV=":br"):
        assert select_renderer("GOOD:1")[2].name == "BR", "DEV=:RENDERER applies to every device"


def test_renderer_added_to_another_plugins_device(manager: PluginManager) -> None:
    assert [(spec.name, record.install_name) for spec, record in renderer_specs("CPU")] == [("XR", "tiny-good")]
    renderer, _compiler, spec = select_renderer("cpu")
    assert spec.name == "XR" and renderer == ("renderer", "CPU", None)
    with pytest.raises(DeviceNotInstalledError, match="no installed plugin provides device 'CPU'"), \
            Context(DEV="CPU:XR"):
        pytest.fail("DEV naming a device no plugin provides is refused when set, even with a renderer for it")


def test_unknown_renderer_says_did_you_mean(manager: PluginManager) -> None:
    with pytest.raises(SelectionError) as caught, Context(DEV="GOOD:broken"):
        pytest.fail("DEV is checked when it is set")
    message = str(caught.value)
    assert "GOOD has no renderer 'BROKEN'" in message
    assert "available: BROKENR, GR, GR2, BR" in message
    assert "did you mean 'BROKENR'?" in message


def test_explicit_renderer_that_fails_is_not_replaced(manager: PluginManager) -> None:
    with Context(DEV="GOOD:BROKENR"), pytest.raises(SelectionError, match="its compiler is not installed"):
        select_renderer("GOOD")


def test_device_without_renderers(manager: PluginManager) -> None:
    with pytest.raises(SelectionError, match="no installed plugin offers a renderer for FLAKY"):
        select_renderer("FLAKY")


def test_interface_selection_never_falls_back_to_a_mock(manager: PluginManager) -> None:
    spec, interface = select_interface("GOOD")
    assert spec.name == "REAL" and not spec.is_mock
    assert interface == ("interface", "GOOD", ())
    with Context(DEV="FAKE:0,1+GOOD:1"):
        spec, interface = select_interface("GOOD:1")
    assert spec.name == "FAKE" and spec.is_mock and interface == ("interface", "GOOD:1", (0, 1))
    with pytest.raises(SelectionError) as caught:
        select_interface("FILES")
    assert "used only when DEV names them, e.g. DEV=FAKE+FILES" in str(caught.value)
    with pytest.raises(SelectionError, match="did you mean 'FAKE'"), Context(DEV="FAK+GOOD"):
        pytest.fail("DEV is checked when it is set")


def test_device_class_sees_its_dev_target(manager: PluginManager) -> None:
    with Context(DEV="FAKE:3+GOOD:GR2"):
        device = Device["GOOD"]
    assert device.target == Target(device="GOOD", renderer="GR2", interface="FAKE", indices=(3,))
    assert device.interface_spec.name == "FAKE" and device.renderer_spec.name == "GR2"
    assert Device.selected_interfaces["GOOD"] == "FAKE"


def test_allocator_hook(manager: PluginManager) -> None:
    assert Device["GOOD"].allocator == ("allocator for", "GOOD")

    class Stranger:
        device = "ELSEWHERE"

    with pytest.raises(SelectionError, match="no installed plugin returned an allocator for ELSEWHERE"):
        select_allocator(Stranger())


def test_no_device_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_PLUGINS", "")
    reset_plugin_manager(PluginManager(entry_points=[]))
    Device.reset()
    try:
        with Context(DEV=""), pytest.raises(DeviceNotInstalledError, match="no device plugin is installed"):
            _ = Device.DEFAULT
    finally:
        reset_plugin_manager(None)
        Device.reset()
