"""The `tiny` command: `tiny devices` and `tiny plugins`, as text and JSON, with colours only on a terminal.

Most tests run `python -m tinycore.cli` in a fresh interpreter over real throwaway plugin distributions."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from plugin_builder import REPOSITORY_ROOT, run_python, write_test_plugins

from tinycore import cli


def tiny(path: Path, *arguments: str, **environment: str) -> str:
    """Run `tiny ARGUMENTS` in a fresh interpreter and return its standard output (asserting it succeeded)."""
    result = run_python("", path, environment, arguments=["-m", "tinycore.cli", *arguments])
    assert result.returncode == 0, result.stderr
    return result.stdout


def devices_json(path: Path, **environment: str) -> dict[str, Any]:
    """`tiny devices --json`, parsed; devices by name (plugins that did not load by "(plugin name)")."""
    report = json.loads(tiny(path, "devices", "--json", **environment))
    report["by_name"] = {device["name"] or f"({device['plugin']})": device for device in report["devices"]}
    return report


def test_console_script_is_declared() -> None:
    text = (REPOSITORY_ROOT / "pyproject.toml").read_text()
    scripts = text.split("[project.scripts]", 1)[1].split("[", 1)[0]
    assert 'tiny = "tinycore.cli:main"' in scripts


def test_devices_json_status_reason_default_and_parts(tmp_path: Path) -> None:
    report = devices_json(write_test_plugins(tmp_path))
    devices = report["by_name"]
    good = devices["GOOD"]
    assert (good["status"], good["reason"], good["count"], good["default"]) == ("ok", "always here", 2, True)
    assert (good["distribution"], good["version"], good["plugin"]) == ("tiny-good", "1.2.3", "good")
    assert report["default"] == "GOOD" and report["default_error"] is None
    renderers = {row["name"]: row for row in good["renderers"]}
    assert list(renderers) == ["BROKENR", "GR", "GR2", "BR"]
    assert renderers["GR"]["selected"] and not renderers["BROKENR"]["selected"]
    assert renderers["GR2"]["dev"] == "DEV=GOOD:GR2" and renderers["BR"]["distribution"] == "tiny-blocked"
    interfaces = {row["name"]: row for row in good["interfaces"]}
    assert interfaces["REAL"]["selected"] and not interfaces["FAKE"]["selected"] and interfaces["FAKE"]["is_mock"]
    assert interfaces["FAKE"]["dev"] == "DEV=FAKE+GOOD"
    assert devices["FLAKY"]["status"] == "fails to open"
    assert "OSError: the flaky board did not answer" in devices["FLAKY"]["reason"]
    absent = devices["ABSENT"]
    assert (absent["status"], absent["reason"]) == ("unavailable", "the test hardware is unplugged")
    assert devices["FILES"]["dev"] is None, "a negative priority is never the default"
    assert devices["(broken)"]["status"] == "plugin broken"
    assert "this plugin is broken on purpose" in devices["(broken)"]["reason"]
    assert devices["(future)"]["status"] == "plugin refused" and "API level 99" in devices["(future)"]["reason"]
    assert devices["(hookfail)"]["status"] == "plugin broken"


def test_devices_json_shows_a_renderer_added_to_cpu(tmp_path: Path) -> None:
    devices = devices_json(write_test_plugins(tmp_path))["by_name"]
    if "CPU" in devices:  # tiny-cpu is installed here: XR is offered after CPU's own renderers
        names = [row["name"] for row in devices["CPU"]["renderers"]]
        assert names[-1] == "XR" and names.index("XR") > 0
        assert devices["CPU"]["renderers"][-1]["dev"] == "DEV=CPU:XR"
    else:  # no plugin provides CPU: the renderer XR waits for one, and no CPU row is invented
        assert all(device["name"] != "CPU" for device in devices.values())


def test_devices_with_block_and_allow_lists(tmp_path: Path) -> None:
    path = write_test_plugins(tmp_path)
    blocked = devices_json(path, TINYCORE_DISABLE_PLUGINS="blocked")["by_name"]
    assert blocked["(blocked)"]["status"] == "plugin disabled"
    assert blocked["(blocked)"]["reason"] == "listed in TINYCORE_DISABLE_PLUGINS"
    assert "BLOCKED" not in blocked
    allowed = devices_json(path, TINYCORE_PLUGINS="good")["by_name"]
    assert allowed["(broken)"]["status"] == "plugin not allowed"
    assert allowed["(broken)"]["reason"] == "not listed in TINYCORE_PLUGINS='good'"
    assert allowed["GOOD"]["status"] == "ok"


def test_devices_with_dev(tmp_path: Path) -> None:
    report = devices_json(write_test_plugins(tmp_path), DEV="FAKE+GOOD:GR2", TINYCORE_PLUGINS="good")
    good = report["by_name"]["GOOD"]
    assert report["default"] == "GOOD" and report["dev"] == "FAKE+GOOD:GR2"
    assert [row["name"] for row in good["renderers"] if row["selected"]] == ["GR2"]
    assert [row["name"] for row in good["interfaces"] if row["selected"]] == ["FAKE"]


def test_devices_table(tmp_path: Path) -> None:
    output = tiny(write_test_plugins(tmp_path), "devices", TINYCORE_DISABLE_PLUGINS="blocked")
    lines = output.splitlines()
    assert lines[0].split() == ["DEVICE", "STATUS", "COUNT", "DISTRIBUTION", "RENDERERS", "INTERFACES"]
    good_row = next(line for line in lines if " GOOD " in line)
    assert good_row.startswith("*") and good_row.split()[1:6] == ["GOOD", "ok", "2", "tiny-good", "1.2.3"]
    assert "BROKENR, GR*, GR2" in good_row and "FAKE (mock), REAL*" in good_row
    assert any("FLAKY" in line and "fails to open" in line for line in lines)
    assert any(line.split()[:3] == ["(blocked)", "plugin", "disabled"] for line in lines)
    assert "default device: GOOD (highest priority that opens; set DEV to choose)" in output
    assert "FLAKY: fails to open: could not open FLAKY" in output
    assert "ABSENT: unavailable: the test hardware is unplugged" in output
    assert "plugin broken: broken: import of 'tp_broken.hooks' failed" not in output
    assert "plugin broken: plugin broken: import of 'tp_broken.hooks' failed" in output
    assert "    renderer GR2: DEV=GOOD:GR2  [tiny-good]" in output
    assert "    interface FAKE: DEV=FAKE+GOOD  [tiny-good]" in output
    assert "\x1b[" not in output, "no colours when stdout is not a terminal"


def test_plugins_json_and_table(tmp_path: Path) -> None:
    path = write_test_plugins(tmp_path)
    plugins = {plugin["name"]: plugin for plugin in json.loads(tiny(path, "plugins", "--json"))}
    good = plugins["good"]
    assert (good["distribution"], good["version"], good["api_level"], good["status"]) == ("tiny-good", "1.2.3", 1, "ok")
    assert good["hooks"] == ["tiny_devices", "tiny_renderers", "tiny_allocator", "tiny_interfaces"]
    assert plugins["broken"]["status"] == "broken" and "Traceback" in plugins["broken"]["traceback"]
    assert plugins["future"]["status"] == "refused" and plugins["future"]["api_level"] == 99
    table = tiny(path, "plugins")
    assert "plugin API level 1" in table.splitlines()[0]
    good_row = next(line for line in table.splitlines() if line.startswith("good "))
    assert good_row.split()[:5] == ["good", "tiny-good", "1.2.3", "1", "ok"]
    assert "future: refused: plugin 'future' (tiny-future 9.0.0) was written for plugin API level 99" in table
    assert "Traceback" not in table
    assert "Traceback" in tiny(path, "plugins", "--traceback")
    blocked = tiny(path, "plugins", TINYCORE_DISABLE_PLUGINS="blocked")
    assert "blocked: disabled: listed in TINYCORE_DISABLE_PLUGINS" in blocked


def test_no_colour_under_no_color_even_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    plugins = [{"name": "good", "distribution": "tiny-good", "version": "1.0", "api_level": 1, "status": "ok",
                "hooks": ["tiny_devices"], "reason": "", "notes": [], "traceback": ""}]
    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[32mok" in cli.format_plugins(plugins), "green status on a terminal"
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in cli.format_plugins(plugins)


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "devices" in capsys.readouterr().out


def test_unknown_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["gadgets"])
    assert caught.value.code == 2
    assert "invalid choice: 'gadgets'" in capsys.readouterr().err


def test_devices_with_a_malformed_dev_still_lists_devices(tmp_path: Path) -> None:
    report = devices_json(write_test_plugins(tmp_path), DEV="GOOD;;", TINYCORE_PLUGINS="good")
    assert report["default"] is None and "malformed DEV='GOOD;;': empty target" in report["default_error"]
    good = report["by_name"]["GOOD"]
    assert good["status"] == "fails to open" and "DevError: malformed DEV='GOOD;;'" in good["reason"]


def test_a_device_that_cannot_run_gets_the_fix_not_make_it_the_default(tmp_path: Path) -> None:
    """An unavailable device or one that fails to open is listed with its reason and what fixes it; only a device
    that runs is offered as the default."""
    output = tiny(write_test_plugins(tmp_path), "devices", TINYCORE_PLUGINS="good")
    report = devices_json(write_test_plugins(tmp_path), TINYCORE_PLUGINS="good")["by_name"]
    assert report["ABSENT"]["dev"] is None and report["FLAKY"]["dev"] is None
    assert "install or enable what the reason above names" in report["ABSENT"]["fix"]
    assert report["GOOD"]["dev"] == "DEV=GOOD" and report["GOOD"]["fix"] is None
    assert "make it the default: DEV=ABSENT" not in output and "make it the default: DEV=FLAKY" not in output
    absent = output.split("ABSENT: unavailable: the test hardware is unplugged\n", 1)[1].splitlines()[0]
    assert absent.startswith("    cannot run here; to fix: install or enable") and "DEV=ABSENT" in absent
    assert "    make it the default: DEV=GOOD" in output


@pytest.mark.parametrize("command", ["plugins", "devices"])
def test_a_closed_pipe_ends_quietly(tmp_path: Path, command: str) -> None:
    """`tiny plugins | head -1`: the reader has gone before the table is written; no traceback, status 0."""
    import os
    import subprocess
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE, as after `head -1` exits
    env = {key: value for key, value in os.environ.items() if key != "DEV"}
    env["PYTHONPATH"] = str(REPOSITORY_ROOT)
    try:
        result = subprocess.run([sys.executable, "-m", "tinycore.cli", command], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == 0


HIDE_LLVMLITE = ("import sys\n"
                 "class HideLlvmlite:\n"
                 "    def find_spec(self, name, path=None, target=None):\n"
                 "        if name.split('.')[0] == 'llvmlite':\n"
                 "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
                 "sys.meta_path.insert(0, HideLlvmlite())\n")


def test_llvm_renderer_without_llvmlite_is_unavailable_and_refused(tmp_path: Path) -> None:
    """Without llvmlite, `tiny devices` shows CPU's LLVM renderer as unavailable with the install line for this
    checkout (not `pip install 'tiny-cpu[llvm]'`), and DEV=CPU:LLVM is refused when tinycore is imported, before any
    kernel runs, as a DEV naming a renderer that does not exist is."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_LLVMLITE)
    install_line = f"-m pip install -e '{REPOSITORY_ROOT / 'plugins' / 'tiny-cpu'}[llvm]'"
    report = devices_json(tmp_path, TINYCORE_PLUGINS="cpu")
    llvm = next(row for row in report["by_name"]["CPU"]["renderers"] if row["name"] == "LLVM")
    assert llvm["available"] is False and not llvm["selected"], llvm
    assert llvm["reason"].startswith("llvmlite is not installed: ") and install_line in llvm["reason"], llvm
    text = tiny(tmp_path, "devices", TINYCORE_PLUGINS="cpu")
    assert "LLVM (unavailable)" in text and "renderer LLVM: unavailable: llvmlite is not installed" in text, text
    assert "DEV=CPU:LLVM" not in text, "no line offers the unavailable renderer"
    refused = run_python("import tinycore", tmp_path, {"DEV": "CPU:LLVM", "TINYCORE_PLUGINS": "cpu"})
    assert refused.returncode != 0
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("tinycore.device.registry.SelectionError: CPU's renderer 'LLVM' is unavailable here "
                           "(DEV='CPU:LLVM'): llvmlite is not installed") and "choose another: DEV=CPU:C" in last, last
    listed = tiny(tmp_path, "devices", DEV="CPU:LLVM", TINYCORE_PLUGINS="cpu")
    assert "DEV=CPU:LLVM is refused: SelectionError: CPU's renderer 'LLVM' is unavailable" in listed, listed


def test_llvm_renderer_with_llvmlite_is_offered() -> None:
    """With llvmlite installed (the dev environment's tiny-cpu[test]), the LLVM renderer is listed as available."""
    pytest.importorskip("llvmlite")
    from tinycore.device.registry import renderer_specs, renderer_status
    specs = {spec.name: spec for spec, _record in renderer_specs("CPU")}
    assert renderer_status(specs["LLVM"]) == (True, "llvmlite is installed")
    available, reason = renderer_status(specs["C"])
    assert available and reason.startswith("C compiler "), reason  # the C renderer names the compiler it found


def test_a_renderer_probe_that_raises_counts_as_unavailable() -> None:
    from tinycore.device.registry import renderer_status
    from tinycore.plugins.specs import RendererSpec
    spec = RendererSpec("ZZ", "tiny_cpu.renderer:make_c_renderer", probe="tinycore.plugins.install:_pip")
    ok, reason = renderer_status(spec)
    assert not ok and reason.startswith("probe tinycore.plugins.install:_pip raised "), reason
    with pytest.raises(ValueError, match="RendererSpec.probe must be an import path"):
        RendererSpec("ZZ", "tiny_cpu.renderer:make_c_renderer", probe="not a path")
