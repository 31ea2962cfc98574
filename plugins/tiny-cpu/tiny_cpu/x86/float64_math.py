"""exp2, log2 and sin of float64 as arithmetic UOps, for the x86 renderer (which has no libm to call: its code is
position-independent bytes with no relocations). The core decomposes only float32's (codegen/transcendental.py).

Each is a range reduction and a polynomial in float64, a few ulp from the correctly rounded result:
- exp2: x = n + f with n = round(x), |f| <= 1/2; 2**f by its Taylor series (15 terms), 2**n applied as two exact
  powers of two built from their bits, so that results near the ends of the range over- and underflow once.
- log2: x = m * 2**e with m in [sqrt(1/2), sqrt(2)) (denormals scaled by 2**54 first), ln(m) = 2 atanh(s) with
  s = (m - 1) / (m + 1) by its odd series (12 terms); 0 gives -inf, negatives and nan give nan, inf gives inf.
- sin: x = k pi/2 + r with |r| <= pi/4, pi/2 in three parts (Cody and Waite), then the sine or cosine series of r
  by the quadrant. Accurate while k pi/2 is exact; past |x| = 2**30 the reduction would lose the digits that matter,
  so the result there is nan (the C renderer's libm reduces those exactly: use DEV=CPU for such arguments).
"""

from __future__ import annotations

import math

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

F64, I64 = dtypes.float64, dtypes.int64
_ROUNDER = 6755399441055744.0  # 1.5 * 2**52: adding and subtracting it rounds a float64 below 2**51 to an integer
_MANTISSA = (1 << 52) - 1
_ONE_BITS = 0x3FF0000000000000
_SMALLEST_NORMAL = 2.2250738585072014e-308
# pi/2 as three parts whose products with k (below 2**20) are exact (fdlibm's pio2_1, pio2_2, pio2_2t)
_HALF_PI = (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624879595063154e-21)


def _float(value: float) -> UOp:
    return UOp.const(F64, value)


def _int(value: int) -> UOp:
    return UOp.const(I64, value)


def _horner(coefficients: list[float], value: UOp) -> UOp:
    """sum(coefficients[i] * value**i) by Horner's rule."""
    result = _float(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * value + _float(coefficient)
    return result


def _round(value: UOp) -> UOp:
    """`value` rounded to the nearest integer (ties to even), as a float64 (|value| below 2**51)."""
    return (value + _float(_ROUNDER)) - _float(_ROUNDER)


def _power_of_two(exponent: UOp) -> UOp:
    """2**exponent for an int64 exponent in [-1022, 1023], from its bits."""
    return ((exponent + _int(1023)) << _int(52)).bitcast(F64)


def exp2_float64(x: UOp) -> UOp:
    """2**x for float64 `x` (nan passes through: every compare with it is false, so the clamps keep it)."""
    low = (x < _float(-1100.0)).where(_float(-1100.0), x)
    clamped = (_float(1100.0) < low).where(_float(1100.0), low)
    whole = _round(clamped)
    polynomial = _horner([math.log(2) ** k / math.factorial(k) for k in range(15)], clamped - whole)
    exponent = whole.cast(I64)
    half = exponent >> _int(1)
    return polynomial * _power_of_two(half) * _power_of_two(exponent - half)


def log2_float64(x: UOp) -> UOp:
    """log2 of float64 `x`, with the edge values C's log2 gives."""
    denormal = x < _float(_SMALLEST_NORMAL)
    scaled = denormal.where(x * _float(2.0**54), x)
    bits = scaled.bitcast(I64)
    exponent = ((bits >> _int(52)) & _int(0x7FF)) - _int(1023)
    mantissa = ((bits & _int(_MANTISSA)) | _int(_ONE_BITS)).bitcast(F64)
    above = _float(math.sqrt(2.0)) < mantissa
    reduced = above.where(mantissa * _float(0.5), mantissa)
    whole = (exponent + above.where(_int(1), _int(0))).cast(F64) + denormal.where(_float(-54.0), _float(0.0))
    ratio = (reduced - _float(1.0)) / (reduced + _float(1.0))
    series = _horner([1.0 / (2 * k + 1) for k in range(12)], ratio * ratio)
    result = whole + _float(2.0 / math.log(2)) * ratio * series
    infinite = x.eq(_float(math.inf)).where(_float(math.inf), result)
    zero = x.eq(_float(0.0)).where(_float(-math.inf), infinite)
    return ((x < _float(0.0)) | x.ne(x)).where(_float(math.nan), zero)


def sin_float64(x: UOp) -> UOp:
    """sin of float64 `x` (inf and nan give nan: the reduction of inf is nan)."""
    whole = _round(x * _float(2.0 / math.pi))
    reduced = x - whole * _float(_HALF_PI[0]) - whole * _float(_HALF_PI[1]) - whole * _float(_HALF_PI[2])
    square = reduced * reduced
    sine = reduced * _horner([(-1.0) ** k / math.factorial(2 * k + 1) for k in range(13)], square)
    cosine = _horner([(-1.0) ** k / math.factorial(2 * k) for k in range(14)], square)
    quadrant = whole.cast(I64) & _int(3)
    odd = (quadrant & _int(1)).eq(_int(1))
    value = odd.where(cosine, sine)
    signed = (quadrant & _int(2)).eq(_int(2)).where(-value, value)
    # past 2**30 the reduction has lost the digits that matter: nan says so rather than a wrong number
    return (_float(2.0**30) < (x < _float(0.0)).where(-x, x)).where(_float(math.nan), signed)


float64_transcendentals = PatternMatcher([
    (UPat(Ops.EXP2, dtype=F64, src=(UPat.var("x"),)), exp2_float64),
    (UPat(Ops.LOG2, dtype=F64, src=(UPat.var("x"),)), log2_float64),
    (UPat(Ops.SIN, dtype=F64, src=(UPat.var("x"),)), sin_float64),
])
"""float64 EXP2, LOG2 and SIN -> arithmetic UOps (the x86 renderer's pre-codegen rules)."""
