"""Helpers for availability probes: run a probe with a time limit, and load a shared library without raising.

A probe answers (ok, reason, count) cheaply; it must never hang or raise. Plugins wrap their probe body in
`bounded_probe`, which turns exceptions and timeouts into an "unavailable" answer with the reason.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Sequence

ProbeResult = tuple[bool, str, int]


def bounded_probe(body: Callable[[], ProbeResult], timeout_s: float = 5.0) -> ProbeResult:
    """Run `body` in a daemon thread; (False, reason, 0) if it raises or takes longer than `timeout_s` seconds."""
    outcome: list[ProbeResult] = []
    failure: list[BaseException] = []

    def runner() -> None:
        try:
            outcome.append(body())
        except BaseException as error:  # a probe must never take the process down
            failure.append(error)

    thread = threading.Thread(target=runner, name="tinycore-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return (False, f"probe did not answer within {timeout_s:g} s", 0)
    if failure:
        return (False, f"probe failed: {type(failure[0]).__name__}: {failure[0]}", 0)
    ok, reason, count = outcome[0]
    return (bool(ok), str(reason), int(count))


def load_library(names: Sequence[str]) -> tuple[ctypes.CDLL | None, str]:
    """The first of `names` that loads (a file name like "libcuda.so.1", or a short name for find_library), with
    what was tried; (None, reason) when none loads."""
    tried = []
    for name in names:
        path = name if "." in name or "/" in name else ctypes.util.find_library(name)
        if path is None:
            tried.append(f"{name}: not found")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as error:
            tried.append(str(error))
    return None, "; ".join(tried)
