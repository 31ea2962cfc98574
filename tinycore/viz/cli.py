"""`tiny viz FILE [--port N]`: serve a saved VIZ recording (a CI artefact, a file from a remote machine)."""
from __future__ import annotations

import argparse
import sys

from tinycore.viz.hook import VIZ_PORT


def add_viz_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `viz` subcommand to the `tiny` command's subparsers."""
    viz = commands.add_parser("viz", help="serve a VIZ=1 recording in the browser (http://127.0.0.1:PORT)")
    viz.add_argument("file", help="the recording VIZ=1 wrote (its path is printed at exit, or VIZ_PATH)")
    viz.add_argument("--port", type=int, default=int(VIZ_PORT.value), help="port on 127.0.0.1 (default: VIZ_PORT, "
                     "8000)")
    viz.add_argument("--no-browser", action="store_true", help="do not open a browser even on a terminal")


def run_viz(arguments: argparse.Namespace) -> int:
    """Serve the recording until Ctrl-C; 2 with a one-line error for a bad file or a port in use."""
    from tinycore.viz.server import serve_file
    return serve_file(arguments.file, arguments.port, open_browser=not arguments.no_browser and sys.stdout.isatty())
