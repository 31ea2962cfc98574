"""CLDevice: one OpenCL device (CL, CL:1, ...) as a tinycore device: OpenCL C renderer, driver compiler, cl.Buffers."""
from __future__ import annotations

from typing import Any

from tiny_cl.allocator import CLAllocator
from tiny_cl.driver import open_device
from tiny_cl.runtime import CLProgram
from tinycore.device.compiled import Compiled
from tinycore.dtype import dtypes


class CLDevice(Compiled):
    """An OpenCL device; its renderer and compiler come from the registry's selection (DEV=CL:OPENCL)."""

    def __init__(self, device: str = "CL"):
        self.opened = open_device(device)
        renderer, compiler = self._renderer_and_compiler(device)
        opened = self.opened

        def runtime(name: str, lib: bytes) -> CLProgram:
            return CLProgram(opened, name, lib)

        super().__init__(device, CLAllocator(device, opened), renderer, compiler, runtime)
        self.capabilities = self._capabilities()
        if getattr(self.renderer, "max_buffers", None) is None:
            # the scheduler splits kernels that would pass more buffer arguments than the driver accepts
            self.renderer.max_buffers = self.capabilities["max_buffers"]

    def _capabilities(self) -> dict[str, Any]:
        """What this device supports, for the conformance suite: the dtypes its renderer has types for (half and
        double only where the driver reports them), kernel parameters within CL_DEVICE_MAX_PARAMETER_SIZE, local
        memory, integer kernel parameters."""
        type_map = getattr(self.renderer, "type_map", {})
        hardware = self.opened.device
        return {"dtypes": frozenset(dtype for dtype in type_map if dtype != dtypes.void),
                "max_buffers": max(1, int(hardware.max_parameter_size) // 8 - 8), "local_memory": True,
                "threads": False, "symbolic": True, "large_grids": True, "out_of_memory_bytes": 1 << 62}

    @staticmethod
    def _renderer_and_compiler(device: str) -> tuple[Any, Any]:
        """The renderer and compiler the registry selects (the OpenCL C renderer unless another plugin's is asked)."""
        try:
            from tinycore.device.registry import select_renderer
        except ImportError:
            from tiny_cl.renderer import make_cl_renderer
            return make_cl_renderer(device, None)
        renderer, compiler, _spec = select_renderer(device)
        return renderer, compiler

    @property
    def description(self) -> str:
        """'CL:N = <device> on <platform> (<OpenCL version>)'."""
        return self.opened.describe()

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this device."""
        self.opened.finish()

    def close(self) -> None:
        """Finish queued work and release the cached allocations (the context goes when the process ends)."""
        self.opened.finish()
        self.allocator.free_cache()  # type: ignore[attr-defined]
