"""GGUF files: metadata and tensors, with quantized blocks dequantized on the target device by Tensor ops.

Layout (versions 2 and 3, little-endian): "GGUF", u32 version, u64 tensor count, u64 key/value count; the
key/value pairs (string key, u32 value type, value); one info per tensor (string name, u32 dimension count, u64
dimensions innermost first, u32 ggml type, u64 offset); then, aligned to `general.alignment` (default 32), the
data section holding each tensor at its offset. Every count, length and offset is checked against the bytes left
in the file before it is used, and tensors must lie inside the data section without overlapping; a malformed file
raises GGUFFormatError naming the file and the problem.
"""
from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.nn.file_checks import ByteSource, Cursor, MalformedFileError, fail
from tinycore.tensor import Tensor

KIND = "GGUF"
MAX_DIMENSIONS = 8
MAX_NESTING = 8
DEFAULT_ALIGNMENT = 32

# value type -> (struct format, size) for the fixed-size scalar types
_SCALARS: dict[int, tuple[str, int]] = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
                                        6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
_STRING, _ARRAY = 8, 9

GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    30: ("BF16", 1, 2)}
"""Supported ggml tensor types: type id -> (name, elements per block, bytes per block)."""
_OTHER_GGML_TYPES = {9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
                     19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
                     27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}
"""ggml types this reader does not load, by name, for the error that refuses them."""
_PLAIN: dict[int, DType] = {0: dtypes.float32, 1: dtypes.float16, 30: dtypes.bfloat16}


class GGUFFormatError(MalformedFileError):
    """A GGUF file that does not follow the format."""


class _Parser:
    """Reads the header of a GGUF file through a Cursor, checking sizes against the bytes that remain."""

    def __init__(self, source: ByteSource):
        self.source = source
        self.cursor = Cursor(source)

    def error(self, problem: str) -> MalformedFileError:
        return fail(self.source.name, KIND, f"{problem} (at byte {self.cursor.position})", GGUFFormatError)

    def remaining(self) -> int:
        return self.source.size - self.cursor.position

    def count(self, what: str, least_bytes_each: int) -> int:
        """A u64 count of items that each take at least `least_bytes_each` bytes, checked against the file."""
        value = self.cursor.unpack("Q", what)
        if value * least_bytes_each > self.remaining():
            raise self.error(f"{what} is {value}, more than the {self.remaining()} remaining bytes can hold")
        return int(value)

    def string(self, what: str) -> str:
        length = self.count(f"the length of {what}", 1)
        raw = self.cursor.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.error(f"{what} is not valid UTF-8 ({error})") from None

    def value(self, value_type: int, what: str, depth: int = 0) -> Any:
        if value_type in _SCALARS:
            return self.cursor.unpack(_SCALARS[value_type][0], what)
        if value_type == _STRING:
            return self.string(what)
        if value_type == _ARRAY:
            if depth >= MAX_NESTING:
                raise self.error(f"{what} nests arrays more than {MAX_NESTING} deep")
            element_type = self.cursor.unpack("I", f"the element type of {what}")
            if element_type in _SCALARS:
                fmt, size = _SCALARS[element_type]
                length = self.count(f"the length of {what}", size)
                return list(struct.unpack(f"<{length}{fmt}", self.cursor.take(length * size, what)))
            if element_type not in (_STRING, _ARRAY):
                raise self.error(f"{what} has unknown element type {element_type}")
            length = self.count(f"the length of {what}", 8 if element_type == _STRING else 12)
            return [self.value(element_type, f"element {index} of {what}", depth + 1) for index in range(length)]
        raise self.error(f"{what} has unknown value type {value_type}")


def _parse(source: ByteSource) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]], int]:
    """The metadata, the tensor infos (name, shape, ggml type, offset) and the data section's start."""
    parser = _Parser(source)
    cursor = parser.cursor
    magic = cursor.take(4, "the magic bytes") if source.size >= 4 else b""
    if magic != b"GGUF":
        raise parser.error(f"it starts with {magic!r}, not the magic b'GGUF'")
    version = cursor.unpack("I", "the version")
    if version not in (2, 3):
        raise parser.error(f"version {version} is not supported (only GGUF 2 and 3)")
    tensor_count = cursor.unpack("Q", "the tensor count")
    kv_count = parser.count("the key/value count", 13)
    metadata: dict[str, Any] = {}
    for index in range(kv_count):
        key = parser.string(f"key {index}")
        if key in metadata:
            raise parser.error(f"key {key!r} appears twice")
        value_type = cursor.unpack("I", f"the value type of {key!r}")
        metadata[key] = parser.value(value_type, f"the value of {key!r}")
    if tensor_count * 24 > parser.remaining():
        raise parser.error(f"the tensor count is {tensor_count}, more than the {parser.remaining()} remaining bytes "
                           "can describe")
    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for index in range(tensor_count):
        name = parser.string(f"the name of tensor {index}")
        if name in names:
            raise parser.error(f"tensor {name!r} appears twice")
        names.add(name)
        dimension_count = cursor.unpack("I", f"the dimension count of {name!r}")
        if dimension_count > MAX_DIMENSIONS:
            raise parser.error(f"tensor {name!r} has {dimension_count} dimensions, more than {MAX_DIMENSIONS}")
        dimensions = [cursor.unpack("Q", f"dimension {axis} of {name!r}") for axis in range(dimension_count)]
        ggml_type = cursor.unpack("I", f"the type of {name!r}")
        offset = cursor.unpack("Q", f"the offset of {name!r}")
        infos.append((name, tuple(reversed(dimensions)), ggml_type, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or \
            alignment & (alignment - 1) or alignment > 1 << 20:
        raise parser.error(f"general.alignment is {alignment!r}, expected a power of two up to 2**20")
    data_start = -(-cursor.position // alignment) * alignment
    if infos and data_start > source.size:
        raise parser.error(f"the data section would start at byte {data_start}, past the end of the file")
    return metadata, _check_tensors(parser, infos, max(0, source.size - data_start), alignment), data_start


def _check_tensors(parser: _Parser, infos: list[tuple[str, tuple[int, ...], int, int]], data_size: int,
                   alignment: int) -> list[tuple[str, tuple[int, ...], int, int]]:
    """Check each tensor's type, size and offset against the data section and the other tensors."""
    ranges = []
    for name, shape, ggml_type, offset in infos:
        if ggml_type not in GGML_TYPES:
            known = _OTHER_GGML_TYPES.get(ggml_type, "unknown")
            raise parser.error(f"tensor {name!r} has unsupported ggml type {ggml_type} ({known}); supported: "
                               f"{', '.join(kind for kind, _, _ in GGML_TYPES.values())}")
        kind, block_elements, block_bytes = GGML_TYPES[ggml_type]
        elements = prod(shape) if shape else 1
        if shape and shape[-1] % block_elements:
            raise parser.error(f"tensor {name!r} ({kind}) has inner dimension {shape[-1]}, not a multiple of the "
                               f"block size {block_elements}")
        nbytes = elements // block_elements * block_bytes
        if offset % alignment:
            raise parser.error(f"tensor {name!r} has offset {offset}, not a multiple of the alignment {alignment}")
        if offset + nbytes > data_size:
            raise parser.error(f"tensor {name!r} ({kind}, shape {list(shape)}) needs bytes [{offset}, "
                               f"{offset + nbytes}) of the data section, which has {data_size}")
        ranges.append((offset, offset + nbytes, name))
    ranges.sort()
    for (_, previous_end, previous), (start, _, name) in zip(ranges, ranges[1:], strict=False):
        if start < previous_end:
            raise parser.error(f"tensor {name!r} overlaps tensor {previous!r}")
    return infos


# ---- dequantization with Tensor ops (blocks: uint8 (n, block_bytes) on the target device) ----

def _bytes(blocks: Tensor, start: int, stop: int) -> Tensor:
    """Bytes [start, stop) of each block of `blocks` (any leading axes, bytes last)."""
    return blocks.shrink(tuple((0, size) for size in blocks.shape[:-1]) + ((start, stop),))


def _half(blocks: Tensor, start: int) -> Tensor:
    """The little-endian float16 at byte `start` of each block, as float32 of shape (*leading, 1)."""
    if _has_float16(blocks.device):
        # the two bytes as one float16 converted by the device (one instruction on x86 CPUs with F16C, where the
        # integer decoding below is about 15 scalar ops, paid once per block of 32 values in a decode matmul)
        bits16 = _bytes(blocks, start, start + 1).cast(dtypes.uint16) | \
            (_bytes(blocks, start + 1, start + 2).cast(dtypes.uint16) << 8)
        return bits16.bitcast(dtypes.float16).cast(dtypes.float32)
    bits = _bytes(blocks, start, start + 1).cast(dtypes.uint32) | \
        (_bytes(blocks, start + 1, start + 2).cast(dtypes.uint32) << 8)
    return half_bits_to_float(bits)


def _has_float16(device: str | tuple[str, ...]) -> bool:
    """Whether kernels on `device` compute with float16 (its renderer declares it)."""
    from tinycore.device.registry import Device
    name = device[0] if isinstance(device, tuple) else device
    return dtypes.float16 in Device[name].renderer.supported_dtypes()


def half_bits_to_float(bits: Tensor) -> Tensor:
    """IEEE float16 bit patterns (a uint32 tensor of values 0..65535) as float32, with integer ops and one float
    subtraction (so no device needs float16 support, nor float32 subnormals): exponent and mantissa moved into place
    and the exponent rebased by 112 (infinities and NaNs by another 112, to 255); a subnormal half becomes the
    normal float 2**-14 + mantissa * 2**-24, less 2**-14 (exact); the sign bit goes back last. About half the ops
    of taking the fields apart, which matters where every block of a matrix-vector product converts its scale."""
    sign = (bits & 0x8000) << 16
    moved = ((bits & 0x7FFF) << 13) + (112 << 23)
    exponent = bits & 0x7C00
    moved = (exponent == 0x7C00).where(moved + (112 << 23), moved)
    subnormal = (moved + (1 << 23)).bitcast(dtypes.float32) - 2.0 ** -14
    magnitude = (exponent == 0).where(subnormal, moved.bitcast(dtypes.float32))
    return (magnitude.bitcast(dtypes.uint32) | sign).bitcast(dtypes.float32)


def _shifted(packed: Tensor, shifts: int, step: int, mask: int) -> Tensor:
    """Fields of `mask` bits of each byte of packed (n, ..., m): (n, ..., shifts, m), field k taken at bit k * step.
    A broadcast shift instead of a concatenation, so a kernel computes any value from one byte without branches."""
    values = packed.cast(dtypes.int32).unsqueeze(-2)
    # every step-th entry of a range: a strided view of the cached index buffer, so no kernel computes the amounts
    amounts = Tensor.arange(shifts * step, device=packed.device, dtype=dtypes.int32).reshape(shifts, step)[:, 0:1]
    return (values >> amounts) & mask


def _nibbles(blocks: Tensor, start: int) -> Tensor:
    """The 32 4-bit values of the 16 bytes at `start` (element j in the low nibble of byte j, element j + 16 in its
    high nibble): int32 (*leading, 32)."""
    return _shifted(_bytes(blocks, start, start + 16), 2, 4, 0xF).reshape(*blocks.shape[:-1], 32)


def _q4_0(blocks: Tensor) -> Tensor:
    return (_nibbles(blocks, 2) - 8).cast(dtypes.float32) * _half(blocks, 0)


def _q4_1(blocks: Tensor) -> Tensor:
    return _nibbles(blocks, 4).cast(dtypes.float32) * _half(blocks, 0) + _half(blocks, 2)


def _fifth_bits(blocks: Tensor, start: int) -> Tensor:
    """The 32 single high bits stored little-endian in the 4 bytes at `start` (bit j belongs to element j), moved
    to bit 4: int32 (*leading, 32)."""
    leading = blocks.shape[:-1]
    return _shifted(_bytes(blocks, start, start + 4).reshape(*leading, 4, 1), 8, 1, 1).reshape(*leading, 32) << 4


def _q5_0(blocks: Tensor) -> Tensor:
    quants = _nibbles(blocks, 6) | _fifth_bits(blocks, 2)
    return (quants - 16).cast(dtypes.float32) * _half(blocks, 0)


def _q5_1(blocks: Tensor) -> Tensor:
    quants = _nibbles(blocks, 8) | _fifth_bits(blocks, 4)
    return quants.cast(dtypes.float32) * _half(blocks, 0) + _half(blocks, 2)


def _q8_0(blocks: Tensor) -> Tensor:
    # sign-extended by arithmetic rather than a bitcast to int8, which C renderers emit one lane at a time
    quants = (_bytes(blocks, 2, 34).cast(dtypes.int32) ^ 0x80) - 0x80
    return quants.cast(dtypes.float32) * _half(blocks, 0)


Coefficients = tuple[tuple[float, ...], ...]
"""Per lane, the factors of x's 4 groups of 8 that make a term's x operand: (4 groups, 8 lanes)."""

_IDENTITY = tuple(tuple(tuple(1.0 if other == group else 0.0 for _ in range(8)) for other in range(4))
                  for group in range(4))


def _nibble_terms(blocks: Tensor, start: int) -> list[tuple[Coefficients, Tensor]]:
    """The lane terms of the 32 nibbles in the 16 bytes at `start` (element j < 16 in the low nibble of byte j,
    element j + 16 in its high nibble). A byte b = low + 16 * high enters twice: low * (x_low - x_high / 16) +
    b * (x_high / 16) = low * x_low + high * x_high, so the high nibble needs no shift of its own."""
    terms = []
    for half in range(2):
        packed = _bytes(blocks, start + 8 * half, start + 8 * half + 8).cast(dtypes.int32)
        low = tuple(tuple({half: 1.0, half + 2: -1 / 16}.get(group, 0.0) for _ in range(8)) for group in range(4))
        high = tuple(tuple(1 / 16 if group == half + 2 else 0.0 for _ in range(8)) for group in range(4))
        terms += [(low, packed & 0xF), (high, packed)]
    return terms


_LANE_BITS: dict[str, Tensor] = {}


def _lane_bits(device: str) -> Tensor:
    """1, 2, 4, ..., 128 as int32 on `device`, realized once (a buffer the kernels load, where 1 << arange(8)
    would be a kernel of its own each time)."""
    if device not in _LANE_BITS:
        _LANE_BITS[device] = Tensor([1 << lane for lane in range(8)], dtype=dtypes.int32, device=device).realize()
    return _LANE_BITS[device]


def _fifth_bit_terms(blocks: Tensor, start: int) -> list[tuple[Coefficients, Tensor]]:
    """The lane terms of the 32 high bits (worth 16 each) stored little-endian in the 4 bytes at `start`: group g's
    bits are byte g, lane i's bit masked in place (value 2**i) and its x operand scaled by 16 / 2**i, so no shift."""
    masks = _lane_bits(blocks.device if isinstance(blocks.device, str) else blocks.device[0])
    terms = []
    for group in range(4):
        coefficients = tuple(tuple(16 / 2 ** lane if other == group else 0.0 for lane in range(8))
                             for other in range(4))
        terms.append((coefficients, _bytes(blocks, start + group, start + group + 1).cast(dtypes.int32) & masks))
    return terms


class LaneTerms(NamedTuple):
    """A block of 32 values with one scale as a sum of integer lane terms: element 8 * g + i of a block has the value
    (sum over terms of coefficients[g][i] * values[..., i] - offset) * scale + minimum, where only the terms whose
    coefficient for group g is nonzero contribute to it. A one-row product adds, per block and lane, each term's
    values times its x operand (x's groups combined by the coefficients, once per token), so the block's scale (and
    minimum) multiplies one 8-wide partial sum instead of every value."""

    terms: list[tuple[Coefficients, Tensor]]
    offset: int
    scale: Tensor
    minimum: Tensor | None


LANE_TYPES = (2, 3, 6, 7, 8)
"""ggml types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) that block_lane_terms takes."""


def block_lane_terms(blocks: Tensor, ggml_type: int) -> LaneTerms:
    """Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 blocks (uint8, (*leading, bytes per block)) as LaneTerms: integer values of
    shape (*leading, 8), the scale and minimum (float32 (*leading,))."""
    def half(start: int) -> Tensor:
        return _half(blocks, start).reshape(blocks.shape[:-1])
    if ggml_type == 2:
        return LaneTerms(_nibble_terms(blocks, 2), 8, half(0), None)
    if ggml_type == 3:
        return LaneTerms(_nibble_terms(blocks, 4), 0, half(0), half(2))
    if ggml_type == 6:
        return LaneTerms(_nibble_terms(blocks, 6) + _fifth_bit_terms(blocks, 2), 16, half(0), None)
    if ggml_type == 7:
        return LaneTerms(_nibble_terms(blocks, 8) + _fifth_bit_terms(blocks, 4), 0, half(0), half(2))
    if ggml_type == 8:  # int8 bytes, sign-extended as they are widened
        groups = [_bytes(blocks, start, start + 8).bitcast(dtypes.int8) for start in range(2, 34, 8)]
        return LaneTerms(list(zip(_IDENTITY, groups, strict=True)), 0, half(0), None)
    raise NotImplementedError(f"block_lane_terms takes Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks, not "
                              f"{GGML_TYPES.get(ggml_type, (str(ggml_type),))[0]}")


def q6_k_groups(blocks: Tensor) -> list[Tensor]:
    """The 256 unsigned 6-bit values of Q6_K blocks (uint8, (*leading, 210)) as 32 groups of 8 consecutive values,
    int32 (*leading, 8) each (element value = (quant - 32) * sub-block scale * factor). Value 128 * h + 32 * k + l
    takes the low (k < 2) or high nibble of byte 64 * h + 32 * (k % 2) + l and bits 2k, 2k + 1 of byte
    128 + 32 * h + l; each group loads its 8 bytes and shifts by constants."""
    groups = []
    for half in range(2):
        for k in range(4):
            for start in range(0, 32, 8):
                low = _bytes(blocks, 64 * half + 32 * (k % 2) + start, 64 * half + 32 * (k % 2) + start + 8)
                low = low.cast(dtypes.int32)
                low = low & 0xF if k < 2 else low >> 4
                high = _bytes(blocks, 128 + 32 * half + start, 128 + 32 * half + start + 8).cast(dtypes.int32)
                high = (high << (4 - 2 * k)) if k < 2 else (high >> (2 * k - 4))
                groups.append(low | (high & 0x30))
    return groups


def q6_k_scales(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """The 16 signed sub-block scales of Q6_K blocks as float32 (*leading, 16) and the blocks' float16 factors as
    float32 (*leading,)."""
    scales = ((_bytes(blocks, 192, 208).cast(dtypes.int32) ^ 0x80) - 0x80).cast(dtypes.float32)
    return scales, _half(blocks, 208).reshape(blocks.shape[:-1])


def _k_scales(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """The eight 6-bit scales and minimums of each Q4_K or Q5_K block (bytes 4..16), each times its block's float16
    factor (bytes 0..2 and 2..4): float32, (*leading, 8, 1) each (the factor broadcast along the sub-blocks only)."""
    scales = _bytes(blocks, 4, 16).cast(dtypes.int32)
    first, second, third = _bytes(scales, 0, 4), _bytes(scales, 4, 8), _bytes(scales, 8, 12)
    scale = (first & 63).cat((third & 0xF) | ((first >> 6) << 4), dim=-1).cast(dtypes.float32).unsqueeze(-1)
    minimum = (second & 63).cat((third >> 4) | ((second >> 6) << 4), dim=-1).cast(dtypes.float32).unsqueeze(-1)
    return scale * _half(blocks, 0).unsqueeze(-1), minimum * _half(blocks, 2).unsqueeze(-1)


def k_lane_parts(blocks: Tensor, ggml_type: int) -> tuple[list[Tensor], list[Tensor], list[Tensor], Tensor, Tensor]:
    """Q4_K or Q5_K blocks (uint8, (*leading, bytes per block)) for a product in lane form: 32 groups of 8 unsigned
    values (group 4 * j + g holds values 8g .. 8g + 7 of sub-block j), int32 (*leading, 8) each, taken with constant
    shifts; the 8 sub-blocks' 6-bit scales and minimums, float32 (*leading, 1) each; the blocks' float16 factors d
    and dmin, float32 (*leading, 1): value = d * scale_j * q - dmin * minimum_j."""
    if ggml_type not in (12, 13):
        raise NotImplementedError(f"k_lane_parts takes Q4_K and Q5_K blocks, not "
                                  f"{GGML_TYPES.get(ggml_type, (str(ggml_type),))[0]}")

    def byte(index: int) -> Tensor:
        return _bytes(blocks, index, index + 1).cast(dtypes.int32)
    scales, minimums = [], []
    for sub in range(8):
        if sub < 4:
            scale, minimum = byte(4 + sub) & 63, byte(8 + sub) & 63
        else:  # low 4 bits from bytes 12..16, high 2 bits from the top of bytes 4..8 (scales) and 8..12 (minimums)
            scale = (byte(8 + sub) & 0xF) | ((byte(sub) >> 6) << 4)
            minimum = (byte(8 + sub) >> 4) | ((byte(4 + sub) >> 6) << 4)
        scales.append(scale.cast(dtypes.float32))
        minimums.append(minimum.cast(dtypes.float32))
    start = 16 if ggml_type == 12 else 48
    groups = []
    for sub in range(8):
        pair, high = divmod(sub, 2)
        for group in range(4):
            first = start + 32 * pair + 8 * group
            packed = _bytes(blocks, first, first + 8).cast(dtypes.int32)
            values = packed >> 4 if high else packed & 0xF
            if ggml_type == 13:  # bit `sub` of the high-bit byte of each value, moved to bit 4
                bits = _bytes(blocks, 16 + 8 * group, 24 + 8 * group).cast(dtypes.int32)
                values = values | ((bits << (4 - sub)) if sub <= 4 else (bits >> (sub - 4))) & 16
            groups.append(values)
    return groups, scales, minimums, _half(blocks, 0), _half(blocks, 2)


_K_MINIMUM_LANES: dict[str, tuple[Tensor, Tensor, Tensor]] = {}


def _k_minimum_constants(device: str) -> tuple[Tensor, Tensor, Tensor]:
    """Per lane (sub-block) of k_minimum_lanes: the shift and mask of the low bits' byte and the mask of the high
    bits, int32 (8,) each, realized once per device (buffers the kernels load as vectors)."""
    if device not in _K_MINIMUM_LANES:
        values = ([0] * 4 + [4] * 4, [63] * 4 + [15] * 4, [0] * 4 + [48] * 4)
        _K_MINIMUM_LANES[device] = tuple(  # type: ignore[assignment]
            Tensor(lanes, dtype=dtypes.int32, device=device).realize() for lanes in values)
    return _K_MINIMUM_LANES[device]


def k_minimum_lanes(blocks: Tensor) -> Tensor:
    """The eight 6-bit sub-block minimums of Q4_K or Q5_K blocks (uint8, (*leading, bytes per block)) as int32
    (*leading, 8), lane j holding sub-block j's, unpacked by vector ops on two 8-byte loads with per-lane shifts
    and masks: minimum j is byte 8 + j & 63 for j < 4, else byte 8 + j >> 4 with the top two bits of byte 4 + j
    above them. A one-row product multiplies this vector by x's sums per sub-block in one vector operation per
    block, where one scalar minimum per sub-block cost its own extraction, conversion and broadcast."""
    device = blocks.device if isinstance(blocks.device, str) else blocks.device[0]
    shifts, low_masks, high_masks = _k_minimum_constants(device)
    low = _bytes(blocks, 8, 16).cast(dtypes.int32)
    high = _bytes(blocks, 4, 12).cast(dtypes.int32)  # lane j: byte 4 + j, whose bits 6, 7 go to bits 4, 5
    return ((low >> shifts) & low_masks) | ((high >> 2) & high_masks)


def _stored_k_scales(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """_k_scales realized into buffers of their own first: unpacked once per sub-block instead of once per value."""
    scale, minimum = _k_scales(blocks)
    return scale.contiguous(), minimum.contiguous()


def _q4_k(blocks: Tensor, stored_scales: bool = False) -> Tensor:
    leading = blocks.shape[:-1]
    scale, minimum = _stored_k_scales(blocks) if stored_scales else _k_scales(blocks)
    quants = _shifted(_bytes(blocks, 16, 144).reshape(*leading, 4, 32), 2, 4, 0xF).reshape(*leading, 8, 32)
    return quants.cast(dtypes.float32) * scale - minimum


def _q5_k(blocks: Tensor, stored_scales: bool = False) -> Tensor:
    leading = blocks.shape[:-1]
    scale, minimum = _stored_k_scales(blocks) if stored_scales else _k_scales(blocks)
    quants = _shifted(_bytes(blocks, 48, 176).reshape(*leading, 4, 32), 2, 4, 0xF).reshape(*leading, 8, 32)
    fifth = _shifted(_bytes(blocks, 16, 48), 8, 1, 1) << 4
    return (quants | fifth).cast(dtypes.float32) * scale - minimum


def _q6_k(blocks: Tensor) -> Tensor:
    leading = blocks.shape[:-1]
    low = _shifted(_bytes(blocks, 0, 128).reshape(*leading, 2, 64), 2, 4, 0xF).reshape(*leading, 8, 32)
    high = _shifted(_bytes(blocks, 128, 192).reshape(*leading, 2, 32), 4, 2, 3).reshape(*leading, 8, 32)
    quants = ((low | (high << 4)) - 32).reshape(*leading, 16, 16).cast(dtypes.float32)
    scales = ((_bytes(blocks, 192, 208).cast(dtypes.int32) ^ 0x80) - 0x80).cast(dtypes.float32).unsqueeze(-1)
    return quants * scales * _half(blocks, 208).unsqueeze(-1)


_DEQUANTIZE: dict[int, Callable[[Tensor], Tensor]] = {2: _q4_0, 3: _q4_1, 6: _q5_0, 7: _q5_1, 8: _q8_0, 12: _q4_k,
                                                      13: _q5_k, 14: _q6_k}


def dequantize(blocks: Tensor, ggml_type: int, stored_scales: bool = False) -> Tensor:
    """Quantized ggml blocks (uint8, (block count, bytes per block)) as float32 values, (block count * elements per
    block,), built from Tensor ops only so the scheduler can fuse them into the kernel that reads the values.
    `stored_scales`: Q4_K's and Q5_K's sub-block scales and minimums are realized first (a kernel of their own), for
    a dequantization that is stored anyway (prefill slabs): unpacked once per value, the 6-bit scales made a
    1024 x 2048 Q4_K slab take 3.4-3.6 ms on one thread, 1.9-2.2 ms stored first."""
    if ggml_type not in _DEQUANTIZE:
        raise NotImplementedError(f"ggml type {GGML_TYPES.get(ggml_type, (str(ggml_type),))[0]} is not a quantized "
                                  f"type; quantized types: {', '.join(GGML_TYPES[kind][0] for kind in _DEQUANTIZE)}")
    if stored_scales and ggml_type in (12, 13):
        return (_q4_k if ggml_type == 12 else _q5_k)(blocks, stored_scales=True).reshape(-1)
    return _DEQUANTIZE[ggml_type](blocks).reshape(-1)


BLOCK_FORMS: dict[int, tuple[int, ...]] = {2: (32,), 3: (32,), 6: (32,), 7: (32,), 8: (32,), 12: (8, 32),
                                           13: (8, 32), 14: (16, 16)}
"""The shape dequantize_blocks gives one block of each quantized type: its values grouped by the scale they share
(Q4_K and Q5_K: 8 sub-blocks of 32; Q6_K: 16 of 16)."""


def dequantize_blocks(blocks: Tensor, ggml_type: int) -> Tensor:
    """Quantized blocks (uint8, (*leading, bytes per block)) as float32 (*leading, *BLOCK_FORMS[ggml_type]).

    Each scale is broadcast along the trailing axes only: under a sum over those axes (a matrix-vector product in
    block form) the kernel reads and converts a scale once per (sub-)block (see schedule/fusion.py)."""
    if ggml_type not in _DEQUANTIZE:
        raise NotImplementedError(f"ggml type {GGML_TYPES.get(ggml_type, (str(ggml_type),))[0]} is not a quantized "
                                  f"type; quantized types: {', '.join(GGML_TYPES[kind][0] for kind in _DEQUANTIZE)}")
    return _DEQUANTIZE[ggml_type](blocks)


GGUFTensorInfo = tuple[int, tuple[int, ...], Tensor]
"""(ggml type, shape in the file's order, data): data in its dtype and shape for F32/F16/BF16, else uint8 blocks."""


def gguf_load_blocks(fn: Tensor | str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any],
                                                                                             dict[str, GGUFTensorInfo]]:
    """The metadata and the tensors of a GGUF file without dequantizing: for each name, (ggml type, shape, data) where
    data is the tensor itself for F32, F16 and BF16 and the raw uint8 blocks (block count, bytes per block) for the
    quantized types, moved lazily from the file to `device` (see gguf_load for the default device)."""
    if sys.byteorder != "little":
        raise NotImplementedError("GGUF loading needs a little-endian machine")
    source = ByteSource(fn, KIND, GGUFFormatError)
    metadata, infos, data_start = _parse(source)
    target = device if device is not None else source.device
    tensors: dict[str, GGUFTensorInfo] = {}
    for name, shape, ggml_type, offset in infos:
        what = f"tensor {name!r}"
        if ggml_type in _PLAIN:
            data = source.tensor_at(data_start + offset, _PLAIN[ggml_type], shape, what).to(target)
        else:
            _kind, block_elements, block_bytes = GGML_TYPES[ggml_type]
            block_count = (prod(shape) if shape else 1) // block_elements
            data = source.tensor_at(data_start + offset, dtypes.uint8, (block_count, block_bytes), what).to(target)
        tensors[name] = (ggml_type, shape, data)
    return metadata, tensors


def gguf_load(fn: Tensor | str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any],
                                                                                      dict[str, Tensor]]:
    """The metadata and the tensors (by name, in the file's shape order) of a GGUF file.

    `fn` is a path or a 1-D uint8 Tensor of the file. F32, F16 and BF16 tensors keep their dtype; quantized ones
    (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) are dequantized to float32 by Tensor ops on `device` (for a
    Tensor input on a compute device, that device; otherwise the default device). The whole header is validated
    first; tensors are read lazily from the file.
    """
    metadata, blocks = gguf_load_blocks(fn, device)
    return metadata, {name: data if ggml_type in _PLAIN else dequantize(data, ggml_type).reshape(shape)
                      for name, (ggml_type, shape, data) in blocks.items()}



class IntegerBlocks(NamedTuple):
    """Quantized blocks as small integers per block of 32 values (the activation blocks of an integer product):
    element 16 * g + i of 32-block k has the value scale[k, g] * values[k, 16 * g + i] + minimum[k] (minimum None:
    0; g is 0 or 1, the two halves of 16 values, which only Q6_K scales differently)."""

    values: Tensor
    scale: Tensor
    minimum: Tensor | None


def integer_blocks(blocks: Tensor, ggml_type: int) -> IntegerBlocks:
    """Quantized blocks (uint8, (*leading, bytes per block)) as IntegerBlocks: values int32 (*leading, sub, 32) in
    -128..127 (sub the 32-value blocks of one ggml block: 1, or 8 for the 256-value types), scale float32
    (*leading, sub, 2) and minimum float32 (*leading, sub) or None. Offsets (Q4_0's 8, Q5_0's 16, Q6_K's 32) are
    taken off the integers; Q4_K's and Q5_K's 6-bit sub-block scales and minimums and Q6_K's signed sub-block scales
    of 16 values are in scale and minimum with the blocks' float16 factors. Built from Tensor ops, lazily."""
    leading = blocks.shape[:-1]

    def one(values: Tensor, scale: Tensor, minimum: Tensor | None = None) -> IntegerBlocks:
        shaped = None if minimum is None else minimum.reshape(*leading, 1)
        return IntegerBlocks(values.reshape(*leading, 1, 32), scale.reshape(*leading, 1, 1).expand(*leading, 1, 2),
                             shaped)
    if ggml_type == 2:
        return one(_nibbles(blocks, 2) - 8, _half(blocks, 0))
    if ggml_type == 3:
        return one(_nibbles(blocks, 4), _half(blocks, 0), _half(blocks, 2))
    if ggml_type == 6:
        return one((_nibbles(blocks, 6) | _fifth_bits(blocks, 2)) - 16, _half(blocks, 0))
    if ggml_type == 7:
        return one(_nibbles(blocks, 8) | _fifth_bits(blocks, 4), _half(blocks, 0), _half(blocks, 2))
    if ggml_type == 8:
        return one((_bytes(blocks, 2, 34).cast(dtypes.int32) ^ 0x80) - 0x80, _half(blocks, 0))
    if ggml_type in (12, 13):
        scale, minimum = _k_scales(blocks)  # (*leading, 8, 1), factors included
        start = 16 if ggml_type == 12 else 48
        quants = _shifted(_bytes(blocks, start, start + 128).reshape(*leading, 4, 32), 2, 4, 0xF)
        quants = quants.reshape(*leading, 8, 32)
        if ggml_type == 13:
            quants = quants | (_shifted(_bytes(blocks, 16, 48), 8, 1, 1) << 4)
        return IntegerBlocks(quants, scale.expand(*leading, 8, 2), -minimum.reshape(*leading, 8))
    if ggml_type == 14:
        low = _shifted(_bytes(blocks, 0, 128).reshape(*leading, 2, 64), 2, 4, 0xF).reshape(*leading, 8, 32)
        high = _shifted(_bytes(blocks, 128, 192).reshape(*leading, 2, 32), 4, 2, 3).reshape(*leading, 8, 32)
        scales, factor = q6_k_scales(blocks)
        return IntegerBlocks((low | (high << 4)) - 32, (scales * factor.unsqueeze(-1)).reshape(*leading, 8, 2), None)
    raise NotImplementedError(f"integer_blocks takes the quantized types, not "
                              f"{GGML_TYPES.get(ggml_type, (str(ggml_type),))[0]}")
