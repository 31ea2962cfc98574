"""Folding reductions and paddings over zero-size tensors into constants before kernels are made.

The tensor graph keeps a reduce or a pad over an empty input (so that autograd reaches that input and gives it a
zero gradient of its shape), but no kernel can loop over a zero-size range: index arithmetic over such shapes
divides by zero. A reduce over no elements is the identity of its operation; a zero-padding of nothing is zeros.
Both are local rewrites, so this is a PatternMatcher applied to the graph to be scheduled.
"""
from __future__ import annotations

from collections.abc import Sequence

from tinycore.dtype import ConstType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp


def _identity(operation: Ops, node: UOp) -> ConstType:
    """The value a reduce `operation` gives over no elements, in `node`'s dtype."""
    identities: dict[Ops, ConstType] = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(node.dtype)}
    return identities[operation]


def _empty(node: UOp) -> bool:
    """True when `node` has no elements (a symbolic size is never known to be zero)."""
    size = node.size
    return isinstance(size, int) and size == 0


def _fold_reduce(node: UOp) -> UOp | None:
    if not _empty(node.src[0]) or _empty(node):
        return None
    return UOp.const_on(node.dtype, _identity(node.arg[0], node), node.device, node.shape)


def _fold_pad(node: UOp) -> UOp | None:
    if not _empty(node.src[0]) or _empty(node):
        return None
    return UOp.const_on(node.dtype, 0, node.device, node.shape)


fold_empty_rules = PatternMatcher([
    (UPat(Ops.REDUCE_AXIS, name="node"), _fold_reduce),
    (UPat(Ops.PAD, name="node"), _fold_pad),
])
"""REDUCE_AXIS over an empty source -> the identity constant; PAD of an empty source -> zeros."""


def fold_empty(outputs: Sequence[UOp]) -> list[UOp]:
    """`outputs` with every reduce and pad over a zero-size source folded to a constant (the same nodes when the
    graph has none)."""
    # each output's own toposort: a SINK over them would be hash-consed and keep the outputs (and so their
    # buffers) alive after the schedule is done with them
    if not any(node.op in (Ops.REDUCE_AXIS, Ops.PAD) and _empty(node.src[0])
               for output in outputs for node in output.toposort):
        return list(outputs)
    sink = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(outputs)), fold_empty_rules, name="fold empty")
    return list(sink.src)
