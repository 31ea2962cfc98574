"""`tiny conformance DEVICE [--json] [-k EXPR]`: run the conformance suite on one device and print the summary.

Exit status 0 when every applicable check passed, 1 when any failed (or nothing ran), 2 on bad arguments, a missing
requirement (the `testing` extra: pytest) or a device that cannot be opened (reported once, up front).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

PLUGIN_MODULE = "tinycore.testing.plugin"


def add_conformance_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add the `conformance` subcommand to the `tiny` command's subparsers and return its parser."""
    parser = subparsers.add_parser("conformance", help="check a device against the conformance suite",
                                   description="Run the device conformance suite on DEVICE and print pass / fail / "
                                               "not applicable counts by category.")
    parser.add_argument("device", metavar="DEVICE", help="the device to check, e.g. CPU, CL:1, PYTHON")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON (for CI dashboards)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", default=None,
                        help="only run checks matching the pytest -k expression EXPR, e.g. 'ops and not reduce'")
    parser.add_argument("--verbose", "-v", action="store_true", help="show pytest's tracebacks of failing checks")
    return parser


def _plugin_loaded_by_entry_point() -> bool:
    """True when an installed pytest11 entry point already loads the suite's plugin."""
    from importlib.metadata import entry_points
    return any(entry.value.split(":")[0] == PLUGIN_MODULE for entry in entry_points(group="pytest11"))


def pytest_arguments(device: str, json_path: str, keyword: str | None, verbose: bool) -> list[str]:
    """The pytest command line that runs the suite on `device` and writes the JSON summary to `json_path`."""
    arguments = [] if _plugin_loaded_by_entry_point() else ["-p", PLUGIN_MODULE]
    arguments += ["--pyargs", "tinycore.testing", f"--tiny-device={device}", f"--tiny-json={json_path}",
                  "-p", "no:cacheprovider", "--no-header", "-q", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    arguments += ["--tb=short"] if verbose else ["--tb=no", "-rN"]
    if keyword:
        arguments += ["-k", keyword]
    return arguments


TESTING_REQUIREMENTS = ("pytest",)
"""The modules the suite needs beyond the core (pytest runs it); the core's `testing` extra installs them. The
oracles are numpy's (torch, where installed, adds comparisons with its autograd and scatters, and is never needed)."""


def _importable(name: str) -> bool:
    """True when module `name` can be found (without importing it)."""
    from importlib.util import find_spec
    try:
        return find_spec(name) is not None
    except ImportError:
        return False


def missing_requirement() -> str | None:
    """A one-line error naming the `testing` extra when a module the suite needs is not installed, else None."""
    missing = [name for name in TESTING_REQUIREMENTS if not _importable(name)]
    if not missing:
        return None
    from tinycore.plugins.install import install_command
    return (f"tiny conformance needs {' and '.join(missing)}, which the 'testing' extra of tinycore installs: "
            f"{install_command('tinycore[testing]')}")


def device_error(device: str) -> str | None:
    """Why `device` cannot be checked (a malformed name, no plugin provides it, it does not open), or None."""
    from tinycore.device.registry import Device
    try:
        Device[device]
    except Exception as error:  # noqa: BLE001 - any failure to open is reported once, up front
        return f"{type(error).__name__}: {error}"
    return None


def _fail_up_front(args: argparse.Namespace, message: str) -> int:
    """Report an error that stops the suite before it runs (one line, or a JSON document) and return status 2."""
    if args.json:
        print(json.dumps({"device": args.device, "ok": False, "error": message}, indent=2))
    else:
        print(f"tiny conformance: {message}", file=sys.stderr)
    return 2


def run_conformance(args: argparse.Namespace) -> int:
    """Run the suite as asked by the parsed `tiny conformance` arguments; returns the exit status (2, with one
    error, when the suite's requirements are missing or the device cannot be opened)."""
    problem = missing_requirement()
    if problem is None:
        problem = device_error(args.device)
        if problem is not None:
            problem = f"{args.device} cannot be checked: {problem}"
    if problem is not None:
        return _fail_up_front(args, problem)
    import pytest
    descriptor, json_path = tempfile.mkstemp(prefix="tinycore-conformance-", suffix=".json")
    os.close(descriptor)
    try:
        arguments = pytest_arguments(args.device, json_path, args.keyword, getattr(args, "verbose", False))
        if args.json:
            with contextlib.redirect_stdout(io.StringIO()) as captured:
                status = pytest.main(arguments)
        else:
            status = pytest.main(arguments)
        try:
            with open(json_path) as file:
                summary = json.load(file)
        except (OSError, ValueError):
            summary = None
    finally:
        os.unlink(json_path)
    if summary is None:
        message = f"the conformance suite did not run on {args.device} (pytest exit status {int(status)})"
        if args.json:
            print(json.dumps({"device": args.device, "ok": False, "error": message,
                              "output": captured.getvalue()[-4000:]}, indent=2))
        else:
            print(message, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] and int(status) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m tinycore.testing.cli DEVICE ...`: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="tiny")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_conformance_parser(commands)
    arguments = parser.parse_args(["conformance", *(sys.argv[1:] if argv is None else argv)])
    return run_conformance(arguments)


if __name__ == "__main__":
    sys.exit(main())
