"""Compile-only use of NV (DEV=NV::sm_90 on a machine without an NVIDIA GPU): the core's compile-only stand-in
(tinycore.device.compile_only) with NVIDIA's names in its messages."""
from __future__ import annotations

from tinycore.device.compile_only import CompiledOnlyProgram, HostAllocator, NoGPUForLaunchError
from tinycore.device.compile_only import CompileOnlyInterface as _CoreCompileOnlyInterface

__all__ = ["CompileOnlyInterface", "CompiledOnlyProgram", "HostAllocator", "NoGPUForLaunchError"]


class CompileOnlyInterface(_CoreCompileOnlyInterface):
    """Host buffers and programs that refuse to launch, saying a CUBIN was built but no NVIDIA GPU is here."""

    def __init__(self, device: str, arch: str, reason: str):
        super().__init__(device, arch, reason, binary_kind="CUBIN", hardware="NVIDIA GPU",
                         elsewhere=", or use DEV=MOCK+NV to run kernels on the simulated GPU")
