"""exp2 and log2 of float32 as arithmetic UOps (range reduction and a polynomial) for renderers that ask for it.

A libm call per element keeps a C compiler from vectorizing the loop around it; the same function as multiplies,
adds, compares, selects and bit operations vectorizes with the rest of the kernel (on the CPU: float8 lanes, the
selects as blends, see RendererContract.vector_masks). Everything runs in float32 (float64 would halve the lanes and
add conversions), arranged so that results stay within an ulp of the correctly rounded value over the whole float32
range, denormal inputs and results included; inf, nan, -0 and the domain edges (log2 of 0 and of negatives) are
selected explicitly. float64 and float16 keep the renderer's builtins.
"""
from __future__ import annotations

import math
import struct

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

F32, I32 = dtypes.float32, dtypes.int32
_ROUNDER = 12582912.0  # 1.5 * 2**23: adding and subtracting it rounds a float32 below 2**22 to an integer
# 2**f on |f| <= 1/2 by a degree-6 polynomial: a least-squares fit of the relative error on 2000 Chebyshev nodes
# (numpy.linalg.lstsq in float64), relative error below 2e-9 (0.03 ulp); one degree fewer than Taylor needs
_EXP2_COEFFICIENTS = (1.0000000005920204, 0.6931472056005106, 0.24022646608713902, 0.055503289975178886,
                      0.009618519534355316, 0.0013399860363039558, 0.00015337576831086252)


def _float(value: float) -> UOp:
    return UOp.const(F32, value)


def _int(value: int) -> UOp:
    return UOp.const(I32, value)


def _power_of_two(exponent: UOp) -> UOp:
    """2**exponent as float32 from its bits, for int32 `exponent` in [-126, 127]."""
    return ((exponent + _int(127)) << _int(23)).bitcast(F32)


def exp2_float32(x: UOp) -> UOp:
    """2**x for float32 `x` in float32 arithmetic: x = n + f with n = round(x) and |f| <= 1/2 (exact), 2**f by a
    degree-6 polynomial, 2**n applied as two exact powers of two so that denormal results are rounded once. Within
    an ulp of the correctly rounded result on the whole float32 range."""
    # inputs past these bounds give inf or 0 anyway; nan fails the first comparison, takes the -151 path and is
    # selected back at the end
    above = (_float(-151.0) < x).where(x, _float(-151.0))
    clamped = (above < _float(129.0)).where(above, _float(129.0))
    # adding and removing 1.5 * 2**23 rounds to the nearest integer (|clamped| < 2**22); exact, no libm round()
    whole = (clamped + _float(_ROUNDER)) - _float(_ROUNDER)
    fraction = clamped - whole
    polynomial = _float(_EXP2_COEFFICIENTS[-1])
    for coefficient in reversed(_EXP2_COEFFICIENTS[:-1]):
        polynomial = polynomial * fraction + _float(coefficient)
    exponent = whole.cast(I32)
    half = exponent >> _int(1)
    result = polynomial * _power_of_two(half) * _power_of_two(exponent - half)
    return x.ne(x).where(x, result)


def _float32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _float32_round(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


# 1/ln 2 as a float32 with 12 low mantissa bits clear (its products with `high` below are exact) plus the rest
_INVERSE_LN2_HIGH = struct.unpack("<f", struct.pack("<I", _float32_bits(1 / math.log(2)) & 0xFFFFF000))[0]
_INVERSE_LN2_LOW = _float32_round(1 / math.log(2) - _INVERSE_LN2_HIGH)
_SQRT_HALF_BITS = _float32_bits(math.sqrt(0.5))


def log2_float32(x: UOp) -> UOp:
    """log2(x) for float32 `x` in float32 arithmetic. x = 2**k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), found
    from the bits (denormals scaled by 2**25 first). With s = f / (2 + f), log(1 + f) = f - (f*f/2 - s*(f*f/2 + R))
    where R = 2 s^2/3 + 2 s^4/5 + 2 s^6/7 + 2 s^8/9 (the series of 2 atanh(s) past its first term; |s| < 0.172, so
    the terms left out are below 2e-9 relative). The leading part f - f*f/2 is split into a high half of 12
    mantissa bits and the rest, so its product with 1/ln 2 (also split) and the sum with k lose nothing before
    the final rounding: within an ulp of the correctly rounded result. Special values are selected at the end."""
    tiny = x < _float(2.0 ** -126)
    scaled = tiny.where(x * _float(2.0 ** 25), x)
    bits = scaled.bitcast(I32)
    offset = bits - _int(_SQRT_HALF_BITS)
    exponent = offset >> _int(23)  # k: 1 + f = scaled / 2**k lands in [sqrt(1/2), sqrt(2))
    mantissa = (bits - (exponent << _int(23))).bitcast(F32)
    exponent = exponent - tiny.where(_int(25), _int(0))
    fraction = mantissa - _float(1.0)
    ratio = fraction / (fraction + _float(2.0))
    square = ratio * ratio
    series = _float(2 / 9)
    for coefficient in (2 / 7, 2 / 5, 2 / 3):
        series = series * square + _float(coefficient)
    series = series * square
    half_square = _float(0.5) * fraction * fraction
    high = ((fraction - half_square).bitcast(I32) & _int(-4096)).bitcast(F32)
    low = (fraction - high) - half_square + ratio * (half_square + series)
    whole = exponent.cast(F32)
    scaled_high = high * _float(_INVERSE_LN2_HIGH)
    scaled_low = (low + high) * _float(_INVERSE_LN2_LOW) + low * _float(_INVERSE_LN2_HIGH)
    leading = whole + scaled_high
    scaled_low = scaled_low + ((whole - leading) + scaled_high)
    result = scaled_low + leading
    result = x.ne(math.inf).where(result, UOp.const(F32, math.inf))
    result = x.ne(0.0).where(result, UOp.const(F32, -math.inf))
    result = (x < 0.0).where(UOp.const(F32, math.nan), result)
    return x.ne(x).where(x, result)


transcendental_rules = PatternMatcher([
    (UPat(Ops.EXP2, dtype=F32, src=(UPat.var("x"),)), exp2_float32),
    (UPat(Ops.LOG2, dtype=F32, src=(UPat.var("x"),)), log2_float32),
])
"""float32 EXP2 and LOG2 -> arithmetic UOps (what a renderer with `decompose_transcendentals` gets)."""


def decompose_transcendentals(ast: UOp) -> UOp:
    """`ast` with every float32 exp2 and log2 written as arithmetic (see the module docstring)."""
    return graph_rewrite(ast, transcendental_rules, name="decompose transcendentals")
