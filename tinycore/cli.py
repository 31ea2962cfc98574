"""The `tiny` command: `tiny devices` and `tiny plugins` (each with `--json`).

Colours are used only when stdout is a terminal and NO_COLOR is not set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

from tinycore.helpers import DEV, colored
from tinycore.llm.cli import add_llm_parser, run_llm
from tinycore.testing.cli import add_conformance_parser, run_conformance

if TYPE_CHECKING:
    from tinycore.plugins.manager import PluginSummary

STATUS_COLOURS = {"ok": "green", "unavailable": "yellow", "fails to open": "red", "plugin broken": "red",
                  "plugin refused": "red", "plugin disabled": "yellow", "plugin not allowed": "yellow",
                  "broken": "red", "refused": "red", "disabled": "yellow", "not allowed": "yellow"}


class PartRow(TypedDict, total=False):
    """One renderer or interface of a device in `tiny devices` (a renderer says whether it is available and why
    not, an interface whether it is a mock)."""

    name: str
    distribution: str
    description: str
    selected: bool
    available: bool
    reason: str | None
    is_mock: bool
    dev: str


class DeviceRow(TypedDict):
    """One device (or one plugin that did not load: no name) in `tiny devices`."""

    name: str | None
    status: str
    reason: str
    count: int
    priority: int | None
    description: str
    plugin: str
    distribution: str
    version: str | None
    default: bool
    dev: str | None
    fix: str | None
    renderers: list[PartRow]
    interfaces: list[PartRow]


class DevicesReport(TypedDict):
    """What `tiny devices` shows (and prints with --json)."""

    dev: str
    dev_error: str | None
    default: str | None
    default_error: str | None
    devices: list[DeviceRow]


def _plugin_status_label(status: str) -> str:
    """The device-table status for a plugin that did not load ("broken" -> "plugin broken")."""
    return f"plugin {status}"


def _renderer_rows(name: str, selected: str | None) -> list[PartRow]:
    """The renderers offered for device `name`, each with whether it is selected, whether what it needs is installed
    (with the reason and the fix when not) and the DEV= line choosing it."""
    from tinycore.device.registry import renderer_specs, renderer_status
    rows: list[PartRow] = []
    for spec, record in renderer_specs(name):
        available, reason = renderer_status(spec)
        rows.append({"name": spec.name, "distribution": record.install_name, "description": spec.description,
                     "selected": spec.name == selected, "available": available,
                     "reason": None if available else reason, "dev": f"DEV={name}:{spec.name}"})
    return rows


def _interface_rows(name: str, selected: str | None) -> list[PartRow]:
    """The interfaces offered for device `name`, each with whether it is selected and the DEV= line choosing it."""
    from tinycore.device.registry import interface_specs
    return [{"name": spec.name, "distribution": record.install_name, "description": spec.description,
             "is_mock": spec.is_mock, "selected": spec.name == selected, "dev": f"DEV={spec.name}+{name}"}
            for spec, record in interface_specs(name)]


def _fix_for(name: str, status: str) -> str | None:
    """What makes a device that cannot run here usable (None for a device that runs)."""
    if status == "unavailable":
        return (f"install or enable what the reason above names, then check with `tiny devices`; "
                f"select it with DEV={name}")
    if status == "fails to open":
        return (f"the device is present but its plugin could not open it: fix the error above (or report it to the "
                f"plugin's authors); select it with DEV={name} once it opens")
    return None


def _plugin_fix(status: str, distribution: str) -> str:
    """What makes a plugin that did not load usable."""
    from tinycore.plugins.install import install_command
    if status in ("disabled", "not allowed"):
        return "change TINYCORE_PLUGINS / TINYCORE_DISABLE_PLUGINS to load it"
    return f"reinstall or upgrade it: {install_command(distribution, upgrade=True)}"


def collect_devices() -> DevicesReport:
    """Everything `tiny devices` shows: each device's status and parts, the default device, skipped plugins."""
    from tinycore.device.registry import Device
    from tinycore.device.target import Target, target_for
    from tinycore.plugins.manager import get_plugin_manager

    manager = get_plugin_manager()
    default: str | None = None
    default_error: str | None = None
    try:
        default = Device.DEFAULT
    except Exception as error:
        default_error = str(error)
    dev_error = _dev_error()
    devices: list[DeviceRow] = []
    for spec, record in Device.specs():
        ok, reason, count = Device.probe(spec.name)
        status = "ok" if ok else "unavailable"
        if ok:
            try:
                Device[spec.name]
            except Exception as error:
                status, reason = "fails to open", str(error)
        try:
            target = target_for(spec.name)
        except ValueError:  # a malformed DEV: reported once as the default-device error
            target = Target(device=spec.name)
        renderer = Device.selected_renderers.get(spec.name) or target.renderer or None
        renderers = _renderer_rows(spec.name, renderer)
        if renderer is None:
            first_renderer = next((row for row in renderers if row["available"]), None)
            if first_renderer is not None:
                first_renderer["selected"] = True
        interface = Device.selected_interfaces.get(spec.name) or target.interface or None
        interfaces = _interface_rows(spec.name, interface)
        if interface is None:
            first = next((row for row in interfaces if not row["is_mock"]), None)
            if first is not None:
                first["selected"] = True
        devices.append({"name": spec.name, "status": status, "reason": reason, "count": count,
                        "priority": spec.priority, "description": spec.description, "plugin": record.name,
                        "distribution": record.install_name, "version": record.version,
                        "default": spec.name == (default or "").split(":", 1)[0],
                        "dev": f"DEV={spec.name}" if spec.priority >= 0 and status == "ok" else None,
                        "fix": _fix_for(spec.name, status), "renderers": renderers, "interfaces": interfaces})
    for record in manager.records:
        if record.status != "ok":
            devices.append({"name": None, "status": _plugin_status_label(record.status), "reason": record.reason,
                            "count": 0, "priority": None, "description": "", "plugin": record.name,
                            "distribution": record.install_name, "version": record.version, "default": False,
                            "dev": None, "fix": _plugin_fix(record.status, record.install_name),
                            "renderers": [], "interfaces": []})
    return {"dev": DEV.raw, "dev_error": dev_error, "default": default, "default_error": default_error,
            "devices": devices}


def _dev_error() -> str | None:
    """Why the DEV that is set would be refused when a program imports tinycore (None when unset or fine): the
    `tiny` command does not refuse it, so that the devices are still listed."""
    if not DEV.raw:
        return None
    from tinycore.device.registry import check_dev_targets
    from tinycore.device.target import current_targets
    try:
        check_dev_targets(current_targets())
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _table(headers: list[str], rows: list[list[str]], colours: list[list[str | None]]) -> str:
    """A plain-text table with columns padded to their widest cell; cells coloured after padding."""
    widths = [max(len(header), *(len(row[column]) for row in rows)) if rows else len(header)
              for column, header in enumerate(headers)]
    lines = ["  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip()]
    for row, row_colours in zip(rows, colours, strict=True):
        cells = [colored(cell.ljust(width), colour)
                 for cell, width, colour in zip(row, widths, row_colours, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _names(items: list[PartRow]) -> str:
    """Comma-separated names, the selected one starred, mocks marked."""
    return ", ".join(item["name"] + ("*" if item["selected"] else "") + (" (mock)" if item.get("is_mock") else "")
                     + (" (unavailable)" if item.get("available") is False else "") for item in items) or "-"


def format_devices(report: DevicesReport) -> str:
    """The `tiny devices` table and the notes under it."""
    headers = ["", "DEVICE", "STATUS", "COUNT", "DISTRIBUTION", "RENDERERS", "INTERFACES"]
    rows, colours = [], []
    for device in report["devices"]:
        distribution = device["distribution"] + (f" {device['version']}" if device["version"] else "")
        rows.append(["*" if device["default"] else "", device["name"] or f"({device['plugin']})", device["status"],
                     str(device["count"]), distribution, _names(device["renderers"]), _names(device["interfaces"])])
        colours.append([None, None, STATUS_COLOURS.get(device["status"]), None, None, None, None])
    lines = [_table(headers, rows, colours), ""]
    if report.get("dev_error"):
        lines.append(colored(f"DEV={report['dev']} is refused:", "red") + f" {report['dev_error']}")
    if report["default"]:
        lines.append(f"default device: {report['default']}" + (f" (DEV={report['dev']})" if report["dev"] else
                                                                 " (highest priority that opens; set DEV to choose)"))
    else:
        lines.append(colored("no default device:", "red") + f" {report['default_error']}")
    for device in report["devices"]:
        label = device["name"] or f"plugin {device['plugin']}"
        lines.append(f"{label}: {device['status']}" + (f": {device['reason']}" if device["reason"] else ""))
        if device["fix"]:
            lines.append(f"    cannot run here; to fix: {device['fix']}")
        elif device["dev"]:
            lines.append(f"    make it the default: {device['dev']}")
        elif device["name"]:
            lines.append(f"    never the default (priority {device['priority']}); opened by name: {device['name']}:...")
        for kind in ("renderers", "interfaces"):
            for item in device[kind]:
                marker = " (selected)" if item["selected"] else ""
                if item.get("available") is False:
                    lines.append(f"    {kind[:-1]} {item['name']}: unavailable: {item['reason']}  "
                                 f"[{item['distribution']}]")
                    continue
                lines.append(f"    {kind[:-1]} {item['name']}{marker}: {item['dev']}  [{item['distribution']}]")
    lines.append("* = default device; a starred renderer or interface is the one used")
    return "\n".join(lines)


def collect_plugins() -> list[PluginSummary]:
    """Everything `tiny plugins` shows: one dict per discovered plugin."""
    from tinycore.plugins.manager import get_plugin_manager
    return [record.as_dict() for record in get_plugin_manager().records]


def format_plugins(plugins: list[PluginSummary], show_tracebacks: bool = False) -> str:
    """The `tiny plugins` table and, for plugins that did not load, the reason (and traceback if asked)."""
    from tinycore.plugins import PLUGIN_API_LEVEL, core_version
    headers = ["PLUGIN", "DISTRIBUTION", "VERSION", "API", "STATUS", "HOOKS"]
    rows, colours = [], []
    for plugin in plugins:
        rows.append([plugin["name"], plugin["distribution"] or "-", plugin["version"] or "-",
                     str(plugin["api_level"]) if plugin["api_level"] is not None else "-", plugin["status"],
                     ", ".join(plugin["hooks"]) or "-"])
        colours.append([None, None, None, None, STATUS_COLOURS.get(plugin["status"]), None])
    lines = [f"tinycore {core_version()}, plugin API level {PLUGIN_API_LEVEL}", _table(headers, rows, colours)]
    for plugin in plugins:
        if plugin["reason"]:
            lines.append(f"{plugin['name']}: {plugin['status']}: {plugin['reason']}")
        for note in plugin["notes"]:
            lines.append(f"{plugin['name']}: note: {note}")
        if show_tracebacks and plugin["traceback"]:
            lines.append("    " + plugin["traceback"].rstrip().replace("\n", "\n    "))
    if not plugins:
        from tinycore.plugins.install import install_command
        lines.append("no plugins found in the entry-point group 'tinycore.plugins'; install one: "
                     + install_command("tiny-cpu"))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `tiny` command."""
    parser = argparse.ArgumentParser(prog="tiny", description="tinycore: devices and plugins")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    devices = commands.add_parser("devices", help="list every device of every plugin, its status and parts")
    devices.add_argument("--json", action="store_true", help="print JSON for tools")
    plugins = commands.add_parser("plugins", help="list plugins: distribution, version, API level, hooks, status")
    plugins.add_argument("--json", action="store_true", help="print JSON for tools")
    plugins.add_argument("--traceback", action="store_true", help="show the traceback of each broken plugin")
    add_conformance_parser(commands)
    add_llm_parser(commands)
    from tinycore.nn.onnx.cli import add_onnx_parser
    add_onnx_parser(commands)
    from tinycore.viz.cli import add_viz_parser
    add_viz_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `tiny` command; returns the exit status.

    A reader that closes the pipe early (`tiny plugins | head -1`) ends the command quietly with status 0. A mistake
    in how the command was run or set up (see `user_errors`) is one line on stderr and status 2."""
    try:
        status = _run(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except user_errors() as error:
        return report_user_error("tiny", error)


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors that report a mistake in how a program was run or set up, not a fault in tinycore: a DEV that is
    malformed or names what is not installed, a device that cannot be opened, a distributed run outside its launcher
    or without MPI, a missing or malformed file. Their messages say what to do, so they are shown without a
    traceback."""
    from tinycore.device.registry import DeviceNotInstalledError, DeviceOpenError, SelectionError
    from tinycore.distributed import DistributedError, MPIUnavailableError
    from tinycore.nn.file_checks import MalformedFileError
    from tinycore.target import DevError
    return (DevError, DeviceNotInstalledError, DeviceOpenError, SelectionError, DistributedError, MPIUnavailableError,
            MalformedFileError, FileNotFoundError)


def report_user_error(program: str, error: BaseException) -> int:
    """Print `program: message` for a user error on one line of stderr (the traceback too at DEBUG >= 1, for a bug
    report) and return the exit status 2."""
    from tinycore.helpers import DEBUG
    if DEBUG >= 1:
        import traceback
        traceback.print_exception(error, file=sys.stderr)
    message = " ".join(str(error).split()) or type(error).__name__
    print(f"{program}: {message}", file=sys.stderr)
    return 2


def run_program(program: str, entry: Callable[[], int]) -> int:
    """Run a program's `entry` (an example's main) and return its exit status; a user error (`user_errors`) is one
    line on stderr, `program: message`, and status 2."""
    try:
        return entry()
    except user_errors() as error:
        return report_user_error(program, error)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of a closed pipe raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured): nothing is left to flush
        pass
    finally:
        os.close(devnull)


def _run(argv: Sequence[str] | None) -> int:
    """Parse `argv` and run the chosen subcommand."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "devices":
        report = collect_devices()
        print(json.dumps(report, indent=2) if arguments.json else format_devices(report))
        return 0
    if arguments.command == "plugins":
        plugins = collect_plugins()
        print(json.dumps(plugins, indent=2) if arguments.json else format_plugins(plugins, arguments.traceback))
        return 0
    if arguments.command == "conformance":
        return run_conformance(arguments)
    if arguments.command == "llm":
        return run_llm(arguments)
    if arguments.command == "onnx":
        from tinycore.nn.onnx.cli import run_onnx
        return run_onnx(arguments)
    if arguments.command == "viz":
        from tinycore.viz.cli import run_viz
        return run_viz(arguments)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
