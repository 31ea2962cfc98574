"""exp2, log2 and sin of float32 as arithmetic UOps (range reduction and a polynomial) for renderers that ask for it.

A libm call per element keeps a C compiler from vectorizing the loop around it; the same function as multiplies,
adds, compares, selects and bit operations vectorizes with the rest of the kernel (on the CPU: float8 lanes, the
selects as blends, see RendererContract.vector_masks). Everything runs in float32 (float64 would halve the lanes and
add conversions), arranged so that results stay within an ulp of the correctly rounded value over the whole float32
range, denormal inputs and results included; inf, nan, -0 and the domain edges (log2 of 0 and of negatives) are
selected explicitly where the arithmetic does not already give them (exp2 carries nan through). sin reduces its
argument by Payne-Hanek in int32 limbs (see _reduce_half_pi), so it stays within an ulp for the largest arguments
too. float64 and float16 keep the renderer's builtins.
"""
from __future__ import annotations

import math
import struct

from tinycore.dtype import dtypes
from tinycore.uop.ops import FUSED, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

F32, I32, U32 = dtypes.float32, dtypes.int32, dtypes.uint32
_ROUNDER = 12582912.0  # 1.5 * 2**23: adding and subtracting it rounds a float32 below 2**22 to an integer
_EXP2_BIAS = 152  # added to exp2's n in [-150, 129] so that the bits of the rounding sum hold n + 152 in [2, 281]
_EXP2_FIRST_FIELD = 2 * 127 - _EXP2_BIAS  # exponent fields floor(u/2) + 102 and ceil(u/2) add up to n + 2 * 127
# 2**f on |f| <= 1/2 by a degree-6 polynomial: a least-squares fit of the relative error on 2000 Chebyshev nodes
# (numpy.linalg.lstsq in float64), relative error below 2e-9 (0.03 ulp); one degree fewer than Taylor needs
_EXP2_COEFFICIENTS = (1.0000000005920204, 0.6931472056005106, 0.24022646608713902, 0.055503289975178886,
                      0.009618519534355316, 0.0013399860363039558, 0.00015337576831086252)


def _float(value: float) -> UOp:
    return UOp.const(F32, value)


def _int(value: int) -> UOp:
    return UOp.const(I32, value)


def _unsigned(value: int) -> UOp:
    return UOp.const(U32, value)


def _horner(coefficients: tuple[float, ...], value: UOp, fused: bool) -> UOp:
    """sum(coefficients[i] * value**i) by Horner's rule, each step a MULACC marked FUSED when `fused` (one rounding
    per step where the renderer has an FMA: as accurate or more, and half the instructions)."""
    result = _float(coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = UOp(Ops.MULACC, F32, (result, value, _float(coefficient)), FUSED) if fused else \
            result * value + _float(coefficient)
    return result


def exp2_float32(x: UOp, fused: bool = False) -> UOp:
    """2**x for float32 `x` in float32 arithmetic: x = n + f with n = round(x) and |f| <= 1/2 (exact), 2**f by a
    degree-6 polynomial, 2**n applied as two exact powers of two so that denormal results are rounded once. Within
    an ulp of the correctly rounded result on the whole float32 range.

    The rounding sum c + 1.5 * 2**23 + _EXP2_BIAS holds n + _EXP2_BIAS in its low mantissa bits, so both powers of
    two come from those bits by integer shifts and adds (no float-to-int conversion, which LLVM makes poison for
    nan). A nan passes the clamps unchanged (each select keeps x where its comparison is false) and every step after
    them, so it needs no select of its own; inf is clamped to 129, which gives inf.

    Below -150 the result is +0 (2**-150 is half the least denormal, and rounds to even): those lanes compute 2**0
    and select 0 at the end. Computed through, their products underflowed, and x86 takes a microcode assist for
    each result that underflows (the FPU does not flush to zero here): exp2 of 4M times -inf ran 15x slower than of
    4M zeros, and a causal mask's -inf scores made attention's softmax crawl. Results in the denormal range itself
    (x in (-150, -126)) still round there, correctly, at that cost."""
    underflow = x < _float(-150.0)
    above = underflow.where(_float(0.0), x)
    clamped = (_float(129.0) < above).where(_float(129.0), above)
    # adding and removing the rounder rounds to the nearest integer (|clamped| < 2**22); exact, no libm round()
    rounder = _float(_ROUNDER + _EXP2_BIAS)
    shifted = clamped + rounder
    whole = shifted - rounder
    fraction = clamped - whole
    polynomial = _horner(_EXP2_COEFFICIENTS, fraction, fused)
    # bits = 0x4B400000 + u with u = n + _EXP2_BIAS in [2, 281]; shifted left by 23, the 0x4B400000 part (and its
    # half) leave nothing behind, so the exponent fields are floor(u/2) + _EXP2_FIRST_FIELD in [103, 242] and
    # ceil(u/2) in [1, 141], adding up to n + 2 * 127. Unsigned, so every shift is defined for nan's bits too.
    bits = shifted.bitcast(U32)
    half = bits >> _unsigned(1)
    first = ((half + _unsigned(_EXP2_FIRST_FIELD)) << _unsigned(23)).bitcast(F32)
    second = ((bits - half) << _unsigned(23)).bitcast(F32)
    # polynomial * first is exact (in [2**-26, 2**116]); only the product with second rounds, once, into denormals
    return underflow.where(_float(0.0), polynomial * first * second)


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




# ---- sin and cos of float32 ----

_PI_BITS = 320  # bits of 2/pi kept: the window read for the largest float32 ends near bit 276


def _two_over_pi_bits() -> int:
    """floor(2/pi * 2**_PI_BITS), from Machin's formula in integers (pi = 16 atan(1/5) - 4 atan(1/239))."""
    scale = 1 << (_PI_BITS + 64)

    def arctan_inverse(n: int) -> int:
        total, term, k, sign = 0, scale // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    pi_scaled = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)  # pi * 2**(_PI_BITS + 64), to a few units
    return (2 * scale * (1 << _PI_BITS)) // pi_scaled


_LIMB = 12  # 12-bit limbs: the product of two fits in an int32 with room for sums of two
_LIMB_MASK = (1 << _LIMB) - 1
_WORD = 30  # 2/pi is kept in 30-bit words (positive int32s, so every shift is well defined)
_PADDING = 36  # zero bits in front of 2/pi's binary point: G(n), n >= 1, is bit n of 0.000...(36 zeros) 2/pi
_WORDS = tuple((_two_over_pi_bits() >> (_PI_BITS + _PADDING - _WORD * (w + 1))) & ((1 << _WORD) - 1)
               for w in range(8))
# 84 bits of 2/pi are read (7 limbs): the product's low 84 bits hold the quadrant (2 bits) and the fraction, and the
# bits of 2/pi after the window add less than m 2**-82 < 2**-58 quadrants. The float32 argument nearest a multiple
# of pi/2 (16367173 * 2**72, found from the continued fractions of 2**E 2/pi for every exponent E) is 2**-29.86
# quadrants from it, so the reduced argument keeps a relative error below 2**-28 (1/16 ulp) everywhere.
_WINDOW_LIMBS = 7
_WINDOW_WORDS = 4  # 84 bits starting anywhere inside a word span four 30-bit words
# pi/2 as a float32 with its low 12 mantissa bits clear (exact products with 12-bit halves) plus the rest
_HALF_PI_HIGH = struct.unpack("<f", struct.pack("<I", _float32_bits(math.pi / 2) & 0xFFFFF000))[0]
_HALF_PI_LOW = _float32_round(math.pi / 2 - _HALF_PI_HIGH)
# least-squares fits (numpy.linalg.lstsq in float64, 4000 Chebyshev nodes on [-pi/4, pi/4]) of the relative error:
# sin r = r + r z S(z), cos r = 1 - z/2 + z^2 C(z) with z = r^2; relative errors below 4e-9 and 2e-10
_SIN_COEFFICIENTS = (-0.16666654339337095, 0.008332148256325497, -0.00019513932562144603)
_COS_COEFFICIENTS = (0.041666645038985275, -0.001388729007312125, 2.4430574507129025e-05)


def _window(first_bit: UOp) -> list[UOp]:
    """Bits first_bit .. first_bit + 83 of the padded 2/pi (first_bit in [11, 140]) as seven 12-bit limbs, most
    significant first. The four 30-bit words that hold them, words w .. w + 3 for the word number w in [0, 4], are
    picked by selects on w > 0, w > 1, w > 2 and w > 3 (a kernel has no constant tables; selects keep it vector
    code: four compares and sixteen selects, where three rounds of selects on w's bits took nine and twenty-two),
    then shifted into place."""
    before = first_bit - _int(1)
    word = (before * _int(2185)) >> _int(16)  # before // 30 for before in [0, 144]
    skip = before - word * _int(_WORD)
    words: list[UOp] = [_int(value) for value in _WORDS[:_WINDOW_WORDS]]
    for past in range(1, 5):
        beyond = _int(past - 1) < word
        words = [beyond.where(_int(_WORDS[k + past]), words[k]) for k in range(_WINDOW_WORDS)]
    kept = (_int(1) << (_int(_WORD) - skip)) - _int(1)  # the bits of a word left after skipping `skip`
    aligned = [((words[k] & kept) << skip) | (words[k + 1] >> (_int(_WORD) - skip)) for k in range(3)]
    high, low = aligned[0], aligned[1]  # 60 bits = 5 limbs, then the first 24 bits of the third word: 2 limbs
    return [high >> _int(18), (high >> _int(6)) & _int(_LIMB_MASK),
            ((high & _int(63)) << _int(6)) | (low >> _int(24)), (low >> _int(12)) & _int(_LIMB_MASK),
            low & _int(_LIMB_MASK), aligned[2] >> _int(18), (aligned[2] >> _int(6)) & _int(_LIMB_MASK)]


def _fast_two_sum(first: UOp, second: UOp) -> tuple[UOp, UOp]:
    """first + second as a float32 sum and its exact rounding error, for |first| >= |second| or first = 0
    (Dekker's Fast2Sum: three operations where TwoSum takes six)."""
    total = first + second
    return total, second - (total - first)


def _split(value: UOp) -> tuple[UOp, UOp]:
    """Veltkamp's split of a float32 into a 12-bit high part and the rest (both exact)."""
    scaled = value * _float(4097.0)
    high = scaled - (scaled - value)
    return high, value - high


def _reduce_half_pi(magnitude: UOp) -> tuple[UOp, UOp, UOp]:
    """For finite float32 `magnitude` >= 1/2: the nearest integer q (mod 4, int32) to magnitude * 2/pi and the rest
    r = magnitude - q pi/2 in [-pi/4, pi/4] as a float32 pair (high, low), r within 2**-28 relative.

    Payne-Hanek in 12-bit integer limbs: magnitude = m 2**(E - 150) with the 24-bit integer m, so magnitude * 2/pi
    mod 4 is the low 84 bits of m times the 84 bits of 2/pi that start at bit E - 115 of the padded 2/pi (the bits
    before give multiples of 4, the ones after less than 2**-58), scaled by 2**-82. The product's top 2 bits give
    q, the rest (rounded to the nearest quadrant) is summed exactly into floats and multiplied by pi/2 as float32
    pairs."""
    bits = magnitude.bitcast(I32)
    exponent = bits >> _int(23)
    mantissa = (bits & _int(0x7FFFFF)) | _int(0x800000)
    offset = (exponent - _int(126)).maximum(_int(0))  # 0 for |x| = 1/2 up to 129 for inf and nan (selected away)
    window = _window(offset + _int(11))
    parts = (mantissa & _int(_LIMB_MASK), mantissa >> _int(_LIMB))  # m in two 12-bit limbs, low first
    last = _WINDOW_LIMBS - 1
    columns = []  # column c: the products of weight 2**(12 c), counted from the window's last limb
    for column in range(_WINDOW_LIMBS):
        total = parts[0] * window[last - column]
        if column >= 1:
            total = total + parts[1] * window[last + 1 - column]
        columns.append(total)
    digits: list[UOp] = []
    carry = _int(0)
    for column_sum in columns:
        total = column_sum + carry if digits else column_sum
        digits.append(total & _int(_LIMB_MASK))
        carry = total >> _int(_LIMB)
    top = digits[-1]  # 2 bits of quadrant, then the fraction's first 10 bits
    rounds_up = (top >> _int(_LIMB - 3)) & _int(1)  # the fraction is 1/2 or more: take the next quadrant
    quadrant = ((top >> _int(_LIMB - 2)) + rounds_up) & _int(3)

    def scaled(first: UOp, second: UOp, power: int) -> UOp:
        # two digits joined into one integer below 2**24 (exact as a float32), then scaled: one conversion
        return ((first << _int(_LIMB)) | second).cast(F32) * _float(2.0 ** -power)

    # signed: the fraction's first 22 bits, less one whole when it rounds up, so the fraction is in [-1/2, 1/2)
    leading = (((top & _int(1023)) << _int(_LIMB)) | digits[-2]) - (rounds_up << _int(2 * _LIMB - 2))
    # a nonzero `high` is at least 2**-22 in magnitude and `middle` below it, so Fast2Sum is exact (digits[0],
    # below 2**-70, is left out)
    high = leading.cast(F32) * _float(2.0 ** -22)
    middle = scaled(digits[-3], digits[-4], 46)
    bottom = scaled(digits[-5], digits[-6], 70)
    fraction, error = _fast_two_sum(high, middle)
    fraction, fraction_low = _fast_two_sum(fraction, error + bottom)
    # (fraction + fraction_low) * pi/2 without a fused multiply-add (a renderer's FMA may compile to a multiply and
    # an add where the CPU lacks one): the 12-bit high half of the fraction times _HALF_PI_HIGH (12 significant
    # bits) is exact; the rest, about 2**-12 of it, is rounded (errors near 2**-36 of the result), far below the
    # 2**-28 the reduction keeps
    fraction_high, fraction_rest = _split(fraction)
    product = fraction_high * _float(_HALF_PI_HIGH)
    rest = fraction_rest * _float(_HALF_PI_HIGH) + (fraction * _float(_HALF_PI_LOW) +
                                                    fraction_low * _float(_HALF_PI_HIGH))
    reduced, reduced_low = _fast_two_sum(product, rest)
    return quadrant, reduced, reduced_low


def _sin_cos_float32(x: UOp, cosine: bool, fused: bool = False) -> UOp:
    """sin(x) (or cos(x) when `cosine`) for float32 `x` in float32 and int32 arithmetic: x reduced to r in
    [-pi/4, pi/4] and a quadrant by _reduce_half_pi (|x| >= 1/2; below, r = |x|), then the sine or cosine polynomial
    of r chosen by the quadrant, with the low part of r added where it counts (the polynomials' steps fused where
    `fused`). Within 1 ulp of numpy's float64 result rounded to float32 over the whole float32 range; inf and nan
    give nan, sin keeps the sign of 0."""
    magnitude = (x.bitcast(I32) & _int(0x7FFFFFFF)).bitcast(F32)
    small = magnitude < _float(0.5)
    quadrant, reduced, reduced_low = _reduce_half_pi(magnitude)
    quadrant = small.where(_int(0), quadrant)
    reduced = small.where(magnitude, reduced)
    reduced_low = small.where(_float(0.0), reduced_low)
    if cosine:
        quadrant = (quadrant + _int(1)) & _int(3)
    square = reduced * reduced
    series = _horner(_SIN_COEFFICIENTS, square, fused)
    sine = reduced + (reduced * square * series + reduced_low)
    series = _horner(_COS_COEFFICIENTS, square, fused)
    half_square = _float(0.5) * square
    leading = _float(1.0) - half_square
    cosine_value = leading + (((_float(1.0) - leading) - half_square) + (square * square * series -
                                                                        reduced * reduced_low))
    value = (quadrant & _int(1)).ne(0).where(cosine_value, sine)
    sign = (quadrant & _int(2)) << _int(30)  # quadrants 2 and 3 negate
    if not cosine:
        sign = sign ^ (x.bitcast(I32) & _int(-2 ** 31))  # sin is odd: the sign of x flips the result
    value = (value.bitcast(I32) ^ sign).bitcast(F32)
    if not cosine:
        # below 2**-12, x is sin(x) correctly rounded; this also keeps -0 and denormals exact
        value = (magnitude < _float(2.0 ** -12)).where(x, value)
    finite = magnitude < _float(math.inf)
    return finite.where(value, UOp.const(F32, math.nan))


def sin_float32(x: UOp, fused: bool = False) -> UOp:
    """sin(x) for float32 `x` in float32 and int32 arithmetic (see _sin_cos_float32)."""
    return _sin_cos_float32(x, False, fused)


def cos_float32(x: UOp, fused: bool = False) -> UOp:
    """cos(x) for float32 `x`: the sine's reduction with the quadrant moved by one (exact, unlike sin(pi/2 - x)
    in float32, which rounds pi/2 - x)."""
    return _sin_cos_float32(x, True, fused)


def _is_half_pi(node: UOp) -> bool:
    return node.op is Ops.CONST and node.arg == _float32_round(math.pi / 2)


def _sin_of(argument: UOp, fused: bool) -> UOp:
    """SIN(argument) decomposed; SIN(pi/2 - x), how Tensor.cos is built, is taken as cos(x)."""
    if argument.op is Ops.ADD and len(argument.src) == 2:
        first, second = argument.src
        for constant, other in ((first, second), (second, first)):
            if _is_half_pi(constant) and other.op is Ops.NEG:
                return cos_float32(other.src[0], fused)
    return sin_float32(argument, fused)


def _rules(fused: bool) -> PatternMatcher:
    return PatternMatcher([
        (UPat(Ops.EXP2, dtype=F32, src=(UPat.var("x"),)), lambda x: exp2_float32(x, fused)),
        (UPat(Ops.LOG2, dtype=F32, src=(UPat.var("x"),)), log2_float32),
        (UPat(Ops.SIN, dtype=F32, src=(UPat.var("argument"),)), lambda argument: _sin_of(argument, fused)),
    ])


transcendental_rules = _rules(False)
"""float32 EXP2, LOG2 and SIN -> arithmetic UOps (what a renderer with `decompose_transcendentals` gets)."""
fused_transcendental_rules = _rules(True)
"""The same with the polynomials' steps as MULACCs marked FUSED (renderers with `fused_multiply_add`)."""


def decompose_transcendentals(ast: UOp, fused: bool = False) -> UOp:
    """`ast` with every float32 exp2, log2 and sin written as arithmetic (see the module docstring); `fused`: the
    polynomial steps may round once (RendererContract.fused_multiply_add)."""
    return graph_rewrite(ast, fused_transcendental_rules if fused else transcendental_rules,
                         name="decompose transcendentals")
