"""Casts and bitcasts between scalars of every dtype, as C converts them (see tiny_cpu.x86.scalars for where each
dtype lives): floats truncate toward zero into integers, integers wrap into narrower ones, anything nonzero (NaN
included) is a true bool, and 64-bit unsigned integers, which x86 has no conversion for, go through the signed ones
with a fix-up for the values above 2**63."""

from __future__ import annotations

from tiny_cpu.x86.function import FunctionBuilder
from tiny_cpu.x86.scalars import (
    HALVES,
    UNSIGNED,
    float_bits,
    half_bits,
    integer_bits,
    is_float,
    normalize,
    round_half,
    suffix,
)
from tinycore.dtype import DType, dtypes
from tinycore.renderer.isa import SubRegister, VirtualRegister

_TWO_63 = 1 << 63


def cast(builder: FunctionBuilder, value: VirtualRegister, source: DType, target: DType) -> VirtualRegister:
    """`value` of scalar dtype `source` converted to `target` (a new register, or `value` when nothing changes)."""
    source, target = source.scalar, target.scalar
    if source == target:
        return value
    if is_float(source) and is_float(target):
        return _float_to_float(builder, value, source, target)
    if is_float(target):
        return round_half(builder, _integer_to_float(builder, value, source, target), target)
    if is_float(source):
        return _float_to_integer(builder, value, source, target)
    return _integer_to_integer(builder, value, source, target)


def _float_to_float(builder: FunctionBuilder, value: VirtualRegister, source: DType, target: DType) -> VirtualRegister:
    result = builder.value("vec", 128)
    if source == dtypes.float64:
        builder.emit("vcvtsd2ss", result, value, value)
    elif target == dtypes.float64:
        builder.emit("vcvtss2sd", result, value, value)
        return result
    else:
        builder.emit("vmovaps", result, value)
    return round_half(builder, result, target)


def _wide_integer(builder: FunctionBuilder, value: VirtualRegister, source: DType) -> VirtualRegister:
    """An integer or bool as a 64-bit register holding the same number (sign- or zero-extended)."""
    wide = builder.value("gpr", 64)
    if source == dtypes.bool:
        builder.emit("movzx", wide, value)
    elif value.bits == 64:
        return value
    elif source in UNSIGNED:
        builder.emit("mov", SubRegister(wide, 32), value)  # writing 32 bits clears the upper half
    else:
        builder.emit("movsxd", wide, value)
    return wide


def _integer_to_float(builder: FunctionBuilder, value: VirtualRegister, source: DType,
                      target: DType) -> VirtualRegister:
    convert = "vcvtsi2sd" if target == dtypes.float64 else "vcvtsi2ss"
    wide = _wide_integer(builder, value, source)
    result = builder.value("vec", 128)
    builder.emit("vxorps", result, result, result)  # no false dependency on the register's old value
    if source != dtypes.uint64:
        builder.emit(convert, result, result, wide)
        return result
    # above 2**63 the signed conversion sees a negative number: halve it (keeping the low bit, so it rounds the
    # same), convert, and double
    large, done = builder.label(), builder.label()
    halved = builder.value("gpr", 64)
    builder.emit("test", wide, wide)
    builder.emit("js", large)
    builder.emit(convert, result, result, wide)
    builder.emit("jmp", done)
    builder.bind(large)
    low = builder.value("gpr", 64)
    builder.emit("mov", halved, wide)
    builder.emit("shr", halved, 1)
    builder.emit("mov", low, wide)
    builder.emit("and", low, 1)
    builder.emit("or", halved, low)
    builder.emit(convert, result, result, halved)
    builder.emit("vadd" + suffix(target), result, result, result)
    builder.bind(done)
    return result


def _float_to_integer(builder: FunctionBuilder, value: VirtualRegister, source: DType,
                      target: DType) -> VirtualRegister:
    flavour = suffix(source)
    if target == dtypes.bool:
        zero, mask = builder.value("vec", 128), builder.value("vec", 128)
        builder.emit("vxorps", zero, zero, zero)
        builder.emit("vcmp" + flavour, mask, value, zero, 4)  # not equal, true when unordered: NaN is true
        return mask_to_bool(builder, mask)
    truncate = "vcvtt" + flavour + "2si"
    if target == dtypes.uint64:
        return _float_to_uint64(builder, value, source)
    if integer_bits(target) == 64 or target == dtypes.uint32:
        wide = builder.value("gpr", 64)
        builder.emit(truncate, wide, value)
        if target != dtypes.uint32:
            return wide
        result = builder.value("gpr", 32)
        builder.emit("mov", result, SubRegister(wide, 32))
        return result
    result = builder.value("gpr", 32)
    builder.emit(truncate, result, value)
    normalize(builder, result, target)
    return result


def _float_to_uint64(builder: FunctionBuilder, value: VirtualRegister, source: DType) -> VirtualRegister:
    """From 2**63 up, the signed conversion overflows: subtract 2**63 first and set the top bit after."""
    flavour, truncate = suffix(source), "vcvtt" + suffix(source) + "2si"
    bits, width = float_bits(float(_TWO_63), source)
    carrier, limit = builder.value("gpr", width), builder.value("vec", 128)
    builder.emit("mov", carrier, bits if width == 32 else bits - (1 << 64) if bits >> 63 else bits)
    builder.emit("vmovd" if width == 32 else "vmovq", limit, carrier)
    result, shifted, top = builder.value("gpr", 64), builder.value("vec", 128), builder.value("gpr", 64)
    mask, done = builder.value("vec", 128), builder.label()
    builder.emit(truncate, result, value)
    builder.emit("vcmp" + flavour, mask, value, limit, 13)  # greater or equal (ordered)
    flag = mask_to_bool(builder, mask)
    builder.emit("test", flag, flag)
    builder.emit("je", done)
    builder.emit("vsub" + flavour, shifted, value, limit)
    builder.emit(truncate, result, shifted)
    builder.emit("mov", top, -_TWO_63)
    builder.emit("xor", result, top)
    builder.bind(done)
    return result


def mask_to_bool(builder: FunctionBuilder, mask: VirtualRegister) -> VirtualRegister:
    """A scalar compare's lane mask (all ones or zero) as a bool byte (1 or 0)."""
    bits, flag = builder.value("gpr", 32), builder.value("gpr", 8)
    builder.emit("vmovd", bits, mask)
    builder.emit("and", bits, 1)
    builder.emit("mov", flag, SubRegister(bits, 8))
    return flag


def _integer_to_integer(builder: FunctionBuilder, value: VirtualRegister, source: DType,
                        target: DType) -> VirtualRegister:
    if target == dtypes.bool:
        flag = builder.value("gpr", 8)
        builder.emit("cmp", value, 0)
        builder.emit("setne", flag)
        return flag
    if integer_bits(target) == 64:
        wide = _wide_integer(builder, value, source)
        if wide is value:
            copy = builder.value("gpr", 64)
            builder.emit("mov", copy, value)
            return copy
        return wide
    result = builder.value("gpr", 32)
    if source == dtypes.bool:
        builder.emit("movzx", result, value)
    else:
        builder.emit("mov", result, SubRegister(value, 32) if value.bits == 64 else value)
    normalize(builder, result, target)
    return result


def bitcast(builder: FunctionBuilder, value: VirtualRegister, source: DType, target: DType) -> VirtualRegister:
    """The bits of `value` read as `target` (the same size): moves between register files, and halves packed or
    unpacked from their float32 form."""
    source, target = source.scalar, target.scalar
    if not is_float(source) and not is_float(target):
        return _integer_to_integer(builder, value, source, target)
    if is_float(source) and is_float(target):
        if source in HALVES:  # float16 <-> bfloat16: through the 16 bits
            return bitcast(builder, bitcast(builder, value, source, dtypes.uint16), dtypes.uint16, target)
        return value
    if is_float(source):
        if source in HALVES:
            bits = half_bits(builder, value, source)
            normalize(builder, bits, target)
            return bits
        result = builder.value("gpr", integer_bits(target))
        builder.emit("vmovq" if result.bits == 64 else "vmovd", result, value)
        return result
    result = builder.value("vec", 128)
    if target in HALVES:
        bits = builder.value("gpr", 32)
        builder.emit("mov", bits, value)
        if target == dtypes.bfloat16:
            builder.emit("shl", bits, 16)
            builder.emit("vmovd", result, bits)
        else:
            builder.emit("and", bits, 0xFFFF)
            packed = builder.value("vec", 128)
            builder.emit("vmovd", packed, bits)
            builder.emit("vcvtph2ps", result, packed)
        return result
    builder.emit("vmovq" if value.bits == 64 else "vmovd", result, value)
    return result
