"""Compiled: the base class of every device that runs compiled programs."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinycore.device.allocator import Allocator
from tinycore.device.compiler import Compiler


class Compiled:
    """A device: its canonical name, allocator, renderer, compiler and runtime.

    `runtime(name, lib)` loads a compiled binary and returns a program, called as
    `program(*buffers, global_size=(..), local_size=(..), vals=(ints), wait=False)`; with `wait=True` it returns the
    kernel time in seconds.
    """

    def __init__(self, device: str, allocator: Allocator, renderer: Any, compiler: Compiler,
                 runtime: Callable[[str, bytes], Any], graph: Any = None):
        self.device = device
        self.allocator = allocator
        self.renderer = renderer
        self.compiler = compiler
        self.runtime = runtime
        self.graph = graph

    def synchronize(self) -> None:
        """Wait until every launched program and copy on this device has finished (default: all are synchronous)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"
