"""The CUDA interface against a fake libcuda (no GPU here): the calls it makes, in order, with the arguments the
driver API expects (contexts made current, sizes, kernel parameter blocks, grids), and that bytes copied in come back
out, within a GPU, between two GPUs (peer access) and across a launch whose fake kernel adds one to a buffer."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy
import pytest
import tiny_nv.cuda as cuda


def _out(pointer: Any) -> Any:
    """The ctypes object behind a byref() argument."""
    return pointer._obj


class FakeDriver:
    """libcuda in Python: two devices, memory as bytearrays at fake addresses, and one kernel 'add_one' that adds 1
    to the float32s of its first buffer (its count is the second, integer, parameter)."""

    def __init__(self) -> None:
        self.memory: dict[int, bytearray] = {}
        self.next_address = 0x7F0000000000
        self.current: int | None = None
        self.calls: list[str] = []
        self.launches: list[tuple[tuple[int, ...], tuple[int, ...], list[int]]] = []
        self.peers: list[tuple[int, int]] = []

    def _find(self, address: int, size: int) -> tuple[bytearray, int]:
        for start, block in self.memory.items():
            if start <= address and address + size <= start + len(block):
                return block, address - start
        raise AssertionError(f"access of {size} bytes at {address:#x} outside the fake GPU's memory")

    def cuInit(self, flags: int) -> int:
        return 0

    def cuDeviceGetCount(self, count: Any) -> int:
        _out(count).value = 2
        return 0

    def cuDeviceGet(self, handle: Any, index: int) -> int:
        _out(handle).value = index
        return 0

    def cuDevicePrimaryCtxRetain(self, context: Any, handle: ctypes.c_int) -> int:
        _out(context).value = 1000 + handle.value
        return 0

    def cuDeviceGetAttribute(self, value: Any, attribute: int, handle: ctypes.c_int) -> int:
        _out(value).value = {cuda.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                             cuda.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0}[attribute]
        return 0

    def cuDeviceGetName(self, name: Any, size: int, handle: ctypes.c_int) -> int:
        name.value = b"Fake H200"
        return 0

    def cuDeviceTotalMem_v2(self, total: Any, handle: ctypes.c_int) -> int:
        _out(total).value = 141 * 10 ** 9
        return 0

    def cuCtxSetCurrent(self, context: ctypes.c_void_p) -> int:
        self.current = context.value
        return 0

    def cuMemAlloc_v2(self, address: Any, size: int) -> int:
        assert self.current is not None, "cuMemAlloc without a current context"
        self.calls.append(f"alloc {size}")
        _out(address).value = self.next_address
        self.memory[self.next_address] = bytearray(size)
        self.next_address += size + 4096
        return 0

    def cuMemFree_v2(self, address: int) -> int:
        del self.memory[address]
        return 0

    def cuMemcpyHtoD_v2(self, address: int, host: Any, size: int) -> int:
        block, offset = self._find(address, size)
        block[offset:offset + size] = bytes(host)[:size]
        return 0

    def cuMemcpyDtoH_v2(self, host: Any, address: int, size: int) -> int:
        block, offset = self._find(address, size)
        ctypes.memmove(host, bytes(block[offset:offset + size]), size)
        return 0

    def cuMemcpyDtoD_v2(self, destination: int, source: int, size: int) -> int:
        self.calls.append("dtod")
        data, offset = self._find(source, size)
        target, target_offset = self._find(destination, size)
        target[target_offset:target_offset + size] = data[offset:offset + size]
        return 0

    def cuMemcpyPeer(self, destination: int, destination_context: ctypes.c_void_p, source: int,
                     source_context: ctypes.c_void_p, size: int) -> int:
        self.calls.append(f"peer {source_context.value}->{destination_context.value}")
        return self.cuMemcpyDtoD_v2(destination, source, size)

    def cuDeviceCanAccessPeer(self, can: Any, device: ctypes.c_int, peer: ctypes.c_int) -> int:
        _out(can).value = 1
        return 0

    def cuCtxEnablePeerAccess(self, peer_context: ctypes.c_void_p, flags: int) -> int:
        self.peers.append((self.current or 0, peer_context.value or 0))
        return 0

    def cuModuleLoadData(self, module: Any, image: bytes) -> int:
        assert image.startswith(b"\x7fELF"), "the fake driver loads CUBINs only"
        _out(module).value = 55
        return 0

    def cuModuleGetFunction(self, function: Any, module: ctypes.c_void_p, name: bytes) -> int:
        if name != b"add_one":
            return 500  # CUDA_ERROR_NOT_FOUND
        _out(function).value = 77
        return 0

    def cuModuleUnload(self, module: ctypes.c_void_p) -> int:
        return 0

    def cuLaunchKernel(self, function: ctypes.c_void_p, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared: int, stream: Any, parameters: Any, extra: Any) -> int:
        address = ctypes.cast(parameters[0], ctypes.POINTER(ctypes.c_uint64)).contents.value
        count = ctypes.cast(parameters[1], ctypes.POINTER(ctypes.c_int32)).contents.value
        self.launches.append(((gx, gy, gz), (bx, by, bz), [address, count]))
        block, offset = self._find(address, 4 * count)
        values = numpy.frombuffer(block, numpy.float32, count, offset) + 1
        block[offset:offset + 4 * count] = values.tobytes()
        return 0

    def cuEventCreate(self, event: Any, flags: int) -> int:
        _out(event).value = 9
        return 0

    def cuEventRecord(self, event: Any, stream: Any) -> int:
        return 0

    def cuEventSynchronize(self, event: Any) -> int:
        return 0

    def cuEventElapsedTime(self, milliseconds: Any, start: Any, end: Any) -> int:
        _out(milliseconds).value = 1.5
        return 0

    def cuEventDestroy_v2(self, event: Any) -> int:
        return 0

    def cuCtxSynchronize(self) -> int:
        return 0

    def cuGetErrorString(self, status: int, text: Any) -> int:
        _out(text).value = b"CUDA_ERROR_NOT_FOUND"
        return 0


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(cuda, "libcuda", lambda: fake)
    return fake


def test_context_describes_the_gpu(driver: FakeDriver) -> None:
    interface = cuda.open_cuda("NV:1", ())
    assert interface.arch == "sm_90" and interface.context.index == 1
    assert interface.description == "NV:1 = Fake H200 (sm_90, 141 GB) through the CUDA driver"
    with pytest.raises(cuda.CUDAError, match="there is no CUDA device 2"):
        cuda.open_cuda("NV:2", ())
    assert cuda.open_cuda("NV", (1,)).context.index == 1  # DEV=CUDA:1+NV maps NV to GPU 1


def test_copies_round_trip_and_kernels_get_their_parameters(driver: FakeDriver) -> None:
    interface = cuda.open_cuda("NV", ())
    allocator = interface.allocator
    values = numpy.arange(16, dtype=numpy.float32)
    handle = allocator.alloc(values.nbytes)
    allocator.copyin(handle, memoryview(values).cast("B"))
    view = allocator.offset(handle, 32, 8)  # floats 2..9
    cubin = b"\x7fELF" + bytes(60)
    program = interface.load("add_one", cubin)
    seconds = program(view, global_size=(2, 1, 1), local_size=(4, 1, 1), vals=(8,), wait=True)
    assert seconds == pytest.approx(1.5e-3)
    assert driver.launches == [((2, 1, 1), (4, 1, 1), [handle.address + 8, 8])]
    result = numpy.empty_like(values)
    allocator.copyout(memoryview(result).cast("B"), handle)
    numpy.testing.assert_array_equal(result, values + numpy.isin(numpy.arange(16), range(2, 10)))
    with pytest.raises(cuda.CUDAError, match="finding kernel 'missing'.*CUDA_ERROR_NOT_FOUND"):
        interface.load("missing", cubin)


def test_device_and_peer_copies(driver: FakeDriver) -> None:
    first, second = cuda.open_cuda("NV", ()), cuda.open_cuda("NV:1", ())
    values = numpy.arange(8, dtype=numpy.int32)
    source = first.allocator.alloc(values.nbytes)
    first.allocator.copyin(source, memoryview(values).cast("B"))

    class Target:
        def __init__(self, allocator: cuda.CUDAAllocator) -> None:
            self.allocator, self.nbytes = allocator, values.nbytes
            self._buf = allocator.alloc(values.nbytes)

        def ensure_allocated(self) -> Target:
            return self

    same, other = Target(first.allocator), Target(second.allocator)
    first.allocator.copy_to_buffer(source, same)
    first.allocator.copy_to_buffer(source, other)
    assert "dtod" in driver.calls and "peer 1000->1001" in driver.calls and driver.peers == [(1001, 1000)]
    for target in (same, other):
        result = numpy.empty_like(values)
        target.allocator.copyout(memoryview(result).cast("B"), target._buf)
        numpy.testing.assert_array_equal(result, values)
