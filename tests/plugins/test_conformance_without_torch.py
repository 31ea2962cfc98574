"""The conformance suite needs no torch: its gradient and scatter checks run (and pass) against numpy oracles in an
environment where torch cannot be imported, and the `testing` extra does not install torch."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from plugin_builder import REPOSITORY_ROOT

TORCH_ORACLE_CHECKS = ("autograd or gather_matches or scatter_matches or scatter_reduce_matches or gradients_match "
                       "or sorted_and_segmented")
"""The checks whose oracle was torch before numpy's took over."""


def test_testing_extra_does_not_install_torch() -> None:
    extras = tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "torch" not in {Requirement(text).name for text in extras["testing"]}, extras["testing"]


def test_gradient_and_scatter_checks_run_without_torch(tmp_path: Path) -> None:
    """With torch hidden, `tiny conformance CPU` runs every check that used torch as its oracle: none is skipped or
    reported as not applicable, and all pass."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class HideTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, HideTorch())\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "DEV")}
    environment.update({"PYTHONPATH": str(tmp_path), "NO_COLOR": "1"})
    if shutil.which("gcc"):  # clang 14 rejects the C renderer's _Float16 on x86 (see test_conformance)
        environment["CC"] = "gcc"
    hidden = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=environment,
                            timeout=60, check=False)
    assert hidden.returncode != 0 and "No module named 'torch'" in hidden.stderr, "torch is hidden"
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "conformance", "CPU", "--json", "-k",
                             TORCH_ORACLE_CHECKS], capture_output=True, text=True, env=environment, timeout=600,
                            cwd=str(tmp_path), check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["failures"] == [] and summary["not_applicable"] == [], json.dumps(summary, indent=2)[:3000]
    assert summary["categories"]["autograd"]["passed"] == 8, summary["categories"]["autograd"]
    assert summary["categories"]["indexing"]["passed"] >= 40, summary["categories"]["indexing"]
