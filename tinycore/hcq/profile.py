"""PROFILE=1: every kernel and copy that queue devices time, written as a Chrome trace-event JSON at exit.

Times come from the devices' queue timestamps (microseconds). The file opens in Perfetto (ui.perfetto.dev) and
chrome://tracing: one process per device, one thread per queue, one complete ("X") event per kernel or copy.
It goes to PROFILE_PATH, or to a file in the temporary directory whose path is printed at exit.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
from dataclasses import dataclass

from tinycore.helpers import PROFILE_PATH


@dataclass(frozen=True)
class ProfileEvent:
    """One timed command: a kernel or a copy, its device and queue, start and end in device microseconds."""

    name: str
    device: str
    queue: str
    start_us: float
    end_us: float


EVENTS: list[ProfileEvent] = []
_enabled: list[bool] = []


def record(name: str, device: str, queue: str, start_us: float, end_us: float) -> None:
    """Add one timed command to the profile."""
    EVENTS.append(ProfileEvent(name, device, queue, start_us, end_us))


def enable() -> None:
    """Write the profile at exit (called once a device starts profiling)."""
    if not _enabled:
        _enabled.append(True)
        atexit.register(write_at_exit)


def trace_events(events: list[ProfileEvent]) -> dict[str, list[dict[str, object]]]:
    """The Chrome trace-event document of `events`: metadata naming each device and queue, then one "X" event
    (name, ts and dur in microseconds) per command."""
    devices = sorted({event.device for event in events})
    process_of = {device: number + 1 for number, device in enumerate(devices)}
    queues = sorted({(event.device, event.queue) for event in events})
    thread_of = {key: number + 1 for number, key in enumerate(queues)}
    document: list[dict[str, object]] = []
    for device, process in process_of.items():
        document.append({"name": "process_name", "ph": "M", "pid": process, "args": {"name": device}})
    for (device, queue), thread in thread_of.items():
        document.append({"name": "thread_name", "ph": "M", "pid": process_of[device], "tid": thread,
                         "args": {"name": queue}})
    for event in events:
        document.append({"name": event.name, "ph": "X", "cat": event.queue, "pid": process_of[event.device],
                         "tid": thread_of[(event.device, event.queue)], "ts": event.start_us,
                         "dur": max(0.0, event.end_us - event.start_us), "args": {"device": event.device}})
    return {"traceEvents": document}


def write(path: str | None = None) -> str:
    """Write the profile recorded so far to `path` (default: PROFILE_PATH, else a new temporary file); its path."""
    target = path or PROFILE_PATH.value
    if not target:
        descriptor, target = tempfile.mkstemp(prefix="tinycore-profile-", suffix=".json")
        os.close(descriptor)
    with open(target, "w") as file:
        json.dump(trace_events(EVENTS), file)
    return target


def write_at_exit() -> None:
    """Write the profile and say where it went."""
    path = write()
    print(f"PROFILE: {len(EVENTS)} timed commands written to {path} (open it in ui.perfetto.dev)", file=sys.stderr)
