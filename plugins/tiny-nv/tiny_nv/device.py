"""NVDevice: an NVIDIA GPU reached through one interface (CUDA driver API, the NV queues, or the MOCK GPU), with the
CUDA C renderer and NVRTC (or the PTX renderer), or compile-only when DEV names an arch and no GPU is here."""
from __future__ import annotations

from typing import Any, Protocol

from tinycore.device.compiled import Compiled
from tinycore.dtype import dtypes
from tinycore.testing.capabilities import DeviceCapabilities

NV_DTYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                       dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
                       dtypes.float64})


class NVInterface(Protocol):
    """What the device needs from an interface: an allocator, loading compiled kernels, waiting for the GPU."""

    allocator: Any

    @property
    def description(self) -> str:
        """What the interface reaches, for `tiny devices`."""

    def load(self, name: str, lib: bytes) -> Any:
        """A program for the compiled kernel `lib` (its function `name`)."""

    def synchronize(self) -> None:
        """Wait for every queued kernel and copy."""


def open_interface(device: str) -> tuple[str, NVInterface]:
    """(interface name, interface) for `device`: DEV's interface, else the first real one that opens, else the
    compile-only stand-in when DEV names an architecture (DEV=NV::sm_90)."""
    from tiny_nv.compile_only import CompileOnlyInterface
    from tinycore.device.registry import SelectionError, select_interface, target_for
    target = target_for(device)
    try:
        spec, interface = select_interface(device)
    except SelectionError as error:
        if target.arch and not target.interface:
            return CompileOnlyInterface.name, CompileOnlyInterface(device, target.arch, str(error))
        raise RuntimeError(f"{error}. Without a GPU, DEV={device}::sm_90 (any sm_XX) renders and compiles kernels "
                           "only, and DEV=MOCK+NV runs them on the simulated GPU") from error
    return spec.name, interface


class NVDevice(Compiled):
    """One NVIDIA GPU (NV, NV:1, ...)."""

    def __init__(self, device: str = "NV"):
        from tinycore.device.registry import select_renderer
        self.interface_name, self.interface = open_interface(device)
        renderer, compiler, _spec = select_renderer(device)
        interface = self.interface
        super().__init__(device, interface.allocator, renderer, compiler, interface.load)
        local_memory = bool(getattr(renderer, "has_shared", True))
        mock = self.interface_name == "MOCK"
        self.capabilities = DeviceCapabilities(
            dtypes=NV_DTYPES, max_buffers=getattr(renderer, "max_buffers", None), local_memory=local_memory,
            threads=False, symbolic=True, large_grids=not mock,  # the MOCK GPU interprets kernels in Python
            out_of_memory_bytes=1 << 62)

    @property
    def description(self) -> str:
        """The interface's description of the GPU."""
        return str(self.interface.description)

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this GPU."""
        self.interface.synchronize()
