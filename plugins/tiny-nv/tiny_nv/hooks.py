"""The hooks of the NVIDIA plugin: the NV device, its renderers (CUDA C through NVRTC; PTX) and its interfaces (the
CUDA driver API; the MOCK GPU, only when DEV names it). The probe loads the CUDA driver library and counts devices;
when there is none it says why and how to compile without a GPU."""
from __future__ import annotations

import ctypes

from tinycore.plugins import DeviceSpec, HCQQueues, InterfaceSpec, RendererSpec, device_hooks, hookimpl
from tinycore.plugins.probing import bounded_probe, load_library

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "NV"
PRIORITY = 80
COMPILE_ONLY_HINT = "DEV=NV::sm_90 compiles kernels without a GPU, DEV=MOCK+NV runs them on the simulated GPU"


def _nvrtc_note() -> str:
    """'' when NVRTC is installed, else the command that adds it."""
    from tiny_nv.nvrtc import nvrtc_status
    ok, detail = nvrtc_status()
    return "" if ok else f"; {detail}"


def _count_cuda_devices() -> tuple[bool, str, int]:
    """cuInit and cuDeviceGetCount through libcuda."""
    library, detail = load_library(["libcuda.so.1", "cuda"])
    if library is None:
        return (False, f"the CUDA driver library (libcuda) is not installed ({detail}); {COMPILE_ONLY_HINT}"
                       f"{_nvrtc_note()}", 0)
    status = library.cuInit(0)
    if status != 0:
        return (False, f"cuInit failed with CUDA error {status} (driver loaded from {detail}){_nvrtc_note()}", 0)
    count = ctypes.c_int(0)
    status = library.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return (False, f"the CUDA driver reports no device (cuDeviceGetCount status {status}){_nvrtc_note()}", 0)
    return (True, f"{count.value} CUDA device(s){_nvrtc_note()}", count.value)


def probe() -> tuple[bool, str, int]:
    """NV is available when libcuda loads and reports at least one device."""
    return bounded_probe(_count_cuda_devices)


# CUDA C compiled by NVRTC (the default); PTX rendered directly (DEV=NV:PTX), assembled by the driver. The CUDA
# driver API; the kernel driver's queues (DEV=NV+NV); the MOCK GPU (used only when DEV names it: DEV=MOCK+NV).
tiny_devices, tiny_renderers, tiny_interfaces = device_hooks(
    DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_nv.device:NVDevice",
               "NVIDIA GPUs through the CUDA driver API (CUDA C compiled by NVRTC)", probe="tiny_nv.hooks:probe"),
    renderers=[RendererSpec("CUDA", "tiny_nv.renderer:make_cuda_renderer",
                            "CUDA C compiled to CUBIN by NVRTC from its pip wheel (pip install 'tiny-nv[nvrtc]')"),
               RendererSpec("PTX", "tiny_nv.ptx_compiler:make_ptx_renderer",
                            "PTX rendered from the linear program (no NVRTC), assembled by the CUDA driver")],
    interfaces=[InterfaceSpec("CUDA", "tiny_nv.cuda:open_cuda", description="the CUDA driver API through libcuda"),
                InterfaceSpec("NV", "tiny_nv.kernel_driver:open_kernel_driver",
                              description="the kernel driver (/dev/nvidiactl, /dev/nvidia-uvm): GPFIFO channels and "
                                          "QMDs"),
                InterfaceSpec("MOCK", "tiny_nv.mock_driver:open_mock_driver", is_mock=True,
                              description="the kernel driver and a GPU simulated in Python that decodes the NV "
                                          "command stream")])


@hookimpl
def tiny_hcq_queues(device: object) -> HCQQueues | None:
    """NV's queues (the NV command format) for the queue device DEV=NV+NV and DEV=MOCK+NV open; None for others."""
    if type(device).__name__ != "NVKernelQueueDevice":
        return None
    from tiny_nv.nv_hcq import QUEUES
    return QUEUES
