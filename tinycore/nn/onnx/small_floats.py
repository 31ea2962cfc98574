"""ONNX's 8-bit and 4-bit floats (FLOAT8E4M3FN/FNUZ, FLOAT8E5M2/FNUZ, FLOAT4E2M1, FLOAT8E8M0), held as their bits in
uint8 tensors, and exact conversions between them and float32.

No renderer has storage types for these formats, so the runner carries each such value as a uint8 tensor of its bit
pattern, tagged with its ONNX element type (`mark`, `carried_type`). The conversions are integer bit operations
(and exact power-of-two float scalings) that every device computes: float32 -> format rounds to nearest even, with
ONNX's `saturate` rule, each format's NaN, infinity and zero rules, as ml_dtypes (onnx's reference) converts.
"""
from __future__ import annotations

from dataclasses import dataclass

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

_TYPE_ATTRIBUTE = "_onnx_element_type"


@dataclass(frozen=True)
class SmallFloat:
    """A small float format: its field widths, exponent bias and how it spells NaN and infinity.

    kind: "fn" (no infinity, NaN is all ones with either sign: E4M3FN), "ieee" (infinities and NaNs as IEEE 754:
    E5M2), "fnuz" (no infinity, no negative zero, NaN is the negative zero pattern), "finite" (neither: E2M1, whose
    conversions saturate)."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    kind: str

    @property
    def sign_shift(self) -> int:
        """The bit position of the sign."""
        return self.exponent_bits + self.mantissa_bits

    @property
    def largest_code(self) -> int:
        """The bit pattern (sign clear) of the largest finite value."""
        all_ones = (1 << self.sign_shift) - 1
        if self.kind == "fn":
            return all_ones - 1
        if self.kind == "ieee":
            return all_ones - (1 << self.mantissa_bits)
        return all_ones

    @property
    def largest(self) -> float:
        """The largest finite value."""
        code = self.largest_code
        exponent, mantissa = code >> self.mantissa_bits, code & ((1 << self.mantissa_bits) - 1)
        return (1 + mantissa / (1 << self.mantissa_bits)) * 2.0 ** (exponent - self.bias)


SMALL_FLOATS: dict[int, SmallFloat] = {
    17: SmallFloat(4, 3, 7, "fn"), 18: SmallFloat(4, 3, 8, "fnuz"), 19: SmallFloat(5, 2, 15, "ieee"),
    20: SmallFloat(5, 2, 16, "fnuz"), 23: SmallFloat(2, 1, 1, "finite")}
"""ONNX element type code -> format, for the sign-exponent-mantissa formats."""

E8M0 = 24
"""FLOAT8E8M0: an unsigned power of two, 2**(bits - 127), 0xFF is NaN (scales of microscaling formats)."""

CARRIED_FLOATS = frozenset((*SMALL_FLOATS, E8M0))
"""The ONNX float types the runner holds as uint8 bit patterns."""


def mark(tensor: Tensor, code: int) -> Tensor:
    """`tensor` tagged as holding ONNX element type `code` (its bits, or 2- and 4-bit integers one per byte)."""
    setattr(tensor, _TYPE_ATTRIBUTE, code)
    return tensor


def carried_type(tensor: Tensor | None) -> int | None:
    """The ONNX element type a tensor was tagged with by `mark` (None: the one its dtype says)."""
    return getattr(tensor, _TYPE_ATTRIBUTE, None) if tensor is not None else None


def decode(bits: Tensor, code: int) -> Tensor:
    """float32 values of the bit patterns `bits` (uint8) of ONNX float type `code`; exact."""
    wide = bits.cast(dtypes.int32) & 0xFF
    if code == E8M0:
        # 2**-127 is below float32's normals: the one pattern built from a constant rather than from its bits
        powers = (wide << 23).bitcast(dtypes.float32)
        return (wide == 0xFF).where(float("nan"), (wide == 0).where(2.0 ** -127, powers))
    form = SMALL_FLOATS[code]
    mantissa_mask, exponent_mask = (1 << form.mantissa_bits) - 1, (1 << form.exponent_bits) - 1
    sign = (wide >> form.sign_shift) & 1
    exponent = (wide >> form.mantissa_bits) & exponent_mask
    mantissa = wide & mantissa_mask
    normal = (((exponent + (127 - form.bias)) << 23) | (mantissa << (23 - form.mantissa_bits))).bitcast(dtypes.float32)
    subnormal = mantissa.cast(dtypes.float32) * 2.0 ** (1 - form.bias - form.mantissa_bits)
    magnitude = (exponent == 0).where(subnormal, normal)
    if form.kind == "ieee":
        special = (mantissa == 0).where(float("inf"), float("nan"))
        magnitude = (exponent == exponent_mask).where(special, magnitude)
    elif form.kind == "fn":
        magnitude = ((wide & 0x7F) == 0x7F).where(float("nan"), magnitude)
    value = (sign == 1).where(-magnitude, magnitude)
    if form.kind == "fnuz":
        value = (wide == 0x80).where(float("nan"), value)
    return value


def encode(x: Tensor, code: int, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """The bit patterns (uint8, tagged) of `x` converted to ONNX float type `code`, rounded to nearest even.

    saturate (ONNX's attribute): values beyond the largest finite one, infinities included, become it; otherwise
    they become infinity (E5M2) or NaN (the formats without infinity). FLOAT4E2M1 always saturates, as onnx's
    reference does; FLOAT8E8M0 rounds as `round_mode` says ("up", "down" or "nearest")."""
    value = x.cast(dtypes.float32)
    if code == E8M0:
        return mark(_encode_e8m0(value, saturate, round_mode), code)
    form = SMALL_FLOATS[code]
    if saturate or form.kind == "finite":
        # NaN compares false and stays NaN
        value = (value.abs() > form.largest).where((value < 0).where(-form.largest, form.largest), value)
    bits = value.bitcast(dtypes.int32)
    negative = bits < 0
    magnitude_bits = (bits & 0x7FFFFFFF).minimum(0x7F800001)  # every NaN as one, so the rounding cannot overflow
    shift = 23 - form.mantissa_bits
    rebased = magnitude_bits - ((127 - form.bias) << 23)
    normal = (rebased + ((1 << (shift - 1)) - 1) + ((magnitude_bits >> shift) & 1)) >> shift
    # below the smallest normal the step is fixed: scaling by a power of two is exact, round() breaks ties to even
    scaled = magnitude_bits.bitcast(dtypes.float32) * 2.0 ** (form.bias - 1 + form.mantissa_bits)
    subnormal = scaled.round().cast(dtypes.int32)
    code_bits = (magnitude_bits < ((128 - form.bias) << 23)).where(subnormal, normal)
    is_nan = magnitude_bits > 0x7F800000
    overflow = code_bits > form.largest_code
    sign_bit = negative.where(1 << form.sign_shift, 0)
    if form.kind == "ieee":
        infinity = ((1 << form.exponent_bits) - 1) << form.mantissa_bits
        code_bits = is_nan.where(infinity | (1 << (form.mantissa_bits - 1)), overflow.where(infinity, code_bits))
        result = code_bits | sign_bit
    elif form.kind == "fn":
        result = (is_nan | overflow).where((1 << form.sign_shift) - 1, code_bits) | sign_bit
    elif form.kind == "fnuz":
        signed = (code_bits == 0).where(0, code_bits | sign_bit)
        result = (is_nan | overflow).where(0x80, signed)
    else:
        # no NaN in E2M1: ml_dtypes gives the zero of the opposite sign, kept here so both agree bit for bit
        result = is_nan.where(negative.where(0, 1 << form.sign_shift), code_bits | sign_bit)
    return mark(result.cast(dtypes.uint8), code)


def _encode_e8m0(value: Tensor, saturate: bool, round_mode: str) -> Tensor:
    """float32 -> FLOAT8E8M0 as onnx's reference does: the exponent field of |x|, rounded by `round_mode` on the
    mantissa; NaN and infinities become 0xFF; a carry past 0xFE stays there when saturating, else gives 0xFF (NaN)."""
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode {round_mode!r} is not one of 'up', 'down', 'nearest'")
    bits = value.bitcast(dtypes.int32) & 0x7FFFFFFF
    exponent = bits >> 23
    mantissa = bits & 0x7FFFFF
    if round_mode == "up":
        increment = mantissa > 0
    elif round_mode == "nearest":
        increment = ((bits & 0x400000) > 0).bitwise_and(((bits & 0x3FFFFF) > 0).bitwise_or(exponent > 0))
    else:
        increment = mantissa < 0  # "down" truncates: never
    if saturate:
        increment = increment.bitwise_and(exponent != 0xFE)
    rounded = exponent + increment.cast(dtypes.int32)
    special = exponent == 0xFF
    return special.where(0xFF, rounded).cast(dtypes.uint8)
