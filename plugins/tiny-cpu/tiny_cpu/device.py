"""CPUDevice: the host CPU as a tinycore device (C renderer, C compiler, host memory, worker threads)."""
from __future__ import annotations

from typing import Any

from tiny_cpu.allocator import CPUAllocator
from tiny_cpu.runtime import CPUProgram
from tinycore.device.compiled import Compiled


class CPUDevice(Compiled):
    """The CPU device. Its renderer and compiler come from the registry's selection (DEV=CPU:RENDERER:ARCH)."""

    capabilities = {"threads": True}
    """What the conformance suite checks: every dtype, integer kernel parameters, large grids and worker threads
    (the reference device declares everything; no shared memory)."""

    def __init__(self, device: str = "CPU"):
        select_renderer: Any
        try:
            from tinycore.device.registry import select_renderer
        except ImportError:
            select_renderer = None
        if select_renderer is not None:
            renderer, compiler, _spec = select_renderer(device)
        else:
            from tiny_cpu.renderer import make_c_renderer
            renderer, compiler = make_c_renderer(device, None)
        super().__init__(device, CPUAllocator(device), renderer, compiler, CPUProgram)
