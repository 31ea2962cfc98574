"""x86-64 instruction bytes: ModRM/SIB with displacements, and the REX, VEX and EVEX prefixes.

Each encoder returns `Encoded`: the instruction's bytes, and where a RIP-relative displacement sits in them (so the
assembler can point it at a label once the label's address is known). These functions know forms, not mnemonics;
`integer_ops` and `vector_ops` choose the form for each mnemonic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tinycore.renderer.isa import Memory, Register


class EncodingError(ValueError):
    """An instruction or operand combination the encoder cannot express."""


@dataclass(frozen=True)
class Encoded:
    """An instruction's bytes, and the offset of its RIP-relative disp32 in them (None when it has none)."""

    data: bytes
    rip_offset: int | None = None


RegisterOrMemory = Register | Memory


def fits_int8(value: int) -> bool:
    """True when `value` is representable as a signed byte."""
    return -128 <= value <= 127


def fits_int32(value: int) -> bool:
    """True when `value` is representable as a signed 32-bit integer."""
    return -(1 << 31) <= value < (1 << 31)


def immediate(value: int, size: int) -> bytes:
    """`value` as a little-endian immediate of `size` bytes (signed or unsigned, as long as it fits)."""
    if not -(1 << (8 * size - 1)) <= value < (1 << (8 * size)):
        raise EncodingError(f"immediate {value} does not fit in {size} bytes")
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


@dataclass(frozen=True)
class _ModRM:
    data: bytes
    x: int  # REX.X: bit 3 of the index register (for EVEX registers: bit 4 of the r/m register)
    b: int  # REX.B: bit 3 of the base or r/m register
    rip_offset: int | None


def _physical(register: object, role: str) -> Register:
    if not isinstance(register, Register):
        raise EncodingError(f"{role} must be a physical register before encoding, not {register!r}")
    return register


def modrm(reg_field: int, rm: RegisterOrMemory, disp8_scale: int = 1) -> _ModRM:
    """The ModRM byte (with SIB and displacement for memory) for `reg_field` and the r/m operand.

    `disp8_scale` is EVEX's compressed displacement: a disp8 counts units of that many bytes.
    """
    reg_bits = (reg_field & 7) << 3
    if isinstance(rm, Register):
        return _ModRM(bytes([0xC0 | reg_bits | (rm.number & 7)]), (rm.number >> 4) & 1, (rm.number >> 3) & 1, None)
    if rm.rip or rm.label is not None:
        return _ModRM(bytes([0x05 | reg_bits]) + struct.pack("<i", rm.disp), 0, 0, 1)
    base = _physical(rm.base, "a memory base") if rm.base is not None else None
    index = _physical(rm.index, "a memory index") if rm.index is not None else None
    for register in (base, index):
        if register is not None and (register.kind != "gpr" or register.bits != 64):
            raise EncodingError(f"memory addresses take 64-bit general registers, not {register.name}")
    if index is not None and index.number == 4:
        raise EncodingError("rsp cannot be a memory index register")
    if not fits_int32(rm.disp):
        raise EncodingError(f"displacement {rm.disp} does not fit in 32 bits")
    scale_bits = {1: 0, 2: 1, 4: 2, 8: 3}[rm.scale]
    if base is None:  # [index*scale + disp32] or absolute [disp32]: SIB with base=101 and mod=00
        index_number = index.number if index is not None else 4
        sib = (scale_bits << 6) | ((index_number & 7) << 3) | 5
        return _ModRM(bytes([0x04 | reg_bits, sib]) + struct.pack("<i", rm.disp), (index_number >> 3) & 1, 0, None)
    compressed = rm.disp // disp8_scale if rm.disp % disp8_scale == 0 else None
    if rm.disp == 0 and (base.number & 7) != 5:
        mod, disp = 0, b""  # rbp/r13 with mod=00 would mean RIP/disp32
    elif compressed is not None and fits_int8(compressed):
        mod, disp = 1, struct.pack("<b", compressed)
    else:
        mod, disp = 2, struct.pack("<i", rm.disp)
    if index is None and (base.number & 7) != 4:
        return _ModRM(bytes([(mod << 6) | reg_bits | (base.number & 7)]) + disp, 0, (base.number >> 3) & 1, None)
    index_number = index.number if index is not None else 4  # rsp/r12 as base need a SIB with "no index"
    sib = (scale_bits << 6) | ((index_number & 7) << 3) | (base.number & 7)
    return _ModRM(bytes([(mod << 6) | reg_bits | 4, sib]) + disp, (index_number >> 3) & 1, (base.number >> 3) & 1, None)


def _needs_rex_for_byte(register: Register | None) -> bool:
    return register is not None and register.kind == "gpr" and register.bits == 8 and 4 <= register.number < 8


def legacy(
    opcode: bytes,
    reg_field: int,
    rm: RegisterOrMemory,
    *,
    w: bool = False,
    prefix: bytes = b"",
    imm: bytes = b"",
    byte_registers: tuple[Register | None, ...] = (),
) -> Encoded:
    """A legacy-encoded instruction: [prefix] [REX] opcode ModRM [SIB] [disp] [imm].

    `byte_registers` are the 8-bit registers among the operands: spl, bpl, sil and dil need a REX prefix.
    """
    encoded = modrm(reg_field, rm)
    if isinstance(rm, Register) and rm.number >= 16:
        raise EncodingError(f"{rm.name} needs EVEX")
    rex = (w << 3) | (((reg_field >> 3) & 1) << 2) | (encoded.x << 1) | encoded.b
    needs_rex = rex != 0 or any(_needs_rex_for_byte(r) for r in byte_registers)
    head = prefix + (bytes([0x40 | rex]) if needs_rex else b"") + opcode
    rip = None if encoded.rip_offset is None else len(head) + encoded.rip_offset
    return Encoded(head + encoded.data + imm, rip)


def legacy_plus_register(
    opcode: int, register: Register, *, w: bool = False, prefix: bytes = b"", imm: bytes = b""
) -> Encoded:
    """An instruction with the register in the opcode's low 3 bits (push, pop, mov r, imm)."""
    rex = (w << 3) | ((register.number >> 3) & 1)
    needs_rex = rex != 0 or _needs_rex_for_byte(register)
    return Encoded(prefix + (bytes([0x40 | rex]) if needs_rex else b"") + bytes([opcode | (register.number & 7)]) + imm)


def vex(
    map_select: int,
    pp: int,
    w: int,
    length: int,
    opcode: int,
    reg_field: int,
    vvvv: int,
    rm: RegisterOrMemory,
    imm: bytes = b"",
) -> Encoded:
    """A VEX-encoded instruction (AVX, AVX2, FMA, F16C): 2-byte C5 form when it can, else 3-byte C4.

    `map_select` is 1 for 0F, 2 for 0F38, 3 for 0F3A; `pp` is 0, 66, F3, F2 as 0-3; `length` is 0 (128) or 1 (256).
    """
    if reg_field >= 16 or vvvv >= 16 or (isinstance(rm, Register) and rm.number >= 16):
        raise EncodingError("registers 16-31 need EVEX")
    encoded = modrm(reg_field, rm)
    r, x, b = (reg_field >> 3) & 1, encoded.x, encoded.b
    tail = ((~vvvv & 15) << 3) | (length << 2) | pp
    if map_select == 1 and w == 0 and x == 0 and b == 0:
        head = bytes([0xC5, ((r ^ 1) << 7) | tail, opcode])
    else:
        head = bytes([0xC4, ((r ^ 1) << 7) | ((x ^ 1) << 6) | ((b ^ 1) << 5) | map_select, (w << 7) | tail, opcode])
    rip = None if encoded.rip_offset is None else len(head) + encoded.rip_offset
    return Encoded(head + encoded.data + imm, rip)


def evex(
    map_select: int,
    pp: int,
    w: int,
    length: int,
    opcode: int,
    reg_field: int,
    vvvv: int,
    rm: RegisterOrMemory,
    *,
    disp8_scale: int,
    broadcast: bool = False,
    mask: int = 0,
    zeroing: bool = False,
    imm: bytes = b"",
) -> Encoded:
    """An EVEX-encoded instruction (AVX-512): registers 0-31, 512-bit length (`length` 2), embedded broadcast,
    opmask `mask` (k1-k7, 0 for none) with merging or `zeroing`, and compressed disp8 in units of `disp8_scale`."""
    encoded = modrm(reg_field, rm, disp8_scale)
    r, r_high = (reg_field >> 3) & 1, (reg_field >> 4) & 1
    x, b = encoded.x, encoded.b
    if isinstance(rm, Register):
        x = (rm.number >> 4) & 1
    p0 = ((r ^ 1) << 7) | ((x ^ 1) << 6) | ((b ^ 1) << 5) | ((r_high ^ 1) << 4) | map_select
    p1 = (w << 7) | ((~vvvv & 15) << 3) | 0x04 | pp
    p2 = (zeroing << 7) | (length << 5) | (broadcast << 4) | ((((vvvv >> 4) & 1) ^ 1) << 3) | mask
    head = bytes([0x62, p0, p1, p2, opcode])
    rip = None if encoded.rip_offset is None else len(head) + encoded.rip_offset
    return Encoded(head + encoded.data + imm, rip)
