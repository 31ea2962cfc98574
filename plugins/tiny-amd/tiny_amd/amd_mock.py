"""The MOCK interface (DEV=MOCK+AMD): a simulated AMD GPU in Python that executes what the AMD queues wrote.

MockAMDGPU is the core's mock address space (tinycore.hcq.mock) plus AMD's engines. A compute queue is an AQL ring
in GPU memory with read and write indices; a copy queue is an SDMA ring. When a doorbell rings the GPU runs every
ring until each is empty or stalled on a wait: AQL kernel dispatches (the kernel descriptor address names the code
object, whose linear program the core's interpreter runs on the kernarg block's buffer addresses and values),
barrier-AND packets, AMD vendor packets holding PM4 (WAIT_REG_MEM64 stalls until a signal is reached, RELEASE_MEM
writes a value or the 100 MHz clock), and SDMA COPY_LINEAR, FENCE, POLL_REGMEM and TIMESTAMP packets.

This proves the host side (packet encoding, kernarg blocks, signals, copies, TinyJit graphs) in CI; the code objects
themselves are checked by the clang compile tests, and nothing here has run on an AMD GPU.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tiny_amd import amdcmd
from tinycore.codegen.interpreter import Program
from tinycore.device.compiler import CompileError, Compiler
from tinycore.hcq.mock import MockMemory, pack_mock_binary, program_from_source, run_kernel, unpack_mock_binary
from tinycore.uop.ops import Ops


class MockCompiler(Compiler):
    """Packs the linear program embedded in the source with the code object clang makes of the same source when a
    clang for the target is installed; without one the MOCK code object holds the program only."""

    def __init__(self, arch: str):
        super().__init__("amd-mock-kernels")
        self.arch, self.name = arch, f"amd-mock-{arch}"

    def compile(self, src: str) -> bytes:
        """The MOCK code object of `src`."""
        from tiny_amd.compiler import AMDCompiler, ToolchainMissingError
        uops_pickle = program_from_source(src)
        if uops_pickle is None:
            raise CompileError("the source carries no linear program: render it with the MOCK interface's HIP "
                               "renderer (DEV=MOCK+AMD)", log=src[:2000])
        try:
            binary = AMDCompiler(self.arch).compile(src)
        except ToolchainMissingError:
            binary = b""
        return pack_mock_binary(uops_pickle, binary)


@dataclass
class Ring:
    """A ring buffer in GPU memory the host writes and the GPU reads: `kind` "aql" (64-byte packets) or "sdma"
    (dword packets); `indices` is GPU memory holding the read and the write index (packets or dwords)."""

    kind: str
    base: int
    words: int
    indices: int
    name: str
    stalled_polls: int = field(default=0)


class MockAMDGPU(MockMemory):
    """A simulated AMD GPU: the core's mock address space, AQL and SDMA rings and the engines that run them."""

    def __init__(self, name: str = "MOCK AMD"):
        super().__init__(name)
        self.rings: list[Ring] = []
        self.running = False
        self.launches = self.copies = self.releases = self.barriers = 0

    def new_ring(self, kind: str, words: int, name: str) -> Ring:
        """A ring of `words` dwords and its index pair, registered with the GPU."""
        ring = Ring(kind, self.allocate(4 * words, f"{name} ring"), words, self.allocate(16, f"{name} indices"), name)
        self.rings.append(ring)
        return ring

    def now_ticks(self) -> int:
        """The GPU clock counter (100 MHz)."""
        return self.now_ns() // 10

    def ring_doorbell(self) -> None:
        """Run every ring until each is empty or stalled."""
        if self.running:
            return
        self.running = True
        try:
            while any([self._run(ring) for ring in self.rings]):
                pass
        finally:
            self.running = False

    def poll(self) -> None:
        """Let stalled rings look at their signals again (the host calls this when it reads a signal)."""
        self.ring_doorbell()

    def _run(self, ring: Ring) -> bool:
        indices = self.view(ring.indices, 16).cast("Q")
        ran = False
        while indices[0] < indices[1]:
            step = self._aql(ring, int(indices[0])) if ring.kind == "aql" else self._sdma(ring, int(indices[0]))
            if step == 0:
                return ran
            indices[0] += step
            ran = True
        return ran

    # ---- AQL ----

    def _aql(self, ring: Ring, read: int) -> int:
        """Run the packet at packet index `read`; 1 when done, 0 when it stalls."""
        slots = ring.words // amdcmd.AQL_PACKET_WORDS
        position = ring.base + (read % slots) * amdcmd.AQL_PACKET_BYTES
        words = list(self.view(position, amdcmd.AQL_PACKET_BYTES).cast("I"))
        kind = words[0] & 0xFF
        if kind == amdcmd.AQL_KERNEL_DISPATCH:
            self._dispatch(words)
        elif kind == amdcmd.AQL_VENDOR_SPECIFIC:
            if words[0] >> 16 != amdcmd.AMD_AQL_FORMAT_PM4_INLINE:
                raise ValueError(f"{self.name}: unknown AMD vendor packet format {words[0] >> 16}")
            if not self._pm4(words[1:1 + amdcmd.AQL_PM4_WORDS]):
                return 0
        elif kind == amdcmd.AQL_BARRIER_AND:
            dependencies = [words[2 + 2 * index] | (words[3 + 2 * index] << 32) for index in range(5)]
            if any(int(self.view(address, 8).cast("q")[0]) != 0 for address in dependencies if address):
                return 0
            self.barriers += 1
        else:
            raise ValueError(f"{self.name}: AQL packet type {kind} is not simulated (ring {ring.name})")
        completion = words[14] | (words[15] << 32)
        if completion:  # HSA completion signals count down
            self.view(completion, 8).cast("q")[0] -= 1
        return 1

    def _dispatch(self, words: list[int]) -> None:
        group = [words[1] & 0xFFFF, words[1] >> 16, words[2] & 0xFFFF]
        grid = words[3:6]
        code = words[8] | (words[9] << 32)
        kernargs = words[10] | (words[11] << 32)
        program = self.programs.get(code)
        if program is None:
            uops, _binary = unpack_mock_binary(self.view(code, self.extent(code)))
            program = self.programs[code] = Program(uops)
        groups = [size // local if local else 0 for size, local in zip(grid, group, strict=True)]
        if any(size % local for size, local in zip(grid, group, strict=True) if local):
            raise ValueError(f"{self.name}: grid {grid} is not a whole number of {group} workgroups")
        self._check_launch(program, groups, group)
        run_kernel(self, program, kernargs)
        self.launches += 1

    def _check_launch(self, program: Program, groups: list[int], group: list[int]) -> None:
        """The dispatch's sizes must be the ones the program's ids were made for."""
        for special in program.specials:
            label, size = str(special.arg), special.src[0] if special.src else None
            if size is None or size.op is not Ops.CONST:
                continue
            launched = (group if label.startswith("lidx") else groups)[int(label[-1])]
            if launched != size.arg:
                raise ValueError(f"{self.name}: the dispatch launches {launched} along {label}, the kernel was made "
                                 f"for {size.arg}")

    def _pm4(self, words: list[int]) -> bool:
        """Run PM4 type-3 packets until a zero word; False when a wait is not satisfied yet."""
        position = 0
        while position < len(words) and words[position]:
            header = words[position]
            if header >> 30 != 3:
                raise ValueError(f"{self.name}: PM4 header {header:#x} is not a type-3 packet")
            opcode, body = (header >> 8) & 0xFF, words[position + 1:position + 2 + ((header >> 16) & 0x3FFF)]
            if opcode == amdcmd.PM4_WAIT_REG_MEM64:
                if body[0] & 7 != amdcmd.WAIT_FUNCTION_GREATER_EQUAL:
                    raise ValueError(f"{self.name}: WAIT_REG_MEM64 function {body[0] & 7} is not simulated")
                address, reference = body[1] | (body[2] << 32), body[3] | (body[4] << 32)
                if int(self.view(address, 8).cast("Q")[0]) < reference:
                    return False
            elif opcode == amdcmd.PM4_RELEASE_MEM:
                address, select = body[2] | (body[3] << 32), body[1] >> 29
                value = self.now_ticks() if select == amdcmd.DATA_SELECT_CLOCK_64 else body[4] | (body[5] << 32)
                if select not in (amdcmd.DATA_SELECT_CLOCK_64, amdcmd.DATA_SELECT_VALUE_64):
                    raise ValueError(f"{self.name}: RELEASE_MEM data select {select} is not simulated")
                self.view(address, 8).cast("Q")[0] = value
                self.releases += 1
            else:
                raise ValueError(f"{self.name}: PM4 opcode {opcode:#x} is not simulated")
            position += 1 + len(body)
        return True

    # ---- SDMA ----

    def _sdma(self, ring: Ring, read: int) -> int:
        """Run the SDMA packet at dword `read`; its size in dwords when done, 0 when it stalls."""
        def word(index: int) -> int:
            return int(self.view(ring.base + 4 * ((read + index) % ring.words), 4).cast("I")[0])
        opcode = word(0) & 0xFF
        if opcode == amdcmd.SDMA_COPY:
            count, source = word(1) + 1, word(3) | (word(4) << 32)
            destination = word(5) | (word(6) << 32)
            self.view(destination, count)[:] = bytes(self.view(source, count))
            self.copies += 1
            return 7
        if opcode == amdcmd.SDMA_FENCE:
            self.view(word(1) | (word(2) << 32), 4).cast("I")[0] = word(3)
            return 4
        if opcode == amdcmd.SDMA_POLL_REGMEM:
            current = int(self.view(word(1) | (word(2) << 32), 4).cast("I")[0])
            return 6 if current >= word(3) else 0
        if opcode == amdcmd.SDMA_TIMESTAMP:
            self.view(word(1) | (word(2) << 32), 8).cast("Q")[0] = self.now_ticks()
            return 3
        raise ValueError(f"{self.name}: SDMA opcode {opcode} is not simulated (ring {ring.name})")


def write_ring(gpu: MockAMDGPU, ring: Ring, words: list[int]) -> None:
    """Append `words` to `ring` at its write index (AQL: whole packets), then ring the doorbell."""
    indices = gpu.view(ring.indices, 16).cast("Q")
    unit = amdcmd.AQL_PACKET_WORDS if ring.kind == "aql" else 1
    if len(words) % unit:
        raise ValueError(f"{ring.name}: {len(words)} words are not whole AQL packets")
    write = int(indices[1])
    for offset in range(0, len(words), unit):
        while (write + 1) - int(indices[0]) > ring.words // unit:  # full: let the GPU drain it
            gpu.ring_doorbell()
        slot = (write % (ring.words // unit)) * unit
        gpu.view(ring.base + 4 * slot, 4 * unit)[:] = struct.pack(f"<{unit}I", *words[offset:offset + unit])
        write += 1
    indices[1] = write
    gpu.ring_doorbell()


class MockSelection:
    """What DEV=MOCK+AMD selects: the device itself builds its simulated GPU (AMDQueueDevice); this records it."""

    name = "MOCK"

    def __init__(self, device: str):
        self.device = device

    @property
    def description(self) -> str:
        """What this is."""
        return f"{self.device} = the MOCK GPU (AQL, PM4 and SDMA simulated in Python)"


def open_mock(device: str, indices: tuple[int, ...]) -> MockSelection:
    """The MOCK interface for `device` (the queue device makes one simulated GPU per device)."""
    return MockSelection(device)
