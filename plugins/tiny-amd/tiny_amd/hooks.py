"""The hooks of the AMD plugin: the AMD device. The probe looks for /dev/kfd, else the HIP runtime."""
from __future__ import annotations

import ctypes
import os

from tinycore.plugins import DeviceSpec, hookimpl
from tinycore.plugins.probing import bounded_probe, load_library

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "AMD"
PRIORITY = 70
KFD_PATH = "/dev/kfd"
KFD_TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"


def _count_kfd_gpus() -> int:
    """The number of KFD topology nodes that are GPUs (gpu_id not 0)."""
    count = 0
    for node in os.listdir(KFD_TOPOLOGY) if os.path.isdir(KFD_TOPOLOGY) else []:
        try:
            with open(os.path.join(KFD_TOPOLOGY, node, "gpu_id")) as handle:
                count += handle.read().strip() not in ("", "0")
        except OSError:
            continue
    return count


def _find_amd() -> tuple[bool, str, int]:
    """/dev/kfd with GPU nodes, else hipGetDeviceCount through libamdhip64."""
    if os.path.exists(KFD_PATH):
        count = _count_kfd_gpus()
        if count:
            return (True, f"{count} GPU(s) through {KFD_PATH}", count)
    library, detail = load_library(["libamdhip64.so", "amdhip64"])
    if library is None:
        return (False, f"neither {KFD_PATH} with a GPU nor the HIP runtime (libamdhip64) is present ({detail})", 0)
    count_value = ctypes.c_int(0)
    status = library.hipGetDeviceCount(ctypes.byref(count_value))
    if status != 0 or count_value.value == 0:
        return (False, f"the HIP runtime reports no device (hipGetDeviceCount status {status})", 0)
    return (True, f"{count_value.value} GPU(s) through the HIP runtime", count_value.value)


def probe() -> tuple[bool, str, int]:
    """AMD is available when /dev/kfd lists a GPU or the HIP runtime loads and reports one."""
    return bounded_probe(_find_amd)


@hookimpl
def tiny_devices() -> list[DeviceSpec]:
    """The AMD device."""
    return [DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_amd.device:AMDDevice",
                       "AMD GPUs through KFD or the HIP runtime (code objects built by clang or LLVM)",
                       probe="tiny_amd.hooks:probe")]
