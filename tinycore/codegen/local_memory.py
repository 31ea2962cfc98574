"""Lowering of a group reduce into local memory, barriers and a gated store.

A group reduce splits one reduce axis of size N across the L work-items of a work-group (SPECIAL lidx0):

1. work-item `lidx` reduces the elements lidx, lidx + L, lidx + 2L, ... below N into a register (a loop of
   ceil((N - lidx) / L) steps, so sizes that L does not divide need no masks);
2. it stores that partial result at `local[lidx]` (a DEFINE_LOCAL of L elements per REDUCE), then a BARRIER;
3. work-item 0 combines the L partials from local memory (a loop over L loads ordered after the barrier, whose trip
   count is 0 in the other work-items); the result reaches only stores, since a grouped REDUCE may not sit inside
   another REDUCE;
4. every global STORE is gated to work-item 0 (`lidx == 0`), so each output is written once.

The program must not run the barrier inside a loop that not all work-items of the group enter: the caller groups
only kernels whose output axes all became SPECIAL indices and whose grouped REDUCEs are not nested in other REDUCEs.
"""
from __future__ import annotations

from tinycore.codegen.gating import StoreGate, gated_store_rules
from tinycore.dtype import dtypes
from tinycore.uop.axis import AxisType, new_range, range_size
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import simplify
from tinycore.uop.uop import UOp


class GroupReduceError(ValueError):
    """A group reduce that does not apply to the kernel (see `lower_group_reduce`)."""


def nested_reduces(ast: UOp) -> set[UOp]:
    """The REDUCE nodes that appear inside another REDUCE's reduced value."""
    inside: set[UOp] = set()
    for node in ast.toposort:
        if node.op is Ops.REDUCE:
            inside.update(n for n in node.src[0].toposort if n.op is Ops.REDUCE)
    return inside


def group_partial_end(size: int, group: int, local_index: UOp) -> UOp:
    """The trip count of work-item `local_index` over elements local_index, +group, ... below `size`."""
    if size % group == 0:
        return UOp.const(dtypes.int32, size // group)
    # simplified here so the index simplification later finds the same RANGE node in values and REDUCEs
    return simplify((UOp.const(dtypes.int32, size - 1) - local_index) // group + 1)


class _GroupLowering:
    """The context of `group_reduce_rules`: the grouped RANGE, the work-item index, the partial loops' ends, and
    what the rewrite made so far (the two loops of each group of ranges, the local buffers)."""

    def __init__(self, grouped: UOp, local_index: UOp, group: int, partial_end: UOp, first_only_end: UOp,
                 next_id: int):
        self.grouped, self.local_index, self.group = grouped, local_index, group
        self.partial_end, self.first_only_end, self.next_id = partial_end, first_only_end, next_id
        self.partial_ranges: dict[tuple[UOp, ...], tuple[UOp, UOp]] = {}
        self.locals_made = 0


def _group_reduce(ctx: _GroupLowering, node: UOp) -> UOp | None:
    """A REDUCE over the grouped range as each work-item's partial (over its elements local_index, +group, ...)
    stored into local memory, a barrier, and work-item 0's combination of the partials."""
    if ctx.grouped not in node.src[1:]:
        return None
    if node.src[1:] not in ctx.partial_ranges:
        ctx.partial_ranges[node.src[1:]] = (new_range(ctx.partial_end, ctx.next_id, AxisType.REDUCE),
                                            new_range(ctx.first_only_end, ctx.next_id + 1, AxisType.REDUCE))
        ctx.next_id += 2
    inner, combine = ctx.partial_ranges[node.src[1:]]
    value = node.src[0].substitute({ctx.grouped: inner * ctx.group + ctx.local_index})
    others = tuple(source for source in node.src[1:] if source is not ctx.grouped)
    partial = UOp(Ops.REDUCE, node.dtype, (value,) + others + (inner,), node.arg)
    shared = UOp(Ops.DEFINE_LOCAL, node.dtype.ptr(ctx.group, "local"), (), ctx.locals_made)
    ctx.locals_made += 1
    barrier = UOp(Ops.BARRIER, dtypes.void, (shared.index(ctx.local_index).store(partial),))
    read = UOp(Ops.LOAD, node.dtype, (shared.index(combine), barrier))
    return UOp(Ops.REDUCE, node.dtype, (read, combine), node.arg)


group_reduce_rules = PatternMatcher([(UPat(Ops.REDUCE, name="node"), _group_reduce)])
"""Each REDUCE over the grouped range through local memory (context: a _GroupLowering)."""


def lower_group_reduce(ast: UOp, grouped: UOp, local_index: UOp, next_id: int) -> tuple[UOp, int]:
    """`ast` with every REDUCE over the RANGE `grouped` reduced by the work-group of SPECIAL `local_index`.

    Returns the new AST and the next free axis id. `local_index` is a SPECIAL "lidxN" whose size (the group size)
    is a constant no larger than the grouped range's size.
    """
    size, group = range_size(grouped), local_index.src[0].arg if local_index.src[0].op is Ops.CONST else None
    if size is None or group is None or not 1 <= group <= size:
        raise GroupReduceError(f"a group reduce needs a constant range and group size with 1 <= group <= range, got "
                               f"range {size} and group {group}: pick a smaller group")
    users = [node for node in ast.toposort if node.op is Ops.REDUCE and grouped in node.src[1:]]
    if not users:
        raise GroupReduceError("no REDUCE reduces over the grouped range: group a reduce axis of the kernel")
    if nested_reduces(ast) & set(users):
        raise GroupReduceError("a grouped REDUCE sits inside another REDUCE: its barrier would run in a loop")
    if any(node.dtype.count != 1 for node in users):
        raise GroupReduceError("a grouped REDUCE has a vector dtype: group before vector accumulators are made")
    partial_end = group_partial_end(size, group, local_index)
    # no grouped result feeds another REDUCE (checked above), so only stores use it: work-item 0 combines the
    # partials alone (the others loop zero times and their stores are gated off)
    first = local_index.eq(0)
    first_only_end = simplify(first.where(UOp.const(dtypes.int32, group), UOp.const(dtypes.int32, 0)))
    lowering = _GroupLowering(grouped, local_index, group, partial_end, first_only_end, next_id)
    grouped_ast = graph_rewrite(ast, group_reduce_rules, lowering, name="group reduces")
    for store in grouped_ast.src:
        if store.src[0].op is not Ops.INDEX:
            raise GroupReduceError(f"a kernel store writes through {store.src[0].op}, not an INDEX: it cannot be gated")
    # the kernel's own stores only: the partials' stores into local memory stay ungated
    outputs = frozenset(store.src[0].src[0] for store in grouped_ast.src)
    return graph_rewrite(grouped_ast, gated_store_rules, StoreGate(first, outputs), name="gate stores"), \
        lowering.next_id
