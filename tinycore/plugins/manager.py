"""Plugin discovery and isolation: find the `tinycore.plugins` entry points once, load each, check its API level and
register its hooks with pluggy. Hooks are called through pluggy (`firstresult` specs stop at the first answer); each
implementation is registered wrapped, so that one that raises marks its plugin broken (reason and traceback kept)
and the call goes on with the other plugins.

Controls (read when discovery runs):
  TINYCORE_PLUGINS=cpu,cl         only these plugins (entry-point or distribution names); set but empty: none
  TINYCORE_DISABLE_PLUGINS=webgpu skip these plugins
  TINYCORE_TRACE_PLUGINS=1        print every hook call and its result to stderr
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, TypeVar

import pluggy

from tinycore.helpers import environ
from tinycore.plugins import hookspecs
from tinycore.plugins.api_level import PLUGIN_API_LEVEL
from tinycore.plugins.specs import DeviceSpec, InterfaceSpec, RendererSpec

ENTRY_POINT_GROUP = "tinycore.plugins"
HOOK_NAMES = tuple(name for name, value in vars(hookspecs).items() if name.startswith("tiny_") and callable(value))
"""The hooks, in the order the spec module declares them (read from it, so a new spec needs no second list)."""

OK = "ok"
BROKEN = "broken"
REFUSED = "refused"
DISABLED = "disabled"
NOT_ALLOWED = "not allowed"

_Spec = TypeVar("_Spec")


class EntryPointLike(Protocol):
    """What discovery reads of an importlib.metadata entry point (tests pass stand-ins)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    def load(self) -> types.ModuleType: ...


class PluginSummary(TypedDict):
    """A plugin record as `tiny plugins --json` prints it."""

    name: str
    module: str
    distribution: str | None
    version: str | None
    status: str
    reason: str
    traceback: str
    api_level: int | None
    hooks: list[str]
    notes: list[str]


@dataclass
class PluginRecord:
    """What the core knows about one plugin entry point: where it comes from, whether it loaded, and why not."""

    name: str
    module_path: str
    distribution: str | None
    version: str | None
    status: str = OK
    reason: str = ""
    traceback: str = ""
    api_level: int | None = None
    hooks: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    module: types.ModuleType | None = None

    @property
    def install_name(self) -> str:
        """The name to give pip for this plugin (its distribution, else its entry-point name)."""
        return self.distribution or self.name

    def as_dict(self) -> PluginSummary:
        """A JSON-friendly view (for `tiny plugins --json`)."""
        return {"name": self.name, "module": self.module_path, "distribution": self.distribution,
                "version": self.version, "status": self.status, "reason": self.reason,
                "traceback": self.traceback, "api_level": self.api_level, "hooks": list(self.hooks),
                "notes": list(self.notes)}


def _normalize(name: str) -> str:
    """A plugin or distribution name in the form the allow and block lists compare ("Tiny_CPU" -> "tiny-cpu")."""
    return name.strip().lower().replace("_", "-")


def _name_list(variable: str) -> set[str] | None:
    """The comma-separated names in environment variable `variable`, or None when it is unset."""
    value = environ(variable)
    if value is None:
        return None
    return {_normalize(part) for part in value.split(",") if part.strip()}


def _format_value(value: object, limit: int = 400) -> str:
    """`repr(value)`, shortened for trace output."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class PluginManager:
    """Discovers the installed plugins once and calls their hooks with per-plugin failure isolation."""

    def __init__(self, entry_points: Iterable[EntryPointLike] | None = None) -> None:
        """`entry_points` replaces the importlib.metadata lookup (for tests); by default it happens on first use."""
        self._given_entry_points = list(entry_points) if entry_points is not None else None
        self._pluggy = pluggy.PluginManager("tinycore")
        self._pluggy.add_hookspecs(hookspecs)
        self._records: list[PluginRecord] = []
        self._discovered = False
        self._lock = threading.RLock()
        self._device_specs: list[tuple[DeviceSpec, PluginRecord]] | None = None
        self._renderer_specs: dict[str, list[tuple[RendererSpec, PluginRecord]]] = {}
        self._interface_specs: dict[str, list[tuple[InterfaceSpec, PluginRecord]]] = {}
        self.trace = environ("TINYCORE_TRACE_PLUGINS", "0") not in ("", "0")

    # ---- discovery ---------------------------------------------------------------------------------------------

    @property
    def records(self) -> list[PluginRecord]:
        """Every discovered plugin, loaded or not, in discovery order (sorted by entry-point name)."""
        self.discover()
        return list(self._records)

    def record(self, name: str) -> PluginRecord | None:
        """The record of the plugin with entry-point name `name`, or None."""
        return next((record for record in self.records if record.name == name), None)

    def discover(self) -> None:
        """Read the entry points (once per manager) and load every plugin the allow and block lists permit."""
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            entry_points = self._given_entry_points
            if entry_points is None:
                from importlib.metadata import entry_points as find_entry_points
                entry_points = list(find_entry_points(group=ENTRY_POINT_GROUP))
            allowed = _name_list("TINYCORE_PLUGINS")
            blocked = _name_list("TINYCORE_DISABLE_PLUGINS") or set()
            seen: dict[str, PluginRecord] = {}
            for entry_point in sorted(entry_points, key=lambda point: point.name):
                record = self._new_record(entry_point)
                names = {_normalize(record.name)}
                if record.distribution:
                    names.add(_normalize(record.distribution))
                if record.name in seen:
                    record.status, record.reason = BROKEN, (
                        f"entry point name {record.name!r} is already used by distribution "
                        f"{seen[record.name].install_name}; uninstall one of them")
                elif names & blocked:
                    record.status, record.reason = DISABLED, "listed in TINYCORE_DISABLE_PLUGINS"
                elif allowed is not None and not names & allowed:
                    record.status, record.reason = NOT_ALLOWED, (
                        f"not listed in TINYCORE_PLUGINS={environ('TINYCORE_PLUGINS', '')!r}")
                else:
                    self._load(record, entry_point)
                seen.setdefault(record.name, record)
                self._records.append(record)
            # pluggy calls the implementation registered last first: registering in reverse makes every hook call
            # visit the plugins in discovery order
            for record in reversed(self._records):
                if record.status == OK and record.module is not None:
                    self._register(record)
            self._discovered = True

    @staticmethod
    def _new_record(entry_point: EntryPointLike) -> PluginRecord:
        """A record for `entry_point` with its distribution name and version filled in when known."""
        distribution = getattr(entry_point, "dist", None)
        distribution_name = distribution.metadata["Name"] if distribution is not None else None
        version = distribution.version if distribution is not None else None
        return PluginRecord(entry_point.name, entry_point.value, distribution_name, version)

    def _load(self, record: PluginRecord, entry_point: EntryPointLike) -> None:
        """Import the plugin module and check its API level; failures mark the record."""
        try:
            module = entry_point.load()
        except (Exception, SystemExit) as error:
            self._mark_broken(record, f"import of {record.module_path!r} failed: {type(error).__name__}: {error}")
            return
        level = getattr(module, "TINYCORE_PLUGIN_API", None)
        record.api_level = level if isinstance(level, int) else None
        if level != PLUGIN_API_LEVEL:
            record.status, record.reason = REFUSED, self._api_message(record, level)
            return
        record.module = module

    def _register(self, record: PluginRecord) -> None:
        """Register the hook implementations of `record`'s module with pluggy, each wrapped by `_isolated`."""
        module = record.module
        implementations = types.SimpleNamespace()
        for name in dir(module):
            if self._pluggy.parse_hookimpl_opts(module, name) is not None:
                setattr(implementations, name, self._isolated(record, name, getattr(module, name)))
        try:
            self._pluggy.register(implementations, name=record.name)
        except Exception as error:
            self._mark_broken(record, f"hooks of {record.module_path!r} are invalid: {type(error).__name__}: {error}")
            return
        record.hooks = tuple(name for name in HOOK_NAMES if hasattr(implementations, name))

    def _isolated(self, record: PluginRecord, hook_name: str,
                  function: Callable[..., object]) -> Callable[..., tuple[PluginRecord, object] | None]:
        """`function` (a hook implementation of `record`) answering `(record, result)`, or None when it returns
        None, raises (the plugin is then marked broken) or its plugin is broken already. pluggy reads the
        implementation's argument names and hookimpl options through the wrapper (functools.wraps)."""
        parameter_names = tuple(inspect.signature(function).parameters)

        @functools.wraps(function)
        def isolated(*arguments: object, **keywords: object) -> tuple[PluginRecord, object] | None:
            if record.status != OK:
                return None
            try:
                result = function(*arguments, **keywords)
            except Exception as error:
                self._mark_broken(record, f"hook {hook_name} raised {type(error).__name__}: {error}")
                return None
            if self.trace:
                shown = ", ".join(f"{key}={_format_value(value)}" for key, value in
                                  [*zip(parameter_names, arguments, strict=False), *keywords.items()])
                print(f"tinycore.plugins: {record.name}.{hook_name}({shown}) -> {_format_value(result)}",
                      file=sys.stderr)
            return None if result is None else (record, result)
        return isolated

    @staticmethod
    def _api_message(record: PluginRecord, level: object) -> str:
        """Why a plugin of API level `level` is refused, and the pip command that fixes it."""
        from tinycore.plugins.api_level import core_version
        from tinycore.plugins.install import install_command
        source = f"plugin {record.name!r} ({record.install_name} {record.version or '(unknown version)'})"
        if not isinstance(level, int):
            return (f"{source} does not declare TINYCORE_PLUGIN_API (an int) in {record.module_path}; this tinycore "
                    f"{core_version()} supports plugin API level {PLUGIN_API_LEVEL}; fix: "
                    f"{install_command(record.install_name, upgrade=True)}")
        if level > PLUGIN_API_LEVEL:
            fix = install_command("tinycore", upgrade=True)
        else:
            fix = install_command(record.install_name, upgrade=True)
        return (f"{source} was written for plugin API level {level}, but this tinycore {core_version()} supports "
                f"plugin API level {PLUGIN_API_LEVEL}; fix: {fix}")

    def _mark_broken(self, record: PluginRecord, reason: str) -> None:
        """Record the exception being handled against `record` and stop calling its hooks."""
        record.status, record.reason, record.traceback = BROKEN, reason, traceback.format_exc()
        if self._pluggy.get_plugin(record.name) is not None:
            self._pluggy.unregister(name=record.name)
        record.module = None
        if self.trace:
            print(f"tinycore.plugins: {record.name} is broken: {reason}", file=sys.stderr)

    # ---- hook calls --------------------------------------------------------------------------------------------

    def call(self, hook_name: str, **arguments: Any) -> list[tuple[PluginRecord, Any]]:
        """Call hook `hook_name` through pluggy: every loaded plugin's implementation, in discovery order.

        Returns (record, result) for each plugin whose implementation returned something other than None; for a
        `firstresult` hook, only the first such. A plugin whose implementation raises is marked broken (reason and
        traceback kept) and left out.
        """
        self.discover()
        answer = getattr(self._pluggy.hook, hook_name)(**arguments)
        if answer is None:
            return []
        return [answer] if isinstance(answer, tuple) else list(answer)

    def call_first(self, hook_name: str, **arguments: Any) -> Any:
        """The first non-None result of hook `hook_name` (pluggy's answer for a `firstresult` hook), or None."""
        results = self.call(hook_name, **arguments)
        return results[0][1] if results else None

    def _checked_calls(self, hook_name: str, is_valid: Callable[[object], bool], expected: str,
                       arguments: dict[str, object]) -> list[tuple[PluginRecord, Any]]:
        """`call`, with results failing `is_valid` turning their plugin broken."""
        checked = []
        for record, result in self.call(hook_name, **arguments):
            if is_valid(result):
                checked.append((record, result))
            else:
                try:
                    raise TypeError(f"hook {hook_name} returned {_format_value(result, 200)}, expected {expected}")
                except TypeError as error:
                    self._mark_broken(record, str(error))
        return checked

    def _spec_lists(self, hook_name: str, spec_type: type[_Spec],
                    arguments: dict[str, object]) -> list[tuple[_Spec, PluginRecord]]:
        """Every spec returned by list-returning hook `hook_name`, with the plugin that returned it."""
        def is_valid(value: object) -> bool:
            return isinstance(value, (list, tuple)) and all(isinstance(item, spec_type) for item in value)
        expected = f"a list of {spec_type.__name__}"
        return [(spec, record) for record, specs in self._checked_calls(hook_name, is_valid, expected, arguments)
                for spec in specs]

    def device_specs(self) -> list[tuple[DeviceSpec, PluginRecord]]:
        """Every device of every loaded plugin (first provider of a name wins), computed once."""
        with self._lock:
            if self._device_specs is None:
                chosen: dict[str, tuple[DeviceSpec, PluginRecord]] = {}
                for spec, record in self._spec_lists("tiny_devices", DeviceSpec, {}):
                    if spec.name in chosen:
                        owner = chosen[spec.name][1]
                        record.notes.append(f"device {spec.name} ignored: already provided by {owner.install_name}")
                        continue
                    chosen[spec.name] = (spec, record)
                self._device_specs = list(chosen.values())
            return list(self._device_specs)

    def renderer_specs(self, device: str) -> list[tuple[RendererSpec, PluginRecord]]:
        """Renderers for device family `device`: the providing plugin's first, then the others' in discovery order."""
        with self._lock:
            if device not in self._renderer_specs:
                specs = self._spec_lists("tiny_renderers", RendererSpec, {"device": device})
                self._renderer_specs[device] = self._owner_first(device, specs)
            return list(self._renderer_specs[device])

    def interface_specs(self, device: str) -> list[tuple[InterfaceSpec, PluginRecord]]:
        """Interfaces for device family `device`: the providing plugin's first, then the others'."""
        with self._lock:
            if device not in self._interface_specs:
                specs = self._spec_lists("tiny_interfaces", InterfaceSpec, {"device": device})
                self._interface_specs[device] = self._owner_first(device, specs)
            return list(self._interface_specs[device])

    def _owner_first(self, device: str,
                     specs: list[tuple[_Spec, PluginRecord]]) -> list[tuple[_Spec, PluginRecord]]:
        """`specs` reordered so that those of the plugin providing `device` come first (stable otherwise)."""
        owner = next((record.name for spec, record in self.device_specs() if spec.name == device), None)
        return sorted(specs, key=lambda pair: pair[1].name != owner)


_manager: PluginManager | None = None
_manager_lock = threading.Lock()


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager (created on first use; discovery happens on its first query)."""
    global _manager
    if _manager is None:
        with _manager_lock:
            if _manager is None:
                _manager = PluginManager()
    return _manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace the process-wide manager (None: rediscover on next use). For tests and tools."""
    global _manager
    _manager = manager
