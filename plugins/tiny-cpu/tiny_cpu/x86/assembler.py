"""The x86-64 assembler: instructions by Intel mnemonic into a byte buffer, with labels and jump fixups."""

from __future__ import annotations

import struct

from tiny_cpu.x86.encoding import Encoded, EncodingError
from tiny_cpu.x86.integer_ops import CONDITIONS, INTEGER_ENCODERS
from tiny_cpu.x86.vector_ops import VECTOR_OPS, encode_vector
from tinycore.renderer.isa import Instruction, Label, Memory, Operand, Register

BRANCHES = {"jmp": b"\xe9", "call": b"\xe8", **{"j" + c: bytes([0x0F, 0x80 | n]) for c, n in CONDITIONS.items()}}


class Assembler:
    """Collects machine code. `emit(mnemonic, *operands)` appends one instruction; `bind(label)` marks a position;
    `finish()` resolves every jump and RIP-relative reference to its label and returns the bytes."""

    def __init__(self) -> None:
        self.code = bytearray()
        self.labels: dict[Label, int] = {}
        self._fixups: list[tuple[int, Label, int]] = []  # (where the rel32 is, its label, the address it counts from)
        self._addends: dict[int, int] = {}  # a RIP-relative reference's own displacement, added to its label's distance

    def bind(self, label: Label) -> None:
        """Place `label` at the current end of the code."""
        if label in self.labels:
            raise EncodingError(f"label {label!r} is bound twice")
        self.labels[label] = len(self.code)

    def emit(self, op: str, *operands: Operand, mask: Register | None = None, zeroing: bool = False) -> None:
        """Append instruction `op` (an Intel mnemonic) with Intel-order operands; jumps and calls may name a Label."""
        if op in BRANCHES and len(operands) == 1 and isinstance(operands[0], Label):
            self.code += BRANCHES[op]
            self._fixups.append((len(self.code), operands[0], len(self.code) + 4))
            self.code += b"\0\0\0\0"
            return
        encoded = self.encode(op, operands, mask, zeroing)
        start = len(self.code)
        self.code += encoded.data
        if encoded.rip_offset is None:  # most instructions: no operand to look for a label in
            return
        label = next((o.label for o in operands if isinstance(o, Memory) and o.label is not None), None)
        if label is not None:
            self._fixups.append((start + encoded.rip_offset, label, start + len(encoded.data)))
            self._addends[start + encoded.rip_offset] = struct.unpack_from("<i", self.code, start + encoded.rip_offset)[
                0
            ]

    @staticmethod
    def encode(op: str, operands: tuple[Operand, ...], mask: Register | None = None, zeroing: bool = False) -> Encoded:
        """The bytes of one instruction that names no label (remembered: a kernel repeats most of its instructions,
        the bench kernels 37245 encodes of 4695 distinct ones)."""
        # the operands' types are in the key so that equal-but-different immediates (1, True) never share an entry
        key = (op, operands, tuple(map(type, operands)), mask, zeroing)
        try:
            encoded = _ENCODED.get(key)
        except TypeError:  # an unhashable operand: encoded afresh, and the encoder names what is wrong with it
            return _encode(op, operands, mask, zeroing)
        if encoded is None:
            encoded = _encode(op, operands, mask, zeroing)
            if len(_ENCODED) >= _ENCODED_LIMIT:
                _ENCODED.clear()
            _ENCODED[key] = encoded
        return encoded

    def align(self, boundary: int) -> None:
        """Pad the code with no-ops (the fewest, longest ones) to a multiple of `boundary` bytes: a loop's top, as
        compilers place it, so that its first instructions are fetched and decoded in one block."""
        padding = -len(self.code) % boundary
        while padding:
            size = min(padding, len(_NOPS) - 1)
            self.code += _NOPS[size]
            padding -= size

    def emit_instruction(self, instruction: Instruction) -> None:
        """Append an `Instruction` (a label pseudo-instruction binds its label, an align one pads to its boundary)."""
        if instruction.op == "align":
            boundary = instruction.operands[0]
            if not isinstance(boundary, int) or boundary <= 0 or boundary & (boundary - 1):
                raise EncodingError("align takes a power of two")
            self.align(boundary)
            return
        if instruction.op == "label":
            label = instruction.operands[0]
            if not isinstance(label, Label):
                raise EncodingError("a label instruction takes a Label")
            self.bind(label)
        else:
            self.emit(instruction.op, *instruction.operands, mask=instruction.mask)

    def finish(self) -> bytes:
        """The code with every label reference filled in."""
        for where, label, origin in self._fixups:
            if label not in self.labels:
                raise EncodingError(f"label {label!r} is used but never bound")
            struct.pack_into("<i", self.code, where, self.labels[label] - origin + self._addends.get(where, 0))
        return bytes(self.code)


_ENCODED: dict[tuple[object, ...], Encoded] = {}
# the recommended no-ops of 1 to 9 bytes (nop, and nop with a ModRM, SIB, displacement and operand-size prefix)
_NOPS = [b"", b"\x90", b"\x66\x90", b"\x0f\x1f\x00", b"\x0f\x1f\x40\x00", b"\x0f\x1f\x44\x00\x00",
         b"\x66\x0f\x1f\x44\x00\x00", b"\x0f\x1f\x80\x00\x00\x00\x00", b"\x0f\x1f\x84\x00\x00\x00\x00\x00",
         b"\x66\x0f\x1f\x84\x00\x00\x00\x00\x00"]
_ENCODED_LIMIT = 1 << 16  # entries; the cache starts over when full


def _encode(op: str, operands: tuple[Operand, ...], mask: Register | None, zeroing: bool) -> Encoded:
    """The bytes of one instruction, encoded."""
    if op in VECTOR_OPS:
        return encode_vector(op, operands, mask, zeroing)
    if mask is not None:
        raise EncodingError(f"{op} takes no opmask")
    encoder = INTEGER_ENCODERS.get(op)
    if encoder is None:
        raise EncodingError(f"the x86 assembler has no instruction {op!r}")
    try:
        return encoder(*operands)
    except TypeError as error:
        raise EncodingError(f"{op}: wrong number of operands ({len(operands)})") from error
