"""Registration checks for a device plugin: is it declared, installed and described the way tinycore finds it?

Every device plugin, in-tree or third-party, wants the same handful of checks in its own test suite. Call them from
plain test functions; each raises AssertionError with a message that says what to fix:

    import tiny_mydev.hooks as hooks
    from tinycore.testing import registration

    def test_api_level() -> None:
        registration.check_api_level(hooks)

    def test_device_spec() -> None:
        registration.check_device_spec(hooks, "MYDEV", "tiny_mydev.device:MyDevice", "tiny_mydev.hooks:probe")

The checks:

- `check_api_level`: the hooks module's TINYCORE_PLUGIN_API is the level this tinycore supports.
- `check_pyproject`: pyproject.toml names the distribution, its dependencies (the tinycore range) and the entry point.
- `check_installed_entry_point`: the entry point is installed, names the hooks module and belongs to the distribution.
- `check_device_spec`: `tiny_devices()` describes the device with the expected import paths, and the probe resolves.
- `check_probe_is_quick`: the probe answers `(ok, reason, count)` well formed and within PROBE_SECONDS.
- `check_tiny_devices_row`: `tiny devices --json` lists the device, from the distribution, with a status that agrees
  with the probe (ok, or "fails to open" with an expected reason, or "unavailable" with the probe's reason).

Importing this module is cheap: it imports neither pytest nor any plugin. The checks raise AssertionError
explicitly, so they also hold under `python -O`.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tinycore.plugins import PLUGIN_API_LEVEL, DeviceSpec, load_object

ENTRY_POINT_GROUP = "tinycore.plugins"
"""The entry-point group tinycore discovers plugins in."""

CORE_REQUIREMENT = "tinycore>=0.1,<0.2"
"""The tinycore range a plugin written for this plugin API level depends on."""

PROBE_SECONDS = 15.0
"""How long a probe may take on this machine: `tiny devices` and default-device selection run every probe."""

TINY_DEVICES_TIMEOUT_SECONDS = 120
"""How long `tiny devices --json` may run in `check_tiny_devices_row` before the check fails."""

ProbeAnswer = tuple[bool, str, int]
"""What a probe returns: (available, reason, device count)."""

__all__ = ["ENTRY_POINT_GROUP", "CORE_REQUIREMENT", "PROBE_SECONDS", "TINY_DEVICES_TIMEOUT_SECONDS", "ProbeAnswer",
           "check_api_level", "check_pyproject", "check_installed_entry_point", "check_device_spec",
           "check_probe_is_quick", "check_tiny_devices_row", "check_registration"]


def _require(condition: bool, message: str) -> None:
    """Raise AssertionError(message) unless `condition` holds (explicit, so it also holds under `python -O`)."""
    if not condition:
        raise AssertionError(message)


def check_api_level(hooks_module: ModuleType) -> None:
    """The hooks module declares `TINYCORE_PLUGIN_API` equal to the plugin API level this tinycore supports."""
    declared = getattr(hooks_module, "TINYCORE_PLUGIN_API", None)
    _require(declared == PLUGIN_API_LEVEL,
             f"{hooks_module.__name__}.TINYCORE_PLUGIN_API is {declared!r}, but this tinycore supports plugin API "
             f"level {PLUGIN_API_LEVEL!r}: set TINYCORE_PLUGIN_API = {PLUGIN_API_LEVEL!r} in {hooks_module.__name__} "
             "once the plugin follows that level's hook specifications (tinycore.plugins.hookspecs)")


def check_pyproject(plugin_root: str | Path, distribution: str, entry_name: str, hooks_module_name: str, *,
                    dependencies: Sequence[str] = (CORE_REQUIREMENT,)) -> None:
    """`plugin_root`/pyproject.toml declares the distribution, its dependencies and the tinycore entry point.

    The file must contain, as written: `name = "DISTRIBUTION"`; `dependencies = ["...", ...]` listing exactly
    `dependencies` in order (by default only the tinycore range, CORE_REQUIREMENT); and the table
    `[project.entry-points."tinycore.plugins"]` whose first line is `ENTRY_NAME = "HOOKS_MODULE_NAME"`.
    """
    pyproject = Path(plugin_root) / "pyproject.toml"
    _require(pyproject.is_file(), f"{pyproject} does not exist: a plugin is a distribution with a pyproject.toml")
    text = pyproject.read_text()
    name_line = f'name = "{distribution}"'
    _require(name_line in text, f"{pyproject}: [project] must declare the distribution name: {name_line}")
    dependency_line = "dependencies = [" + ", ".join(f'"{requirement}"' for requirement in dependencies) + "]"
    _require(dependency_line in text,
             f"{pyproject}: [project] must declare its dependencies, the compatible tinycore range first, as "
             f"{dependency_line}")
    entry_point = f'[project.entry-points."{ENTRY_POINT_GROUP}"]\n{entry_name} = "{hooks_module_name}"'
    _require(entry_point in text,
             f"{pyproject}: must declare the entry point that makes it a tinycore plugin, the entry right below the "
             f"table header:\n{entry_point}")


def check_installed_entry_point(entry_name: str, hooks_module_name: str, distribution: str, *,
                                plugin_root: str | Path | None = None) -> None:
    """The installed entry point `entry_name` of group tinycore.plugins names `hooks_module_name` and belongs to
    `distribution`. `plugin_root` (the directory of the plugin's pyproject.toml) only makes the pip command in the
    message exact."""
    points = {point.name: point for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    source = os.path.relpath(plugin_root) if plugin_root is not None else "<the directory of its pyproject.toml>"
    _require(entry_name in points,
             f"{distribution} is not installed: pip install -e {source} (no entry point {entry_name!r} in group "
             f"{ENTRY_POINT_GROUP}; installed: {', '.join(sorted(points)) or 'none'})")
    point = points[entry_name]
    _require(point.value == hooks_module_name,
             f"the installed entry point {entry_name!r} names {point.value!r}, expected {hooks_module_name!r}: fix "
             f"pyproject.toml and reinstall with pip install -e {source}")
    owner = point.dist.metadata["Name"] if point.dist is not None else None
    _require(owner == distribution,
             f"the installed entry point {entry_name!r} belongs to distribution {owner!r}, expected {distribution!r}: "
             "another distribution claims the name, or an old install is left over (pip uninstall it)")


def check_device_spec(hooks_module: ModuleType, device_name: str, device_class: str, probe: str | None, *,
                      only: bool = True) -> DeviceSpec:
    """`hooks_module.tiny_devices()` returns a DeviceSpec for `device_name` with the import paths `device_class`
    and `probe`, and the probe path resolves (to the hooks module's own function when it names that module).

    With `only` (the default) the spec must be the only one the plugin returns. Returns the spec.
    """
    specs = hooks_module.tiny_devices()
    names = [getattr(spec, "name", repr(spec)) for spec in specs]
    if only:
        _require(len(specs) == 1, f"{hooks_module.__name__}.tiny_devices() must return exactly one DeviceSpec "
                                  f"({device_name!r}); it returned {len(specs)}: {names}")
    matching = [spec for spec in specs if isinstance(spec, DeviceSpec) and spec.name == device_name]
    _require(len(matching) == 1, f"{hooks_module.__name__}.tiny_devices() must return one DeviceSpec named "
                                 f"{device_name!r}; it returned {names}")
    (spec,) = matching
    _require((spec.device_class, spec.probe) == (device_class, probe),
             f"DeviceSpec {device_name!r} has device_class={spec.device_class!r}, probe={spec.probe!r}; expected "
             f"device_class={device_class!r}, probe={probe!r}")
    if probe is not None:
        resolved = load_object(probe)
        module_name, _separator, attribute = probe.partition(":")
        if module_name == hooks_module.__name__:
            _require(resolved is getattr(hooks_module, attribute, None),
                     f"probe {probe!r} resolves to {resolved!r}, not to {hooks_module.__name__}.{attribute}")
        _require(callable(resolved), f"probe {probe!r} resolves to {resolved!r}, which is not callable")
    return spec


def check_registration(hooks_module: ModuleType, plugin_root: str | Path, device_name: str, device_class: str, *,
                       dependencies: Sequence[str] = (CORE_REQUIREMENT,)) -> DeviceSpec:
    """check_api_level, check_pyproject, check_installed_entry_point and check_device_spec for a plugin named the
    usual way: hooks in the module `tiny_NAME.hooks` (whose `probe` is the device's probe), distribution
    `tiny-NAME`, entry point `NAME`. Returns the device spec. A plugin named otherwise calls the four itself."""
    package, _separator, module = hooks_module.__name__.partition(".")
    _require(package.startswith("tiny_") and module == "hooks",
             f"check_registration derives the names from a hooks module tiny_NAME.hooks, got {hooks_module.__name__}: "
             "call check_api_level, check_pyproject, check_installed_entry_point and check_device_spec instead")
    entry_name = package.removeprefix("tiny_")
    distribution = f"tiny-{entry_name}"
    check_api_level(hooks_module)
    check_pyproject(plugin_root, distribution, entry_name, hooks_module.__name__, dependencies=dependencies)
    check_installed_entry_point(entry_name, hooks_module.__name__, distribution, plugin_root=plugin_root)
    return check_device_spec(hooks_module, device_name, device_class, f"{hooks_module.__name__}:probe")


def check_probe_is_quick(probe: Callable[[], Any]) -> ProbeAnswer:
    """Calling `probe()` on this machine answers within PROBE_SECONDS with `(ok: bool, reason: str, count: int)`,
    a non-empty reason, and a positive count exactly when ok. Returns the answer."""
    started = time.perf_counter()
    answer = probe()
    elapsed = time.perf_counter() - started
    _require(elapsed < PROBE_SECONDS,
             f"the probe took {elapsed:.1f} s (limit {PROBE_SECONDS:.0f} s): a probe must not open the device or wait "
             "on the hardware; check for a library or device node and count devices cheaply")
    _require(isinstance(answer, tuple) and len(answer) == 3,
             f"the probe must return (ok: bool, reason: str, count: int), got {answer!r}")
    ok, reason, count = answer
    _require(isinstance(ok, bool) and isinstance(reason, str) and bool(reason) and isinstance(count, int),
             f"the probe must return (ok: bool, reason: str, count: int) with a non-empty reason, got {answer!r}")
    _require((count > 0) == ok,
             f"the probe answered ok={ok} with count={count}: a device is available exactly when it counts at least "
             "one (return count 0 with ok False and a reason)")
    return (ok, reason, count)


def check_tiny_devices_row(entry_name: str, device_name: str, distribution: str, probe: Callable[[], Any], *,
                           fails_to_open_with: str | None = None) -> dict[str, Any]:
    """`tiny devices --json`, with only this plugin allowed (TINYCORE_PLUGINS=`entry_name`) and DEV unset, lists
    one row for `device_name` from `distribution` and plugin `entry_name`, with a status that agrees with `probe()`.

    When the probe answers not ok the row is "unavailable" with the probe's reason. When it answers ok the row is
    "ok", or, with `fails_to_open_with`, "fails to open" with that text in its reason (a device not built yet).
    Returns the row, for checks of a plugin's own (renderers, DEV lines).
    """
    environment = {**os.environ, "TINYCORE_PLUGINS": entry_name, "NO_COLOR": "1"}
    environment.pop("DEV", None)
    command = [sys.executable, "-m", "tinycore.cli", "devices", "--json"]
    result = subprocess.run(command, capture_output=True, text=True, env=environment,
                            timeout=TINY_DEVICES_TIMEOUT_SECONDS)
    described = f"`tiny devices --json` with TINYCORE_PLUGINS={entry_name}"
    _require(result.returncode == 0, f"{described} exited with status {result.returncode}:\n{result.stderr}")
    try:
        rows = json.loads(result.stdout)["devices"]
    except (ValueError, KeyError, TypeError) as error:
        raise AssertionError(f"{described} printed no JSON with a 'devices' list ({error}):\n{result.stdout}") from None
    matching = [row for row in rows if row["name"] == device_name]
    plugin_problems = [f"plugin {row['plugin']!r} is {row['status']!r}: {row['reason']}" for row in rows
                       if row["name"] is None and row["plugin"] == entry_name]
    _require(len(matching) == 1, f"{described} must list one row named {device_name!r}; it listed devices "
                                 f"{[row['name'] for row in rows if row['name'] is not None]}"
                                 + "".join(f"; {problem}" for problem in plugin_problems))
    (row,) = matching
    _require((row["distribution"], row["plugin"]) == (distribution, entry_name),
             f"{described} says {device_name} comes from distribution {row['distribution']!r}, plugin "
             f"{row['plugin']!r}; expected {distribution!r}, {entry_name!r}")
    ok, reason, _count = probe()
    seen = f"{described} lists {device_name} as {row['status']!r} ({row['reason']})"
    if not ok:
        _require((row["status"], row["reason"]) == ("unavailable", reason),
                 f"{seen}, but its probe answers unavailable ({reason}): the row must be 'unavailable' with the "
                 "probe's reason")
    elif fails_to_open_with is not None:
        _require(row["status"] == "fails to open" and fails_to_open_with in row["reason"],
                 f"{seen}; expected 'fails to open' with {fails_to_open_with!r} in the reason")
    else:
        _require(row["status"] == "ok", f"{seen}, but its probe answers ok ({reason}): opening the device must work")
    return dict(row)
