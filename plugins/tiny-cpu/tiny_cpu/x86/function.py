"""x86-64 functions over virtual registers: linear-scan allocation, spills to the stack, and the System V frame.

A `FunctionBuilder` takes instructions whose operands may be `VirtualRegister`s. `assemble()` allocates registers
(incoming arguments arrive in rdi, rsi, rdx, rcx, r8, r9 then on the stack, floats in xmm0-7), rewrites spilled
values through scratch registers, and wraps the body in a prologue that saves the callee-saved registers it uses
and an epilogue that restores them.
"""

from __future__ import annotations

from dataclasses import replace

from tiny_cpu.x86.assembler import BRANCHES, Assembler
from tiny_cpu.x86.registers import (
    CALLEE_SAVED,
    FLOAT_ARGUMENTS,
    GPR64,
    INTEGER_ARGUMENTS,
    XMM,
    r10,
    r11,
    rax,
    rbp,
    rsp,
    view,
)
from tiny_cpu.x86.streaming import STREAM_ALIGNMENT
from tiny_cpu.x86.vector_ops import VECTOR_OPS
from tinycore.renderer.isa import (
    Instruction,
    Label,
    Memory,
    Operand,
    Register,
    SubRegister,
    VirtualRegister,
    linear_scan,
    live_intervals,
    rewrite_program,
)

# rax, r10 and r11 are kept out of allocation: scratch for spilled operands, the return value, and the dividend
# (r10 and r11 are taken first, so a spilled divisor does not land in rax)
GENERAL_POOL = [r for r in GPR64 if r not in (rax, r10, r11, rsp, rbp)]
GENERAL_POOL.sort(key=lambda r: r in CALLEE_SAVED)  # caller-saved first: they cost no save and restore
GENERAL_SCRATCH = [r10, r11, rax]
# destination read as well as written: two-operand ALU forms, conditional moves, FMA accumulators
_READ_WRITE = {"add", "sub", "and", "or", "xor", "adc", "sbb", "imul", "shl", "shr", "sar", "rol", "ror", "not", "neg"}
_READ_ONLY = {"cmp", "test", "push", "idiv", "div", "mul"}  # division and mul read rax/rdx implicitly


def access_modes(op: str, operands: tuple[Operand, ...]) -> tuple[str, ...]:
    """How each operand of x86 instruction `op` is used: "r", "w" or "rw" (the allocator's view)."""
    if not operands:
        return ()
    # the answer depends only on the mnemonic, the first operand's type and the count: remembered, as every emitted
    # instruction asks (tens of thousands per large kernel)
    key = (op, type(operands[0]), len(operands))
    modes = _ACCESS_MODES.get(key)
    if modes is None:
        modes = _ACCESS_MODES[key] = _access_modes(op, operands)
    return modes


_ACCESS_MODES: dict[tuple[str, type, int], tuple[str, ...]] = {}


def _access_modes(op: str, operands: tuple[Operand, ...]) -> tuple[str, ...]:
    if op in BRANCHES or op in _READ_ONLY or isinstance(operands[0], (Memory, Label, int)):
        return ("r",) * len(operands)
    if op == "imul" and len(operands) == 3:
        first = "w"
    elif op in _READ_WRITE or op.startswith(("cmov", "vfm", "vfnm", "vpternlog")):
        first = "rw"
    else:
        first = "w"
    return (first,) + ("r",) * (len(operands) - 1)


def reads_memory_there(instruction: Instruction, index: int) -> bool:
    """Whether operand `index` of `instruction` may be a memory reference of its full width: the r/m source of a
    packed three-operand vector instruction (arithmetic, FMA, compare, blend), which reads the whole vector."""
    op = VECTOR_OPS.get(instruction.op)
    return op is not None and index == 2 and op.form in ("rvm", "rvmi", "rvmr") and op.tuple == "full" and \
        instruction.op.endswith(("ps", "pd"))


_COMMUTED = frozenset({"vaddps", "vmulps", "vaddpd", "vmulpd", "vfmadd231ps", "vfmadd231pd", "vfnmadd231ps",
                       "vfnmadd231pd"})
"""Packed instructions whose two sources may trade places (the 231 FMAs' are the two factors; max and min are left
out: x86 returns the second source when either is NaN)."""


def fold_loads(program: list[Instruction]) -> list[Instruction]:
    """`program` with each vector load read once, by the very next instruction where that takes memory, folded into
    it (`vmovups v, [m]; vmulps a, b, v` is `vmulps a, b, [m]`, as gcc writes it): an instruction and a register fewer.
    Only the next instruction: nothing can store to the address or change its registers in between."""
    mentions: dict[VirtualRegister, int] = {}
    for instruction in program:
        for operand in instruction.operands:
            if isinstance(operand, VirtualRegister):
                mentions[operand] = mentions.get(operand, 0) + 1
            elif isinstance(operand, SubRegister):
                mentions[operand.value] = mentions.get(operand.value, 0) + 1
            elif isinstance(operand, Memory):
                for part in (operand.base, operand.index):
                    if isinstance(part, VirtualRegister):
                        mentions[part] = mentions.get(part, 0) + 1
    folded: list[Instruction] = []
    skip = False
    for position, instruction in enumerate(program):
        if skip:
            skip = False
            continue
        operands = instruction.operands
        value, source = (operands[0], operands[1]) if len(operands) == 2 else (None, None)
        if instruction.op == "vmovups" and instruction.mask is None and isinstance(value, VirtualRegister) and \
                isinstance(source, Memory) and mentions.get(value) == 2 and position + 1 < len(program):
            reader = program[position + 1]
            if len(reader.operands) > 2 and reader.operands[1] is value and reader.op in _COMMUTED and \
                    isinstance(reader.operands[2], VirtualRegister) and reader.operands[0] is not value:
                # `vaddps a, v, b` is `vaddps a, b, v`: the load may be folded from either factor or term
                reader = replace(reader, operands=(reader.operands[0], reader.operands[2], value,
                                                   *reader.operands[3:]))
            if len(reader.operands) > 2 and reader.operands[2] is value and reader.operands.count(value) == 1 and \
                    not source.broadcast and source.bits == value.bits and reads_memory_there(reader, 2) and \
                    not any(isinstance(operand, Memory) for operand in reader.operands):
                folded.append(replace(reader, operands=(*reader.operands[:2], source, *reader.operands[3:])))
                skip = True
                continue
        folded.append(instruction)
    return folded


_HIGH_VECTORS = frozenset(XMM[16:])
_EVEX_FORMS = frozenset(name for name, op in VECTOR_OPS.items() if op.has_evex and not name.startswith("vcmp"))


def _vex_only_values(program: list[Instruction]) -> set[VirtualRegister]:
    """The vector values that some instruction without an EVEX form reads or writes (xmm16-31 cannot be named
    there). Compares into vectors count as such: their EVEX form writes a mask register, not a vector of lane masks
    (the 512-bit compares, into a mask register, do not)."""
    values: set[VirtualRegister] = set()
    for instruction in program:
        if instruction.op in _EVEX_FORMS:  # most vector instructions, decided by the mnemonic alone
            continue
        op = VECTOR_OPS.get(instruction.op)
        into_vector = bool(instruction.operands) and not (isinstance(instruction.operands[0], Register)
                                                          and instruction.operands[0].kind == "mask")
        if op is not None and op.has_evex and not (instruction.op.startswith("vcmp") and into_vector):
            continue
        for operand in instruction.operands:
            mentioned = operand.value if isinstance(operand, SubRegister) else operand
            if isinstance(mentioned, VirtualRegister) and mentioned.kind == "vec":
                values.add(mentioned)
    return values


class FunctionBuilder:
    """Builds one System V function. `arguments` are its integer/pointer arguments (64-bit values, or the widths in
    `integer_argument_bits`) followed by its float arguments (scalars in the low lane of a 128-bit value);
    `vector_registers` is 16, or 32 with AVX-512."""

    def __init__(
        self,
        integer_arguments: int,
        float_arguments: int = 0,
        vector_registers: int = 16,
        integer_argument_bits: list[int] | None = None,
    ) -> None:
        if float_arguments > len(FLOAT_ARGUMENTS):
            raise ValueError(f"at most {len(FLOAT_ARGUMENTS)} float arguments are supported (they arrive in xmm0-7)")
        if vector_registers not in (16, 32):
            raise ValueError("vector_registers is 16 (AVX2) or 32 (AVX-512)")
        self.program: list[Instruction] = []
        self._count = 0
        self._labels = 0
        # the scratch registers for spilled operands are xmm13-15 either way: they serve every instruction, and
        # xmm16-31 (AVX-512) only those with an EVEX form (see `assemble`). The allocator tries the pool in order, so
        # with AVX-512 values take xmm16-31 first and leave xmm0-12 to the values that some VEX-only instruction
        # reads (a scalar constant's vmovd, a 128-bit xor): low-first, long-lived splats filled xmm0-12 and the
        # VEX-only values that came later spilled them while xmm16-31 stood empty (softmax: six splats on the stack)
        self.vector_pool = XMM[16:vector_registers] + XMM[:13]
        self.vector_scratch = XMM[13:16]
        self.blocked: dict[Register, int] = {}
        # the bases of buffers stored by `vmovntps` (tiny_cpu.x86.streaming): the registers or argument words that
        # the entry test reads, before the prologue; unaligned, the function runs its body with plain stores
        self.stream_bases: list[Register | Memory] = []
        self.arguments: list[VirtualRegister] = []
        widths = integer_argument_bits or [64] * integer_arguments
        for i in range(integer_arguments):
            value = self.value("gpr", widths[i])  # an int arrives in the low 32 bits; the rest is undefined
            if i < len(INTEGER_ARGUMENTS):
                self.blocked[INTEGER_ARGUMENTS[i]] = len(self.program)
                self.emit("mov", value, view(INTEGER_ARGUMENTS[i], widths[i]))
            else:  # above the return address and the saved rbp
                stack = Memory(rbp, None, 1, 16 + 8 * (i - len(INTEGER_ARGUMENTS)), widths[i])
                self.emit("mov", value, stack)
            self.arguments.append(value)
        for i in range(float_arguments):
            value = self.value("vec", 128)
            self.blocked[FLOAT_ARGUMENTS[i]] = len(self.program)
            self.emit("vmovaps", value, FLOAT_ARGUMENTS[i])
            self.arguments.append(value)

    def value(self, kind: str, bits: int) -> VirtualRegister:
        """A fresh virtual register: kind "gpr" (bits 8-64) or "vec" (bits 128-512)."""
        self._count += 1
        return VirtualRegister(self._count, kind, bits)

    def label(self) -> Label:
        """A fresh label, to `bind` and jump to."""
        self._labels += 1
        return Label(f"L{self._labels}")

    def bind(self, label: Label) -> None:
        """Place `label` here."""
        self.program.append(Instruction("label", (label,), ("r",)))

    def emit(self, op: str, *operands: Operand, clobbers: tuple[Register, ...] = (),
             mask: Register | None = None) -> None:
        """Append an x86 instruction (Intel mnemonic and operand order) over virtual or physical registers;
        `clobbers` are physical registers it overwrites beyond its operands (values live across it avoid them),
        `mask` the opmask (k1-k7) it runs under."""
        self.program.append(Instruction(op, operands, access_modes(op, operands), clobbers, mask))

    def ret(self, value: VirtualRegister | None = None) -> None:
        """Return `value` (in rax for an integer, xmm0 for a float) and leave the function."""
        if value is not None and value.kind == "gpr":
            self.emit("mov", view(rax, value.bits), value)
        elif value is not None:
            self.emit("vmovaps", view(XMM[0], value.bits), value)
        self.program.append(Instruction("ret"))

    def assemble(self) -> bytes:
        """Allocate registers, add the prologue and epilogue, and encode."""
        self.program = fold_loads(self.program)
        intervals = live_intervals(self.program)
        # values that meet an instruction with no EVEX form keep to xmm0-15 (a kernel of integers has none to check)
        if len(self.vector_pool) > 13 and any(value.kind == "vec" for value in intervals):
            legacy = _vex_only_values(self.program)
            for interval in intervals.values():
                if interval.value in legacy:
                    interval.avoid = interval.avoid | _HIGH_VECTORS
        allocation = linear_scan(intervals, {"gpr": GENERAL_POOL, "vec": self.vector_pool}, self.blocked)
        used = allocation.used_registers()  # a set built afresh per call: once, not once per callee-saved register
        saved = [r for r in CALLEE_SAVED if r in used]
        spill_base = 8 * len(saved)
        frame = allocation.spill_bytes + (-(spill_base + allocation.spill_bytes) % 16)

        def slot(offset: int, bits: int) -> Memory:
            return Memory(rbp, None, 1, -(spill_base + offset + bits // 8), bits)

        def load(register: Register, offset: int) -> Instruction:
            return Instruction("mov" if register.kind == "gpr" else "vmovups", (register, slot(offset, register.bits)))

        def store(offset: int, register: Register) -> Instruction:
            return Instruction("mov" if register.kind == "gpr" else "vmovups", (slot(offset, register.bits), register))

        def in_memory(instruction: Instruction, index: int, offset: int) -> Memory | None:
            operand = instruction.operands[index]
            if not isinstance(operand, VirtualRegister) or not reads_memory_there(instruction, index):
                return None
            return slot(offset, operand.bits)

        body = rewrite_program(
            self.program, allocation, {"gpr": GENERAL_SCRATCH, "vec": self.vector_scratch}, view, load, store,
            in_memory,
        )
        uses_vectors = any(v.kind == "vec" for v in intervals)
        assembler = Assembler()
        if self.stream_bases and any(instruction.op == "vmovntps" for instruction in body):
            plain = Label("plain stores")
            assembler.emit("mov", rax, self.stream_bases[0])
            for base in self.stream_bases[1:]:
                assembler.emit("or", rax, base)
            assembler.emit("test", view(rax, 32), STREAM_ALIGNMENT - 1)
            assembler.emit("jne", plain)
            self._emit_body(assembler, body, saved, spill_base, frame, uses_vectors, streamed=True)
            assembler.bind(plain)
            body = [_plain_stores(instruction) for instruction in body]
        self._emit_body(assembler, body, saved, spill_base, frame, uses_vectors, streamed=False)
        self.allocation, self.saved_registers = allocation, saved
        return assembler.finish()

    @staticmethod
    def _emit_body(assembler: Assembler, body: list[Instruction], saved: list[Register], spill_base: int, frame: int,
                   uses_vectors: bool, streamed: bool) -> None:
        """The prologue, the allocated `body` and an epilogue at each ret (after an `sfence` when `streamed`)."""
        assembler.emit("push", rbp)
        assembler.emit("mov", rbp, rsp)
        for register in saved:
            assembler.emit("push", register)
        if frame:
            assembler.emit("sub", rsp, frame)
        for instruction in body:
            if instruction.op == "ret":
                if streamed:
                    assembler.emit("sfence")
                if uses_vectors:
                    assembler.emit("vzeroupper")
                assembler.emit("lea", rsp, Memory(rbp, None, 1, -spill_base, 64))
                for register in reversed(saved):
                    assembler.emit("pop", register)
                assembler.emit("pop", rbp)
                assembler.emit("ret")
            elif instruction.op in ("mov", "vmovaps", "vmovups") and instruction.operands[0] == instruction.operands[1]:
                continue  # a copy the allocator made redundant
            else:
                assembler.emit_instruction(instruction)


def _renamed(operand: Operand) -> Operand:
    """`operand` with its label renamed for the second copy of a body (labels are bound once per function)."""
    if isinstance(operand, Label):
        return Label(f"{operand.name} plain")
    if isinstance(operand, Memory) and operand.label is not None:
        return replace(operand, label=Label(f"{operand.label.name} plain"))
    return operand


def _plain_stores(instruction: Instruction) -> Instruction:
    """The instruction of the body's copy for unaligned bases: `vmovntps` as `vmovups`, labels renamed."""
    operands = tuple(_renamed(operand) for operand in instruction.operands)
    op = "vmovups" if instruction.op == "vmovntps" else instruction.op
    if op == instruction.op and operands == instruction.operands:
        return instruction
    return replace(instruction, op=op, operands=operands)
