"""Rules over a kernel's index arithmetic, run before expansion: each INDEX simplified, and each select its bounds
decide replaced by the branch taken.

Only addresses (and their validity masks) are simplified, never values: rewriting a value could drop a clause of a
load's mask that an enclosing where() implies, which would turn a masked load into an out-of-bounds one.
"""
from __future__ import annotations

from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.symbolic import simplify
from tinycore.uop.uop import UOp


class IndexFolding:
    """The context of `index_rules`: the INDEXes it produced, so that a simplified address is not simplified again
    when the rewrite visits it (simplify already reached a fixpoint on it; a second call would only cost time)."""

    def __init__(self) -> None:
        self.simplified: set[UOp] = set()


def _fold_index(ctx: IndexFolding, index: UOp) -> UOp | None:
    """The INDEX `index` simplified by the `symbolic` rules. The loads inside an address (a gather's or a scatter's
    coordinates, read from memory) are values: they are stood in for by opaque leaves while the address is simplified
    (their own INDEXes were simplified already, as sources come first)."""
    if index in ctx.simplified:
        return None
    loads = [inner for inner in index.toposort if inner.op is Ops.LOAD]
    if not loads:
        simplified = simplify(index)
    else:
        stand_ins = {load: UOp(Ops.NOOP, load.dtype, (), ("a load inside an address", position))
                     for position, load in enumerate(loads)}
        simplified = simplify(index.substitute(stand_ins)).substitute({stand_in: load for load, stand_in in
                                                                      stand_ins.items()})
    ctx.simplified.add(simplified)
    return None if simplified is index else simplified


index_rules = PatternMatcher([(UPat(Ops.INDEX, name="index"), _fold_index)])
"""Each INDEX simplified by the `symbolic` rules (context: an IndexFolding)."""


def _decided_select(condition: UOp, if_true: UOp, if_false: UOp) -> UOp | None:
    """The branch a scalar select of index arithmetic takes when its bounds decide the condition (a padding check
    that always holds, say `oy + 65*ky < 192` of a convolution). Opts can hide such a condition from the folding that
    expansion does (a SHIFTED_UPCAST's min() start), and a vector select per load would stay in the inner loop."""
    if condition.dtype.count != 1 or any(leaf.op in (Ops.LOAD, Ops.REDUCE) for leaf in condition.toposort):
        return None
    decided = simplify(condition)
    if decided.op is not Ops.CONST:
        return None
    return if_true if decided.arg else if_false


decided_select_rules = PatternMatcher([
    (UPat(Ops.WHERE, src=(UPat.var("condition"), UPat.var("if_true"), UPat.var("if_false"))), _decided_select),
])
"""WHERE(condition, a, b) -> a or b where the condition is index arithmetic its bounds decide."""
