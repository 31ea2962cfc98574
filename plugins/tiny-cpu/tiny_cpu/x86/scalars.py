"""Scalars of every dtype in x86 registers: where each dtype lives, how it is loaded, stored, kept in range and cast.

Integers and bools live in general registers: bool in 8 bits (0 or 1), 8-, 16- and 32-bit integers in 32 bits,
kept sign- or zero-extended from their own width after every operation that can leave it (so compares, shifts and
divisions of the 32-bit register are right), 64-bit integers in 64 bits. Floats live in the low lane of an xmm
register: float64 as a double, float32 as a single, and float16 and bfloat16 as the float32 of their value, rounded
back to their own precision after every operation that can leave it (F16C's vcvtps2ph for float16; for bfloat16
round-to-nearest-even on the bits in a general register, with NaNs kept quiet).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from tinycore.dtype import DType, dtypes
from tinycore.renderer.isa import Label, Memory, SubRegister, VirtualRegister

if TYPE_CHECKING:
    from tiny_cpu.x86.function import FunctionBuilder

HALVES = (dtypes.float16, dtypes.bfloat16)
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INTEGERS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
            dtypes.uint64)
UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.bool)
SCALARS = frozenset({*FLOATS, *INTEGERS, dtypes.bool})
"""Every scalar dtype these rules load, compute with, cast and store."""


def is_float(dtype: DType) -> bool:
    """A float dtype (the value is in an xmm register)."""
    return dtype.scalar in FLOATS


def integer_bits(dtype: DType) -> int:
    """The general-register width of an integer or bool: 8 for bool, 64 for 8-byte integers, else 32."""
    return 8 if dtype.scalar == dtypes.bool else 64 if dtype.scalar.itemsize == 8 else 32


def suffix(dtype: DType) -> str:
    """The scalar instruction suffix of a float dtype: sd for float64, ss for the others (halves as float32)."""
    return "sd" if dtype.scalar == dtypes.float64 else "ss"


def signed_immediate(value: int, bits: int) -> int:
    """`value` wrapped to a signed `bits`-bit integer (how a register of that width holds it)."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def integer_constant(value: int, dtype: DType) -> int:
    """The register contents of an integer or bool constant: wrapped to the dtype, extended to its register."""
    if dtype.scalar == dtypes.bool:
        return int(bool(value))
    width = 8 * dtype.scalar.itemsize
    wrapped = int(value) & ((1 << width) - 1)
    if dtype.scalar not in UNSIGNED and wrapped >> (width - 1):
        wrapped -= 1 << width
    return signed_immediate(wrapped, integer_bits(dtype))


def float_bits(value: float, dtype: DType) -> tuple[int, int]:
    """(bits, width) of a float constant as its register holds it: a double, or the float32 of its (rounded) value."""
    import numpy as np
    if dtype.scalar == dtypes.float64:
        return struct.unpack("<Q", struct.pack("<d", float(value)))[0], 64
    if dtype.scalar == dtypes.float16:
        with np.errstate(over="ignore"):  # past float16's range the constant is an infinity, as C's would be
            value = float(np.float16(value))
    single = struct.unpack("<I", struct.pack("<f", float(np.float32(value))))[0]
    if dtype.scalar == dtypes.bfloat16:
        single = bfloat16_round_bits(single)
    return single, 32


def bfloat16_round_bits(bits: int) -> int:
    """The float32 bits of the bfloat16 nearest to the float32 `bits` (ties to even; NaN stays a quiet NaN)."""
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits | 0x400000) & 0xFFFF0000
    return (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000


def normalize(builder: FunctionBuilder, register: VirtualRegister, dtype: DType) -> None:
    """Sign- or zero-extend an 8- or 16-bit integer from its own width within its 32-bit register, in place."""
    width = 8 * dtype.scalar.itemsize
    if dtype.scalar == dtypes.bool or width >= 32:
        return
    if dtype.scalar in UNSIGNED:
        builder.emit("and", register, (1 << width) - 1)
    else:
        builder.emit("shl", register, 32 - width)
        builder.emit("sar", register, 32 - width)


def round_half(builder: FunctionBuilder, value: VirtualRegister, dtype: DType) -> VirtualRegister:
    """The float32 `value` rounded to float16 or bfloat16 precision (a new register); other dtypes: `value`."""
    if dtype.scalar == dtypes.float16:
        packed, result = builder.value("vec", 128), builder.value("vec", 128)
        builder.emit("vcvtps2ph", packed, value, 0)  # 0: round to nearest even
        builder.emit("vcvtph2ps", result, packed)
        return result
    if dtype.scalar != dtypes.bfloat16:
        return value
    bits = builder.value("gpr", 32)
    builder.emit("vmovd", bits, value)
    rounded = bfloat16_round(builder, bits)
    result = builder.value("vec", 128)
    builder.emit("vmovd", result, rounded)
    return result


def bfloat16_round(builder: FunctionBuilder, bits: VirtualRegister) -> VirtualRegister:
    """`bfloat16_round_bits` on a general register of float32 bits (a new register)."""
    result, magnitude, parity = builder.value("gpr", 32), builder.value("gpr", 32), builder.value("gpr", 32)
    nan, done = builder.label(), builder.label()
    builder.emit("mov", result, bits)
    builder.emit("mov", magnitude, bits)
    builder.emit("and", magnitude, 0x7FFFFFFF)
    builder.emit("cmp", magnitude, 0x7F800000)
    builder.emit("ja", nan)
    builder.emit("mov", parity, bits)
    builder.emit("shr", parity, 16)
    builder.emit("and", parity, 1)
    builder.emit("add", result, 0x7FFF)
    builder.emit("add", result, parity)
    builder.emit("jmp", done)
    builder.bind(nan)
    builder.emit("or", result, 0x400000)
    builder.bind(done)
    builder.emit("and", result, signed_immediate(0xFFFF0000, 32))
    return result


def load_scalar(builder: FunctionBuilder, result: VirtualRegister, address: Memory, dtype: DType) -> None:
    """Load one element of `dtype` at `address` into `result` (a register of the dtype's class)."""
    scalar, size = dtype.scalar, dtype.scalar.itemsize
    if scalar == dtypes.float32:
        builder.emit("vmovss", result, _sized(address, 32))
    elif scalar == dtypes.float64:
        builder.emit("vmovsd", result, _sized(address, 64))
    elif scalar in HALVES:
        bits = builder.value("gpr", 32)
        builder.emit("movzx", bits, _sized(address, 16))
        if scalar == dtypes.bfloat16:
            builder.emit("shl", bits, 16)
            builder.emit("vmovd", result, bits)
        else:
            packed = builder.value("vec", 128)
            builder.emit("vmovd", packed, bits)
            builder.emit("vcvtph2ps", result, packed)
    elif scalar == dtypes.bool or size >= 4:
        builder.emit("mov", result, _sized(address, result.bits))
    else:
        builder.emit("movzx" if scalar in UNSIGNED else "movsx", result, _sized(address, 8 * size))


def store_scalar(builder: FunctionBuilder, address: Memory, value: VirtualRegister, dtype: DType) -> None:
    """Store `value` (a register of the dtype's class) as one element of `dtype` at `address`."""
    scalar, size = dtype.scalar, dtype.scalar.itemsize
    if scalar == dtypes.float32:
        builder.emit("vmovss", _sized(address, 32), value)
    elif scalar == dtypes.float64:
        builder.emit("vmovsd", _sized(address, 64), value)
    elif scalar in HALVES:
        builder.emit("mov", _sized(address, 16), SubRegister(half_bits(builder, value, dtype), 16))
    elif scalar == dtypes.bool or size >= 4:
        builder.emit("mov", _sized(address, value.bits), value)
    else:
        builder.emit("mov", _sized(address, 8 * size), SubRegister(value, 8 * size))


def half_bits(builder: FunctionBuilder, value: VirtualRegister, dtype: DType) -> VirtualRegister:
    """The 16 bits of a float16 or bfloat16 value (held as float32, already rounded), zero-extended in 32 bits."""
    bits = builder.value("gpr", 32)
    if dtype.scalar == dtypes.float16:
        packed = builder.value("vec", 128)
        builder.emit("vcvtps2ph", packed, value, 0)
        builder.emit("vmovd", bits, packed)
        builder.emit("and", bits, 0xFFFF)
    else:
        builder.emit("vmovd", bits, value)
        builder.emit("shr", bits, 16)
    return bits


def _sized(address: Memory, bits: int) -> Memory:
    return Memory(address.base, address.index, address.scale, address.disp, bits, address.label, address.rip,
                  address.broadcast)


def branch_over(builder: FunctionBuilder, flag: VirtualRegister) -> Label:
    """Jump past what follows (to the returned label, which the caller binds) when the byte `flag` is 0."""
    skip = builder.label()
    builder.emit("test", flag, flag)
    builder.emit("je", skip)
    return skip
