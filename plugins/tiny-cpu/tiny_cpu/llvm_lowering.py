"""The LLVM renderer's last codegen rules (its `post_matcher`, the pass "renderer: post"), after the SSA lowering
shared with PTX: UOp -> UOp rewrites of what LLVM IR would otherwise spell as control flow or libm calls.

- a gated LOAD of a buffer of known size reads element 0 where its gate is off and selects the alternative there: a
  read without a branch, so the loop around it vectorizes (element 0 of a buffer of at least the load's lanes is
  always readable);
- a float converted to an 8- or 16-bit or an unsigned 32-bit integer goes through int32 (int64 for uint32) and
  wraps, as C converts (fptoui and a narrow fptosi are poison out of range);
- half math functions and integer powers are computed in float32 and float64, as the C renderer computes them (libm
  has no half functions; llvm.sqrt and llvm.trunc of half are instructions and stay)."""
from __future__ import annotations

from tiny_cpu.lowering import math_in_wider_floats
from tinycore.codegen.ssa_lowering import ssa_lowering
from tinycore.dtype import PtrDType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp


def read_without_branch(load: UOp) -> UOp | None:
    """LOAD(INDEX(buffer, i, gate), alternative) -> WHERE(gate, LOAD(INDEX(buffer, WHERE(gate, i, 0))), alternative),
    through a pointer CAST for a vector load; a buffer of unknown size (or fewer elements than lanes) is left alone."""
    pointer = load.src[0]
    index = pointer.src[0] if pointer.op is Ops.CAST else pointer
    if index.op is not Ops.INDEX or len(index.src) != 3 or not isinstance(index.src[0].dtype, PtrDType) or \
            index.src[0].dtype.size < max(load.dtype.count, 1):
        return None
    buffer, offset, gate = index.src
    ungated = index.replace(src=(buffer, gate.where(offset, offset.const_like(0))))
    pointer = pointer.replace(src=(ungated,)) if pointer.op is Ops.CAST else ungated
    # sources of dtype void only order the load; the first other is the alternative
    alternative = next((source for source in load.src[1:] if source.dtype != dtypes.void),
                       UOp.const(load.dtype.scalar, 0))
    ordering = tuple(source for source in load.src[1:] if source.dtype == dtypes.void)
    return gate.where(load.replace(src=(pointer, *ordering)), alternative)


def convert_through_wider(x: UOp, value: UOp) -> UOp | None:
    """CAST(float -> int8/int16/uint8/uint16/uint32) -> CAST(CAST(float -> int32, or int64 for uint32) -> target)."""
    target = x.dtype.scalar
    if isinstance(x.dtype, PtrDType) or not dtypes.is_float(value.dtype) or not dtypes.is_int(target) or \
            target == dtypes.bool or target.itemsize == 8 or (target.itemsize == 4 and not dtypes.is_unsigned(target)):
        return None
    wide = dtypes.int64 if target == dtypes.uint32 else dtypes.int32
    return value.cast(wide.vec(x.dtype.count) if x.dtype.count > 1 else wide).cast(x.dtype)


llvm_lowering = ssa_lowering + PatternMatcher([
    (UPat(Ops.LOAD, name="load"), read_without_branch),
    (UPat(Ops.CAST, src=(UPat(name="value"),), name="x"), convert_through_wider),
    (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW), name="x"), math_in_wider_floats)])
"""The LLVM renderer's post_matcher (see the module docstring)."""
