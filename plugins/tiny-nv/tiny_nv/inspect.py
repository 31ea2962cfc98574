"""Looking inside CUBINs: ELF checks and SASS through nvdisasm or cuobjdump from a pip wheel (when installed)."""
from __future__ import annotations

import struct
import subprocess
import tempfile

from tiny_nv.toolkit import find_tool

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
"""The ELF machine number of NVIDIA CUDA binaries."""


def elf_symbols(binary: bytes) -> list[str]:
    """The names in the symbol table of a 64-bit little-endian ELF (ValueError when `binary` is not one)."""
    if not binary.startswith(ELF_MAGIC) or len(binary) < 64 or binary[4] != 2 or binary[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    section_offset, = struct.unpack_from("<Q", binary, 0x28)
    entry_size, count, _names_index = struct.unpack_from("<HHH", binary, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", binary, section_offset + index * entry_size)
                for index in range(count)]
    names: list[str] = []
    for section in sections:
        if section[1] != 2:  # SHT_SYMTAB
            continue
        strings = sections[section[6]]
        string_offset = strings[4]
        for position in range(section[4], section[4] + section[5], 24):
            name_offset, = struct.unpack_from("<I", binary, position)
            end = binary.index(b"\0", string_offset + name_offset)
            names.append(binary[string_offset + name_offset:end].decode(errors="replace"))
    return names


def elf_machine(binary: bytes) -> int:
    """The e_machine field of an ELF header (190 for CUDA)."""
    if not binary.startswith(ELF_MAGIC) or len(binary) < 20:
        raise ValueError("not an ELF file")
    return int(struct.unpack_from("<H", binary, 0x12)[0])


def disassembler() -> list[str] | None:
    """The command that prints the SASS of a CUBIN file: nvdisasm, else cuobjdump -sass; None when neither is
    installed (pip install nvidia-cuda-nvdisasm)."""
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm is not None:
        return [nvdisasm]
    cuobjdump = find_tool("cuobjdump")
    return [cuobjdump, "-sass"] if cuobjdump is not None else None


def disassemble(binary: bytes) -> str:
    """The SASS of `binary`; RuntimeError naming the pip package when no disassembler is installed."""
    command = disassembler()
    if command is None:
        raise RuntimeError("no nvdisasm or cuobjdump found: pip install nvidia-cuda-nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(binary)
        file.flush()
        finished = subprocess.run([*command, file.name], capture_output=True, text=True, timeout=60, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({finished.returncode}): {finished.stderr.strip()}")
    return finished.stdout
