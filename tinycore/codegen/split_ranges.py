"""Output axes split where their indices divide them: an axis that a reshape merged from two (attention's heads and
head width, merged into the model width after a permute) reaches the loads as `i // w` and `i % w`, which no axis
test of the heuristic reads as a stride, so a product over such an axis found no register tile (the input gradient
of a transformer block's attention, 8x128x256 from 8 heads of 32: 7.6 ms at 10 GFLOPS). Split at those divisors
(i = h * w + d), the same kernel indexes every load linearly in h and d.

`split_merged_axes` rewrites a kernel AST (a SINK of STOREs over RANGEs, see docs/architecture.md, "Kernel-level
graph"); optimize_kernel tries it on CPU kernels whose heuristic found no tile. `replace_range`, the step every
split of an axis takes (here and in the opts of codegen/opt.py), is here too.
"""
from __future__ import annotations

from tinycore.uop.axis import AxisType, axis_id, axis_kind, range_size
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import simplify_indices
from tinycore.uop.uop import UOp


def replace_range(root: UOp, old: UOp, expression: UOp, new_ranges: tuple[UOp, ...]) -> UOp:
    """`root` with the RANGE `old` replaced by `expression` in values and by `new_ranges` in REDUCE range lists."""
    memo: dict[UOp, UOp] = {old: expression}
    for node in root.toposort:
        if node in memo:
            continue
        if node.op is Ops.REDUCE:
            ranges: list[UOp] = []
            for source in node.src[1:]:
                ranges.extend(new_ranges if source is old else (memo[source],))
            new_src = (memo[node.src[0]],) + tuple(ranges)
        else:
            new_src = tuple(memo[source] for source in node.src)
        memo[node] = node if new_src == node.src else node.replace(src=new_src)
    return memo[root]


def _range_like(axis: UOp, size: int | UOp, identifier: int, kind: AxisType) -> UOp:
    """A RANGE over `size` with `axis`'s index dtype, axis id `identifier` and `kind`."""
    end = size if isinstance(size, UOp) else UOp.const(axis.dtype, size)
    return UOp(Ops.RANGE, axis.dtype, (end,), (identifier, kind))


def _split_points(ast: UOp, axis: UOp, size: int) -> list[int]:
    """The strides at which the indices of `ast` divide `axis` (`axis // k`, `axis % k`, `(axis // k) % m`),
    innermost first, when they nest (each divides the next and the size); [] otherwise."""
    points: set[int] = set()
    for node in ast.toposort:
        if node.op not in (Ops.IDIV, Ops.MOD) or node.src[1].op is not Ops.CONST:
            continue
        divisor, source = node.src[1].arg, node.src[0]
        if not isinstance(divisor, int) or divisor <= 1:
            continue
        if source is axis:
            points.add(divisor)
        elif source.op is Ops.IDIV and source.src[0] is axis and source.src[1].op is Ops.CONST and \
                isinstance(source.src[1].arg, int) and source.src[1].arg > 1:
            inner = source.src[1].arg
            points.update((inner, inner * divisor) if node.op is Ops.MOD else (inner * divisor,))
    ordered = sorted(point for point in points if point < size)
    if not ordered or size % ordered[-1] or any(later % earlier for earlier, later in
                                                   zip(ordered, ordered[1:], strict=False)):
        return []
    return ordered


def split_merged_axes(ast: UOp) -> UOp:
    """`ast` with each output (LOOP) axis that its indices divide split into one axis per factor (outer first), every
    axis renumbered in order; `ast` itself when no axis is divided."""
    ranges = sorted({node for node in ast.toposort if node.op is Ops.RANGE}, key=axis_id)
    plans = {}
    for axis in ranges:
        size = range_size(axis)
        if axis_kind(axis) is AxisType.LOOP and size is not None:
            points = _split_points(ast, axis, size)
            if points:
                plans[axis] = points
    if not plans or any(axis_kind(axis) is None for axis in ranges):
        return ast
    # fresh ids above every existing one, in the same order, the split axes taking consecutive ones: no new axis can
    # coincide with an old one still in the graph
    next_id = max(axis_id(axis) for axis in ranges) + 1
    for axis in ranges:
        kind, size = axis_kind(axis), range_size(axis)
        if axis in plans and size is not None and kind is not None:
            points = plans[axis]
            bounds = [size] + points[::-1]  # outer to inner: sizes size/p_last, p_last/p_prev, ..., p_first
            parts: list[UOp] = []
            for outer, inner in zip(bounds, bounds[1:] + [1], strict=True):
                parts.append(_range_like(axis, outer // inner, next_id, kind))
                next_id += 1
            strides = points[::-1] + [1]
            expression = parts[0] * strides[0]
            for part, stride in zip(parts[1:], strides[1:], strict=True):
                expression = expression + (part * stride if stride != 1 else part)
            ast = replace_range(ast, axis, expression, tuple(parts))
        elif kind is not None:
            replacement = _range_like(axis, axis.src[0] if size is None else size, next_id, kind)
            next_id += 1
            ast = replace_range(ast, axis, replacement, (replacement,))
    return simplify_indices(ast)
