"""General-purpose x86-64 instructions: ALU, moves, lea, multiply and divide, shifts, compares and conditional
moves, push/pop. Jumps and calls to labels are the assembler's (they need the label's address)."""

from __future__ import annotations

from collections.abc import Callable

from tiny_cpu.x86.encoding import Encoded, EncodingError, fits_int8, fits_int32, immediate, legacy, legacy_plus_register
from tinycore.renderer.isa import Memory, Operand, Register

CONDITIONS = {
    "o": 0,
    "no": 1,
    "b": 2,
    "ae": 3,
    "e": 4,
    "ne": 5,
    "be": 6,
    "a": 7,
    "s": 8,
    "ns": 9,
    "p": 10,
    "np": 11,
    "l": 12,
    "ge": 13,
    "le": 14,
    "g": 15,
}
ALU = {"add": 0, "or": 1, "adc": 2, "sbb": 3, "and": 4, "sub": 5, "xor": 6, "cmp": 7}
UNARY = {"not": 2, "neg": 3, "mul": 4, "div": 6, "idiv": 7}
SHIFTS = {"rol": 0, "ror": 1, "shl": 4, "shr": 5, "sar": 7}


def _gpr(operand: Operand, what: str) -> Register:
    if not isinstance(operand, Register) or operand.kind != "gpr":
        raise EncodingError(f"{what} must be a general register, not {operand!r}")
    return operand


def _size(operand: Operand) -> int:
    if isinstance(operand, (Register, Memory)):
        return operand.bits
    raise EncodingError(f"cannot tell the operand size of {operand!r}")


def _sized(
    bits: int,
    opcode8: int,
    opcode: int,
    rm: Register | Memory,
    reg_field: int,
    *,
    imm: bytes = b"",
    byte_registers: tuple[Register | None, ...] = (),
    extra: bytes = b"",
) -> Encoded:
    """Pick the 8/16/32/64-bit flavour: a separate opcode for bytes, 66 for words, REX.W for quadwords."""
    if bits not in (8, 16, 32, 64):
        raise EncodingError(f"no {bits}-bit general operation")
    return legacy(
        extra + bytes([opcode8 if bits == 8 else opcode]),
        reg_field,
        rm,
        w=bits == 64,
        prefix=b"\x66" if bits == 16 else b"",
        imm=imm,
        byte_registers=byte_registers,
    )


def _check_same_size(a: Operand, b: Operand, op: str) -> None:
    if _size(a) != _size(b):
        raise EncodingError(f"{op}: operand sizes differ ({a!r}, {b!r})")


def _alu(op: str, dst: Operand, src: Operand) -> Encoded:
    n = ALU[op]
    if not isinstance(dst, (Register, Memory)):
        raise EncodingError(f"{op}: destination must be a register or memory")
    bits = _size(dst)
    if isinstance(src, int):
        if bits == 8:
            return _sized(8, 0x80, 0x80, dst, n, imm=immediate(src, 1), byte_registers=(_reg_or_none(dst),))
        if fits_int8(src):
            return _sized(bits, 0x83, 0x83, dst, n, imm=immediate(src, 1))
        if bits == 64 and not fits_int32(src):
            raise EncodingError(f"{op}: a 64-bit immediate must fit in 32 bits")
        return _sized(bits, 0x81, 0x81, dst, n, imm=immediate(src, 2 if bits == 16 else 4))
    if isinstance(src, Register):
        _check_same_size(dst, src, op)
        return _sized(bits, 8 * n, 8 * n + 1, dst, src.number, byte_registers=(src, _reg_or_none(dst)))
    if isinstance(src, Memory) and isinstance(dst, Register):
        return _sized(bits, 8 * n + 2, 8 * n + 3, src, dst.number, byte_registers=(dst,))
    raise EncodingError(f"{op}: no form takes ({dst!r}, {src!r})")


def _reg_or_none(operand: Operand) -> Register | None:
    return operand if isinstance(operand, Register) else None


def _mov(dst: Operand, src: Operand) -> Encoded:
    if isinstance(src, int):
        if isinstance(dst, Register) and dst.bits == 64 and not fits_int32(src):
            return legacy_plus_register(0xB8, dst, w=True, imm=immediate(src, 8))
        if isinstance(dst, Register) and dst.bits in (8, 16, 32):
            size = dst.bits // 8
            return legacy_plus_register(
                0xB0 if dst.bits == 8 else 0xB8, dst, prefix=b"\x66" if size == 2 else b"", imm=immediate(src, size)
            )
        if not isinstance(dst, (Register, Memory)):
            raise EncodingError("mov: destination must be a register or memory")
        bits = _size(dst)
        if bits == 64 and not fits_int32(src):
            raise EncodingError("mov to memory: the immediate must fit in 32 bits")
        return _sized(bits, 0xC6, 0xC7, dst, 0, imm=immediate(src, min(bits // 8, 4)))
    if isinstance(src, Register) and isinstance(dst, (Register, Memory)):
        _check_same_size(dst, src, "mov")
        return _sized(src.bits, 0x88, 0x89, dst, src.number, byte_registers=(src, _reg_or_none(dst)))
    if isinstance(src, Memory) and isinstance(dst, Register):
        return _sized(dst.bits, 0x8A, 0x8B, src, dst.number, byte_registers=(dst,))
    raise EncodingError(f"mov: no form takes ({dst!r}, {src!r})")


def _rm(operand: Operand, op: str) -> Register | Memory:
    if not isinstance(operand, (Register, Memory)):
        raise EncodingError(f"{op}: expected a register or memory operand")
    return operand


def _test(dst: Operand, src: Operand) -> Encoded:
    rm = _rm(dst, "test")
    if isinstance(src, int):
        bits = _size(rm)
        return _sized(
            bits, 0xF6, 0xF7, rm, 0, imm=immediate(src, min(bits // 8, 4)), byte_registers=(_reg_or_none(rm),)
        )
    source = _gpr(src, "test's second operand")
    _check_same_size(rm, source, "test")
    return _sized(source.bits, 0x84, 0x85, rm, source.number, byte_registers=(source, _reg_or_none(rm)))


def _shift(op: str, dst: Operand, amount: Operand) -> Encoded:
    rm, n = _rm(dst, op), SHIFTS[op]
    bits, byte_regs = _size(rm), (_reg_or_none(rm),)
    if isinstance(amount, int):
        if amount == 1:
            return _sized(bits, 0xD0, 0xD1, rm, n, byte_registers=byte_regs)
        return _sized(bits, 0xC0, 0xC1, rm, n, imm=immediate(amount, 1), byte_registers=byte_regs)
    if isinstance(amount, Register) and amount.name == "cl":
        return _sized(bits, 0xD2, 0xD3, rm, n, byte_registers=byte_regs)
    raise EncodingError(f"{op}: the shift amount is an immediate or cl, not {amount!r}")


def _imul(*operands: Operand) -> Encoded:
    if len(operands) == 1:
        return _sized(_size(operands[0]), 0xF6, 0xF7, _rm(operands[0], "imul"), 5)
    dst, src = _gpr(operands[0], "imul's destination"), _rm(operands[1], "imul")
    if dst.bits == 8:
        raise EncodingError("imul has no two-operand 8-bit form")
    if len(operands) == 2:
        return _sized(dst.bits, 0xAF, 0xAF, src, dst.number, extra=b"\x0f")
    value = operands[2]
    if not isinstance(value, int):
        raise EncodingError("imul's third operand must be an immediate")
    if fits_int8(value):
        return _sized(dst.bits, 0x6B, 0x6B, src, dst.number, imm=immediate(value, 1))
    return _sized(dst.bits, 0x69, 0x69, src, dst.number, imm=immediate(value, 2 if dst.bits == 16 else 4))


def _extend(op: str, dst: Operand, src: Operand) -> Encoded:
    target, source = _gpr(dst, f"{op}'s destination"), _rm(src, op)
    if op == "movsxd":
        if target.bits != 64 or _size(source) != 32:
            raise EncodingError("movsxd extends 32 bits to 64")
        return legacy(b"\x63", target.number, source, w=True)
    opcode = {("movzx", 8): 0xB6, ("movzx", 16): 0xB7, ("movsx", 8): 0xBE, ("movsx", 16): 0xBF}.get((op, _size(source)))
    if opcode is None:
        raise EncodingError(f"{op} extends 8 or 16 bits, not {_size(source)}")
    return legacy(
        bytes([0x0F, opcode]),
        target.number,
        source,
        w=target.bits == 64,
        prefix=b"\x66" if target.bits == 16 else b"",
        byte_registers=(_reg_or_none(source),),
    )


def _push_pop(op: str, operand: Operand) -> Encoded:
    if isinstance(operand, int):
        if op == "pop":
            raise EncodingError("pop takes a register")
        return Encoded(b"\x6a" + immediate(operand, 1) if fits_int8(operand) else b"\x68" + immediate(operand, 4))
    register = _gpr(operand, op)
    if register.bits != 64:
        raise EncodingError(f"{op} takes a 64-bit register")
    return legacy_plus_register(0x50 if op == "push" else 0x58, register)


def _fixed(data: bytes) -> Callable[..., Encoded]:
    def encode(*operands: Operand) -> Encoded:
        if operands:
            raise EncodingError("this instruction takes no operands")
        return Encoded(data)

    return encode


def _lea(dst: Operand, src: Operand) -> Encoded:
    target = _gpr(dst, "lea's destination")
    if not isinstance(src, Memory):
        raise EncodingError("lea takes a memory operand")
    return _sized(target.bits, 0x8D, 0x8D, src, target.number)


def _indirect(op: str, operand: Operand) -> Encoded:
    rm = _rm(operand, op)
    if _size(rm) != 64:
        raise EncodingError(f"an indirect {op} goes through a 64-bit register or memory")
    return legacy(b"\xff", 2 if op == "call" else 4, rm)


INTEGER_ENCODERS: dict[str, Callable[..., Encoded]] = {
    "mov": _mov,
    "lea": _lea,
    "test": _test,
    "imul": _imul,
    "movzx": lambda d, s: _extend("movzx", d, s),
    "movsx": lambda d, s: _extend("movsx", d, s),
    "movsxd": lambda d, s: _extend("movsxd", d, s),
    "push": lambda o: _push_pop("push", o),
    "pop": lambda o: _push_pop("pop", o),
    "ret": _fixed(b"\xc3"),
    "nop": _fixed(b"\x90"),
    "int3": _fixed(b"\xcc"),
    "ud2": _fixed(b"\x0f\x0b"),
    "cqo": _fixed(b"\x48\x99"),
    "cdq": _fixed(b"\x99"),
    "vzeroupper": _fixed(b"\xc5\xf8\x77"),
    "sfence": _fixed(b"\x0f\xae\xf8"),  # orders streamed (non-temporal) stores before later ones
}
for _name in ALU:
    INTEGER_ENCODERS[_name] = (lambda n: lambda d, s: _alu(n, d, s))(_name)
for _name in SHIFTS:
    INTEGER_ENCODERS[_name] = (lambda n: lambda d, s: _shift(n, d, s))(_name)
for _name, _digit in UNARY.items():
    INTEGER_ENCODERS[_name] = (
        lambda n, g: lambda d: _sized(_size(d), 0xF6, 0xF7, _rm(d, n), g, byte_registers=(_reg_or_none(d),))
    )(_name, _digit)
for _name, _code in CONDITIONS.items():
    INTEGER_ENCODERS["set" + _name] = (
        lambda c: lambda d: legacy(bytes([0x0F, 0x90 | c]), 0, _rm(d, "setcc"), byte_registers=(_reg_or_none(d),))
    )(_code)
    INTEGER_ENCODERS["cmov" + _name] = (
        lambda c: lambda d, s: _sized(_gpr(d, "cmov").bits, 0x40 | c, 0x40 | c, _rm(s, "cmov"), d.number, extra=b"\x0f")
    )(_code)
for _name in ("call", "jmp"):
    INTEGER_ENCODERS[_name] = (lambda n: lambda o: _indirect(n, o))(_name)
