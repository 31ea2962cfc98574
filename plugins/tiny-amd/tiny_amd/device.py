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
            return CompileOnlyInterface.name, CompileOnlyInterface(
                device, target.arch, str(error), "code object", "AMD GPU",
                elsewhere=", or use DEV=MOCK+AMD to run kernels on the simulated GPU")
        raise RuntimeError(f"{error}. Without a GPU, DEV={device}::gfx1100 (or gfx90a, gfx942, gfx1201) renders and "
                           "compiles kernels only, and DEV=MOCK+AMD runs them on the simulated GPU") from error
    return spec.name, interface


def _capabilities(renderer: Any, mock: bool) -> DeviceCapabilities:
    """What AMD supports, for the conformance suite."""
    return DeviceCapabilities(dtypes=AMD_DTYPES, max_buffers=renderer.max_buffers, local_memory=True, threads=False,
                              symbolic=True, large_grids=not mock,  # the MOCK GPU interprets kernels in Python
                              out_of_memory_bytes=1 << 62)


class AMDDevice(Compiled):
    """One AMD GPU (AMD, AMD:1, ...). Through KFD (DEV=KFD+AMD, the default where /dev/kfd lists a GPU) or the MOCK
    driver (DEV=MOCK+AMD) it is a queue device on the core's HCQ machinery (AMDQueueDevice); through the HIP runtime
    or compile-only it is this class."""

    def __new__(cls, device: str = "AMD") -> Any:
        from tinycore.device.registry import target_for
        if cls is AMDDevice:
            interface = target_for(device).interface
            if interface == "MOCK":
                return AMDMockQueueDevice(device)  # not an AMDDevice, so Python does not call AMDDevice.__init__
            if interface == "KFD" or (not interface and _kfd_opens(device)):
                return AMDKFDQueueDevice(device)
        return object.__new__(cls)

    def __init__(self, device: str = "AMD"):
        from tinycore.device.registry import select_renderer
        self.interface_name, self.interface = open_interface(device)
        renderer, compiler, _spec = select_renderer(device)
        super().__init__(device, self.interface.allocator, renderer, compiler, self.interface.load)
        self.capabilities = _capabilities(renderer, False)

    @property
    def description(self) -> str:
        """The interface's description of the GPU."""
        return str(self.interface.description)

    def synchronize(self) -> None:
        """Wait for every kernel and copy queued on this GPU."""
        self.interface.synchronize()


def _kfd_opens(device: str) -> bool:
    """Whether /dev/kfd lists the GPU `device` names (then KFD is the interface DEV=AMD gets)."""
    from tiny_amd.kfd import open_kfd
    try:
        open_kfd(device, ())
    except (OSError, ValueError):
        return False
    return True


def _queue_device_base() -> type:
    from tiny_amd.amd_hcq import AMDQueueDevice
    return AMDQueueDevice


class AMDMockQueueDevice(_queue_device_base()):  # type: ignore[misc]
    """AMD on the MOCK GPU: the KFD interface over the simulated driver (tiny_amd.kfd_mock), driven through the core's
    queue machinery (HCQ): signals, kernarg blocks, TinyJit graphs."""

    def __init__(self, device: str = "AMD"):
        from tiny_amd.kfd_mock import MockKFD
        from tiny_amd.target import device_target, parse_target
        from tinycore.device.registry import select_interface, select_renderer
        spec, _interface = select_interface(device)  # records the MOCK selection (tiny devices shows it)
        self.interface_name = spec.name
        renderer, compiler, _spec = select_renderer(device)
        arch = device_target(device)
        super().__init__(device, renderer, compiler, MockKFD(arch), 0,
                         f"{device} = the MOCK GPU ({arch}; the KFD interface over a simulated amdkfd driver, AQL, "
                         "PM4 and SDMA decoded in Python, kernels run in tinycore's interpreter)",
                         parse_target(arch).wave_size)
        self.capabilities = _capabilities(renderer, True)

    @property
    def description(self) -> str:
        """What this device is."""
        return str(self.interface_description)


class AMDKFDQueueDevice(_queue_device_base()):  # type: ignore[misc]
    """AMD through the amdkfd kernel driver (/dev/kfd and the render node). Not run on AMD hardware here."""

    def __init__(self, device: str = "AMD"):
        from tiny_amd.target import device_target, parse_target
        from tinycore.device.registry import select_interface, select_renderer
        spec, selection = select_interface(device)
        self.interface_name = spec.name
        renderer, compiler, _spec = select_renderer(device)
        arch = device_target(device)
        super().__init__(device, renderer, compiler, selection.files, selection.index, selection.description,
                         parse_target(arch).wave_size)
        self.capabilities = _capabilities(renderer, False)

    @property
    def description(self) -> str:
        """What this device is."""
        return str(self.interface_description)
