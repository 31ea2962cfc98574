"""The switches the core reads to record for VIZ: module-level values, so that with VIZ unset each hook costs one
attribute test. tinycore.viz.record sets them when recording starts (import time with VIZ=1, or `enable()`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinycore.helpers import ContextVar

VIZ = ContextVar("VIZ", 0)
VIZ_PATH = ContextVar("VIZ_PATH", "")  # where the recording is written at exit (default: a temporary file)
VIZ_PORT = ContextVar("VIZ_PORT", 8000)
VIZ_SERVE = ContextVar("VIZ_SERVE", -1)  # 1: serve at exit even without a terminal, 0: never, -1: on a terminal



def _recorded_rewrite(*arguments: Any) -> Any:
    # imported on first use: the recorder needs the IR, which imports this module
    from tinycore.viz.record import recorded_rewrite
    return recorded_rewrite(*arguments)


ENABLED = bool(VIZ.value)
"""True while a recording is being made; every core hook tests this first."""

REWRITE: Callable[..., Any] | None = _recorded_rewrite if ENABLED else None
"""With VIZ on: `REWRITE(run, sink, matcher, ctx, bottom_up, name)` records a named graph_rewrite that `run`
performs; None otherwise (graph_rewrite then runs directly)."""


def set_enabled(enabled: bool) -> None:
    """Turn recording on or off (tinycore.viz.record.enable/disable call this)."""
    global ENABLED, REWRITE
    ENABLED = enabled
    REWRITE = _recorded_rewrite if enabled else None
