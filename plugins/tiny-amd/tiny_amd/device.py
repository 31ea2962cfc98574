"""AMDDevice: an AMD GPU reached through one interface, with the HIP-style renderer and clang, or compile-only when
DEV names a target (DEV=AMD::gfx1100) and no GPU is here."""
from __future__ import annotations

from typing import Any

from tinycore.device.compiled import Compiled
from tinycore.dtype import dtypes
from tinycore.testing.capabilities import DeviceCapabilities

AMD_DTYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                        dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32})
"""float64 is left out: its transcendental ops need ROCm's device library, which the kernels do not link."""


def open_interface(device: str) -> tuple[str, Any]:
    """(interface name, interface) for `device`: DEV's interface, else the first real one that opens, else the
    compile-only stand-in when DEV names a target (DEV=AMD::gfx1100)."""
    from tinycore.device.compile_only import CompileOnlyInterface
    from tinycore.device.registry import SelectionError, select_interface, target_for
    target = target_for(device)
    try:
        spec, interface = select_interface(device)
    except SelectionError as error:
        if target.arch and not target.interface:
            return CompileOnlyInterface.name, CompileOnlyInterface(device, target.arch, str(error), "code object",
                                                                   "AMD GPU")
        raise RuntimeError(f"{error}. Without a GPU, DEV={device}::gfx1100 (or gfx90a, gfx942, gfx1201) renders and "
                           "compiles kernels only") from error
    return spec.name, interface


class AMDDevice(Compiled):
    """One AMD GPU (AMD, AMD:1, ...)."""

    def __init__(self, device: str = "AMD"):
        from tinycore.device.registry import select_renderer
        self.interface_name, self.interface = open_interface(device)
        renderer, compiler, _spec = select_renderer(device)
        super().__init__(device, self.interface.allocator, renderer, compiler, self.interface.load)
        self.capabilities = DeviceCapabilities(
            dtypes=AMD_DTYPES, max_buffers=renderer.max_buffers, local_memory=True, threads=False, symbolic=True,
            large_grids=True, out_of_memory_bytes=1 << 62)

    @property
    def description(self) -> str:
        """The interface's description of the GPU."""
        return str(self.interface.description)

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this GPU."""
        self.interface.synchronize()
