"""Compile-only use of a GPU device on a machine without that GPU (DEV=NV::sm_90, DEV=AMD::gfx1100): every kernel is
rendered and compiled for the named architecture, buffers live in host memory so copies work, and the first launch
raises NoGPUForLaunchError saying the kernel was compiled but cannot run here. Device plugins share this stand-in."""
from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from tinycore.device.allocator import Allocator, BufferSpec


class NoGPUForLaunchError(RuntimeError):
    """A kernel was launched on a device in compile-only mode (no GPU to run it)."""


class HostAllocator(Allocator):
    """Buffers as host memoryviews (bytearrays), so compile-only programs can copy data in and out."""

    def _alloc(self, size: int, options: BufferSpec | None) -> memoryview:
        return memoryview(bytearray(size))

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:len(src)] = src.cast("B")

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest.cast("B")[:] = src[:dest.nbytes]

    def _offset(self, opaque: memoryview, size: int, offset: int) -> memoryview:
        return opaque[offset:offset + size]

    def _as_memoryview(self, opaque: memoryview, size: int) -> memoryview:
        return opaque[:size]


class CompiledOnlyProgram:
    """A compiled kernel that refuses to launch: `program(...)` raises NoGPUForLaunchError with the reason.
    `binary_kind` names the binary (CUBIN, code object), `hardware` the GPU it needs and `elsewhere` (", or ...")
    another way to run it, for the message."""

    def __init__(self, device: str, arch: str, name: str, lib: bytes, reason: str, binary_kind: str = "binary",
                 hardware: str = "GPU", elsewhere: str = ""):
        self.device, self.arch, self.name, self.lib, self.reason = device, arch, name, lib, reason
        self.binary_kind, self.hardware, self.elsewhere = binary_kind, hardware, elsewhere

    def __call__(self, *buffers: object, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> NoReturn:
        raise NoGPUForLaunchError(
            f"{self.device} is compile-only here: kernel {self.name!r} was rendered and compiled for {self.arch} "
            f"({len(self.lib)} bytes of {self.binary_kind}) but there is no {self.hardware} to launch it "
            f"({self.reason}). Run it on a machine with an {self.hardware} and its driver{self.elsewhere}")


class CompileOnlyInterface:
    """The stand-in for a GPU in compile-only mode: host buffers and programs that refuse to launch."""

    name = "COMPILE-ONLY"

    def __init__(self, device: str, arch: str, reason: str, binary_kind: str = "binary", hardware: str = "GPU",
                 elsewhere: str = ""):
        self.device, self.arch, self.reason = device, arch, reason
        self.binary_kind, self.hardware, self.elsewhere = binary_kind, hardware, elsewhere
        self.allocator = HostAllocator(device)

    @property
    def description(self) -> str:
        """What this device is."""
        return f"{self.device} compile-only for {self.arch} (no GPU: {self.reason})"

    def load(self, name: str, lib: bytes) -> CompiledOnlyProgram:
        """A program that raises at launch."""
        return CompiledOnlyProgram(self.device, self.arch, name, lib, self.reason, self.binary_kind, self.hardware,
                                   self.elsewhere)

    def synchronize(self) -> None:
        """Nothing runs, so nothing to wait for."""
