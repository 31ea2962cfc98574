"""The engine: device memory behind BUFFER nodes, and realizing tensor graphs (schedule, compile, run).

The names below are imported on first access, so that `tinycore.engine.memory` can be used by the scheduler
without importing the scheduler back through this package.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"new_buffer_uop": "memory", "buffer_of": "memory", "uop_from_bytes": "memory",
            "realize_uops": "realize", "to_host": "realize", "run_schedule": "realize"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tinycore.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tinycore.engine.{module}"), name)
