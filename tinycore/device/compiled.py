"""Compiled: the base class of every device that runs compiled programs."""
from __future__ import annotations

import weakref
from collections.abc import Callable

from tinycore.device.allocator import Allocator
from tinycore.device.compiler import Compiler
from tinycore.plugins.contract import DeviceContract, GraphFactory, ProgramContract
from tinycore.renderer.renderer import Renderer


class Compiled(DeviceContract):
    """A device: its canonical name, allocator, renderer, compiler and runtime.

    `runtime(name, lib)` loads a compiled binary and returns a program, called as
    `program(*buffers, global_size=(..), local_size=(..), vals=(ints), wait=False)`; with `wait=True` it returns the
    kernel time in seconds.
    """

    allocator: Allocator
    renderer: Renderer
    compiler: Compiler

    def __init__(self, device: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 runtime: Callable[[str, bytes], ProgramContract], graph: GraphFactory | None = None):
        self.device = device
        self.allocator = allocator
        self.renderer = renderer
        self.compiler = compiler
        self.runtime = runtime
        self.graph = graph
        if renderer is not None:
            try:  # Renderer.supported_dtypes reads the capabilities this device declares
                renderer.__dict__["_opened_device"] = weakref.ref(self)  # read back from __dict__ there
            except (AttributeError, TypeError):
                pass  # a renderer object that takes no attributes: it answers from its own declarations

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"
