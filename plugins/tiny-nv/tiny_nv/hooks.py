"""The hooks of the NVIDIA plugin: the NV device. The probe loads the CUDA driver library and counts devices."""
from __future__ import annotations

import ctypes

from tinycore.plugins import DeviceSpec, hookimpl
from tinycore.plugins.probing import bounded_probe, load_library

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "NV"
PRIORITY = 80


def _count_cuda_devices() -> tuple[bool, str, int]:
    """cuInit and cuDeviceGetCount through libcuda."""
    library, detail = load_library(["libcuda.so.1", "cuda"])
    if library is None:
        return (False, f"the CUDA driver library (libcuda) is not installed ({detail})", 0)
    status = library.cuInit(0)
    if status != 0:
        return (False, f"cuInit failed with CUDA error {status} (driver loaded from {detail})", 0)
    count = ctypes.c_int(0)
    status = library.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return (False, f"the CUDA driver reports no device (cuDeviceGetCount status {status})", 0)
    return (True, f"{count.value} CUDA device(s)", count.value)


def probe() -> tuple[bool, str, int]:
    """NV is available when libcuda loads and reports at least one device."""
    return bounded_probe(_count_cuda_devices)


@hookimpl
def tiny_devices() -> list[DeviceSpec]:
    """The NV device."""
    return [DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_nv.device:NVDevice",
                       "NVIDIA GPUs through the CUDA driver API (CUDA C compiled by NVRTC)",
                       probe="tiny_nv.hooks:probe")]
