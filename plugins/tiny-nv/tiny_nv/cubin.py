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


EIATTR_PARAM_CBANK = 0x0A
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
    registers = next((struct.unpack_from("<II", value)[1] for attribute, value in attributes(section_bytes(".nv.info"))
                      if attribute == EIATTR_REGCOUNT and struct.unpack_from("<I", value)[0] == symbol), info >> 24)
    bank = next((struct.unpack_from("<IHH", value)[1:] for attribute, value in
                 attributes(section_bytes(f".nv.info.{name}")) if attribute == EIATTR_PARAM_CBANK), (0, 0))
    return KernelImage(offset, size, registers, shared[4] if shared is not None else 0, bank[0], bank[1])
