"""The parts of a MOCK queue device that every GPU format shares: the program (a code object uploaded to the mock
GPU's memory, its argument blocks, the argument check) and the allocator (GPU memory in the mock address space,
host copies through a staging allocation). A plugin subclasses both and supplies only what its format decides:
the argument block class and size (`MockQueueProgram.arguments_class`, `argument_block_size`) and how a copy is
queued (`MockQueueAllocator._copy`).
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from tinycore.device.allocator import BufferSpec, LRUAllocator
from tinycore.hcq.device import HCQProgram
from tinycore.hcq.mock import MockBuffer, MockMemory, shared_bytes, unpack_mock_binary
from tinycore.hcq.queue import HCQArguments
from tinycore.uop.ops import Ops


class MockQueueProgram(HCQProgram):
    """A kernel of a MOCK queue device: the code object is copied to GPU memory at `address`."""

    arguments_class: type[HCQArguments] = HCQArguments
    """The argument block layout the plugin's hardware reads."""

    def __init__(self, device: Any, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.uops, self.binary = unpack_mock_binary(lib)
        self.buffer_count = sum(1 for uop in self.uops if uop.op is Ops.DEFINE_GLOBAL)
        self.variable_count = len({uop.arg[0] for uop in self.uops if uop.op is Ops.DEFINE_VAR})
        self.shared_bytes = shared_bytes(self.uops)
        self.address = device.gpu.allocate(len(lib), f"code of {name}")
        device.gpu.view(self.address, len(lib))[:] = lib

    @abstractmethod
    def argument_block_size(self, buffer_count: int, value_count: int) -> int:
        """Bytes of one argument block holding `buffer_count` buffer addresses and `value_count` values."""

    def new_arguments(self, buffers: Sequence[object], values: Sequence[int], persistent: bool = False) -> HCQArguments:
        """An argument block of `arguments_class` with `buffers` and `values` written in (in the kernarg ring, or,
        `persistent`, in memory of its own for a graph's life)."""
        size = self.argument_block_size(len(buffers), len(values))
        if persistent:
            memory, address = self.device.kernarg_memory(size)
            offset = 0
        else:
            offset, address = self.device.kernargs.allocate(size)
            memory = self.device.kernargs.memory
        arguments = self.arguments_class(memory, offset, address, len(buffers))
        for index, buffer in enumerate(buffers):
            arguments.set_buffer(index, buffer)
        for index, value in enumerate(values):
            arguments.set_value(index, int(value))
        return arguments

    def __call__(self, *buffers: object, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        """Check the arguments against the program, then the core's launch (exec and a timeline signal)."""
        if len(buffers) != self.buffer_count or len(vals) != self.variable_count:
            raise TypeError(f"kernel {self.name} takes {self.buffer_count} buffers and {self.variable_count} values, "
                            f"got {len(buffers)} and {len(vals)}")
        if any(int(size) == 0 for size in global_size):
            return 0.0 if wait else None
        return super().__call__(*buffers, global_size=global_size, local_size=local_size, vals=vals, wait=wait)


class MockQueueAllocator(LRUAllocator):
    """GPU memory of a MOCK queue device; host copies go through a staging allocation and the plugin's copy
    commands (`_copy`), ordered after the kernels already queued."""

    def __init__(self, device_name: str, gpu: MockMemory, memory_bytes: int):
        super().__init__(device_name)
        self.gpu, self.memory_bytes = gpu, memory_bytes
        self.owner: Any = None  # the device, set once it exists (the allocator is made first)

    @abstractmethod
    def _copy(self, destination: int, source: int, nbytes: int) -> None:
        """Copy `nbytes` between two GPU addresses with the plugin's copy commands and wait for the copy."""

    def _alloc(self, size: int, options: BufferSpec | None) -> MockBuffer:
        if size > self.memory_bytes:
            raise MemoryError(f"{size} bytes is more than the GPU's {self.memory_bytes} bytes")
        return MockBuffer(self.gpu.allocate(size, f"buffer of {size} bytes"), size)

    def _free(self, opaque: MockBuffer, size: int, options: BufferSpec | None) -> None:
        self.gpu.free(opaque.address)

    def _copyin(self, dest: MockBuffer, src: memoryview) -> None:
        staging = self.gpu.allocate(src.nbytes, "staging")
        self.gpu.view(staging, src.nbytes)[:] = src.cast("B")
        self._copy(dest.address, staging, src.nbytes)
        self.gpu.free(staging)

    def _copyout(self, dest: memoryview, src: MockBuffer) -> None:
        staging = self.gpu.allocate(dest.nbytes, "staging")
        self._copy(staging, src.address, dest.nbytes)
        dest.cast("B")[:] = self.gpu.view(staging, dest.nbytes)
        self.gpu.free(staging)

    def _offset(self, opaque: MockBuffer, size: int, offset: int) -> MockBuffer:
        return MockBuffer(opaque.address + offset, size, opaque)
