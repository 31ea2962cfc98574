"""The independent oracle for the x86 encoder tests: capstone's decoder, and operand sets that cover the encoding
space (every register number in every position, every addressing form)."""

from __future__ import annotations

import capstone
from tiny_cpu.x86.registers import GPR64

from tinycore.renderer.isa import Memory, Operand, Register

_DECODER = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_DECODER.detail = True
COMPARISON_PREDICATES = ["eq", "lt", "le", "unord", "neq", "nlt", "nle", "ord"]
DISPLACEMENTS = [0, 8, -128, 127, 128, -129, 64, 256, -8192, 8128, 8192, 12, 0x12345678, -0x80000000]


def memory_forms(bits: int, broadcast: bool = False) -> list[Memory]:
    """Every base register with every displacement size, every index register with every scale, index without base,
    absolute and RIP-relative references, all of `bits` bits."""
    forms = [Memory(base, None, 1, disp, bits, broadcast=broadcast) for base in GPR64 for disp in DISPLACEMENTS]
    indices = [r for r in GPR64 if r.number != 4]
    for i, index in enumerate(indices):
        for j, scale in enumerate((1, 2, 4, 8)):
            base = GPR64[(i * 5 + j * 3 + 1) % 16]
            forms.append(
                Memory(base, index, scale, DISPLACEMENTS[(i + j) % len(DISPLACEMENTS)], bits, broadcast=broadcast)
            )
        forms.append(Memory(None, index, 4, 0x40, bits, broadcast=broadcast))
    forms += [
        Memory(None, None, 1, 0x1000, bits, broadcast=broadcast),
        Memory(disp=0x20, bits=bits, rip=True, broadcast=broadcast),
        Memory(disp=-0x20, bits=bits, rip=True, broadcast=broadcast),
    ]
    return forms


def decode(code: bytes, address: int = 0) -> tuple[str, list[tuple[object, ...]], str, int]:
    """Capstone's reading of the one instruction in `code`: mnemonic, operands as tuples, its text, its length."""
    instructions = list(_DECODER.disasm(code, address))
    if not instructions:
        raise AssertionError(f"capstone cannot decode {code.hex()}")
    first = instructions[0]
    operands: list[tuple[object, ...]] = []
    for operand in first.operands:
        if operand.type == capstone.x86.X86_OP_REG:
            operands.append(("reg", first.reg_name(operand.reg)))
        elif operand.type == capstone.x86.X86_OP_IMM:
            operands.append(("imm", operand.imm, operand.size))
        else:
            memory = operand.mem
            name = lambda r: first.reg_name(r) if r else None
            operands.append(
                (
                    "mem",
                    name(memory.base),
                    name(memory.index),
                    memory.scale if memory.index else 1,
                    memory.disp,
                    operand.size,
                )
            )
    return first.mnemonic, operands, f"{first.mnemonic} {first.op_str}", first.size


def describe(operands: tuple[Operand, ...], memory_size: bool = True) -> list[tuple[object, ...]]:
    """`operands` in the shape `decode` reports them (memory size None when it is not to be compared)."""
    out: list[tuple[object, ...]] = []
    for operand in operands:
        if isinstance(operand, Register):
            out.append(("reg", operand.name))
        elif isinstance(operand, Memory):
            base = "rip" if operand.rip else (operand.base.name if isinstance(operand.base, Register) else None)
            index = operand.index.name if isinstance(operand.index, Register) else None
            out.append(
                (
                    "mem",
                    base,
                    index,
                    operand.scale if index else 1,
                    operand.disp,
                    operand.bits // 8 if memory_size else None,
                )
            )
        elif isinstance(operand, int):
            out.append(("imm", operand))
    return out


def same(wanted: list[tuple[object, ...]], decoded: list[tuple[object, ...]]) -> bool:
    """True when capstone's operands are the wanted ones (immediates compared at capstone's width)."""
    if len(wanted) != len(decoded):
        return False
    for w, d in zip(wanted, decoded, strict=True):
        if w[0] != d[0]:
            return False
        if w[0] == "imm":
            size = int(d[2])  # type: ignore[call-overload]
            if int(w[1]) % (1 << (8 * size)) != int(d[1]) % (1 << (8 * size)):
                return False  # type: ignore[call-overload]
        elif w[0] == "mem":
            if w[1:5] != d[1:5] or (w[5] is not None and w[5] != d[5]):
                return False
        elif w != d:
            return False
    return True
