"""BEAM's progress when stderr is not a terminal (a pipe, a log file): one line per kernel searched, where a terminal
shows a bar. Without it, BEAM=2 sat silent for a minute in CI logs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")

PROGRAM = """
import numpy
from tinycore import Tensor
a = numpy.arange(96, dtype=numpy.float32).reshape(8, 12)
print((Tensor(a) * 2).sum(axis=1).numpy().tolist() == (a * 2).sum(axis=1).tolist())
"""


def test_a_line_per_kernel_searched_when_stderr_is_a_pipe(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "DEV")}
    environment.update({"BEAM": "2", "BEAM_BUDGET": "1", "BEAM_UPCAST_MAX": "16", "TINYCORE_CACHE_DIR": str(tmp_path),
                        "DEV": "CPU", "TINYCORE_PLUGINS": "cpu"})
    finished = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=environment,
                              timeout=300, check=False)
    assert finished.returncode == 0 and finished.stdout.strip() == "True", finished.stdout + finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.startswith("BEAM ")]
    assert lines, f"no BEAM line on a piped stderr: {finished.stderr!r}"
    for line in lines:
        assert re.fullmatch(r"BEAM \S+: \d+/\d+ candidates timed in \d+\.\d s, best \d+\.\d us", line), line
    assert "\r" not in finished.stderr, "no bar redrawn in a log"
