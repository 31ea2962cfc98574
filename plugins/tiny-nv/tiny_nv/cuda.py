"""The CUDA interface: the driver API through libcuda and ctypes (no toolkit, no pycuda).

One primary context per GPU, made current before each call (the registry may open NV:0 and NV:1 from one thread).
Kernels and copies go on the context's legacy default stream, so they run in order; copies from and to host memory
are synchronous (the host bytes may be freed when the call returns). A copy between two NV devices uses
cuMemcpyPeer, with peer access enabled where cuDeviceCanAccessPeer allows it (the driver stages it otherwise).
`program(..., wait=True)` times the kernel with a pair of events.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

from tinycore.device.allocator import BufferSpec, LRUAllocator

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUDAError(RuntimeError):
    """A CUDA driver call failed; the message names the call, the error and what was being done."""


@functools.cache
def libcuda() -> ctypes.CDLL:
    """libcuda with the argument types of the calls used here (CUdeviceptr is 64 bits)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise CUDAError(f"the CUDA driver library libcuda.so.1 does not load ({error}): install the NVIDIA "
                        "driver") from error
    pointer, u64, size_t = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    signatures: dict[str, list[Any]] = {
        "cuInit": [ctypes.c_uint], "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
        "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
        "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
        "cuDeviceTotalMem_v2": [ctypes.POINTER(size_t), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(pointer), ctypes.c_int],
        "cuDeviceCanAccessPeer": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
        "cuCtxSetCurrent": [pointer], "cuCtxSynchronize": [], "cuCtxEnablePeerAccess": [pointer, ctypes.c_uint],
        "cuMemAlloc_v2": [ctypes.POINTER(u64), size_t], "cuMemFree_v2": [u64],
        "cuMemcpyHtoD_v2": [u64, pointer, size_t], "cuMemcpyDtoH_v2": [pointer, u64, size_t],
        "cuMemcpyDtoD_v2": [u64, u64, size_t], "cuMemcpyPeer": [u64, pointer, u64, pointer, size_t],
        "cuModuleLoadData": [ctypes.POINTER(pointer), ctypes.c_char_p], "cuModuleUnload": [pointer],
        "cuModuleGetFunction": [ctypes.POINTER(pointer), pointer, ctypes.c_char_p],
        "cuFuncSetAttribute": [pointer, ctypes.c_int, ctypes.c_int],
        "cuLaunchKernel": [pointer, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, pointer, ctypes.POINTER(pointer), ctypes.POINTER(pointer)],
        "cuEventCreate": [ctypes.POINTER(pointer), ctypes.c_uint], "cuEventRecord": [pointer, pointer],
        "cuEventSynchronize": [pointer], "cuEventDestroy_v2": [pointer],
        "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), pointer, pointer],
        "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, arguments in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = arguments, ctypes.c_int
    return lib


def error_text(status: int) -> str:
    """The driver's text for a status code."""
    text = ctypes.c_char_p()
    if libcuda().cuGetErrorString(status, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
        return f"{text.value.decode()} ({status})"
    return f"CUDA error {status}"


def check(status: int, doing: str) -> None:
    """Raise CUDAError (MemoryError for out of memory) when a driver call failed."""
    if status == CUDA_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"the GPU is out of memory while {doing}")
    if status != CUDA_SUCCESS:
        raise CUDAError(f"{doing} failed: {error_text(status)}")


class CUDAContext:
    """The primary context of one GPU."""

    def __init__(self, index: int):
        lib = libcuda()
        check(lib.cuInit(0), "initialising the CUDA driver (cuInit)")
        count = ctypes.c_int(0)
        check(lib.cuDeviceGetCount(ctypes.byref(count)), "counting CUDA devices")
        if not 0 <= index < count.value:
            raise CUDAError(f"there is no CUDA device {index}: the driver reports {count.value}; use NV:0 to "
                            f"NV:{max(count.value - 1, 0)}")
        self.index = index
        self.handle = ctypes.c_int(0)
        check(lib.cuDeviceGet(ctypes.byref(self.handle), index), f"opening CUDA device {index}")
        self.context = ctypes.c_void_p()
        check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.handle), "retaining the primary context")
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle)
        self.arch = f"sm_{major.value}{minor.value}"
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, self.handle)
        self.name = name.value.decode(errors="replace")
        memory = ctypes.c_size_t(0)
        lib.cuDeviceTotalMem_v2(ctypes.byref(memory), self.handle)
        self.total_memory = memory.value
        self.peers: set[int] = set()

    def current(self) -> None:
        """Make this context current on the calling thread."""
        check(libcuda().cuCtxSetCurrent(self.context), "making the CUDA context current")

    def enable_peer(self, other: CUDAContext) -> bool:
        """Let this context read and write `other`'s memory directly; False when the hardware cannot."""
        if other.index in self.peers:
            return True
        can = ctypes.c_int(0)
        libcuda().cuDeviceCanAccessPeer(ctypes.byref(can), self.handle, other.handle)
        if not can.value:
            return False
        self.current()
        status = libcuda().cuCtxEnablePeerAccess(other.context, 0)
        if status not in (CUDA_SUCCESS, 704):  # 704: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            check(status, f"enabling peer access from GPU {self.index} to GPU {other.index}")
        self.peers.add(other.index)
        return True


class CUDABuffer:
    """Device memory: a CUdeviceptr `address` of `size` bytes (a view keeps its base alive in `base`)."""

    def __init__(self, address: int, size: int, base: CUDABuffer | None = None):
        self.address, self.size, self.base = address, size, base


class CUDAAllocator(LRUAllocator):
    """cuMemAlloc memory with synchronous host copies and peer copies to other NV devices."""

    def __init__(self, device: str, context: CUDAContext):
        super().__init__(device)
        self.context = context

    def _alloc(self, size: int, options: BufferSpec | None) -> CUDABuffer:
        self.context.current()
        address = ctypes.c_uint64(0)
        check(libcuda().cuMemAlloc_v2(ctypes.byref(address), size), f"allocating {size} bytes on {self.device}")
        return CUDABuffer(address.value, size)

    def _free(self, opaque: CUDABuffer, size: int, options: BufferSpec | None) -> None:
        self.context.current()
        check(libcuda().cuMemFree_v2(opaque.address), f"freeing {size} bytes on {self.device}")

    def _copyin(self, dest: CUDABuffer, src: memoryview) -> None:
        self.context.current()
        host = (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else \
            (ctypes.c_char * src.nbytes).from_buffer(src.cast("B"))
        check(libcuda().cuMemcpyHtoD_v2(dest.address, host, src.nbytes), f"copying {src.nbytes} bytes to {self.device}")

    def _copyout(self, dest: memoryview, src: CUDABuffer) -> None:
        self.context.current()
        host = (ctypes.c_char * dest.nbytes).from_buffer(dest.cast("B"))
        check(libcuda().cuMemcpyDtoH_v2(host, src.address, dest.nbytes),
              f"copying {dest.nbytes} bytes from {self.device}")

    def _offset(self, opaque: CUDABuffer, size: int, offset: int) -> CUDABuffer:
        return CUDABuffer(opaque.address + offset, size, opaque)

    def copy_to_buffer(self, source: CUDABuffer, destination: Any) -> None:
        """Copy into the Buffer `destination`: on the same GPU device to device, to another NV GPU peer to peer,
        elsewhere through host memory."""
        target = getattr(destination, "allocator", None)
        size = destination.nbytes
        if isinstance(target, CUDAAllocator):
            handle = destination.ensure_allocated()._buf
            if target.context is self.context:
                self.context.current()
                check(libcuda().cuMemcpyDtoD_v2(handle.address, source.address, size),
                      f"copying {size} bytes within {self.device}")
                return
            target.context.enable_peer(self.context)
            self.context.current()
            check(libcuda().cuMemcpyPeer(handle.address, target.context.context, source.address,
                                         self.context.context, size),
                  f"copying {size} bytes from {self.device} to {target.device}")
            return
        staging = memoryview(bytearray(size))
        self._copyout(staging, source)
        destination.copyin(staging)


class CUDAProgram:
    """A loaded CUBIN (or PTX, which the driver assembles) and its kernel function."""

    def __init__(self, context: CUDAContext, name: str, lib: bytes):
        self.context, self.name = context, name
        context.current()
        self.module = ctypes.c_void_p()
        image = lib if lib.endswith(b"\0") or lib.startswith(b"\x7fELF") else lib + b"\0"
        check(libcuda().cuModuleLoadData(ctypes.byref(self.module), image), f"loading the module of kernel {name!r}")
        self.function = ctypes.c_void_p()
        check(libcuda().cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
              f"finding kernel {name!r} in its module")

    def __call__(self, *buffers: CUDABuffer, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        lib = libcuda()
        grid = [int(size) for size in global_size] + [1] * (3 - len(global_size))
        block = [int(size) for size in (local_size or (1, 1, 1))] + [1] * (3 - len(local_size or (1, 1, 1)))
        if 0 in grid:
            return 0.0 if wait else None
        values: list[Any] = [ctypes.c_uint64(buffer.address) for buffer in buffers]
        values += [ctypes.c_int32(int(value)) for value in vals]
        arguments = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.cast(ctypes.byref(value), ctypes.c_void_p)
                                                             for value in values])
        self.context.current()
        events = [ctypes.c_void_p(), ctypes.c_void_p()] if wait else []
        for event in events:
            check(lib.cuEventCreate(ctypes.byref(event), 0), "creating a timing event")
        if events:
            check(lib.cuEventRecord(events[0], None), "recording the start event")
        check(lib.cuLaunchKernel(self.function, *grid, *block, 0, None, arguments, None),
              f"launching kernel {self.name!r} with grid {tuple(grid)} and blocks of {tuple(block)}")
        if not events:
            return None
        check(lib.cuEventRecord(events[1], None), "recording the end event")
        check(lib.cuEventSynchronize(events[1]), f"waiting for kernel {self.name!r}")
        milliseconds = ctypes.c_float(0)
        check(lib.cuEventElapsedTime(ctypes.byref(milliseconds), events[0], events[1]), "reading the kernel time")
        for event in events:
            lib.cuEventDestroy_v2(event)
        return milliseconds.value * 1e-3

    def __del__(self) -> None:
        try:
            if getattr(self, "module", None) and self.module.value:
                self.context.current()
                libcuda().cuModuleUnload(self.module)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver releases modules with the context
            pass


class CUDAInterface:
    """The CUDA driver API for one GPU: its context, allocator and module loading."""

    def __init__(self, device: str, index: int):
        self.device = device
        self.context = CUDAContext(index)
        self.arch = self.context.arch
        self.allocator = CUDAAllocator(device, self.context)

    @property
    def description(self) -> str:
        """'NV:0 = NVIDIA H200 (sm_90, 141 GB) through the CUDA driver'."""
        return (f"{self.device} = {self.context.name} ({self.arch}, {self.context.total_memory / 1e9:.0f} GB) "
                "through the CUDA driver")

    def load(self, name: str, lib: bytes) -> CUDAProgram:
        """The kernel `name` of the CUBIN or PTX `lib`."""
        return CUDAProgram(self.context, name, lib)

    def synchronize(self) -> None:
        """Wait for every kernel and copy on this GPU."""
        self.context.current()
        check(libcuda().cuCtxSynchronize(), f"synchronizing {self.device}")


def open_cuda(device: str, indices: tuple[int, ...]) -> CUDAInterface:
    """The CUDA interface to `device` (NV -> GPU 0, NV:1 -> GPU 1; DEV=CUDA:2+NV maps NV to GPU 2)."""
    parts = device.split(":")
    number = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    index = indices[number] if number < len(indices) else number
    return CUDAInterface(device, index)
