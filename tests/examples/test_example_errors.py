"""Simple mistakes in running the examples and the `tiny` command are one line on stderr and exit status 2, with
no traceback (a traceback is for a fault in tinycore): train_digits.py --distributed outside an MPI launcher, a
--batch that does not split, a `tiny` subcommand given a device nobody provides."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from plugin_builder import REPOSITORY_ROOT

LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK",
                      "MPI_LOCALRANKID")


def run(arguments: list[str], cwd: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    """`python ARGUMENTS` outside any MPI launcher, DEV and DEBUG unset unless given."""
    env = {key: value for key, value in os.environ.items()
           if key not in (*LAUNCHER_VARIABLES, "DEV", "DEBUG", "TINYCORE_PLUGINS")}
    env.update(environment)
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env, timeout=300,
                          cwd=str(cwd), check=False)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line of stderr, asserting the run exited with status 2 and printed no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_train_digits_distributed_without_a_launcher(tmp_path: Path) -> None:
    line = one_line(run([str(REPOSITORY_ROOT / "examples" / "train_digits.py"), "--distributed", "--steps", "1"],
                        tmp_path))
    assert line.startswith("train_digits.py: this process was not started by an MPI launcher"), line
    assert "mpiexec -n 2" in line


def test_tiny_with_a_device_nobody_provides(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    made = run(["-m", "tinycore.cli", "llm", "--make-test-model", str(model)], tmp_path)
    assert made.returncode == 0 and model.is_file(), made.stderr
    line = one_line(run(["-m", "tinycore.cli", "llm", "--model", str(model), "--device", "NOSUCHDEVICE", "--prompt",
                         "hi", "--max-tokens", "1"], tmp_path))
    assert line.startswith("tiny: no installed plugin provides device 'NOSUCHDEVICE'"), line


def test_debug_shows_the_traceback_for_a_bug_report(tmp_path: Path) -> None:
    result = run([str(REPOSITORY_ROOT / "examples" / "train_digits.py"), "--distributed", "--steps", "1"], tmp_path,
                 DEBUG="1")
    assert result.returncode == 2 and "Traceback" in result.stderr and "DistributedError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("train_digits.py: this process was not started")
