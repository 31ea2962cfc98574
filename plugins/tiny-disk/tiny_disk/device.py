"""The DISK device: files as device memory. It holds data and runs no kernels.

`Device["DISK:/path/to/file"]` is one file, `Device["DISK:shm:name"]` one POSIX shared memory object. Tensors on
DISK are read with `.to(device)` (copies in bounded chunks) and written with `.to("DISK:/path")`; computing on them
raises `DiskKernelError` at realize time, naming the way out.
"""
from __future__ import annotations

from typing import Any, NoReturn

from tiny_disk.allocator import DiskAllocator
from tinycore.device.compiled import Compiled
from tinycore.device.compiler import Compiler


class DiskKernelError(RuntimeError):
    """A kernel was scheduled on a DISK device."""


def _refuse(device: str, what: str) -> NoReturn:
    raise DiskKernelError(f"{device} cannot {what}: DISK holds data and runs no kernels. Move the tensor to a compute "
                          f"device first, e.g. tensor.to('CPU') (or .to(Device.DEFAULT)), and compute there")


class NoKernelRenderer:
    """Stands in for a renderer on DISK: any use raises DiskKernelError (a kernel reached the DISK device)."""

    def __init__(self, device: str):
        object.__setattr__(self, "_device", device)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        _refuse(object.__getattribute__(self, "_device"), "render a kernel")

    def __repr__(self) -> str:
        return f"<NoKernelRenderer {object.__getattribute__(self, '_device')}>"


class NoKernelCompiler(Compiler):
    """Stands in for a compiler on DISK: compiling raises DiskKernelError."""

    name = "none"

    def __init__(self, device: str):
        super().__init__("disk")
        self.device = device

    def compile(self, src: str) -> bytes:
        """Always refused: DISK runs no kernels."""
        _refuse(self.device, "compile a kernel")

    def compile_cached(self, src: str) -> bytes:
        """Always refused: DISK runs no kernels."""
        _refuse(self.device, "compile a kernel")


class DiskDevice(Compiled):
    """One file (or shared memory object) as a device. `Device["DISK"]` opens without a file and can allocate
    nothing; `Device["DISK:/path"]` allocates byte ranges of /path."""

    capabilities = {"kernels": False, "symbolic": False, "large_grids": False, "out_of_memory_bytes": None}
    """For the conformance suite: DISK runs no kernels, so only its memory and copy checks apply."""

    def __init__(self, device: str = "DISK"):
        def runtime(name: str, lib: bytes) -> NoReturn:
            _refuse(device, f"load the program {name!r}")
        super().__init__(device, DiskAllocator(device), NoKernelRenderer(device), NoKernelCompiler(device), runtime)
