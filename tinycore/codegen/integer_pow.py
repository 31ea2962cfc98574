"""The pass "integer pow in floats": C-like languages have pow for floating point types only, so a renderer declares
`integer_pow_rules(float_dtype)` among its post rules and each POW of integers is computed in that float dtype (lanes
kept) and converted back, as C's implicit conversions to a pow(float, float) overload did in the rendered text."""
from __future__ import annotations

from tinycore.dtype import DType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp


def integer_pow_rules(float_dtype: DType) -> PatternMatcher:
    """The rule: POW(a, b) of an integer dtype -> CAST(POW(CAST(a), CAST(b)) in `float_dtype`, to the integer dtype."""
    def in_float(x: UOp) -> UOp | None:
        if dtypes.is_float(x.dtype.scalar):
            return None
        wide = float_dtype.vec(x.dtype.count) if x.dtype.count > 1 else float_dtype
        return UOp(Ops.POW, wide, tuple(source.cast(wide) for source in x.src)).cast(x.dtype)
    return PatternMatcher([(UPat(Ops.POW, name="x"), in_float)])


__all__ = ["integer_pow_rules"]
