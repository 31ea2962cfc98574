"""WebGPUDevice: a WebGPU adapter (through wgpu-py) as a tinycore device: WGSL renderer, storage buffers, compute
pipelines."""
from __future__ import annotations

import functools

from tiny_webgpu.allocator import WebGPUAllocator
from tiny_webgpu.runtime import WebGPUProgram, context_for
from tinycore.device.compiled import Compiled


class WebGPUDevice(Compiled):
    """The WEBGPU device. The adapter comes from the interface selection (DEV=VULKAN+WEBGPU, DEV=GL+WEBGPU; by
    default the first of Vulkan, Metal, D3D12, OpenGL that has one), the renderer from DEV=WEBGPU:WGSL."""

    def __init__(self, device: str = "WEBGPU"):
        from tinycore.device.registry import select_renderer
        self.context = context_for(device)
        renderer, compiler, _spec = select_renderer(device)
        super().__init__(device, WebGPUAllocator(device, self.context), renderer, compiler,
                         functools.partial(WebGPUProgram, self.context))

    @property
    def description(self) -> str:
        """The adapter, its backend and type: 'llvmpipe (LLVM 15.0.6, 256 bits) [Vulkan, CPU]'."""
        return self.context.description

    def synchronize(self) -> None:
        """Wait for every submitted kernel and copy."""
        self.context.synchronize()
