"""Loading an HSA code object (the ELF that clang and ld.lld make) the way the GPU needs it: its loadable segments laid
out at their virtual addresses in one image, dynamic relocations applied for the image's GPU address, and the kernel
descriptor (`<kernel>.kd`, 64 bytes, the AMDHSA layout) that an AQL dispatch packet's kernel_object points at.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
PT_LOAD = 1
SHT_SYMTAB, SHT_RELA, SHT_DYNSYM = 2, 4, 11
R_AMDGPU_RELATIVE64 = 13
DESCRIPTOR_BYTES = 64
WAVEFRONT_SIZE32_BIT = 1 << 10
"""kernel_code_properties bit: the kernel runs in waves of 32 lanes (RDNA); clear means 64."""


class CodeObjectError(ValueError):
    """The bytes are not a code object this loader understands; the message says what is wrong."""


@dataclass(frozen=True)
class KernelDescriptor:
    """The fields of an AMDHSA kernel descriptor the runtime and the packet processor read."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc3: int = 0
    compute_pgm_rsrc1: int = 0
    compute_pgm_rsrc2: int = 0
    kernel_code_properties: int = 0

    @property
    def wave_size(self) -> int:
        """32 or 64 lanes per wavefront."""
        return 32 if self.kernel_code_properties & WAVEFRONT_SIZE32_BIT else 64

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> KernelDescriptor:
        """Decode 64 descriptor bytes."""
        if len(data) < DESCRIPTOR_BYTES:
            raise CodeObjectError(f"a kernel descriptor is {DESCRIPTOR_BYTES} bytes, got {len(data)}")
        group, private, kernarg = struct.unpack_from("<III", data, 0)
        (entry,) = struct.unpack_from("<q", data, 16)
        rsrc3, rsrc1, rsrc2, properties = struct.unpack_from("<IIIH", data, 44)
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, properties)

    def to_bytes(self) -> bytes:
        """The 64 descriptor bytes (reserved fields zero)."""
        data = bytearray(DESCRIPTOR_BYTES)
        struct.pack_into("<III", data, 0, self.group_segment_fixed_size, self.private_segment_fixed_size,
                         self.kernarg_size)
        struct.pack_into("<q", data, 16, self.kernel_code_entry_byte_offset)
        struct.pack_into("<IIIH", data, 44, self.compute_pgm_rsrc3, self.compute_pgm_rsrc1, self.compute_pgm_rsrc2,
                         self.kernel_code_properties)
        return bytes(data)


@dataclass(frozen=True)
class LoadedImage:
    """A code object laid out for loading: `image` goes to GPU memory at some base; the descriptor is at
    `descriptor_offset`; `relocations` are image offsets that must hold base + addend once the base is known."""

    image: bytes
    descriptor_offset: int
    descriptor: KernelDescriptor
    relocations: tuple[tuple[int, int], ...]

    def relocated(self, base: int) -> bytes:
        """The image with every relocation resolved for GPU address `base`."""
        data = bytearray(self.image)
        for offset, addend in self.relocations:
            struct.pack_into("<Q", data, offset, base + addend)
        return bytes(data)


def _sections(elf: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entry size) of every section."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    found = []
    for index in range(shnum):
        _name, kind, _flags, _address, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", elf, shoff + index * shentsize)
        found.append((kind, offset, size, link, entsize))
    return found


def _symbol(elf: bytes, wanted: str) -> tuple[int, list[str]]:
    """(value of the symbol `wanted`, else -1; the names of every kernel descriptor symbol seen)."""
    sections = _sections(elf)
    descriptors: list[str] = []
    for kind, offset, size, link, entsize in sections:
        if kind not in (SHT_DYNSYM, SHT_SYMTAB) or not entsize:
            continue
        strings_offset = sections[link][1]
        for position in range(offset, offset + size, entsize):
            name_offset, _info, _other, _index, value, _size = struct.unpack_from("<IBBHQQ", elf, position)
            end = elf.index(b"\0", strings_offset + name_offset)
            name = elf[strings_offset + name_offset:end].decode()
            if name == wanted:
                return value, descriptors
            if name.endswith(".kd"):
                descriptors.append(name)
    return -1, descriptors


def load_code_object(elf: bytes, kernel: str) -> LoadedImage:
    """The loadable image of the code object `elf` and the descriptor of its kernel `kernel`."""
    if not elf.startswith(ELF_MAGIC) or len(elf) < 64 or elf[4] != 2:
        raise CodeObjectError("not a 64-bit ELF code object (compile the kernel for amdgcn-amd-amdhsa)")
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    segments = []
    for index in range(phnum):
        kind, _flags, offset, address, _physical, file_size, memory_size, _align = struct.unpack_from(
            "<IIQQQQQQ", elf, phoff + index * phentsize)
        if kind == PT_LOAD:
            segments.append((offset, address, file_size, memory_size))
    if not segments:
        raise CodeObjectError("the code object has no loadable segment")
    image = bytearray(max(address + memory_size for _offset, address, _file, memory_size in segments))
    for offset, address, file_size, _memory in segments:
        image[address:address + file_size] = elf[offset:offset + file_size]
    value, descriptors = _symbol(elf, f"{kernel}.kd")
    if value < 0:
        raise CodeObjectError(f"the code object has no kernel descriptor {kernel}.kd (it has "
                              f"{', '.join(descriptors) or 'none'})")
    relocations = []
    for kind, offset, size, _link, entsize in _sections(elf):
        if kind != SHT_RELA or not entsize:
            continue
        for position in range(offset, offset + size, entsize):
            target, info, addend = struct.unpack_from("<QQq", elf, position)
            if info & 0xFFFFFFFF != R_AMDGPU_RELATIVE64:
                raise CodeObjectError(f"relocation type {info & 0xFFFFFFFF} is not supported by this loader")
            relocations.append((target, addend))
    descriptor = KernelDescriptor.from_bytes(bytes(image[value:value + DESCRIPTOR_BYTES]))
    return LoadedImage(bytes(image), value, descriptor, tuple(relocations))


def synthetic_image(descriptor: KernelDescriptor, code_bytes: int = 256) -> LoadedImage:
    """An image holding only `descriptor` and `code_bytes` of zeros for its entry (for the MOCK GPU when no clang is
    installed to build the real code object: the MOCK runs the linear program, never these bytes)."""
    return LoadedImage(descriptor.to_bytes() + bytes(code_bytes), 0, descriptor, ())
