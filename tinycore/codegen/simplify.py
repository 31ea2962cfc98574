"""Re-folding after a substitution: codegen replaces ranges by constants or lanes many times over one kernel, and
only the nodes that depend on the replaced ones need folding again.

The rules themselves live in `tinycore.uop.symbolic` (`folding`, applied to one node by `fold_node`); this module is
the walk that applies them to the changed part of a graph.
"""
from __future__ import annotations

import weakref

from tinycore.uop.symbolic import fold_node
from tinycore.uop.uop import UOp

_DEPENDENTS: weakref.WeakKeyDictionary[UOp, dict[frozenset[UOp], tuple[UOp, ...]]] = weakref.WeakKeyDictionary()
"""root -> {keys: the nodes of root that depend on keys}; kept as long as the root lives."""


def dependents(root: UOp, keys: frozenset[UOp]) -> tuple[UOp, ...]:
    """The nodes of `root` that depend on any of `keys` (keys excluded), sources before users."""
    cache = _DEPENDENTS.get(root)
    if cache is None:
        cache = _DEPENDENTS[root] = {}
    found = cache.get(keys)
    if found is None:
        affected: set[UOp] = set(keys)
        order = []
        disjoint = affected.isdisjoint
        for node in root.toposort:
            if node not in keys and not disjoint(node.src):
                affected.add(node)
                order.append(node)
        found = cache[keys] = tuple(order)
    return found


def substitute_fold(root: UOp, mapping: dict[UOp, UOp], folded: dict[UOp, UOp] | None = None) -> UOp:
    """`root` with the keys of `mapping` replaced by their values, folding only the nodes that changed.

    `folded` (unfolded node -> its fold), when given, is shared between calls: the copies of one kernel for each
    value of its upcast axes rebuild many of the same nodes (a lane that does not use the axis substituted last), and
    each is folded once. The caller keeps it for one kernel; a node folds the same way every time."""
    if root in mapping:
        return mapping[root]
    memo: dict[UOp, UOp] = dict(mapping)
    get = memo.get
    if folded is None:
        folded = {}
    known = folded.get
    for node in dependents(root, frozenset(mapping)):
        sources = node.src
        new_src = tuple(map(get, sources, sources))
        if new_src == sources:
            memo[node] = node
            continue
        built = UOp(node.op, node.dtype, new_src, node.arg)
        result = known(built)
        if result is None:
            result = folded[built] = fold_node(built)
        memo[node] = result
    return get(root, root)
