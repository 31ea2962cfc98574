"""The hooks of the AMD plugin: the AMD device and its renderer (HIP-style C compiled by clang to a code object).
The probe looks for /dev/kfd, else the HIP runtime; when neither is here it says why, how to add them, whether clang
and ld.lld are here to compile kernels, and how to compile without a GPU."""
from __future__ import annotations

import ctypes
import os

from tinycore.plugins import DeviceSpec, HCQQueues, InterfaceSpec, RendererSpec, device_hooks, hookimpl
from tinycore.plugins.probing import bounded_probe, load_library

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "AMD"
PRIORITY = 70
KFD_PATH = "/dev/kfd"
KFD_TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
COMPILE_ONLY_HINT = ("DEV=AMD::gfx1100 (or gfx90a, gfx942, gfx1201) compiles kernels without a GPU, DEV=MOCK+AMD runs "
                     "them on the simulated GPU")
SYSTEM_HINT = ("for a GPU install the amdgpu kernel driver (it creates /dev/kfd; add the user to the render and video "
               "groups) or ROCm's HIP runtime (apt-get install rocm-hip-runtime)")


def _toolchain_note() -> str:
    """'; <what compiles AMD kernels here, or what to install>'."""
    from tiny_amd.compiler import toolchain_status
    return f"; {toolchain_status()[1]}"


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
        return (False, f"neither {KFD_PATH} with a GPU nor the HIP runtime (libamdhip64) is present ({detail}): "
                       f"{SYSTEM_HINT}; {COMPILE_ONLY_HINT}{_toolchain_note()}", 0)
    count_value = ctypes.c_int(0)
    status = library.hipGetDeviceCount(ctypes.byref(count_value))
    if status != 0 or count_value.value == 0:
        return (False, f"the HIP runtime reports no device (hipGetDeviceCount status {status}); {COMPILE_ONLY_HINT}"
                       f"{_toolchain_note()}", 0)
    return (True, f"{count_value.value} GPU(s) through the HIP runtime", count_value.value)


def probe() -> tuple[bool, str, int]:
    """AMD is available when /dev/kfd lists a GPU or the HIP runtime loads and reports one."""
    return bounded_probe(_find_amd)


# HIP-style C compiled to an HSA code object by clang and ld.lld (no ROCm install needed). The amdkfd kernel driver
# (queues on the core's HCQ machinery); the HIP runtime; the MOCK GPU (used only when DEV names it: DEV=MOCK+AMD).
tiny_devices, tiny_renderers, tiny_interfaces = device_hooks(
    DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_amd.device:AMDDevice",
               "AMD GPUs through KFD or the HIP runtime (code objects built by clang or LLVM)",
               probe="tiny_amd.hooks:probe"),
    renderers=[RendererSpec("HIP", "tiny_amd.renderer:make_hip_renderer",
                            "HIP-style C compiled to a code object by clang and ld.lld (apt-get install clang-19 "
                            "lld-19)")],
    interfaces=[InterfaceSpec("KFD", "tiny_amd.kfd:open_kfd",
                              description="the amdkfd kernel driver (/dev/kfd): AQL and SDMA queues, doorbells, "
                                          "events"),
                InterfaceSpec("HIP", "tiny_amd.hip:open_hip", description="ROCm's HIP runtime through libamdhip64"),
                InterfaceSpec("MOCK", "tiny_amd.kfd_mock:open_mock", is_mock=True,
                              description="a simulated amdkfd driver and GPU in Python that decode the KFD calls and "
                                          "the queues' AQL, PM4 and SDMA")])


@hookimpl
def tiny_hcq_queues(device: object) -> HCQQueues | None:
    """AMD's queues (AQL, PM4, SDMA) for the queue devices KFD and DEV=MOCK+AMD open; None for other devices."""
    if type(device).__name__ not in ("AMDMockQueueDevice", "AMDKFDQueueDevice"):
        return None
    from tiny_amd.amd_hcq import QUEUES
    return QUEUES
