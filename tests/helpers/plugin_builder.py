"""Build real throwaway plugin distributions for tests: a package plus a `*.dist-info` directory (METADATA and
entry_points.txt) in a directory that is then put on sys.path or PYTHONPATH, exactly as pip would lay them out.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def write_distribution(root: Path, distribution: str, version: str, entry_points: dict[str, str],
                       modules: dict[str, str]) -> None:
    """Write distribution `distribution` (`version`) into `root`.

    entry_points: entry-point name -> module path, in the group `tinycore.plugins`.
    modules: dotted module name -> source; packages along the way get an empty `__init__.py`.
    """
    for module_name, source in modules.items():
        parts = module_name.split(".")
        for depth in range(1, len(parts)):
            package = root.joinpath(*parts[:depth])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(textwrap.dedent(source))
    info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    lines = ["[tinycore.plugins]"] + [f"{name} = {module}" for name, module in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def run_python(code: str, path: Path | None, environment: dict[str, str] | None = None,
               arguments: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -c code` (or `python arguments...`) in a fresh interpreter with `path` and the repository root
    on PYTHONPATH, the plugin-control variables cleared unless given, and NO_COLOR set."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_TRACE_PLUGINS", "DEV")}
    env["PYTHONPATH"] = os.pathsep.join(([str(path)] if path is not None else []) + [str(REPOSITORY_ROOT)])
    env["NO_COLOR"] = "1"
    env.update(environment or {})
    command = [sys.executable] + (arguments if arguments is not None else ["-c", textwrap.dedent(code)])
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=str(REPOSITORY_ROOT))


GOOD_HOOKS = """
from tinycore.plugins import DeviceSpec, InterfaceSpec, RendererSpec, hookimpl

TINYCORE_PLUGIN_API = 1


def probe_ok():
    return (True, "always here", 2)


def probe_missing():
    return (False, "the test hardware is unplugged", 0)


@hookimpl
def tiny_devices():
    return [DeviceSpec("GOOD", 500, "tp_good.device:GoodDevice", "a device that opens", probe="tp_good.hooks:probe_ok"),
            DeviceSpec("FLAKY", 600, "tp_good.device:FlakyDevice", "a device that fails to open"),
            DeviceSpec("ABSENT", 550, "tp_good.device:GoodDevice", "hardware missing",
                       probe="tp_good.hooks:probe_missing"),
            DeviceSpec("FILES", -1, "tp_good.device:GoodDevice", "never the default")]


@hookimpl
def tiny_renderers(device):
    if device == "GOOD":
        return [RendererSpec("BROKENR", "tp_good.device:make_broken_renderer", "cannot be built here"),
                RendererSpec("GR", "tp_good.device:make_renderer", "the good renderer"),
                RendererSpec("GR2", "tp_good.device:make_renderer", "a second renderer")]
    if device == "CPU":
        return [RendererSpec("XR", "tp_good.device:make_renderer", "a renderer added to another plugin's device")]
    return []


@hookimpl
def tiny_interfaces(device):
    if device == "FILES":
        return [InterfaceSpec("FAKE", "tp_good.device:make_interface", is_mock=True, description="only a mock")]
    if device != "GOOD":
        return []
    return [InterfaceSpec("FAKE", "tp_good.device:make_interface", is_mock=True, description="a mock"),
            InterfaceSpec("REAL", "tp_good.device:make_interface", description="the real one")]


@hookimpl
def tiny_allocator(device):
    return ("allocator for", device.device) if getattr(device, "device", "").startswith("GOOD") else None
"""

GOOD_DEVICE = """
from tinycore.device import select_allocator, select_interface, select_renderer, target_for

OPENED = []


class GoodDevice:
    def __init__(self, device):
        OPENED.append(device)
        self.device = device
        self.renderer, self.compiler, self.renderer_spec = select_renderer(device)
        self.interface_spec, self.interface = select_interface(device)
        self.allocator = select_allocator(self)
        self.target = target_for(device)


class FlakyDevice:
    def __init__(self, device):
        raise OSError("the flaky board did not answer")


def make_renderer(device, arch):
    return ("renderer", device, arch), ("compiler", device)


def make_broken_renderer(device, arch):
    raise RuntimeError("its compiler is not installed")


def make_interface(device, indices):
    return ("interface", device, indices)
"""

BROKEN_HOOKS = """
raise RuntimeError("this plugin is broken on purpose")
"""

FUTURE_HOOKS = """
from tinycore.plugins import DeviceSpec, hookimpl

TINYCORE_PLUGIN_API = 99


@hookimpl
def tiny_devices():
    return [DeviceSpec("FUTURE", 900, "tp_future.device:FutureDevice")]
"""

BLOCKED_HOOKS = """
from tinycore.plugins import DeviceSpec, RendererSpec, hookimpl

TINYCORE_PLUGIN_API = 1


@hookimpl
def tiny_devices():
    return [DeviceSpec("BLOCKED", 50, "tp_good.device:GoodDevice")]


@hookimpl
def tiny_renderers(device):
    return [RendererSpec("BR", "tp_good.device:make_renderer", "added to GOOD by another plugin")] \\
        if device == "GOOD" else []
"""

HOOK_RAISES = """
from tinycore.plugins import hookimpl

TINYCORE_PLUGIN_API = 1


@hookimpl
def tiny_devices():
    raise ValueError("tiny_devices failed on purpose")
"""


def write_test_plugins(root: Path) -> Path:
    """Write the standard set of throwaway plugin distributions into `root` and return it.

    tiny-good (entry point "good"): devices GOOD (opens, priority 500), FLAKY (priority 600, fails to open),
      ABSENT (priority 550, probe says unavailable) and FILES (priority -1); renderers for GOOD and a renderer XR
      added to CPU; interfaces REAL and the mock FAKE for GOOD, only FAKE for FILES; an allocator for GOOD.
    tiny-broken ("broken"): raises at import.  tiny-future ("future"): plugin API level 99.
    tiny-blocked ("blocked"): a device BLOCKED and a renderer BR for GOOD (tests disable it).
    tiny-hookfail ("hookfail"): tiny_devices raises.
    """
    write_distribution(root, "tiny-good", "1.2.3", {"good": "tp_good.hooks"},
                       {"tp_good.hooks": GOOD_HOOKS, "tp_good.device": GOOD_DEVICE})
    write_distribution(root, "tiny-broken", "0.0.1", {"broken": "tp_broken.hooks"}, {"tp_broken.hooks": BROKEN_HOOKS})
    write_distribution(root, "tiny-future", "9.0.0", {"future": "tp_future.hooks"}, {"tp_future.hooks": FUTURE_HOOKS})
    write_distribution(root, "tiny-blocked", "0.1.0", {"blocked": "tp_blocked.hooks"},
                       {"tp_blocked.hooks": BLOCKED_HOOKS})
    write_distribution(root, "tiny-hookfail", "0.1.0", {"hookfail": "tp_hookfail.hooks"},
                       {"tp_hookfail.hooks": HOOK_RAISES})
    return root
