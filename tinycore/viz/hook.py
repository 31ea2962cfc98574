"""The switches the core reads to record for VIZ: module-level values, so that with VIZ unset each hook costs one
attribute test. This module sits low (it imports only helpers) so that the IR, codegen and the engine can call it;
the recorder (tinycore.viz.record, a high layer) installs itself here when recording starts: `import tinycore` does
that with VIZ=1, `tinycore.viz.record.enable()` any time."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tinycore.helpers import ContextVar

VIZ = ContextVar("VIZ", 0)
VIZ_PATH = ContextVar("VIZ_PATH", "")  # where the recording is written at exit (default: a temporary file)
VIZ_PORT = ContextVar("VIZ_PORT", 8000)
VIZ_SERVE = ContextVar("VIZ_SERVE", -1)  # 1: serve at exit even without a terminal, 0: never, -1: on a terminal


class Recorder(Protocol):
    """What the core hands a recorder (tinycore.viz.record implements it)."""

    def rewrite(self, run: Callable[..., Any], sink: object, matcher: object, ctx: object, bottom_up: bool,
                name: str) -> Any:
        """Perform the named graph_rewrite `run(sink, matcher, ctx, bottom_up, name)`, recording it."""

    def kernel_begin(self, ast: object) -> None:
        """codegen starts lowering the kernel `ast`."""

    def kernel_end(self, ast: object, optimized: object, spec: object, uops: Sequence[object],
                   renderer: object) -> None:
        """codegen lowered `ast` (the AST with opts `optimized`) to the linear program `uops` and the ProgramSpec."""

    def step(self, name: str, graph: object, before: object) -> None:
        """A codegen step that is not a graph_rewrite turned the graph `before` into `graph`."""

    def schedule(self, outputs: Sequence[object], schedule: object) -> None:
        """realize ran `schedule`, made for the tensor graphs `outputs`."""

    def launch(self, runner: Callable[..., float | None], buffers: list[object], var_vals: object, wait: bool,
               ast: object) -> float | None:
        """Launch `runner` as realize would (`runner(buffers, var_vals, wait=wait)`), timing it when asked."""


ENABLED = False
"""True while a recording is being made; every core hook tests this first."""

REWRITE: Callable[..., Any] | None = None
"""While recording: the recorder's `rewrite`, which graph_rewrite calls for a named pass; None otherwise."""

_recorder: Recorder | None = None


def install(recorder: Recorder | None) -> None:
    """Start recording into `recorder`, or stop (None)."""
    global ENABLED, REWRITE, _recorder
    _recorder, ENABLED = recorder, recorder is not None
    REWRITE = None if recorder is None else recorder.rewrite


def kernel_begin(ast: object) -> None:
    """See Recorder.kernel_begin (nothing when not recording)."""
    if _recorder is not None:
        _recorder.kernel_begin(ast)


def kernel_end(ast: object, optimized: object, spec: object, uops: Sequence[object], renderer: object) -> None:
    """See Recorder.kernel_end (nothing when not recording)."""
    if _recorder is not None:
        _recorder.kernel_end(ast, optimized, spec, uops, renderer)


def step(name: str, graph: object, before: object = None) -> None:
    """Record a codegen step that is not a graph_rewrite (a graph algorithm) as a pass of the kernel being lowered:
    the graph after it, the nodes not in `before` marked as changed (nothing when not recording)."""
    if _recorder is not None:
        _recorder.step(name, graph, before)


def schedule(outputs: Sequence[object], schedule: object) -> None:
    """See Recorder.schedule (nothing when not recording)."""
    if _recorder is not None:
        _recorder.schedule(outputs, schedule)


def launch(runner: Callable[..., float | None], buffers: list[object], var_vals: object, wait: bool,
           ast: object) -> float | None:
    """See Recorder.launch; a plain launch when not recording."""
    if _recorder is not None:
        return _recorder.launch(runner, buffers, var_vals, wait, ast)
    result: float | None = runner(buffers, var_vals, wait=wait)
    return result
