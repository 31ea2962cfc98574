"""`tiny conformance DEVICE [--json] [-k EXPR]`: run the conformance suite on one device and print the summary.

Exit status 0 when every applicable check passed, 1 when any failed (or nothing ran), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from typing import Any

PLUGIN_MODULE = "tinycore.testing.plugin"


def add_conformance_parser(subparsers: Any) -> argparse.ArgumentParser:
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


def run_conformance(args: argparse.Namespace) -> int:
    """Run the suite as asked by the parsed `tiny conformance` arguments; returns the exit status."""
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
