"""AMD as a queue (HCQ) device on the core's machinery: the core builds and submits the queues, these classes encode
them as AQL packets (compute: kernel dispatches, PM4 waits and signals in AMD vendor packets) and SDMA packets
(copy) and hand them to the GPU's rings.

Used with the MOCK GPU (DEV=MOCK+AMD): AMDQueueDevice owns a MockAMDGPU with one AQL and one SDMA ring; signals,
kernarg blocks and buffers are GPU memory. Launch sizes given as Variables (TinyJit graphs of symbolic kernels) are
symbolic words of the dispatch packet, resolved by the core at submit.
"""
from __future__ import annotations

import struct
from typing import Any

from tiny_amd import amdcmd
from tiny_amd.amd_mock import MockAMDGPU, Ring, write_ring
from tinycore.hcq import HCQArguments, HCQCompiled, HCQSignal, HWQueue
from tinycore.hcq.mock_queue import MockQueueAllocator, MockQueueProgram
from tinycore.plugins import HCQQueues
from tinycore.uop.uop import UOp

KERNARG_ALIGNMENT = 64
RING_WORDS = 1 << 14


class AMDSignal(HCQSignal):
    """A signal in GPU memory: the 64-bit value, then the 64-bit GPU clock a timestamp writes (100 MHz ticks)."""

    timestamp_divider = amdcmd.CLOCK_TICKS_PER_MICROSECOND

    def __init__(self, device: Any = None, value: int = 0, name: str = "signal"):
        self.gpu: MockAMDGPU = device.gpu
        address = self.gpu.allocate(16, f"signal {name}")
        super().__init__(device, value, self.gpu.view(address, 16), address, name)

    def _read_value(self) -> int:
        self.gpu.poll()  # the GPU runs beside the host: a ring stalled on a signal the host set moves on
        return super()._read_value()


class AMDArguments(HCQArguments):
    """A kernarg block: an 8-byte address per buffer, then a 4-byte int per variable (tiny_amd.inspect)."""

    def set_buffer(self, index: int, handle: Any) -> None:
        """The GPU address of buffer argument `index`."""
        struct.pack_into("<Q", self.memory, self.offset + 8 * index, getattr(handle, "address", handle))

    def set_value(self, index: int, value: int) -> None:
        """The value of integer argument `index`."""
        struct.pack_into("<i", self.memory, self.offset + 8 * self.buffer_count + 4 * index, value)


def _address(signal: HCQSignal) -> int:
    if signal.address is None:
        raise ValueError(f"signal {signal.name!r} has no GPU address: make it with the AMD device's new_signal")
    return signal.address


class AMDComputeQueue(HWQueue):
    """AQL packets: kernel dispatches, and PM4 WAIT_REG_MEM64 / RELEASE_MEM in AMD vendor packets."""

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_wait_geq(_address(signal), value)))

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        address = _address(signal)
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(address + 8, 0, clock=True)))
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(address, value)))

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(_address(signal) + 8, 0, clock=True)))

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        if arguments.address is None:
            raise ValueError("an AMD kernarg block needs a GPU address")
        groups = list(global_size) + [1] * (3 - len(global_size))
        local = list(local_size or (1, 1, 1)) + [1] * (3 - len(local_size or (1, 1, 1)))
        self.emit(*amdcmd.aql_dispatch(program.address, arguments.address, groups, local, program.shared_bytes))

    def _submit(self, device: Any) -> None:
        write_ring(device.gpu, device.rings["compute"], [int(word) & 0xFFFFFFFF for word in self.words])


class AMDCopyQueue(HWQueue):
    """SDMA packets: COPY_LINEAR, and signals as FENCEs of the value's two halves with a TIMESTAMP."""

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        # POLL_REGMEM compares 32 bits: the low word of the value (timeline values stay below 2**32)
        self.emit(*amdcmd.sdma_poll_geq(_address(signal), amdcmd.split(value)[0]))

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        address = _address(signal)
        low, high = amdcmd.split(value)
        self.emit(*amdcmd.sdma_timestamp(address + 8))
        self.emit(*amdcmd.sdma_fence(address + 4, high))
        self.emit(*amdcmd.sdma_fence(address, low))

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit(*amdcmd.sdma_timestamp(_address(signal) + 8))

    def _encode_copy(self, destination: Any, source: Any, nbytes: int | UOp) -> None:
        self.emit(*amdcmd.sdma_copy(getattr(destination, "address", destination), getattr(source, "address", source),
                                    nbytes))

    def _submit(self, device: Any) -> None:
        write_ring(device.gpu, device.rings["copy"], [int(word) & 0xFFFFFFFF for word in self.words])


QUEUES = HCQQueues(AMDComputeQueue, AMDCopyQueue, AMDSignal)


class AMDQueueProgram(MockQueueProgram):
    """A code object uploaded to GPU memory; its kernarg blocks follow the HIP renderer's parameter layout."""

    arguments_class = AMDArguments

    def argument_block_size(self, buffer_count: int, value_count: int) -> int:
        """8 bytes a buffer address, then 4 a value (64-byte aligned by the kernarg ring)."""
        return max(8 * buffer_count + 4 * value_count, 8)


class AMDQueueAllocator(MockQueueAllocator):
    """GPU memory; host copies go through a staging allocation and the SDMA ring, ordered after queued kernels."""

    def _copy(self, destination: int, source: int, nbytes: int) -> None:
        device = self.owner
        assert device is not None, "the allocator is used before its device is made"
        # the SDMA packets of the copy queue, written to the ring directly: host copies are the allocator's, not
        # submissions of the core's queues (device.submissions counts those)
        queue = AMDCopyQueue()
        queue.wait(device.timeline_signal, device.timeline_value - 1).copy(destination, source, nbytes)
        queue.signal(device.timeline_signal, device.next_timeline_value())
        queue._submit(device)
        device.host_copies += 1
        device.synchronize()


class AMDQueueDevice(HCQCompiled):
    """AMD on the core's queue machinery, reaching the MOCK GPU through its AQL and SDMA rings."""

    memory_bytes = 1 << 34

    def __init__(self, device: str, renderer: Any, compiler: Any, description: str):
        self.gpu = MockAMDGPU(f"MOCK {device}")
        self.rings: dict[str, Ring] = {"compute": self.gpu.new_ring("aql", RING_WORDS, f"{device} AQL"),
                                       "copy": self.gpu.new_ring("sdma", RING_WORDS, f"{device} SDMA")}
        allocator = AMDQueueAllocator(device, self.gpu, self.memory_bytes)
        super().__init__(device, allocator, renderer, compiler, AMDQueueProgram, QUEUES)
        allocator.owner = self
        self.kernargs.alignment = KERNARG_ALIGNMENT
        self.interface_description = description
        self.host_copies = 0

    def kernarg_memory(self, nbytes: int) -> tuple[memoryview, int | None]:
        """Kernarg memory in the GPU's address space."""
        address = self.gpu.allocate(nbytes, "kernel arguments")
        return self.gpu.view(address, nbytes), address
