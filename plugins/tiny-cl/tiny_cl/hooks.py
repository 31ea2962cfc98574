"""The hooks of the OpenCL plugin: the CL device.

The probe asks pyopencl when it is installed, else the OpenCL ICD loader through ctypes, how many devices the
OpenCL platforms report; it never opens a context.
"""
from __future__ import annotations

import ctypes
import importlib.util

from tinycore.plugins import DeviceSpec, RendererSpec, device_hooks
from tinycore.plugins.probing import bounded_probe, load_library

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "CL"
PRIORITY = 60


def _count_with_pyopencl() -> tuple[bool, str, int]:
    """Count OpenCL devices through pyopencl."""
    import pyopencl

    platforms = pyopencl.get_platforms()
    count = sum(len(platform.get_devices()) for platform in platforms)
    if count == 0:
        return (False, f"pyopencl found {len(platforms)} OpenCL platform(s) but no device", 0)
    names = ", ".join(platform.name for platform in platforms)
    devices = [getattr(device, "name", None) for platform in platforms for device in platform.get_devices()]
    numbered = ", ".join(f"CL:{index} = {name.strip()}" for index, name in enumerate(devices) if isinstance(name, str))
    return (True, f"{count} OpenCL device(s) on {names}" + (f": {numbered}" if numbered else ""), count)


def _count_with_ctypes() -> tuple[bool, str, int]:
    """Count OpenCL platforms and devices through libOpenCL."""
    library, detail = load_library(["OpenCL", "libOpenCL.so.1"])
    if library is None:
        from tinycore.plugins.install import install_command
        return (False, f"no OpenCL ICD loader (libOpenCL) found ({detail}); install pyopencl (it brings one) and "
                       f"an OpenCL driver: a GPU vendor's, or PoCL for the CPU, both with "
                       f"{install_command('tiny-cl[pocl]')}", 0)
    platform_count = ctypes.c_uint32(0)
    status = library.clGetPlatformIDs(0, None, ctypes.byref(platform_count))
    if status != 0 or platform_count.value == 0:
        return (False, f"libOpenCL loaded from {detail} but reports no OpenCL platform (status {status})", 0)
    platforms = (ctypes.c_void_p * platform_count.value)()
    library.clGetPlatformIDs(platform_count.value, platforms, None)
    all_device_types = ctypes.c_uint64(0xFFFFFFFF)
    total = 0
    for platform in platforms:
        device_count = ctypes.c_uint32(0)
        if library.clGetDeviceIDs(ctypes.c_void_p(platform), all_device_types, 0, None,
                                  ctypes.byref(device_count)) == 0:
            total += device_count.value
    if total == 0:
        return (False, f"{platform_count.value} OpenCL platform(s) but no device", 0)
    return (True, f"{total} OpenCL device(s) on {platform_count.value} platform(s)", total)


def probe() -> tuple[bool, str, int]:
    """CL is available when an OpenCL platform answers with at least one device."""
    if importlib.util.find_spec("pyopencl") is not None:
        return bounded_probe(_count_with_pyopencl, timeout_s=10.0)
    return bounded_probe(_count_with_ctypes)


tiny_devices, tiny_renderers, _ = device_hooks(
    DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_cl.device:CLDevice",
               "OpenCL devices through the ICD loader (OpenCL C compiled by the driver)", probe="tiny_cl.hooks:probe"),
    renderers=[RendererSpec("OPENCL", "tiny_cl.renderer:make_cl_renderer",
                            "OpenCL C built by the device's OpenCL driver (binaries cached per driver version)")])
