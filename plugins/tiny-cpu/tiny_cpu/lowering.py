"""The CPU's C renderer's last codegen rules (its `post_matcher`, the pass "renderer: post"): vector forms that gcc 12
compiles badly or wrongly, rewritten into forms it compiles well. Every rule is a UOp -> UOp rewrite."""
from __future__ import annotations

from tinycore.codegen.integer_pow import integer_pow_rules
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.cstyle import CStyleLanguage
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

# lanes the C renderer never blends or selects whole (bool vectors, bfloat16 bits, types cast back after each op)
NOT_WHOLE = (dtypes.bool, dtypes.bfloat16, *CStyleLanguage.narrow_dtypes)

def _whole(lanes: list[UOp], dtype: DType) -> UOp | None:
    """The vector of `dtype` whose lanes are `lanes`: one value broadcast, or the lanes of one vector in order."""
    if all(lane is lanes[0] for lane in lanes):
        return UOp(Ops.VECTORIZE, dtype, tuple(lanes))
    vector = lanes[0].src[0] if lanes[0].op is Ops.GEP else None
    in_order = vector is not None and vector.dtype == dtype and all(
        lane.op is Ops.GEP and lane.src[0] is vector and lane.arg == (position,) for position, lane in enumerate(lanes))
    return vector if in_order else None

def select_whole_vectors(x: UOp) -> UOp | None:
    """VECTORIZE(WHERE(c, a0, b0), WHERE(c, a1, b1), ...) under one scalar c -> WHERE(c, a, b) of whole vectors: gcc 12
    with AVX-512 crashes on, or miscompiles, the vector literal of per-lane selects (cumprod came out 1)."""
    condition = x.src[0].src[0] if x.src[0].op is Ops.WHERE else None
    if condition is None or condition.dtype.count != 1 or x.dtype.scalar in NOT_WHOLE or \
            any(lane.op is not Ops.WHERE or lane.src[0] is not condition for lane in x.src):
        return None
    when_true, when_false = (_whole([lane.src[position] for lane in x.src], x.dtype) for position in (1, 2))
    if when_true is None or when_false is None:
        return None
    return UOp(Ops.WHERE, x.dtype, (condition, when_true, when_false))

def widen_lane_by_lane(x: UOp) -> UOp | None:
    """A vector of 8- or 16-bit integers widened (to float: to int32 first, then converted whole) -> a vector of its
    lanes each widened: gcc 12 compiles __builtin_convertvector(uchar8, int8) one byte at a time, the lanes as one
    vpmovzxbd."""
    source, dtype, narrow = x.src[0], x.dtype, x.src[0].dtype.scalar
    if isinstance(dtype, PtrDType) or dtype.count == 1 or not dtypes.is_int(narrow) or narrow == dtypes.bool or \
            narrow.itemsize >= 4:
        return None
    wider = dtype.scalar if dtypes.is_int(dtype.scalar) and dtype.scalar.itemsize > narrow.itemsize else \
        dtypes.int32 if dtype.scalar in (dtypes.float32, dtypes.float64) else None
    if wider is None:
        return None
    lanes = tuple(source.gep(lane).cast(wider) for lane in range(dtype.count))
    return UOp(Ops.VECTORIZE, wider.vec(dtype.count), lanes).cast(dtype)

def math_in_wider_floats(x: UOp) -> UOp | None:
    """A math function of float16 -> the same in float32, cast back: C's builtins take float (the f versions) or
    double (an integer POW: in float64, by codegen's `integer_pow_rules`)."""
    if x.dtype.scalar != dtypes.float16:
        return None
    wide = dtypes.float32.vec(x.dtype.count) if x.dtype.count > 1 else dtypes.float32
    return UOp(x.op, wide, tuple(source.cast(wide) for source in x.src)).cast(x.dtype)

c_lowering = PatternMatcher([
    (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.POW), name="x"), math_in_wider_floats),
    (UPat(Ops.VECTORIZE, name="x"), select_whole_vectors),
    (UPat(Ops.CAST, name="x"), widen_lane_by_lane),
]) + integer_pow_rules(dtypes.float64)
"""The C renderer's post_matcher: whole-vector selects under a scalar condition, narrow integers widened by lane,
math functions in the float types C has builtins for."""
