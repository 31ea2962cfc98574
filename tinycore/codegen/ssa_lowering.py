"""The pass "SSA lowering": what the SSA-register renderers (PTX, LLVM IR) would each spell as a sequence of
instructions, as plain UOps before rendering (their `post_matcher`), so that each language spells one op per UOp:

- an integer division or remainder by a divisor that may be 0 gives 0, as the constant folder does, and a signed one
  by -1 gives -a and 0 (int min / -1 wraps, as numpy): the op on a divisor made 1 there, selected away (LLVM's sdiv
  by 0 or of int min by -1 is undefined and traps on x86);
- MAX is C's (a<b)?b:a (a NaN first operand is kept, as on the C renderer), and of bools their OR;
- a conversion to bool is != 0 (NaN is true, as in C) and one from bool the select of 1 or 0."""
from __future__ import annotations

from tinycore.dtype import PtrDType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

GUARDED = "guarded"  # the arg of a division whose divisor is never 0 or -1 (not rewritten again)


def _guarded_division(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if dtypes.is_float(x.dtype) or x.arg == GUARDED or b.op is Ops.CONST and b.arg not in (0, -1):
        return None
    is_zero, signed = b.eq(b.const_like(0)), not dtypes.is_unsigned(x.dtype)
    is_special = is_zero | b.eq(b.const_like(-1)) if signed else is_zero
    result = UOp(x.op, x.dtype, (a, is_special.where(b.const_like(1), b)), GUARDED)
    if signed:  # a / -1 is -a (int min stays int min, as numpy wraps) and a % -1 is 0
        result = b.eq(b.const_like(-1)).where(a.alu(Ops.NEG) if x.op is Ops.IDIV else x.const_like(0), result)
    return is_zero.where(x.const_like(0), result)


def _bool_cast(x: UOp, a: UOp) -> UOp | None:
    if isinstance(x.dtype, PtrDType) or (x.dtype.scalar == dtypes.bool) == (a.dtype.scalar == dtypes.bool):
        return None
    if x.dtype.scalar == dtypes.bool:
        return a.ne(UOp.const(a.dtype.scalar, 0))
    return UOp(Ops.WHERE, x.dtype, (a, UOp.const(x.dtype.scalar, 1), UOp.const(x.dtype.scalar, 0)))


ssa_lowering = PatternMatcher([
    (UPat((Ops.IDIV, Ops.MOD), src=(UPat(name="a"), UPat(name="b")), name="x"), _guarded_division),
    (UPat(Ops.MAX, src=(UPat(name="a"), UPat(name="b")), name="x"),
     lambda x, a, b: a.alu(Ops.OR, b) if x.dtype.scalar == dtypes.bool else (a < b).where(b, a)),
    (UPat(Ops.CAST, src=(UPat(name="a"),), name="x"), _bool_cast)])
"""The rules of the pass (see the module docstring), shared by the PTX and LLVM IR renderers."""
