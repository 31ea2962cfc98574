"""Which sm_XX to compile for: DEV's arch (DEV=NV::sm_90), the mock GPU's, or the real GPU's compute capability."""
from __future__ import annotations

import ctypes

from tinycore.device.registry import target_for

MOCK_ARCH = "sm_90"
"""The architecture the MOCK interface simulates (an H100/H200-class GPU)."""
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76


class NoGPUError(RuntimeError):
    """There is no NVIDIA GPU to ask for its architecture; the message says how to compile without one."""


def device_index(device: str) -> int:
    """The index of `device` ('NV' -> 0, 'NV:1' -> 1)."""
    parts = device.split(":")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def gpu_arch(index: int) -> str:
    """'sm_XY' of CUDA device `index`, asked from libcuda; NoGPUError when there is no driver or no such GPU."""
    from tinycore.plugins.probing import load_library
    library, detail = load_library(["libcuda.so.1", "cuda"])
    if library is None:
        raise NoGPUError(f"no NVIDIA driver here ({detail}), so the GPU's architecture is unknown: name one to compile "
                         "only, e.g. DEV=NV::sm_90, or DEV=MOCK+NV for the simulated GPU")
    major, minor, handle = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    if library.cuInit(0) != 0 or library.cuDeviceGet(ctypes.byref(handle), index) != 0:
        raise NoGPUError(f"the CUDA driver has no device {index}: name an architecture to compile only, "
                         "e.g. DEV=NV::sm_90")
    library.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
    library.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
    return f"sm_{major.value}{minor.value}"


def device_arch(device: str) -> str:
    """The architecture to compile for on `device`: DEV's when given, the mock's under DEV=MOCK+NV, else the GPU's."""
    target = target_for(device)
    if target.arch:
        return target.arch
    if target.interface == "MOCK":
        return MOCK_ARCH
    return gpu_arch(device_index(device))
