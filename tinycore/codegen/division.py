"""The pass "guarded division": an integer division or remainder by a value that may be 0 gives 0, never a trap.

The project's rule (the constant folder's and the interpreter's) is that x // 0 and x % 0 are 0; hardware traps (x86)
or leaves it undefined (C, LLVM IR, PTX). A renderer that sets `RendererContract.guard_integer_division` gets, after
devectorization, each IDIV and MOD on integers whose divisor is not a nonzero constant rewritten as

    WHERE(divisor == 0, 0, op(dividend, WHERE(divisor == 0, 1, divisor)))

which no language needs to evaluate lazily: the division it computes never has a zero divisor.
"""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp


def _never_zero(divisor: UOp) -> bool:
    """A nonzero constant, or a divisor this pass already made nonzero."""
    if divisor.op in (Ops.CONST, Ops.VCONST):
        return all(divisor.arg) if divisor.op is Ops.VCONST else divisor.arg != 0
    if divisor.op is not Ops.WHERE:
        return False
    base = divisor.src[2]  # WHERE(base == 0, 1, base) (nodes are hash-consed: built alike, they are the same node)
    return divisor.src[:2] == (base.alu(Ops.CMPEQ, base.const_like(0)), base.const_like(1))


def _guard(x: UOp) -> UOp | None:
    dividend, divisor = x.src
    if dtypes.is_float(x.dtype.scalar) or _never_zero(divisor):
        return None
    is_zero = divisor.alu(Ops.CMPEQ, divisor.const_like(0))
    safe = UOp(Ops.WHERE, divisor.dtype, (is_zero, divisor.const_like(1), divisor))
    return UOp(Ops.WHERE, x.dtype, (is_zero, x.const_like(0), UOp(x.op, x.dtype, (dividend, safe), x.arg)))


guarded_division_rules = PatternMatcher([(UPat((Ops.IDIV, Ops.MOD), name="x"), _guard)])
"""The rule of the pass (see the module docstring)."""


def guard_divisions(roots: list[UOp]) -> list[UOp]:
    """`roots` (stores) with each integer division by a possible 0 guarded (the pass "guarded division")."""
    return list(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), guarded_division_rules,
                              name="guarded division").src)


__all__ = ["guard_divisions", "guarded_division_rules"]
