"""What a launch needs from a CUBIN: where the kernel's machine code is, how many registers it uses, how much
shared memory it declares and where its parameters sit in constant bank 0. Read from the sections NVRTC and ptxas
write: `.text.<kernel>` (its sh_info names the kernel's symbol), `.nv.shared.<kernel>`, and the attribute lists
`.nv.info` (EIATTR_REGCOUNT per kernel symbol) and `.nv.info.<kernel>` (EIATTR_PARAM_CBANK: offset and size)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from tiny_nv.inspect import ELF_MAGIC


@dataclass(frozen=True)
class KernelImage:
    """A kernel inside a CUBIN: its code's file offset and size, registers per thread, static shared bytes."""

    text_offset: int
    text_size: int
    registers: int
    shared_bytes: int
    parameters_offset: int
    parameters_size: int
    stack_bytes: int = 0
    """Local memory (stack) per thread: the larger of EIATTR_FRAME_SIZE, _MIN_STACK_SIZE and _MAX_STACK_SIZE, plus
    EIATTR_CRS_STACK_SIZE."""
    arch: int = 0
    """The sm_XY the code is for, as XY (the low byte of the ELF header's e_flags)."""


EIATTR_PARAM_CBANK = 0x0A
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_CRS_STACK_SIZE = 0x1E
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 4


def attributes(data: bytes) -> list[tuple[int, bytes]]:
    """(attribute, value bytes) of an .nv.info section: each entry is a format byte, an attribute byte, then a
    16-bit value, or (format 4) a 16-bit size and that many bytes."""
    entries, position = [], 0
    while position + 4 <= len(data):
        form, attribute, value = data[position], data[position + 1], data[position + 2:position + 4]
        position += 4
        if form == EIFMT_SVAL:
            size = int.from_bytes(value, "little")
            value, position = data[position:position + size], position + size
        entries.append((attribute, bytes(value)))
    return entries


def _sections(binary: bytes) -> dict[str, tuple[int, ...]]:
    """Section name -> (type, flags, address, offset, size, link, info, align, entry size)."""
    if not binary.startswith(ELF_MAGIC) or len(binary) < 64 or binary[4] != 2 or binary[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file (a CUBIN)")
    section_offset, = struct.unpack_from("<Q", binary, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", binary, 0x3A)
    if section_offset + count * entry_size > len(binary):
        raise ValueError("the ELF section table runs past the end of the file")
    raw = [struct.unpack_from("<IIQQQQIIQQ", binary, section_offset + index * entry_size) for index in range(count)]
    names_at = raw[names_index][4]
    sections: dict[str, tuple[int, ...]] = {}
    for header in raw:
        end = binary.index(b"\0", names_at + header[0])
        sections[binary[names_at + header[0]:end].decode(errors="replace")] = header[1:]
    return sections


def kernel_image(binary: bytes, name: str) -> KernelImage:
    """The kernel `name` of CUBIN `binary`; ValueError when it has no such kernel."""
    sections = _sections(binary)
    text = sections.get(f".text.{name}")
    if text is None:
        kernels = sorted(section[6:] for section in sections if section.startswith(".text."))
        raise ValueError(f"the CUBIN has no kernel {name!r} (it has {kernels})")
    _type, _flags, _address, offset, size, _link, info, _align, _entry = text
    if offset + size > len(binary):
        raise ValueError(f"kernel {name!r}'s code runs past the end of the CUBIN")
    shared = sections.get(f".nv.shared.{name}")

    def section_bytes(section_name: str) -> bytes:
        header = sections.get(section_name)
        return binary[header[3]:header[3] + header[4]] if header is not None else b""

    symbol = info & 0xFFFFFF  # the top byte of sh_info repeats the register count (sm_80's CUBINs)
    per_symbol: dict[int, int] = {}
    registers = info >> 24
    for attribute, value in attributes(section_bytes(".nv.info")):
        if len(value) < 8 or struct.unpack_from("<I", value)[0] != symbol:
            continue
        if attribute == EIATTR_REGCOUNT:
            registers = struct.unpack_from("<I", value, 4)[0]
        elif attribute in (EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE):
            per_symbol[attribute] = max(per_symbol.get(attribute, 0), struct.unpack_from("<I", value, 4)[0])
    own = attributes(section_bytes(f".nv.info.{name}"))
    bank = next((struct.unpack_from("<IHH", value)[1:] for attribute, value in own
                 if attribute == EIATTR_PARAM_CBANK), (0, 0))
    crs = next((struct.unpack_from("<I", value)[0] for attribute, value in own
                if attribute == EIATTR_CRS_STACK_SIZE and len(value) >= 4), 0)
    shared_bytes = (shared[4] if shared is not None else 0) + sum(
        header[4] for section, header in sections.items() if section.startswith(".nv.shared.reserved."))
    return KernelImage(offset, size, registers, shared_bytes, bank[0], bank[1],
                       max(per_symbol.values(), default=0) + crs, struct.unpack_from("<I", binary, 0x30)[0] & 0xFF)


# ---- the module's data: constant banks other than 0 and device globals, linked by the CUBIN's relocations ----
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 1, 2, 4, 8, 9
R_CUDA_32, R_CUDA_64 = 1, 2
"""The relocation types of data words: a symbol's 32-bit or 64-bit GPU address (plus the addend)."""
DATA_ALIGNMENT = 256


@dataclass(frozen=True)
class Relocation:
    """A word of section `target` at `offset` that must hold the address of `symbol_section` + `value` + addend."""

    target: str
    offset: int
    kind: int
    symbol_section: str
    symbol_value: int
    addend: int


@dataclass(frozen=True)
class ModuleData:
    """The sections a CUBIN's kernels reach besides their code and constant bank 0: each `.nv.constantN` (a constant
    bank the QMD must bind), `.nv.global.init` (initialized device globals) and `.nv.global` (zeroed ones), laid out
    from offset 0 of one allocation; and the relocations that put their addresses into one another."""

    contents: dict[str, bytes]
    offsets: dict[str, int]
    size: int
    relocations: tuple[Relocation, ...]

    def banks(self, base: int) -> tuple[tuple[int, int, int], ...]:
        """(bank, GPU address, size) of each constant bank besides 0, with the data placed at `base`."""
        return tuple(sorted((int(name[len(".nv.constant"):]), base + self.offsets[name], len(data))
                            for name, data in self.contents.items() if name.startswith(".nv.constant")))

    def linked(self, base: int) -> bytes:
        """The data, placed at GPU address `base`, with every relocation applied."""
        image = bytearray(self.size)
        for name, data in self.contents.items():
            image[self.offsets[name]:self.offsets[name] + len(data)] = data
        for relocation in self.relocations:
            address = base + self.offsets[relocation.symbol_section] + relocation.symbol_value + relocation.addend
            at = self.offsets[relocation.target] + relocation.offset
            if relocation.kind == R_CUDA_64:
                struct.pack_into("<Q", image, at, address + struct.unpack_from("<Q", image, at)[0])
            else:
                struct.pack_into("<I", image, at, (address + struct.unpack_from("<I", image, at)[0]) & 0xFFFFFFFF)
        return bytes(image)


def module_data(binary: bytes) -> ModuleData:
    """The constant banks, device globals and data relocations of CUBIN `binary`; ValueError for a relocation this
    loader cannot apply (in the code, or of a type other than a 32/64-bit address)."""
    sections = _sections(binary)
    by_index = list(sections.items())
    contents: dict[str, bytes] = {}
    offsets: dict[str, int] = {}
    size = 0
    for name, header in sections.items():
        kind = header[0]
        is_bank = name.startswith(".nv.constant") and name[len(".nv.constant"):].isdigit()
        if not (is_bank or name in (".nv.global.init", ".nv.global")) or header[4] == 0:
            continue
        if is_bank and int(name[len(".nv.constant"):]) == 0:
            continue
        data = bytes(header[4]) if kind == SHT_NOBITS else binary[header[3]:header[3] + header[4]]
        offsets[name], contents[name] = size, data
        size += -(-len(data) // DATA_ALIGNMENT) * DATA_ALIGNMENT
    symbols = _symbols(binary, sections)
    relocations = []
    for header in sections.values():
        if header[0] not in (SHT_REL, SHT_RELA):
            continue
        target = by_index[header[6]][0]
        if target.startswith(".debug"):
            continue
        entry = 24 if header[0] == SHT_RELA else 16
        for position in range(header[3], header[3] + header[4], entry):
            offset, information = struct.unpack_from("<QQ", binary, position)
            addend = struct.unpack_from("<q", binary, position + 16)[0] if header[0] == SHT_RELA else 0
            kind, symbol = information & 0xFFFFFFFF, information >> 32
            symbol_section_index, symbol_value = symbols[symbol]
            symbol_section = by_index[symbol_section_index][0]
            if kind not in (R_CUDA_32, R_CUDA_64) or target not in contents or symbol_section not in contents:
                raise ValueError(f"the CUBIN has a relocation this loader does not apply: type {kind} in {target} "
                                 f"at {offset:#x} to a symbol in {symbol_section or 'no section'}")
            relocations.append(Relocation(target, offset, kind, symbol_section, symbol_value, addend))
    return ModuleData(contents, offsets, size, tuple(relocations))


def _symbols(binary: bytes, sections: dict[str, tuple[int, ...]]) -> list[tuple[int, int]]:
    """(section index, value) of each symbol of the CUBIN's symbol table."""
    table = sections.get(".symtab")
    if table is None:
        return []
    return [struct.unpack_from("<IBBHQQ", binary, position)[3:5]
            for position in range(table[3], table[3] + table[4], 24)]
