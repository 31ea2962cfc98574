"""Quiet driver start-up: Mesa's window-system code prints an error for every adapter when XDG_RUNTIME_DIR is unset
(headless machines, CI). Compute never uses it, so a private, empty runtime directory is provided when missing."""
from __future__ import annotations

import os
import tempfile

_prepared = [False]


def prepare_driver_environment() -> None:
    """Set XDG_RUNTIME_DIR to a private temporary directory when it is unset or invalid (before wgpu loads)."""
    if _prepared[0]:
        return
    _prepared[0] = True
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current):
        return
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tiny-webgpu-runtime-")
