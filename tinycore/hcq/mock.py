"""The device-neutral half of a simulated GPU (the MOCK interfaces of GPU plugins, e.g. DEV=MOCK+NV, DEV=MOCK+AMD):
a GPU virtual address space backed by host memory, the code object that carries a kernel's linear program next to
its real binary, and the launch of that program in the core's interpreter with its arguments read from GPU memory.

A plugin's mock GPU derives from MockMemory and adds the decoding of its own command format (NV's GPFIFO and QMDs,
AMD's AQL, PM4 and SDMA packets); everything here is shared so the formats are all that differ.
"""
from __future__ import annotations

import base64
import bisect
import pickle
import struct
import time
from collections.abc import Sequence
from typing import Any

import numpy

from tinycore.codegen.interpreter import Program
from tinycore.dtype import PtrDType, dtypes, to_numpy_dtype
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

PROGRAM_MARKER = "// tinycore-program "
"""The line of a kernel source (rendered for a MOCK GPU) that carries its linear program, pickled and base64-coded."""
MOCK_BINARY_MAGIC = b"TCNVMOCK"
"""The first bytes of a compiled binary made for a MOCK GPU (what a plugin checks to tell one apart)."""
_ADDRESS_BASE = 0x1_0000_0000
ALIGNMENT = 256
"""Every allocation starts on a multiple of this many bytes."""


def embed_program(source: str, uops: Sequence[UOp]) -> str:
    """`source` with the linear program appended as a comment line (for MockCompiler)."""
    packed = base64.b64encode(pickle.dumps(list(uops), protocol=pickle.HIGHEST_PROTOCOL)).decode()
    return f"{source}{PROGRAM_MARKER}{packed}\n"


def pack_mock_binary(uops_pickle: bytes, binary: bytes) -> bytes:
    """The MOCK GPU's code object: magic, the pickled linear program, then the device binary (possibly empty)."""
    return MOCK_BINARY_MAGIC + struct.pack("<II", len(uops_pickle), len(binary)) + uops_pickle + binary


def unpack_mock_binary(data: bytes | memoryview) -> tuple[list[UOp], bytes]:
    """(linear program, device binary) of a MOCK code object; ValueError when `data` is not one."""
    raw = bytes(data[:16])
    if not raw.startswith(MOCK_BINARY_MAGIC):
        raise ValueError("the program address does not hold a MOCK code object (no TCNVMOCK header)")
    program_size, binary_size = struct.unpack("<II", raw[8:16])
    uops = pickle.loads(bytes(data[16:16 + program_size]))
    return uops, bytes(data[16 + program_size:16 + program_size + binary_size])


def program_from_source(src: str) -> bytes | None:
    """The pickled linear program a source rendered for a MOCK GPU carries (see embed_program), or None."""
    line = next((line for line in src.splitlines() if line.startswith(PROGRAM_MARKER)), None)
    return None if line is None else base64.b64decode(line[len(PROGRAM_MARKER):])


def shared_bytes(uops: Sequence[UOp]) -> int:
    """The bytes of local (shared / LDS) memory a linear program declares."""
    return sum(uop.dtype.size * uop.dtype.base.itemsize for uop in uops
               if uop.op is Ops.DEFINE_LOCAL and isinstance(uop.dtype, PtrDType))


class MockBuffer:
    """An allocation on a MOCK GPU: its GPU address and size (a view shares its base's memory)."""

    def __init__(self, address: int, size: int, base: MockBuffer | None = None):
        self.address, self.size, self.base = address, size, base


class MockMemory:
    """A GPU address space backed by host memory: allocations at 256-byte aligned addresses with a gap between them
    (an overrun faults), views of GPU memory, the GPU's clock and the programs loaded from code objects."""

    def __init__(self, name: str):
        self.name = name
        self.starts: list[int] = []  # sorted allocation addresses
        self.allocations: dict[int, bytearray] = {}
        self.purposes: dict[int, str] = {}
        self.next_address = _ADDRESS_BASE
        self.programs: dict[int, Program] = {}
        self.started_ns = time.perf_counter_ns()

    def allocate(self, size: int, purpose: str) -> int:
        """The address of `size` new zeroed bytes."""
        address = self.next_address
        self.next_address += -(-max(size, 1) // ALIGNMENT) * ALIGNMENT + ALIGNMENT  # a gap catches overruns
        self.allocations[address] = bytearray(max(size, 1))
        self.purposes[address] = purpose
        bisect.insort(self.starts, address)
        return address

    def free(self, address: int) -> None:
        """Release the allocation at `address`."""
        if address not in self.allocations:
            raise ValueError(f"{self.name}: free of {address:#x}, which is not the start of an allocation")
        del self.allocations[address], self.purposes[address]
        self.starts.remove(address)
        self.programs.pop(address, None)

    def locate(self, address: int, size: int) -> tuple[bytearray, int]:
        """(backing bytes, offset) of `size` bytes at `address`; MemoryError (a GPU fault) outside allocations."""
        position = bisect.bisect_right(self.starts, address) - 1
        if position >= 0:
            start = self.starts[position]
            backing = self.allocations[start]
            if address + size <= start + len(backing):
                return backing, address - start
        raise MemoryError(f"{self.name}: access of {size} bytes at {address:#x} is outside every allocation "
                          "(a GPU page fault)")

    def view(self, address: int, size: int) -> memoryview:
        """A writable view of `size` bytes at `address`."""
        backing, offset = self.locate(address, size)
        return memoryview(backing)[offset:offset + size]

    def extent(self, address: int) -> int:
        """The bytes from `address` to the end of its allocation."""
        position = bisect.bisect_right(self.starts, address) - 1
        if position < 0:
            raise MemoryError(f"{self.name}: address {address:#x} is outside every allocation (a GPU page fault)")
        start = self.starts[position]
        remaining = start + len(self.allocations[start]) - address
        if remaining <= 0:
            raise MemoryError(f"{self.name}: address {address:#x} is outside every allocation (a GPU page fault)")
        return remaining

    def now_ns(self) -> int:
        """The GPU's clock (nanoseconds since it was made)."""
        return time.perf_counter_ns() - self.started_ns


def run_kernel(gpu: MockMemory, program: Program, arguments: int) -> None:
    """Run `program` with its parameters read from GPU address `arguments`: an 8-byte address per buffer (in
    DEFINE_GLOBAL order), then a 4-byte int per variable (sorted by name), as CUDA lays out kernel parameters."""
    pointers = sorted((uop for uop in program.uops if uop.op is Ops.DEFINE_GLOBAL), key=lambda uop: uop.arg)
    names = sorted({uop.arg[0] for uop in program.uops if uop.op is Ops.DEFINE_VAR})
    words = gpu.view(arguments, 8 * len(pointers) + 4 * len(names))
    addresses = struct.unpack_from(f"<{len(pointers)}Q", words, 0)
    values = struct.unpack_from(f"<{len(names)}i", words, 8 * len(pointers))
    buffers: list[Any] = [None] * (max((uop.arg for uop in pointers), default=-1) + 1)
    bfloat16_buffers: list[tuple[memoryview, list[float]]] = []
    for uop, address in zip(pointers, addresses, strict=True):
        pointer = uop.dtype
        assert isinstance(pointer, PtrDType)
        element = pointer.base.scalar
        count = min(pointer.size if pointer.size > 0 else 1 << 62, gpu.extent(address) // element.itemsize)
        memory = gpu.view(address, count * element.itemsize)
        if element == dtypes.bfloat16:
            floats = (numpy.frombuffer(memory, numpy.uint16).astype(numpy.uint32) << 16).view(numpy.float32)
            as_list = floats.tolist()
            bfloat16_buffers.append((memory, as_list))
            buffers[uop.arg] = as_list
        else:
            buffers[uop.arg] = numpy.frombuffer(memory, to_numpy_dtype(element))
    program(buffers, dict(zip(names, values, strict=True)))
    for memory, as_list in bfloat16_buffers:
        bits = numpy.asarray(as_list, numpy.float32).view(numpy.uint32)
        rounded = ((bits.astype(numpy.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(numpy.uint16)
        memory.cast("B")[:] = rounded.tobytes()
