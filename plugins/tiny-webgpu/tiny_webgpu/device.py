"""WebGPUDevice: a WebGPU adapter (through wgpu-py) as a tinycore device: WGSL renderer, storage buffers, compute
pipelines."""
from __future__ import annotations

import functools
from typing import Any

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
    def capabilities(self) -> Any:
        """What kernels on this adapter support (read by the conformance suite): 32-bit and packed 8/16-bit dtypes,
        float16 with `shader-f16`, at most maxStorageBuffersPerShaderStage buffers per kernel."""
        from tinycore.dtype import dtypes
        from tinycore.testing.capabilities import DeviceCapabilities
        supported = {dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                     dtypes.float32}
        if getattr(self.renderer, "has_f16", False):
            supported.add(dtypes.float16)
        return DeviceCapabilities(dtypes=frozenset(supported),
                                  max_buffers=getattr(self.renderer, "max_storage_buffers", None))

    @property
    def description(self) -> str:
        """The adapter, its backend and type: 'llvmpipe (LLVM 15.0.6, 256 bits) [Vulkan, CPU]'."""
        return self.context.description

    def synchronize(self) -> None:
        """Wait for every submitted kernel and copy."""
        self.context.synchronize()
