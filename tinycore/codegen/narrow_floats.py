"""The pass "narrow floats": arithmetic on float formats a renderer stores but cannot compute with, in float32.

A renderer lists such dtypes (bfloat16 in C, OpenCL C and HIP; float16 where a language has no half arithmetic) in
`RendererContract.emulated_floats`. Linearize runs this pass on them after devectorization and before the renderer's
post rules, so the renderer only ever sees, for those dtypes, loads, stores, selects (WHERE chooses bits), bitcasts
and CASTs to and from float32:

- an ALU op on them becomes CAST to float32 of each such operand, the op in float32, and a CAST back to the narrow
  dtype (comparisons give bool: no cast back);
- a CAST between them and any dtype other than float32 goes through float32;
- a constant becomes a float32 constant (the narrow value, exactly) CAST to the narrow dtype; an operand widened
  from such a constant is that float32 constant itself.

The narrow value is rounded once per op, as when each result is stored, which is what torch computes op by op.
"""
from __future__ import annotations

from tinycore.dtype import DType, PtrDType, dtypes, truncate
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

_COMPUTED = GroupOp.ALU - {Ops.WHERE}  # a select moves bits: it needs no arithmetic


def _wide(dtype: DType) -> DType:
    return dtypes.float32.vec(dtype.count) if dtype.count > 1 else dtypes.float32


def _widen(source: UOp, emulated: frozenset[DType]) -> UOp:
    """`source` in float32 (a narrow constant's own float32 value; other dtypes as they are)."""
    if source.dtype.scalar not in emulated:
        return source
    if source.op is Ops.CAST and source.src[0].op in (Ops.CONST, Ops.VCONST):
        return source.src[0]
    return source.cast(_wide(source.dtype))


def _compute_wide(x: UOp, emulated: frozenset[DType]) -> UOp | None:
    if x.dtype.scalar not in emulated and not any(source.dtype.scalar in emulated for source in x.src):
        return None
    wide = UOp(x.op, x.dtype if x.op in GroupOp.Comparison else _wide(x.dtype),
               tuple(_widen(source, emulated) for source in x.src), x.arg)
    return wide if x.op in GroupOp.Comparison else wide.cast(x.dtype)


def _cast_through_float32(x: UOp, emulated: frozenset[DType]) -> UOp | None:
    source, float32 = x.src[0], dtypes.float32
    if isinstance(x.dtype, PtrDType):
        return None
    if {source.dtype.scalar, x.dtype.scalar} & emulated and float32 not in (source.dtype.scalar, x.dtype.scalar) \
            and source.dtype.scalar != x.dtype.scalar:
        return _widen(source, emulated).cast(_wide(source.dtype)).cast(x.dtype)
    return None


def _constant(x: UOp, emulated: frozenset[DType]) -> UOp | None:
    if x.dtype.scalar not in emulated:
        return None
    values = tuple(truncate(value, x.dtype) for value in x.arg) if x.op is Ops.VCONST else truncate(x.arg, x.dtype)
    return UOp(x.op, _wide(x.dtype), x.src, values).cast(x.dtype)


def narrow_float_rules(emulated: frozenset[DType]) -> PatternMatcher:
    """The rules of the pass for the scalar dtypes `emulated` (see the module docstring)."""
    return PatternMatcher([
        (UPat(tuple(_COMPUTED), name="x"), lambda x: _compute_wide(x, emulated)),
        (UPat(Ops.CAST, name="x"), lambda x: _cast_through_float32(x, emulated)),
        (UPat((Ops.CONST, Ops.VCONST), dtype=tuple(emulated), name="x"), lambda x: _constant(x, emulated))])


_RULES: dict[frozenset[DType], PatternMatcher] = {}


def compute_narrow_floats(roots: list[UOp], emulated: frozenset[DType]) -> list[UOp]:
    """`roots` (stores) with every op on the dtypes `emulated` computed in float32 (the pass "narrow floats")."""
    rules = _RULES.setdefault(emulated, narrow_float_rules(emulated))
    return list(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), rules, name="narrow floats").src)


__all__ = ["compute_narrow_floats", "narrow_float_rules"]
