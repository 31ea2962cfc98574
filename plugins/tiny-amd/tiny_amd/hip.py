"""The HIP interface: ROCm's HIP runtime (libamdhip64) through ctypes, the simpler path to an AMD GPU.

The code object clang built is loaded with hipModuleLoadData; a launch hands HIP the kernarg block itself
(HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE), packed exactly as tiny_amd.inspect.pack_kernargs packs it, so the bytes
the kernel reads are the ones the compile tests check against the code object's metadata. Kernels and copies go on
the null stream, in order; `program(..., wait=True)` times the kernel with a pair of events. Written against the
HIP API reference and tested against a fake libamdhip64: it has not run on an AMD GPU.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

from tiny_amd.inspect import pack_kernargs
from tinycore.device.allocator import BufferSpec, LRUAllocator

HIP_SUCCESS = 0
HIP_MEMCPY_HOST_TO_DEVICE, HIP_MEMCPY_DEVICE_TO_HOST, HIP_MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3


class HIPError(RuntimeError):
    """A HIP runtime call failed; the message names the call, the error and what was being done."""


@functools.cache
def libhip() -> ctypes.CDLL:
    """libamdhip64 with the argument types of the calls used here."""
    try:
        lib = ctypes.CDLL("libamdhip64.so")
    except OSError as error:
        raise HIPError(f"the HIP runtime libamdhip64.so does not load ({error}): install ROCm's HIP runtime "
                       "(apt-get install rocm-hip-runtime) or use DEV=AMD::gfx1100 to compile only") from error
    pointer, size_t = ctypes.c_void_p, ctypes.c_size_t
    signatures: dict[str, list[Any]] = {
        "hipInit": [ctypes.c_uint], "hipGetDeviceCount": [ctypes.POINTER(ctypes.c_int)],
        "hipSetDevice": [ctypes.c_int], "hipDeviceSynchronize": [],
        "hipMalloc": [ctypes.POINTER(pointer), size_t], "hipFree": [pointer],
        "hipMemcpy": [pointer, pointer, size_t, ctypes.c_int],
        "hipModuleLoadData": [ctypes.POINTER(pointer), ctypes.c_char_p], "hipModuleUnload": [pointer],
        "hipModuleGetFunction": [ctypes.POINTER(pointer), pointer, ctypes.c_char_p],
        "hipModuleLaunchKernel": [pointer, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                  ctypes.c_uint, ctypes.c_uint, pointer, ctypes.POINTER(pointer),
                                  ctypes.POINTER(pointer)],
        "hipEventCreate": [ctypes.POINTER(pointer)], "hipEventRecord": [pointer, pointer],
        "hipEventSynchronize": [pointer], "hipEventDestroy": [pointer],
        "hipEventElapsedTime": [ctypes.POINTER(ctypes.c_float), pointer, pointer],
        "hipGetErrorString": [ctypes.c_int],
    }
    for name, arguments in signatures.items():
        function = getattr(lib, name)
        function.argtypes = arguments
        function.restype = ctypes.c_char_p if name == "hipGetErrorString" else ctypes.c_int
    return lib


def check(status: int, doing: str) -> None:
    """HIPError naming `doing` and HIP's text for `status` unless it is hipSuccess."""
    if status != HIP_SUCCESS:
        text = libhip().hipGetErrorString(status)
        name = text.decode() if isinstance(text, bytes) else f"HIP error {status}"
        raise HIPError(f"{doing} failed: {name} ({status})")


class HIPBuffer:
    """Device memory: its address and size (a view shares its base's allocation)."""

    def __init__(self, address: int, size: int, base: HIPBuffer | None = None):
        self.address, self.size, self.base = address, size, base


class HIPAllocator(LRUAllocator):
    """hipMalloc'd memory; host copies are synchronous hipMemcpy calls."""

    def __init__(self, device: str, index: int):
        super().__init__(device)
        self.index = index

    def _alloc(self, size: int, options: BufferSpec | None) -> HIPBuffer:
        check(libhip().hipSetDevice(self.index), f"selecting GPU {self.index}")
        address = ctypes.c_void_p(0)
        status = libhip().hipMalloc(ctypes.byref(address), size)
        if status != HIP_SUCCESS:
            raise MemoryError(f"hipMalloc of {size} bytes on {self.device} failed (HIP status {status})")
        return HIPBuffer(int(address.value or 0), size)

    def _free(self, opaque: HIPBuffer, size: int, options: BufferSpec | None) -> None:
        check(libhip().hipFree(ctypes.c_void_p(opaque.address)), f"freeing {size} bytes on {self.device}")

    def _copyin(self, dest: HIPBuffer, src: memoryview) -> None:
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src.cast("B"))
        check(libhip().hipMemcpy(ctypes.c_void_p(dest.address), host, src.nbytes, HIP_MEMCPY_HOST_TO_DEVICE),
              f"copying {src.nbytes} bytes to {self.device}")

    def _copyout(self, dest: memoryview, src: HIPBuffer) -> None:
        host = (ctypes.c_char * dest.nbytes)()
        check(libhip().hipMemcpy(host, ctypes.c_void_p(src.address), dest.nbytes, HIP_MEMCPY_DEVICE_TO_HOST),
              f"copying {dest.nbytes} bytes from {self.device}")
        dest.cast("B")[:] = bytes(host)

    def _offset(self, opaque: HIPBuffer, size: int, offset: int) -> HIPBuffer:
        return HIPBuffer(opaque.address + offset, size, opaque)


class HIPProgram:
    """A kernel of a loaded code object; a call packs the kernarg block and launches it on the null stream."""

    def __init__(self, index: int, name: str, lib: bytes):
        self.index, self.name = index, name
        lib_hip = libhip()
        check(lib_hip.hipSetDevice(index), f"selecting GPU {index}")
        self.module, self.function = ctypes.c_void_p(0), ctypes.c_void_p(0)
        check(lib_hip.hipModuleLoadData(ctypes.byref(self.module), lib), f"loading the code object of {name}")
        check(lib_hip.hipModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
              f"finding kernel {name} in its code object")

    def __call__(self, *buffers: HIPBuffer, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        lib_hip = libhip()
        block = list(local_size or (1, 1, 1)) + [1] * (3 - len(local_size or (1, 1, 1)))
        grid = list(global_size) + [1] * (3 - len(global_size))
        if any(int(size) == 0 for size in grid):
            return 0.0 if wait else None
        arguments = pack_kernargs([buffer.address for buffer in buffers], [int(value) for value in vals])
        kernargs = ctypes.create_string_buffer(arguments, max(len(arguments), 1))
        size = ctypes.c_size_t(len(arguments))
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(kernargs),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), HIP_LAUNCH_PARAM_END)
        check(lib_hip.hipSetDevice(self.index), f"selecting GPU {self.index}")
        events = (ctypes.c_void_p(0), ctypes.c_void_p(0))
        if wait:
            for event in events:
                check(lib_hip.hipEventCreate(ctypes.byref(event)), "creating a timing event")
            check(lib_hip.hipEventRecord(events[0], None), "recording the start event")
        sizes = [int(size) for size in grid + block]
        check(lib_hip.hipModuleLaunchKernel(self.function, *sizes, 0, None, None, extra), f"launching {self.name}")
        if not wait:
            return None
        milliseconds = ctypes.c_float(0)
        check(lib_hip.hipEventRecord(events[1], None), "recording the end event")
        check(lib_hip.hipEventSynchronize(events[1]), f"waiting for {self.name}")
        check(lib_hip.hipEventElapsedTime(ctypes.byref(milliseconds), events[0], events[1]), "timing the kernel")
        for event in events:
            lib_hip.hipEventDestroy(event)
        return milliseconds.value / 1e3


class HIPInterface:
    """One AMD GPU through the HIP runtime."""

    name = "HIP"

    def __init__(self, device: str, index: int):
        lib_hip = libhip()
        check(lib_hip.hipInit(0), "initializing the HIP runtime")
        count = ctypes.c_int(0)
        check(lib_hip.hipGetDeviceCount(ctypes.byref(count)), "counting GPUs")
        if index >= count.value:
            raise HIPError(f"{device}: the HIP runtime has {count.value} GPU(s), there is no GPU {index}")
        self.device, self.index = device, index
        self.allocator = HIPAllocator(device, index)

    @property
    def description(self) -> str:
        """What this reaches."""
        return f"{self.device} = AMD GPU {self.index} through the HIP runtime"

    def load(self, name: str, lib: bytes) -> HIPProgram:
        """The kernel `name` of the code object `lib`."""
        return HIPProgram(self.index, name, lib)

    def synchronize(self) -> None:
        """Wait for every kernel and copy on this GPU."""
        check(libhip().hipSetDevice(self.index), f"selecting GPU {self.index}")
        check(libhip().hipDeviceSynchronize(), f"synchronizing {self.device}")


def open_hip(device: str, indices: tuple[int, ...]) -> HIPInterface:
    """The HIP interface for `device` (AMD:1 is GPU 1)."""
    from tiny_amd.target import device_index
    return HIPInterface(device, indices[0] if indices else device_index(device))
