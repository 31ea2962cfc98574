"""NVRTC through ctypes: CUDA C -> CUBIN for one sm_XX (or PTX when asked), with the build log in every error.

The library comes from the nvidia-cuda-nvrtc pip wheel (see toolkit.find_nvrtc), so no CUDA toolkit install is
needed. Binaries are cached on disk by the core's Compiler, keyed by the source, the target, the options and the
NVRTC version.
"""
from __future__ import annotations

import ctypes
import functools
import re

from tiny_nv.toolkit import NVRTC_INSTALL_HINT, find_nvrtc
from tinycore.device.compiler import CompileError, Compiler

ARCH_PATTERN = re.compile(r"^sm_(\d+)([af]?)$")
DEFAULT_OPTIONS = ("--std=c++17", "--fmad=true", "-default-device")
"""Options every kernel is built with. Fused multiply-add is on: it rounds once where a multiply and an add round
twice, so results are as accurate or more (numpy's order may differ in the last bit)."""


class NVRTCUnavailableError(RuntimeError):
    """libnvrtc could not be found or loaded; the message says how to install it."""


def parse_arch(arch: str) -> int:
    """The compute capability number of `arch` ('sm_90' -> 90); ValueError naming the expected form otherwise."""
    found = ARCH_PATTERN.match(arch)
    if found is None or int(found.group(1)) < 50:
        raise ValueError(f"unknown NVIDIA architecture {arch!r}: expected sm_XX with XX >= 50, e.g. DEV=NV::sm_90 "
                         "(sm_80 for A100, sm_89 for L4/RTX 40xx, sm_90 for H100/H200)")
    return int(found.group(1))


class _Library:
    """The loaded libnvrtc with the argument types of the functions used."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        lib = self.lib
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        for getter in ("ProgramLog", "CUBIN", "PTX"):
            size_function = getattr(lib, f"nvrtcGet{getter}Size")
            size_function.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
            getattr(lib, f"nvrtcGet{getter}").argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        count = ctypes.c_int(0)
        self.supported: tuple[int, ...] = ()
        if lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)) == 0 and count.value > 0:
            archs = (ctypes.c_int * count.value)()
            if lib.nvrtcGetSupportedArchs(archs) == 0:
                self.supported = tuple(int(arch) for arch in archs)

    def error(self, status: int) -> str:
        """NVRTC's name for a status code."""
        text = self.lib.nvrtcGetErrorString(status)
        return text.decode() if text else f"NVRTC error {status}"

    def read(self, program: ctypes.c_void_p, getter: str) -> bytes:
        """The program's log, CUBIN or PTX."""
        size = ctypes.c_size_t(0)
        status = getattr(self.lib, f"nvrtcGet{getter}Size")(program, ctypes.byref(size))
        if status != 0:
            raise CompileError(f"nvrtcGet{getter}Size failed: {self.error(status)}")
        buffer = ctypes.create_string_buffer(size.value)
        status = getattr(self.lib, f"nvrtcGet{getter}")(program, buffer)
        if status != 0:
            raise CompileError(f"nvrtcGet{getter} failed: {self.error(status)}")
        return buffer.raw[:size.value]


@functools.cache
def load_nvrtc() -> _Library:
    """The loaded libnvrtc; NVRTCUnavailableError (with the install command) when it is missing or does not load."""
    path, where = find_nvrtc()
    if path is None:
        raise NVRTCUnavailableError(f"NVRTC is not installed ({where}); {NVRTC_INSTALL_HINT}")
    try:
        return _Library(path)
    except OSError as error:
        raise NVRTCUnavailableError(f"libnvrtc from {where} ({path}) does not load: {error}; reinstall it with "
                               f"{NVRTC_INSTALL_HINT}") from error


def nvrtc_status() -> tuple[bool, str]:
    """(NVRTC usable, a one-line description: its version and path, or why not and the install command)."""
    try:
        library = load_nvrtc()
    except NVRTCUnavailableError as error:
        return False, str(error)
    return True, f"NVRTC {library.version[0]}.{library.version[1]} from {library.path}"


def compile_cuda(src: str, arch: str, ptx: bool = False, options: tuple[str, ...] = DEFAULT_OPTIONS,
                 name: str = "kernel.cu") -> bytes:
    """Compile CUDA C `src` for `arch` (sm_XX) into a CUBIN, or into PTX text when `ptx`; CompileError with NVRTC's
    build log (and the source) when NVRTC rejects it."""
    number = parse_arch(arch)
    library = load_nvrtc()
    if library.supported and number not in library.supported:
        raise CompileError(f"NVRTC {library.version[0]}.{library.version[1]} cannot compile for {arch}; it supports "
                           f"{', '.join(f'sm_{value}' for value in library.supported)}: install a matching "
                           "nvidia-cuda-nvrtc wheel or pick a supported DEV=NV::sm_XX")
    variant = arch[len(f"sm_{number}"):]  # the 'a' / 'f' of architecture-specific targets such as sm_90a
    target = f"--gpu-architecture={'compute' if ptx else 'sm'}_{number}{variant}"
    program = ctypes.c_void_p()
    status = library.lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), name.encode(), 0, None, None)
    if status != 0:
        raise CompileError(f"nvrtcCreateProgram failed: {library.error(status)}")
    try:
        arguments = [option.encode() for option in (target, *options)]
        array = (ctypes.c_char_p * len(arguments))(*arguments)
        status = library.lib.nvrtcCompileProgram(program, len(arguments), array)
        log = library.read(program, "ProgramLog").rstrip(b"\0").decode(errors="replace").strip()
        if status != 0:
            raise CompileError(f"NVRTC {library.version[0]}.{library.version[1]} failed to compile {name} for {arch} "
                               f"({library.error(status)}); its build log follows",
                               log=log + "\n--- source ---\n" + src)
        if ptx:
            return library.read(program, "PTX").rstrip(b"\0")
        return library.read(program, "CUBIN")
    finally:
        library.lib.nvrtcDestroyProgram(ctypes.byref(program))


class NVRTCCompiler(Compiler):
    """CUDA C -> CUBIN for one architecture (PTX text when `ptx`), cached on disk."""

    def __init__(self, arch: str, ptx: bool = False):
        parse_arch(arch)
        super().__init__("nv-kernels")
        self.arch, self.ptx = arch, ptx
        self.name = f"nvrtc-{arch}-{'ptx' if ptx else 'cubin'}"
        self.flags = DEFAULT_OPTIONS

    def version(self) -> str:
        """The NVRTC version (part of the cache key, so an update never reuses an old binary)."""
        library = load_nvrtc()
        return f"nvrtc {library.version[0]}.{library.version[1]}"

    def compile(self, src: str) -> bytes:
        """The CUBIN (or PTX) of `src`."""
        return compile_cuda(src, self.arch, self.ptx, self.flags)

    def disassemble(self, lib: bytes) -> str:
        """SASS of a CUBIN through nvdisasm from a wheel (see tiny_nv.inspect)."""
        from tiny_nv.inspect import disassemble
        return disassemble(lib)
