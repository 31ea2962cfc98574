"""Gated stores: a kernel's stores done only where a condition holds (each keeps its own gate too).

Used where opts compute an element in more than one place and only one may write it (the outputs a SHIFTED_UPCAST
recomputes, codegen/opt.py) and where a group reduce leaves the combined result to one work-item
(codegen/local_memory.py).
"""
from __future__ import annotations

from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp


class StoreGate:
    """The context of `gated_store_rules`: the `gate` to add to the stores into `buffers`, and the stores already
    gated (a gated store is not gated again when the rewrite visits it)."""

    def __init__(self, gate: UOp, buffers: frozenset[UOp]):
        self.gate, self.buffers = gate, buffers
        self.gated: set[UOp] = set()


def _gate_store(ctx: StoreGate, store: UOp, index: UOp) -> UOp | None:
    if store in ctx.gated or index.src[0] not in ctx.buffers:
        return None
    valid = ctx.gate if len(index.src) < 3 else index.src[2] & ctx.gate
    gated = store.replace(src=(index.replace(src=index.src[:2] + (valid,)),) + store.src[1:])
    ctx.gated.add(gated)
    return gated


gated_store_rules = PatternMatcher([
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="index"),), allow_any_len=True, name="store"), _gate_store),
])
"""STORE(INDEX(buffer, i[, valid]), value) -> STORE(INDEX(buffer, i, valid & gate), value) for the buffers of the
context (a StoreGate)."""
