"""The hooks of the CPU plugin: the CPU device, its C renderer, its allocator and its queues.

This module is imported when tinycore discovers plugins, so it imports nothing heavy: the device class, the
renderer and the compiler are named by import path and loaded when CPU is opened.
"""
from __future__ import annotations

import shlex
import shutil
from typing import Any

from tinycore.helpers import environ
from tinycore.plugins import DeviceSpec, HCQQueues, RendererSpec, device_family, device_hooks, hookimpl

TINYCORE_PLUGIN_API = 1

DEVICE_NAME = "CPU"
PRIORITY = 100


def find_c_compiler() -> str | None:
    """The C compiler to use: the program named by $CC when it is found, else gcc, else clang (None: none found).

    The same order as tiny_cpu.compiler uses (gcc compiles small kernels faster and has _Float16 on x86)."""
    configured = environ("CC")
    candidates = [shlex.split(configured)[0]] if configured and configured.strip() else ["gcc", "clang"]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def c_compiler_missing_reason() -> str | None:
    """Why the C renderer cannot compile here (None when a C compiler is found)."""
    if find_c_compiler() is not None:
        return None
    configured = environ("CC")
    if configured and configured.strip():
        return f"CC={configured!r} is not an executable on PATH; set CC to a C compiler"
    return "no C compiler found: install gcc or clang, or set CC"


def probe() -> tuple[bool, str, int]:
    """CPU is available when a C compiler is found (CC, gcc or clang on PATH), or without one where the X86
    renderer runs (x86-64): its kernels, and the worker pool built when tiny-cpu was installed, need no compiler."""
    missing = c_compiler_missing_reason()
    if missing is None:
        return (True, f"C compiler {find_c_compiler()}", 1)
    if x86_probe()[0]:
        return (True, f"{missing} (for the C renderer); the X86 renderer needs none: DEV=CPU:X86", 1)
    return (False, missing, 0)


def c_probe() -> tuple[bool, str]:
    """The C renderer is available when a C compiler is found."""
    missing = c_compiler_missing_reason()
    return (False, missing) if missing else (True, f"C compiler {find_c_compiler()}")


def llvm_missing_reason() -> str:
    """Why the LLVM renderer cannot run here, with the install line that fits how tinycore was installed."""
    from tinycore.plugins.install import install_command
    return f"llvmlite is not installed: {install_command('tiny-cpu[llvm]')}"


def llvm_probe() -> tuple[bool, str]:
    """The LLVM renderer is available when llvmlite can be imported (found without importing it: that is slow)."""
    from importlib.util import find_spec
    try:
        found = find_spec("llvmlite") is not None
    except (ImportError, ValueError):
        found = False
    return (True, "llvmlite is installed") if found else (False, llvm_missing_reason())


X86_FEATURES = ("avx", "avx2", "fma", "f16c", "bmi2")
"""The CPU features the x86 renderer's code uses (/proc/cpuinfo's names)."""


def x86_probe() -> tuple[bool, str]:
    """The x86 renderer is available on x86-64 hosts with AVX2, FMA, F16C and BMI2; elsewhere it says why not
    (nothing heavy is imported)."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return (False, f"this host is {platform.machine()}, not x86-64: the X86 renderer emits x86-64 machine code "
                       "only; use DEV=CPU (C) or DEV=CPU:LLVM")
    from tiny_cpu.target import host_cpu_flags
    flags = host_cpu_flags()
    missing = [feature for feature in X86_FEATURES if flags and feature not in flags]
    if missing:
        return (False, f"this x86-64 CPU lacks {', '.join(missing)}, which the X86 renderer's code uses; use DEV=CPU "
                       "(C) or DEV=CPU:LLVM")
    return (True, "x86-64 host: kernels encoded in Python, no compiler needed")


# the C renderer (compiled by $CC, gcc or clang), then the LLVM renderer (LLVM IR compiled in process by llvmlite:
# DEV=CPU:LLVM, with tiny-cpu[llvm] installed)
tiny_devices, tiny_renderers, _ = device_hooks(
    DeviceSpec(DEVICE_NAME, PRIORITY, "tiny_cpu.device:CPUDevice",
               "C kernels compiled by gcc or clang to shared objects, run on the host's cores",
               probe="tiny_cpu.hooks:probe"),
    renderers=[RendererSpec("C", "tiny_cpu.renderer:make_c_renderer",
                            "C source compiled to a shared object by $CC, gcc or clang",
                            probe="tiny_cpu.hooks:c_probe"),
               RendererSpec("LLVM", "tiny_cpu.llvm_compiler:make_llvm_renderer",
                            "LLVM IR compiled in process by llvmlite (the llvm extra of tiny-cpu)",
                            probe="tiny_cpu.hooks:llvm_probe"),
               RendererSpec("X86", "tiny_cpu.x86.renderer:make_x86_renderer",
                            "x86-64 machine code selected and encoded in Python (no compiler), x86-64 hosts only",
                            probe="tiny_cpu.hooks:x86_probe")])


@hookimpl
def tiny_allocator(device: Any) -> Any:
    """Host memory for the CPU device being opened (None for any other device)."""
    if device_family(device) != DEVICE_NAME:
        return None
    from tiny_cpu.allocator import CPUAllocator
    return CPUAllocator(device.device)


@hookimpl
def tiny_hcq_queues(device: Any) -> HCQQueues | None:
    """The CPU device's queues: command words for its C queues, signals in host memory."""
    if device_family(device) != DEVICE_NAME:
        return None
    from tiny_cpu.queue import CPUComputeQueue, CPUCopyQueue, CPUSignal
    return HCQQueues(CPUComputeQueue, CPUCopyQueue, CPUSignal)
