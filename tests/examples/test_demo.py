"""The README's main job: examples/train_digits.py trains to a real accuracy (reduced step count for CI)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_train_digits_reaches_ninety_percent() -> None:
    environment = {**os.environ, "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--steps", "150",
                             "--min-accuracy", "0.9"], capture_output=True, text=True, env=environment, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    match = re.search(r"test accuracy ([0-9.]+)% on (\d+) held-out images", result.stdout)
    assert match is not None, result.stdout
    assert float(match.group(1)) >= 90.0 and int(match.group(2)) == 359
