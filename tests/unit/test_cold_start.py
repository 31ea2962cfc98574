"""What a program's first run pays before its first kernel: modules imported that it does not use.

Each check runs in a fresh interpreter, since this process has long imported everything.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from sklearn.datasets import load_digits

from tinycore.nn import datasets


def _modules_after(code: str) -> set[str]:
    """The names in sys.modules after a fresh interpreter runs `code`."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return set(finished.stdout.split())


def test_digits_reads_scikit_learns_file_without_importing_it() -> None:
    # importing sklearn.datasets (and with it scipy) took 1.5 s of the digits demo's 6 s cold start
    loaded = _modules_after("from tinycore.nn import datasets\ndatasets.digits()")
    assert "sklearn" not in loaded and "scipy" not in loaded


def test_digits_arrays_are_scikit_learns() -> None:
    pixels, labels = datasets._digits_arrays()
    reference = load_digits()
    np.testing.assert_array_equal(pixels, reference.data)
    np.testing.assert_array_equal(labels, reference.target)
