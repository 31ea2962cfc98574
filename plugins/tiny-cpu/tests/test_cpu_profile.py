"""PROFILE=1 on the CPU queue device: a Chrome trace of the kernels that ran, from the queue timestamps."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import numpy as np
from tinycore import Tensor, TinyJit
a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
print("result", ((a * 2 + 1).sum(1).exp()).numpy().tolist())

@TinyJit
def step(x):
    return ((x + 1).contiguous() * 3).realize()

for _ in range(4):
    step(Tensor(np.ones(4, dtype=np.float32)).realize())
print("replayed kernels", 2 * step.captured_kernel_count)
"""


def run(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEV": "CPU", "PROFILE": "1", **environment}
    env.pop("PROFILE_PATH", None) if "PROFILE_PATH" not in environment else None
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300,
                          check=True)


def test_trace_lists_the_kernels_that_ran_with_their_device_times(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    finished = run({"PROFILE_PATH": str(path), "DEBUG": "2"})
    # DEBUG=2 prints one line per eager kernel with its device time (from the same timestamps)
    printed = [(match[1], float(match[2])) for match in re.finditer(r"^kernel (\S+)\s+([\d.]+) us", finished.stdout,
                                                                      re.MULTILINE)]
    replayed = int(re.search(r"replayed kernels (\d+)", finished.stdout)[1])  # type: ignore[index]
    assert printed and replayed > 0
    trace = json.loads(path.read_text())
    events = [event for event in trace["traceEvents"] if event["ph"] == "X"]
    assert len(events) == len(printed) + replayed
    assert [event["name"] for event in events[:len(printed)]] == [name for name, _ in printed]
    for event, (_, microseconds) in zip(events, printed, strict=False):
        assert abs(event["dur"] - microseconds) <= 0.01 + 1e-6 * microseconds
    # the replays repeat the captured kernels (the last ones printed, from the capturing call)
    assert [event["name"] for event in events[len(printed):]] == [name for name, _ in printed[-2:]] * 2
    starts = [event["ts"] for event in events]
    assert starts == sorted(starts), "kernels of one queue start in submission order"
    names = {event["args"]["name"] for event in trace["traceEvents"] if event["ph"] == "M"}
    assert {"CPU", "compute"} <= names
    assert all(event["pid"] == events[0]["pid"] and event["dur"] >= 0 for event in events)


def test_without_a_path_the_trace_goes_to_a_temporary_file_named_at_exit() -> None:
    finished = run({})
    match = re.search(r"PROFILE: (\d+) timed commands written to (\S+)", finished.stderr)
    assert match is not None, finished.stderr
    path = Path(match[2])
    try:
        events = [event for event in json.loads(path.read_text())["traceEvents"] if event["ph"] == "X"]
        assert len(events) == int(match[1]) > 0
    finally:
        path.unlink()
