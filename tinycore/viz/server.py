"""The VIZ server: the page (tinycore/viz/assets) and one recording as JSON, over HTTP on 127.0.0.1.

Routes (GET only):
- `/` and `/assets/NAME`: the page's files;
- `/api/summary`: kernels (id, name, device, pass names with rule counts), schedules (id, name, items), timeline;
- `/api/kernel/ID`: one kernel in full (its passes' graphs, linear program, source);
- `/api/schedule/ID`: one schedule with its tensor graph and kernel outlines.
Anything else is a JSON error: 404 for an unknown path or id, 400 for a malformed one. The server stays up.
"""
from __future__ import annotations

import json
import mimetypes
import sys
import threading
import webbrowser
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ASSETS = Path(__file__).resolve().parent / "assets"
HOST = "127.0.0.1"


class RecordingError(ValueError):
    """The file is not a VIZ recording (missing, unreadable, not JSON, or of another format)."""


def load_recording(path: str) -> dict[str, Any]:
    """The recording saved at `path`; RecordingError saying what is wrong otherwise."""
    try:
        with open(path) as file:
            document = json.load(file)
    except FileNotFoundError:
        raise RecordingError(f"no such file: {path} (VIZ=1 prints the path of the recording it wrote)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordingError(f"{path} is not a VIZ recording: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("kernels"), list):
        raise RecordingError(f"{path} is not a VIZ recording (no 'kernels' list): write one with VIZ=1")
    return document


def summary(recording: dict[str, Any]) -> dict[str, object]:
    """What the page lists first: kernels with their passes (no graphs), schedules (no graphs), the timeline."""
    kernels = [{"id": kernel["id"], "name": kernel["name"], "device": kernel.get("device", ""),
                "passes": [{"name": step["name"], "nodes": len(step["nodes"]), "changed": len(step["changed"]),
                            "rules": sum(count for _, count in step["rules"]), "ms": step.get("ms", 0.0)}
                           for step in kernel["passes"]]}
               for kernel in recording["kernels"]]
    schedules = [{"id": schedule["id"], "name": schedule["name"], "items": schedule["items"]}
                 for schedule in recording.get("schedules", [])]
    return {"version": recording.get("version"), "kernels": kernels, "schedules": schedules,
            "timeline": recording.get("timeline", []), "errors": recording.get("errors", [])}


class VizHandler(BaseHTTPRequestHandler):
    """Answers the routes of the module docstring from the server's `recording`."""

    server: VizServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        """Quiet: a page load makes many requests."""

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, document: object) -> None:
        self._send(status, json.dumps(document).encode(), "application/json")

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._json(status, {"error": message, "status": int(status)})

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        """Serve one route."""
        try:
            path = unquote(urlsplit(self.path).path)
        except ValueError:
            return self._error(HTTPStatus.BAD_REQUEST, "malformed URL")
        recording = self.server.recording
        if path in ("/", "/index.html"):
            return self._asset("index.html")
        if path.startswith("/assets/"):
            return self._asset(path[len("/assets/"):])
        if path == "/api/summary":
            return self._json(HTTPStatus.OK, self.server.summary)
        for prefix, key in (("/api/kernel/", "kernels"), ("/api/schedule/", "schedules")):
            if path.startswith(prefix):
                text = path[len(prefix):]
                if not text.isdigit():
                    return self._error(HTTPStatus.BAD_REQUEST, f"{prefix}ID takes a number, got {text!r}")
                entries = recording.get(key, [])
                number = int(text)
                if number >= len(entries):
                    return self._error(HTTPStatus.NOT_FOUND, f"no {key[:-1]} {number} (there are {len(entries)})")
                return self._json(HTTPStatus.OK, entries[number])
        return self._error(HTTPStatus.NOT_FOUND, f"unknown path {path!r}")

    def do_POST(self) -> None:  # noqa: N802
        """The server only reads."""
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "only GET is served")

    do_PUT = do_DELETE = do_POST  # noqa: N815 (http.server's names)

    def _asset(self, name: str) -> None:
        target = (ASSETS / name).resolve()
        if not target.is_relative_to(ASSETS) or not target.is_file():
            return self._error(HTTPStatus.NOT_FOUND, f"no asset {name!r}")
        content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if target.suffix == ".js":
            content_type = "text/javascript"
        self._send(HTTPStatus.OK, target.read_bytes(), content_type + ("; charset=utf-8" if "text" in content_type
                                                                       else ""))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a malformed request line, an unknown method) as JSON too."""
        try:
            self._json(code, {"error": message or HTTPStatus(code).phrase, "status": code})
        except (OSError, ValueError):
            pass


class VizServer(ThreadingHTTPServer):
    """A threading HTTP server holding one recording."""

    daemon_threads = True

    def __init__(self, recording: dict[str, Any], port: int, host: str = HOST):
        self.recording = recording
        self.summary = summary(recording)
        super().__init__((host, port), VizHandler)

    @property
    def url(self) -> str:
        """The address the page is served at."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"


def start(recording: dict[str, Any], port: int = 0) -> tuple[VizServer, threading.Thread]:
    """A server for `recording` on 127.0.0.1:`port` (0: any free port), serving in a background thread."""
    server = VizServer(recording, port)
    thread = threading.Thread(target=server.serve_forever, name="tinycore-viz", daemon=True)
    thread.start()
    return server, thread


def serve_file(path: str, port: int, open_browser: bool = False) -> int:
    """Serve the recording at `path` on 127.0.0.1:`port` until Ctrl-C; 2 after a one-line error on stderr when
    the file is not a recording or the port cannot be bound, 0 otherwise."""
    try:
        recording = load_recording(path)
    except RecordingError as error:
        print(f"tiny viz: {error}", file=sys.stderr)
        return 2
    if not 0 <= port <= 65535:
        print(f"tiny viz: port {port} is out of range (0-65535)", file=sys.stderr)
        return 2
    try:
        server = VizServer(recording, port)
    except OSError as error:
        print(f"tiny viz: cannot listen on {HOST}:{port} ({error.strerror or error}): pass another --port "
              f"(or VIZ_PORT)", file=sys.stderr)
        return 2
    print(f"VIZ: serving {path} at {server.url} (Ctrl-C stops)", file=sys.stderr)
    if open_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
