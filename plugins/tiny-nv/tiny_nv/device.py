"""NVDevice: an NVIDIA GPU reached through one interface (CUDA driver API, the kernel driver's queues, or the MOCK
GPU), with the CUDA C renderer and NVRTC (or the PTX renderer), or compile-only when DEV names an arch and no GPU is
here."""
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


def _capabilities(renderer: Any, mock: bool) -> DeviceCapabilities:
    """What NV supports, for the conformance suite."""
    return DeviceCapabilities(
        dtypes=NV_DTYPES, max_buffers=getattr(renderer, "max_buffers", None),
        local_memory=bool(getattr(renderer, "has_shared", True)), threads=False, symbolic=True,
        large_grids=not mock,  # the MOCK GPU interprets kernels in Python
        out_of_memory_bytes=1 << 62)


class NVDevice(Compiled):
    """One NVIDIA GPU (NV, NV:1, ...). Under DEV=NV+NV (the kernel driver) and DEV=MOCK+NV (the simulated driver and
    GPU) it is a queue device (NVKernelQueueDevice): the core's HCQ machinery drives the NV queues on the driver's
    channels."""

    def __new__(cls, device: str = "NV") -> Any:
        from tinycore.device.registry import target_for
        if cls is NVDevice and target_for(device).interface in ("MOCK", "NV"):
            return NVKernelQueueDevice(device)  # not an NVDevice, so Python does not call NVDevice.__init__ on it
        return object.__new__(cls)

    def __init__(self, device: str = "NV"):
        from tinycore.device.registry import select_renderer
        self.interface_name, self.interface = open_interface(device)
        renderer, compiler, _spec = select_renderer(device)
        interface = self.interface
        super().__init__(device, interface.allocator, renderer, compiler, interface.load)
        self.capabilities = _capabilities(renderer, self.interface_name == "MOCK")

    @property
    def description(self) -> str:
        """The interface's description of the GPU."""
        return str(self.interface.description)

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this GPU."""
        self.interface.synchronize()


def _queue_device_base() -> type:
    from tiny_nv.nv_hcq import NVQueueDevice
    return NVQueueDevice


class NVKernelQueueDevice(_queue_device_base()):  # type: ignore[misc]
    """NV through the kernel driver's channels on the core's queue machinery (HCQ): signals, argument blocks,
    TinyJit graphs. DEV=NV+NV reaches a real GPU; DEV=MOCK+NV the simulated driver and GPU."""

    def __init__(self, device: str = "NV"):
        from tinycore.device.registry import select_interface, select_renderer
        spec, gpu = select_interface(device)
        self.interface_name = spec.name
        renderer, compiler, _spec = select_renderer(device)
        mock = spec.name == "MOCK"
        where = ("the MOCK GPU (the kernel driver and the GPU simulated in Python; kernels run in tinycore's "
                 "interpreter)") if mock else f"the kernel driver (/dev/nvidia{gpu.minor}, sm_{gpu.sm})"
        super().__init__(device, renderer, compiler, f"{device} = {where}, driven through the core's HCQ queues", gpu)
        self.capabilities = _capabilities(renderer, mock)

    @property
    def description(self) -> str:
        """What this device is."""
        return self.interface_description


NVMockQueueDevice = NVKernelQueueDevice
"""The name DEV=MOCK+NV's device had before the kernel driver interface existed."""
