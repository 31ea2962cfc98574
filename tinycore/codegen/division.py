"""The pass "guarded division": an integer division or remainder never traps, whatever its divisor.

The project's rule (the constant folder's and the interpreter's) is that x // 0 and x % 0 are 0, and numpy's that a
signed int min // -1 wraps to int min (and int min % -1 is 0). Hardware traps on both (x86's idiv raises SIGFPE) and
C, LLVM IR and PTX leave them undefined. A renderer that sets `RendererContract.guard_integer_division` gets, after
devectorization, each IDIV and MOD on integers whose divisor may be 0 (or, signed, -1) rewritten as

    WHERE(divisor == 0, 0, WHERE(divisor == -1, -dividend or 0, op(dividend, WHERE(special, 1, divisor))))

(the -1 select only for signed types), which no language needs to evaluate lazily: the division it computes has a
divisor of neither value. A divisor whose bounds exclude them (a nonzero constant, a loop bound, a variable of a
positive range) is left alone, so index arithmetic keeps its plain division.
"""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

GUARDED = "guarded"
"""The arg of a division this pass made safe (so it is not guarded again)."""


def _safe(divisor: UOp, signed: bool) -> bool:
    """Whether `divisor` can never be 0, nor -1 when the division is signed."""
    if divisor.op is Ops.VCONST:
        return all(value != 0 and not (signed and value == -1) for value in divisor.arg)
    return divisor.vmin > 0 or (divisor.vmax < -1 if signed else divisor.vmax < 0)


def _guard(x: UOp, dividend: UOp, divisor: UOp) -> UOp | None:
    signed = not dtypes.is_unsigned(x.dtype.scalar)
    if dtypes.is_float(x.dtype.scalar) or x.arg == GUARDED or _safe(divisor, signed):
        return None
    is_zero = divisor.alu(Ops.CMPEQ, divisor.const_like(0))
    is_minus_one = divisor.alu(Ops.CMPEQ, divisor.const_like(-1)) if signed else None
    special = is_zero if is_minus_one is None else is_zero.alu(Ops.OR, is_minus_one)
    result = UOp(x.op, x.dtype, (dividend, UOp(Ops.WHERE, divisor.dtype, (special, divisor.const_like(1), divisor))),
                 GUARDED)
    if is_minus_one is not None:  # a // -1 is -a (int min wraps to itself, as in numpy) and a % -1 is 0
        negated = dividend.alu(Ops.NEG) if x.op is Ops.IDIV else x.const_like(0)
        result = UOp(Ops.WHERE, x.dtype, (is_minus_one, negated, result))
    return UOp(Ops.WHERE, x.dtype, (is_zero, x.const_like(0), result))


guarded_division_rules = PatternMatcher([
    (UPat((Ops.IDIV, Ops.MOD), src=(UPat(name="dividend"), UPat(name="divisor")), name="x"), _guard)])
"""The rule of the pass (see the module docstring)."""


def guard_divisions(roots: list[UOp]) -> list[UOp]:
    """`roots` (stores) with each integer division by a possible 0 or -1 guarded (the pass "guarded division")."""
    return list(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), guarded_division_rules,
                              name="guarded division").src)


__all__ = ["GUARDED", "guard_divisions", "guarded_division_rules"]
