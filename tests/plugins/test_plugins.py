"""Plugin discovery with real throwaway plugin distributions: API levels, failure isolation, allow and block lists,
tracing, one entry-point lookup, and `import tinycore` staying free of plugin device code (fresh interpreters)."""
from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import pytest
from plugin_builder import REPOSITORY_ROOT, run_python, write_distribution, write_test_plugins

from tinycore.plugins import PLUGIN_API_LEVEL, DeviceSpec, InterfaceSpec, RendererSpec, hookimpl, load_object
from tinycore.plugins.install import install_command
from tinycore.plugins.manager import PluginManager
from tinycore.plugins.probing import bounded_probe

CONTROLS = ("TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_TRACE_PLUGINS")


def entry_points_in(path: Path) -> list[Any]:
    """The `tinycore.plugins` entry points of the distributions in `path` (and only those)."""
    return [entry_point for distribution in distributions(path=[str(path)])
            for entry_point in distribution.entry_points if entry_point.group == "tinycore.plugins"]


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The throwaway distributions, importable, with the plugin controls cleared; their modules forgotten after."""
    write_test_plugins(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in CONTROLS:
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    for name in [name for name in sys.modules if name.split(".")[0].startswith("tp_")]:
        del sys.modules[name]


def by_name(manager: PluginManager) -> dict[str, Any]:
    """The manager's records by entry-point name."""
    return {record.name: record for record in manager.records}


# ---- in process -------------------------------------------------------------------------------------------------

def test_records_distribution_version_level_and_hooks(plugin_dir: Path) -> None:
    records = by_name(PluginManager(entry_points=entry_points_in(plugin_dir)))
    assert sorted(records) == ["blocked", "broken", "future", "good", "hookfail"]
    good = records["good"]
    assert (good.status, good.distribution, good.version, good.api_level) == ("ok", "tiny-good", "1.2.3", 1)
    assert good.hooks == ("tiny_devices", "tiny_renderers", "tiny_allocator", "tiny_interfaces")
    assert records["blocked"].hooks == ("tiny_devices", "tiny_renderers")


def test_plugin_raising_at_import_is_recorded_with_traceback(plugin_dir: Path) -> None:
    manager = PluginManager(entry_points=entry_points_in(plugin_dir))
    broken = by_name(manager)["broken"]
    assert broken.status == "broken"
    assert "import of 'tp_broken.hooks' failed: RuntimeError: this plugin is broken on purpose" in broken.reason
    assert "Traceback" in broken.traceback and "tp_broken" in broken.traceback
    assert "GOOD" in [spec.name for spec, _record in manager.device_specs()], "the other plugins still work"


def test_unsupported_api_level_is_refused_with_the_fix(plugin_dir: Path) -> None:
    future = by_name(PluginManager(entry_points=entry_points_in(plugin_dir)))["future"]
    assert future.status == "refused" and future.api_level == 99
    assert "plugin API level 99" in future.reason and f"supports plugin API level {PLUGIN_API_LEVEL}" in future.reason
    assert "tiny-future 9.0.0" in future.reason
    assert install_command("tinycore", upgrade=True) in future.reason
    assert "tp_future.hooks" in sys.modules, "its module was read for the level"


def test_old_or_missing_api_level_names_the_plugin_upgrade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_distribution(tmp_path, "tiny-old", "0.0.1", {"old": "tp_old.hooks"},
                       {"tp_old.hooks": "TINYCORE_PLUGIN_API = 0\n"})
    write_distribution(tmp_path, "tiny-unversioned", "0.0.1", {"unversioned": "tp_unversioned.hooks"},
                       {"tp_unversioned.hooks": "NOTHING = None\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    records = by_name(PluginManager(entry_points=entry_points_in(tmp_path)))
    assert records["old"].status == "refused" and "pip install --upgrade tiny-old" in records["old"].reason
    assert "written for plugin API level 0" in records["old"].reason
    unversioned = records["unversioned"]
    assert unversioned.status == "refused" and "does not declare TINYCORE_PLUGIN_API" in unversioned.reason
    assert "pip install --upgrade tiny-unversioned" in unversioned.reason


def test_plugin_raising_in_a_hook_is_marked_broken(plugin_dir: Path) -> None:
    manager = PluginManager(entry_points=entry_points_in(plugin_dir))
    names = [spec.name for spec, _record in manager.device_specs()]
    assert names == ["BLOCKED", "GOOD", "FLAKY", "ABSENT", "FILES"]
    hookfail = by_name(manager)["hookfail"]
    assert hookfail.status == "broken"
    assert hookfail.reason == "hook tiny_devices raised ValueError: tiny_devices failed on purpose"
    assert "ValueError" in hookfail.traceback


def _allocator_plugin(root: Path, name: str, body: str, marker: str = "@hookimpl") -> None:
    """A distribution tiny-NAME whose tiny_allocator hook notes its call in tp_calls.CALLS and then runs `body`."""
    source = ("import tp_calls\nfrom tinycore.plugins import hookimpl\nTINYCORE_PLUGIN_API = 1\n"
              f"{marker}\ndef tiny_allocator(device):\n    tp_calls.CALLS.append({name!r})\n    {body}\n")
    write_distribution(root, f"tiny-{name}", "1.0", {name: f"tp_{name}.hooks"}, {f"tp_{name}.hooks": source})


def test_firstresult_hook_stops_at_the_first_answer_in_discovery_order(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tp_calls.py").write_text("CALLS = []\n")
    _allocator_plugin(tmp_path, "anone", "return None")
    _allocator_plugin(tmp_path, "braise", "raise OSError('no memory on purpose')")
    _allocator_plugin(tmp_path, "canswer", "return ('allocator of', device)")
    _allocator_plugin(tmp_path, "dlater", "return ('should not be asked', device)")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        manager = PluginManager(entry_points=entry_points_in(tmp_path))
        assert manager.call_first("tiny_allocator", device="DEV0") == ("allocator of", "DEV0")
        import tp_calls
        assert tp_calls.CALLS == ["anone", "braise", "canswer"], "pluggy stops at the first non-None answer"
        records = by_name(manager)
        assert records["braise"].status == "broken"
        assert records["braise"].reason == "hook tiny_allocator raised OSError: no memory on purpose"
        assert records["dlater"].status == "ok" and records["dlater"].hooks == ("tiny_allocator",)
        tp_calls.CALLS.clear()
        assert manager.call_first("tiny_allocator", device="DEV1") == ("allocator of", "DEV1")
        assert tp_calls.CALLS == ["anone", "canswer"], "a broken plugin is not called again"
    finally:
        for module in [name for name in sys.modules if name.startswith("tp_")]:
            del sys.modules[module]


def test_hook_options_of_pluggy_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tp_calls.py").write_text("CALLS = []\n")
    _allocator_plugin(tmp_path, "aplain", "return 'plain'")
    _allocator_plugin(tmp_path, "zeager", "return 'eager'", marker="@hookimpl(tryfirst=True)")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        manager = PluginManager(entry_points=entry_points_in(tmp_path))
        assert manager.call_first("tiny_allocator", device="DEV0") == "eager", "tryfirst outranks discovery order"
        import tp_calls
        assert tp_calls.CALLS == ["zeager"]
    finally:
        for module in [name for name in sys.modules if name.startswith("tp_")]:
            del sys.modules[module]


def test_hook_returning_the_wrong_type_is_marked_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = ("from tinycore.plugins import hookimpl\nTINYCORE_PLUGIN_API = 1\n"
              "@hookimpl\ndef tiny_devices():\n    return ['CPU']\n")
    write_distribution(tmp_path, "tiny-wrong", "1.0", {"wrong": "tp_wrong.hooks"}, {"tp_wrong.hooks": source})
    monkeypatch.syspath_prepend(str(tmp_path))
    manager = PluginManager(entry_points=entry_points_in(tmp_path))
    assert manager.device_specs() == []
    record = by_name(manager)["wrong"]
    assert record.status == "broken" and "expected a list of DeviceSpec" in record.reason


def test_hook_with_unknown_argument_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = ("from tinycore.plugins import hookimpl\nTINYCORE_PLUGIN_API = 1\n"
              "@hookimpl\ndef tiny_renderers(device, colour):\n    return []\n")
    write_distribution(tmp_path, "tiny-badargs", "1.0", {"badargs": "tp_badargs.hooks"}, {"tp_badargs.hooks": source})
    monkeypatch.syspath_prepend(str(tmp_path))
    record = by_name(PluginManager(entry_points=entry_points_in(tmp_path)))["badargs"]
    assert record.status == "broken" and "hooks of 'tp_badargs.hooks' are invalid" in record.reason


def test_block_list_skips_without_importing(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_DISABLE_PLUGINS", "blocked, tiny-future")
    manager = PluginManager(entry_points=entry_points_in(plugin_dir))
    records = by_name(manager)
    assert records["blocked"].status == "disabled" and "TINYCORE_DISABLE_PLUGINS" in records["blocked"].reason
    assert records["future"].status == "disabled", "distribution names work too"
    assert "tp_blocked.hooks" not in sys.modules and "tp_future.hooks" not in sys.modules
    assert "BLOCKED" not in [spec.name for spec, _record in manager.device_specs()]
    assert records["good"].status == "ok"


def test_allow_list_loads_only_listed_plugins(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_PLUGINS", "good")
    records = by_name(PluginManager(entry_points=entry_points_in(plugin_dir)))
    assert records["good"].status == "ok"
    for name in ("blocked", "broken", "future", "hookfail"):
        assert records[name].status == "not allowed"
        assert records[name].reason == "not listed in TINYCORE_PLUGINS='good'"
    assert "tp_broken.hooks" not in sys.modules


def test_empty_allow_list_loads_nothing(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_PLUGINS", "")
    manager = PluginManager(entry_points=entry_points_in(plugin_dir))
    assert {record.status for record in manager.records} == {"not allowed"}
    assert manager.device_specs() == []


def test_trace_prints_each_hook_call(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TINYCORE_TRACE_PLUGINS", "1")
    manager = PluginManager(entry_points=entry_points_in(plugin_dir))
    manager.renderer_specs("CPU")
    error = capsys.readouterr().err
    assert "tinycore.plugins: good.tiny_renderers(device='CPU') -> [RendererSpec(name='XR'" in error
    assert "tinycore.plugins: blocked.tiny_renderers(device='CPU') -> []" in error


def test_discovery_reads_the_entry_point_group_once(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    real_entry_points = importlib.metadata.entry_points

    def counting_entry_points(**selection: Any) -> Any:
        calls.append(selection)
        return [point for point in real_entry_points(**selection) if point.name in ("good", "broken")]

    monkeypatch.setattr(importlib.metadata, "entry_points", counting_entry_points)
    manager = PluginManager()
    assert calls == [], "nothing happens before first use"
    manager.device_specs()
    manager.renderer_specs("GOOD")
    manager.interface_specs("GOOD")
    assert [record.name for record in manager.records] == ["broken", "good"]
    assert calls == [{"group": "tinycore.plugins"}]


def test_spec_dataclasses_validate_and_are_frozen() -> None:
    spec = DeviceSpec("X", 1, "package.module:Thing")
    with pytest.raises(AttributeError):
        spec.name = "Y"  # type: ignore[misc]
    with pytest.raises(ValueError, match="upper-case"):
        DeviceSpec("cpu", 1, "a.b:C")
    with pytest.raises(ValueError, match="import path"):
        DeviceSpec("CPU", 1, "a.b.C")
    with pytest.raises(ValueError, match="import path"):
        RendererSpec("C", "no_colon")
    with pytest.raises(ValueError, match="import path"):
        DeviceSpec("CPU", 1, "a.b:C", probe="a.b")
    assert InterfaceSpec("MOCK", "a.b:make", is_mock=True).is_mock


def test_load_object_resolves_and_explains() -> None:
    assert load_object("json:dumps") is json.dumps
    assert load_object("os.path:join.__name__") == "join"
    with pytest.raises(ImportError, match="has no attribute 'nothing_here'"):
        load_object("json:nothing_here")
    with pytest.raises(ModuleNotFoundError):
        load_object("no_such_module_anywhere:thing")


def test_hookimpl_marks_for_the_tinycore_project() -> None:
    @hookimpl
    def tiny_devices() -> list[DeviceSpec]:
        return []

    assert hasattr(tiny_devices, "tinycore_impl")


def test_bounded_probe_turns_hangs_and_errors_into_reasons() -> None:
    started = time.perf_counter()
    assert bounded_probe(lambda: time.sleep(5) or (True, "", 1), timeout_s=0.2) == (
        False, "probe did not answer within 0.2 s", 0)
    assert time.perf_counter() - started < 2
    assert bounded_probe(lambda: 1 / 0) == (False, "probe failed: ZeroDivisionError: division by zero", 0)
    assert bounded_probe(lambda: (1, "fine", "3")) == (True, "fine", 3)


# ---- fresh interpreters -----------------------------------------------------------------------------------------

SCENARIO = """
import json, sys
import tinycore
from tinycore.device import Device
from tinycore.plugins.manager import get_plugin_manager
good = Device["GOOD"]
print(json.dumps({"records": {r.name: [r.status, r.reason] for r in get_plugin_manager().records},
                  "default": Device.DEFAULT, "renderer": good.renderer_spec.name,
                  "interface": good.interface_spec.name,
                  "devices": [spec.name for spec, _ in Device.specs()]}))
"""


def run_scenario(path: Path, **environment: str) -> dict[str, Any]:
    """Run SCENARIO in a fresh interpreter and return what it printed."""
    result = run_python(SCENARIO, path, environment)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_fresh_interpreter_isolates_every_kind_of_failure(tmp_path: Path) -> None:
    report = run_scenario(write_test_plugins(tmp_path))
    records = report["records"]
    assert records["good"] == ["ok", ""]
    assert records["broken"][0] == "broken" and "broken on purpose" in records["broken"][1]
    assert records["future"][0] == "refused" and "pip install --upgrade" in records["future"][1]
    assert records["hookfail"][0] == "broken" and "tiny_devices failed on purpose" in records["hookfail"][1]
    assert records["blocked"] == ["ok", ""]
    assert report["renderer"] == "GR" and report["interface"] == "REAL"
    assert "FUTURE" not in report["devices"] and "GOOD" in report["devices"]
    assert report["default"] == "GOOD", "GOOD has the highest priority among the devices that open"


def test_fresh_interpreter_with_block_list(tmp_path: Path) -> None:
    report = run_scenario(write_test_plugins(tmp_path), TINYCORE_DISABLE_PLUGINS="blocked")
    assert report["records"]["blocked"] == ["disabled", "listed in TINYCORE_DISABLE_PLUGINS"]
    assert "BLOCKED" not in report["devices"] and report["renderer"] == "GR"


def test_fresh_interpreter_with_allow_list(tmp_path: Path) -> None:
    report = run_scenario(write_test_plugins(tmp_path), TINYCORE_PLUGINS="good,blocked")
    statuses = {name: status for name, (status, _reason) in report["records"].items()}
    assert statuses["good"] == "ok" and statuses["blocked"] == "ok"
    assert statuses["broken"] == statuses["future"] == statuses["hookfail"] == "not allowed"
    assert all(status == "not allowed" for name, status in statuses.items() if name not in ("good", "blocked"))


def test_fresh_interpreter_with_dev(tmp_path: Path) -> None:
    report = run_scenario(write_test_plugins(tmp_path), DEV="FAKE+GOOD:GR2")
    assert (report["default"], report["renderer"], report["interface"]) == ("GOOD", "GR2", "FAKE")


def test_dev_naming_a_missing_device_fails_with_the_distribution(tmp_path: Path) -> None:
    result = run_python("import tinycore\nfrom tinycore.device import Device\nDevice.DEFAULT",
                        write_test_plugins(tmp_path), {"DEV": "WEBGPU", "TINYCORE_PLUGINS": "good"})
    assert result.returncode != 0
    assert "no installed plugin provides device 'WEBGPU'" in result.stderr
    assert "installed devices: FLAKY (tiny-good 1.2.3), ABSENT (tiny-good 1.2.3), GOOD" in result.stderr
    # Where tiny-webgpu is not installed the error says how to get it; where it is, that the allow list left it out.
    left_out = "tiny-webgpu is installed but its plugin is not allowed: not listed in TINYCORE_PLUGINS"
    assert "pip install -e " + str(REPOSITORY_ROOT / "plugins" / "tiny-webgpu") in result.stderr \
        or left_out in result.stderr, "from a checkout, the hint installs the plugin's folder"


def test_import_tinycore_imports_no_plugin_device_module(tmp_path: Path) -> None:
    code = """
    import json, sys
    import tinycore
    plugin_roots = ("tiny_cpu", "tiny_disk", "tiny_cl", "tiny_webgpu", "tiny_nv", "tiny_amd", "tp_good")
    print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in plugin_roots)))
    """
    result = run_python(code, write_test_plugins(tmp_path))
    assert result.returncode == 0, result.stderr
    imported = json.loads(result.stdout.strip().splitlines()[-1])
    assert [name for name in imported if name.endswith(".device")] == [], imported
    assert imported == [], "discovery is lazy: not even a plugin's hooks module is imported by `import tinycore`"


def test_import_tinycore_survives_every_broken_plugin(tmp_path: Path) -> None:
    path = write_test_plugins(tmp_path)
    result = run_python("import tinycore\nfrom tinycore.device import Device\nprint(sorted(Device.opened()))", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
