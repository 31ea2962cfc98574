"""The simulated AMD GPU behind DEV=MOCK+AMD: it executes what the KFD queues wrote.

MockAMDGPU is the core's mock address space (tinycore.hcq.mock) plus AMD's engines. The MOCK kernel driver
(tiny_amd.kfd_mock) registers each queue made by CREATE_QUEUE: its ring, read and write pointers and doorbell. When a
doorbell is written (or the driver lets the GPU run while the host sleeps in WAIT_EVENTS) the GPU runs every queue until
it is empty or stalled on a wait:

- AQL kernel dispatch: kernel_object is the address of the code object's 64-byte kernel descriptor, which the GPU
  decodes (kernarg size, LDS, scratch, wave size, code entry) and checks against the packet; the kernel at the code
  entry runs as the linear program registered for that address (the core's interpreter stands in for the shader
  cores), on the kernarg block's buffer addresses and values;
- AQL barrier-AND, completion signals (counted down), and AMD's vendor packet: its PM4 INDIRECT_BUFFER is followed
  and the PM4 there run (WAIT_REG_MEM64 stalls until a signal is reached, RELEASE_MEM writes a value or the 100 MHz
  clock and may raise an interrupt);
- SDMA COPY_LINEAR, FENCE, TRAP, POLL_REGMEM and TIMESTAMP.

This proves the host side (KFD calls, packet encoding, kernel descriptors, kernarg blocks, signals, copies, TinyJit
graphs) in CI; nothing here has run on an AMD GPU, and the machine code itself is checked only by the compile tests.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tiny_amd import amdcmd
from tiny_amd.code_object import KernelDescriptor
from tinycore.codegen.interpreter import Program
from tinycore.device.compiler import CompileError, Compiler
from tinycore.hcq.mock import MockMemory, pack_mock_binary, program_from_source, run_kernel
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
class MockQueue:
    """A queue the GPU runs: `kind` "aql" (64-byte packets; pointers count packets) or "sdma" (pointers count bytes);
    `read_pointer` and `write_pointer` are GPU addresses of 64-bit values."""

    kind: str
    base: int
    size: int
    read_pointer: int
    write_pointer: int
    name: str


class MockAMDGPU(MockMemory):
    """A simulated AMD GPU: the core's mock address space, the queues KFD made and the engines that run them."""

    def __init__(self, name: str = "MOCK AMD", wave_size: int = 32):
        super().__init__(name)
        self.wave_size = wave_size
        self.queues: list[MockQueue] = []
        self.code: dict[int, Program] = {}  # code entry address -> the linear program standing in for its machine code
        self.running = False
        self.interrupt: Callable[[int], None] = lambda context: None
        self.launches = self.copies = self.releases = self.barriers = self.interrupts = 0
        self.indirect_buffers = 0

    def now_ticks(self) -> int:
        """The GPU clock counter (100 MHz)."""
        return self.now_ns() // 10

    def run(self) -> None:
        """Run every queue until each is empty or stalled (a doorbell was written, or the host sleeps on an event)."""
        if self.running:
            return
        self.running = True
        try:
            while any([self._run(queue) for queue in self.queues]):
                pass
        finally:
            self.running = False

    def _pointer(self, address: int) -> memoryview:
        return self.view(address, 8).cast("Q")

    def _run(self, queue: MockQueue) -> bool:
        read, write = self._pointer(queue.read_pointer), self._pointer(queue.write_pointer)
        ran = False
        while read[0] < write[0]:
            step = self._aql(queue, int(read[0])) if queue.kind == "aql" else self._sdma(queue, int(read[0]))
            if step == 0:
                return ran
            read[0] += step
            ran = True
        return ran

    # ---- AQL ----

    def _aql(self, queue: MockQueue, read: int) -> int:
        """Run the packet at packet index `read`; 1 when done, 0 when it stalls."""
        slots = queue.size // amdcmd.AQL_PACKET_BYTES
        position = queue.base + (read % slots) * amdcmd.AQL_PACKET_BYTES
        words = list(self.view(position, amdcmd.AQL_PACKET_BYTES).cast("I"))
        kind = words[0] & 0xFF
        if kind == amdcmd.AQL_KERNEL_DISPATCH:
            self._dispatch(words)
        elif kind == amdcmd.AQL_VENDOR_SPECIFIC:
            if words[0] >> 16 != amdcmd.AMD_AQL_FORMAT_PM4_IB:
                raise ValueError(f"{self.name}: AMD vendor packet format {words[0] >> 16} is not AMD_AQL_FORMAT_PM4_IB "
                                 f"(queue {queue.name})")
            if not self._pm4(self._indirect_buffer(words[1:5])):
                return 0
        elif kind == amdcmd.AQL_BARRIER_AND:
            dependencies = [words[2 + 2 * index] | (words[3 + 2 * index] << 32) for index in range(5)]
            if any(int(self.view(address, 8).cast("q")[0]) != 0 for address in dependencies if address):
                return 0
            self.barriers += 1
        else:
            raise ValueError(f"{self.name}: AQL packet type {kind} at index {read} is not simulated (queue "
                             f"{queue.name}; an INVALID packet means the host advanced the write index too early)")
        completion = words[14] | (words[15] << 32)
        if completion:  # HSA completion signals count down
            self.view(completion, 8).cast("q")[0] -= 1
        # the packet processor hands the slot back: its header becomes INVALID
        self.view(position, 2).cast("H")[0] = amdcmd.AQL_INVALID
        return 1

    def _indirect_buffer(self, jump: list[int]) -> list[int]:
        """The PM4 words an INDIRECT_BUFFER packet points at."""
        if (jump[0] >> 8) & 0xFF != amdcmd.PM4_INDIRECT_BUFFER or jump[0] >> 30 != 3:
            raise ValueError(f"{self.name}: the vendor packet does not start with a PM4 INDIRECT_BUFFER ({jump[0]:#x})")
        if not jump[3] & amdcmd.INDIRECT_BUFFER_VALID:
            raise ValueError(f"{self.name}: the indirect buffer is not marked valid")
        address, count = (jump[1] & 0xFFFFFFFC) | (jump[2] << 32), jump[3] & 0xFFFFF
        self.indirect_buffers += 1
        return list(self.view(address, 4 * count).cast("I"))

    def _dispatch(self, words: list[int]) -> None:
        group = [words[1] & 0xFFFF, words[1] >> 16, words[2] & 0xFFFF]
        grid = words[3:6]
        private_bytes, group_bytes = words[6], words[7]
        descriptor_address = words[8] | (words[9] << 32)
        kernargs = words[10] | (words[11] << 32)
        descriptor = KernelDescriptor.from_bytes(bytes(self.view(descriptor_address, 64)))
        entry = descriptor_address + descriptor.kernel_code_entry_byte_offset
        program = self.code.get(entry)
        if program is None:
            raise ValueError(f"{self.name}: no kernel code is loaded at {entry:#x} (kernel descriptor at "
                             f"{descriptor_address:#x}): the dispatch's kernel_object must be a loaded .kd symbol")
        if descriptor.wave_size != self.wave_size:
            raise ValueError(f"{self.name}: the kernel was built for wave{descriptor.wave_size}, this GPU runs "
                             f"wave{self.wave_size}: compile for its target")
        if group_bytes < descriptor.group_segment_fixed_size or private_bytes < descriptor.private_segment_fixed_size:
            raise ValueError(f"{self.name}: the dispatch gives {group_bytes} bytes of LDS and {private_bytes} of "
                             f"scratch, the kernel descriptor asks {descriptor.group_segment_fixed_size} and "
                             f"{descriptor.private_segment_fixed_size}")
        buffers = sum(1 for uop in program.uops if uop.op is Ops.DEFINE_GLOBAL)
        variables = len({uop.arg[0] for uop in program.uops if uop.op is Ops.DEFINE_VAR})
        if descriptor.kernarg_size != 8 * buffers + 4 * variables:
            raise ValueError(f"{self.name}: the kernel descriptor's kernarg segment is {descriptor.kernarg_size} "
                             f"bytes, the kernel reads {8 * buffers + 4 * variables}")
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
        """Run PM4 type-3 packets; False when a wait is not satisfied yet (the whole buffer runs again later, so a
        wait comes first in each buffer the queues write)."""
        position = 0
        while position < len(words):
            header = words[position]
            if header >> 30 != 3:
                raise ValueError(f"{self.name}: PM4 header {header:#x} is not a type-3 packet")
            opcode, body = (header >> 8) & 0xFF, words[position + 1:position + 2 + ((header >> 16) & 0x3FFF)]
            if opcode == amdcmd.PM4_WAIT_REG_MEM64:
                if body[0] & 7 != amdcmd.WAIT_FUNCTION_GREATER_EQUAL:
                    raise ValueError(f"{self.name}: WAIT_REG_MEM64 function {body[0] & 7} is not simulated")
                address, reference = body[1] | (body[2] << 32), body[3] | (body[4] << 32)
                if int(self.view(address, 8).cast("Q")[0]) < reference:
                    if position:
                        raise ValueError(f"{self.name}: a WAIT_REG_MEM64 after other packets of one buffer")
                    return False
            elif opcode == amdcmd.PM4_RELEASE_MEM:
                address, select = body[2] | (body[3] << 32), body[1] >> 29
                if select not in (amdcmd.DATA_SELECT_CLOCK_64, amdcmd.DATA_SELECT_VALUE_64):
                    raise ValueError(f"{self.name}: RELEASE_MEM data select {select} is not simulated")
                value = self.now_ticks() if select == amdcmd.DATA_SELECT_CLOCK_64 else body[4] | (body[5] << 32)
                self.view(address, 8).cast("Q")[0] = value
                self.releases += 1
                if (body[1] >> 24) & 7:
                    self.interrupts += 1
                    self.interrupt(body[6])
            else:
                raise ValueError(f"{self.name}: PM4 opcode {opcode:#x} is not simulated")
            position += 1 + len(body)
        return True

    # ---- SDMA ----

    def _sdma(self, queue: MockQueue, read: int) -> int:
        """Run the SDMA packet at byte `read`; its size in bytes when done, 0 when it stalls."""
        def word(index: int) -> int:
            return int(self.view(queue.base + (read + 4 * index) % queue.size, 4).cast("I")[0])
        opcode = word(0) & 0xFF
        if opcode == amdcmd.SDMA_COPY:
            count, source = word(1) + 1, word(3) | (word(4) << 32)
            destination = word(5) | (word(6) << 32)
            self.view(destination, count)[:] = bytes(self.view(source, count))
            self.copies += 1
            return 28
        if opcode == amdcmd.SDMA_FENCE:
            self.view(word(1) | (word(2) << 32), 4).cast("I")[0] = word(3)
            return 16
        if opcode == amdcmd.SDMA_TRAP:
            self.interrupts += 1
            self.interrupt(word(1) & 0xFFFFFFF)
            return 8
        if opcode == amdcmd.SDMA_POLL_REGMEM:
            current = int(self.view(word(1) | (word(2) << 32), 4).cast("I")[0])
            return 24 if current >= word(3) else 0
        if opcode == amdcmd.SDMA_TIMESTAMP:
            self.view(word(1) | (word(2) << 32), 8).cast("Q")[0] = self.now_ticks()
            return 12
        raise ValueError(f"{self.name}: SDMA opcode {opcode} is not simulated (queue {queue.name})")

