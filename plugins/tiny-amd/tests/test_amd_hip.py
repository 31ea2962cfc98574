"""The HIP interface against a fake libamdhip64 (no AMD GPU here): memory round trips, the code object and kernel
name it loads, and a launch whose kernarg block (read back through HIP_LAUNCH_PARAM_BUFFER_POINTER) holds the buffer
addresses and values where the code object's metadata says; errors name the call and HIP's message."""
from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy
import pytest
from tiny_amd import hip


class FakeHip:
    """libamdhip64 in Python: one GPU, memory as bytearrays at fake addresses, kernels recorded at launch."""

    def __init__(self) -> None:
        self.memory: dict[int, bytearray] = {}
        self.next_address = 0x7F00_0000_0000
        self.modules: list[bytes] = []
        self.launches: list[tuple[str, tuple[int, ...], bytes]] = []
        self.functions: dict[int, str] = {}
        self.fail_malloc = False

    def hipInit(self, flags: int) -> int:
        return 0

    def hipGetDeviceCount(self, count: Any) -> int:
        count._obj.value = 1
        return 0

    def hipSetDevice(self, index: int) -> int:
        return 0 if index == 0 else 101  # hipErrorInvalidDevice

    def hipGetErrorString(self, status: int) -> bytes:
        return {101: b"hipErrorInvalidDevice", 2: b"hipErrorOutOfMemory"}.get(status, b"hipErrorUnknown")

    def hipMalloc(self, pointer: Any, size: int) -> int:
        if self.fail_malloc:
            return 2
        address = self.next_address
        self.next_address += (size + 255) // 256 * 256 + 256
        self.memory[address] = bytearray(size)
        pointer._obj.value = address
        return 0

    def hipFree(self, pointer: Any) -> int:
        del self.memory[pointer.value]
        return 0

    def _locate(self, address: int) -> tuple[bytearray, int]:
        for start, backing in self.memory.items():
            if start <= address < start + len(backing):
                return backing, address - start
        raise AssertionError(f"address {address:#x} is not device memory")

    def hipMemcpy(self, destination: Any, source: Any, size: int, kind: int) -> int:
        if kind == hip.HIP_MEMCPY_HOST_TO_DEVICE:
            backing, offset = self._locate(destination.value)
            backing[offset:offset + size] = bytes(source)[:size]
        elif kind == hip.HIP_MEMCPY_DEVICE_TO_HOST:
            backing, offset = self._locate(source.value)
            ctypes.memmove(destination, bytes(backing[offset:offset + size]), size)
        else:
            return 1
        return 0

    def hipModuleLoadData(self, module: Any, image: bytes) -> int:
        self.modules.append(image)
        module._obj.value = len(self.modules)
        return 0

    def hipModuleGetFunction(self, function: Any, module: Any, name: bytes) -> int:
        handle = 1000 + len(self.functions)
        self.functions[handle] = name.decode()
        function._obj.value = handle
        return 0

    def hipModuleLaunchKernel(self, function: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                              shared: int, stream: Any, params: Any, extra: Any) -> int:
        assert params is None and extra[0] == hip.HIP_LAUNCH_PARAM_BUFFER_POINTER
        assert extra[2] == hip.HIP_LAUNCH_PARAM_BUFFER_SIZE and extra[4] == hip.HIP_LAUNCH_PARAM_END
        size = ctypes.c_size_t.from_address(extra[3]).value
        kernargs = ctypes.string_at(extra[1], size)
        self.launches.append((self.functions[function.value], (gx, gy, gz, bx, by, bz), kernargs))
        # the kernel 'add_one' adds 1 to each float of buffer 1 into buffer 0, n = the first value
        address_out, address_in, count = struct.unpack("<QQi", kernargs)
        out, out_offset = self._locate(address_out)
        source, in_offset = self._locate(address_in)
        values = numpy.frombuffer(bytes(source[in_offset:in_offset + 4 * count]), numpy.float32) + 1
        out[out_offset:out_offset + 4 * count] = values.tobytes()
        return 0

    def hipDeviceSynchronize(self) -> int:
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeHip:
    driver = FakeHip()
    monkeypatch.setattr(hip, "libhip", lambda: driver)
    return driver


def test_copies_round_trip_and_the_launch_packs_the_kernargs(fake: FakeHip) -> None:
    interface = hip.open_hip("AMD", ())
    assert interface.description == "AMD = AMD GPU 0 through the HIP runtime"
    allocator = interface.allocator
    source, destination = allocator.alloc(16), allocator.alloc(16)
    allocator._copyin(source, memoryview(numpy.arange(4, dtype=numpy.float32).tobytes()))
    program = interface.load("add_one", b"\x7fELF fake code object")
    assert fake.modules == [b"\x7fELF fake code object"]
    program(destination, source, global_size=(2, 1, 1), local_size=(2, 1, 1), vals=(4,))
    interface.synchronize()
    name, sizes, kernargs = fake.launches[0]
    assert (name, sizes) == ("add_one", (2, 1, 1, 2, 1, 1))
    assert kernargs == struct.pack("<QQi", destination.address, source.address, 4)  # 20 bytes, as the notes say
    out = memoryview(bytearray(16))
    allocator._copyout(out, destination)
    numpy.testing.assert_array_equal(numpy.frombuffer(out, numpy.float32), [1, 2, 3, 4])


def test_errors_name_the_call_and_hips_message(fake: FakeHip) -> None:
    with pytest.raises(hip.HIPError, match="there is no GPU 3"):
        hip.open_hip("AMD:3", (3,))
    interface = hip.open_hip("AMD", ())
    fake.fail_malloc = True
    with pytest.raises(MemoryError, match="hipMalloc of 64 bytes on AMD failed"):
        interface.allocator._alloc(64, None)
    program = interface.load("add_one", b"code")
    program.index = 1
    with pytest.raises(hip.HIPError, match="selecting GPU 1 failed: hipErrorInvalidDevice"):
        program(global_size=(1, 1, 1))


def test_without_the_runtime_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    hip.libhip.cache_clear()
    monkeypatch.setattr(hip.ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(f"{name}: not found")))
    with pytest.raises(hip.HIPError, match="rocm-hip-runtime.*DEV=AMD::gfx1100"):
        hip.libhip()
    hip.libhip.cache_clear()
