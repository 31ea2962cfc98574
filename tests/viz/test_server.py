"""The VIZ server over real HTTP on 127.0.0.1 (an ephemeral port, every request bounded by a timeout)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinycore.viz import server as viz_server

TIMEOUT_S = 10


def _kernel(number: int, name: str) -> dict[str, object]:
    step = {"name": "kernel AST", "ms": 0.5, "rules": [["fold (x.py:1)", 2]], "changed": [1],
            "nodes": [{"id": 0, "op": "CONST", "dtype": "int", "arg": "0", "src": []},
                      {"id": 1, "op": "SINK", "dtype": "void", "arg": "", "src": [0]}]}
    return {"id": number, "name": name, "device": "CPU", "passes": [step], "linear": ["0 SINK"], "source": "int f;",
            "language": "CRenderer"}


RECORDING = {"version": 1, "kernels": [_kernel(0, "E_4"), _kernel(1, "r_4_4")], "errors": [],
             "schedules": [{"id": 0, "name": "schedule 0: 2 kernels, 0 copies", "groups": [],
                            "graph": {"nodes": [], "changed": []},
                            "items": [{"kind": "kernel", "kernel": 0, "name": "E_4"}]}],
             "timeline": [{"device": "CPU", "queue": "launch", "name": "E_4", "start_us": 1.0, "end_us": 3.0,
                           "kernel": 0}]}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """A server of RECORDING on a free port, stopped after the module."""
    server, thread = viz_server.start(RECORDING, 0)
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT_S)


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_summary_lists_kernels_passes_schedules_and_timeline(base_url: str) -> None:
    status, content_type, body = _get(base_url + "api/summary")
    assert status == 200 and content_type == "application/json"
    summary = json.loads(body)
    assert [kernel["name"] for kernel in summary["kernels"]] == ["E_4", "r_4_4"]
    assert summary["kernels"][1]["passes"] == [{"name": "kernel AST", "nodes": 2, "changed": 1, "rules": 2,
                                                "ms": 0.5}]
    assert summary["schedules"][0]["items"] == RECORDING["schedules"][0]["items"]  # type: ignore[index]
    assert summary["timeline"] == RECORDING["timeline"]


def test_kernel_and_schedule_routes_return_the_recorded_entries(base_url: str) -> None:
    assert json.loads(_get(base_url + "api/kernel/1")[2]) == RECORDING["kernels"][1]  # type: ignore[index]
    assert json.loads(_get(base_url + "api/schedule/0")[2]) == RECORDING["schedules"][0]  # type: ignore[index]


@pytest.mark.parametrize(("path", "status"), [("api/kernel/abc", 400), ("api/kernel/-1", 400), ("api/kernel/2", 404),
                                              ("api/schedule/9", 404), ("nowhere", 404), ("api", 404),
                                              ("assets/../server.py", 404), ("assets/missing.js", 404)])
def test_bad_requests_get_json_errors(base_url: str, path: str, status: int) -> None:
    got, content_type, body = _get(base_url + path)
    assert got == status and content_type == "application/json"
    document = json.loads(body)
    assert document["status"] == status and document["error"]


def test_a_malformed_request_line_gets_400_json_and_the_server_stays_up(base_url: str) -> None:
    port = int(base_url.rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as connection:
        connection.sendall(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n")  # four words: not a request line
        reply = b""
        while chunk := connection.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    assert json.loads(body)["status"] == 400
    assert _get(base_url + "api/summary")[0] == 200


def test_the_page_and_its_assets_are_served(base_url: str) -> None:
    status, content_type, body = _get(base_url)
    assert status == 200 and content_type.startswith("text/html") and b"/assets/app.js" in body
    for asset in ("app.js", "style.css", "layout.worker.js", "vendor/dagre.min.js"):
        status, _, body = _get(base_url + "assets/" + asset)
        assert status == 200 and len(body) > 100, asset


def _tiny_viz(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinycore.cli", "viz", *arguments], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_tiny_viz_with_a_bad_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    missing = _tiny_viz(str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr
    not_json = tmp_path / "notes.txt"
    not_json.write_text("hello")
    wrong = _tiny_viz(str(not_json))
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "not a VIZ recording" in wrong.stderr


def test_tiny_viz_on_a_port_in_use_is_one_line_and_status_2(tmp_path: Path, base_url: str) -> None:
    saved = tmp_path / "recording.json"
    saved.write_text(json.dumps(RECORDING))
    port = base_url.rstrip("/").rsplit(":", 1)[1]
    busy = _tiny_viz(str(saved), "--port", port)
    assert busy.returncode == 2 and busy.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in busy.stderr
