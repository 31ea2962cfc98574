"""The graph of a matrix product built on nodes directly.

`Tensor.dot` spells a product as a dozen Tensor operations (unsqueeze, transpose, contiguous, a broadcast multiply,
a sum); each one checks its arguments and wraps a new Tensor, about 30 us of Python per operation, 0.2-0.4 ms per
product: 2-3% of a 1024^2 product on two cores, more of a small one. The operands of `dot` are already checked, so
this module makes the same nodes without the per-step Tensors. Nodes are shared between equal computations, so the
result is the very node the Tensor operations make (tests/unit/tensor/test_matmul_graph.py checks that for the
packed and the in-place layout, batches and broadcast batches); gradients follow from the nodes as before.
"""
from __future__ import annotations

from tinycore.dtype import DType
from tinycore.gradient import CompositeGradient, with_gradient
from tinycore.tensor.support import broadcast_shape, int_shape
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def _unsqueeze(node: UOp, axis: int) -> UOp:
    """`node` with a size-1 axis inserted before the (non-negative) `axis`."""
    shape = node.shape
    return node.reshape(shape[:axis] + (1,) + shape[axis:])


def _swap(node: UOp, first: int, second: int) -> UOp:
    """`node` with two (non-negative) axes exchanged."""
    order = list(range(len(node.shape)))
    order[first], order[second] = order[second], order[first]
    return node.permute(order)


def _broadcast_to(node: UOp, shape: tuple[int, ...]) -> UOp:
    """`node` broadcast to `shape` (new axes on the left, then size-1 axes stretched)."""
    if node.shape == shape:
        return node
    padded = (1,) * (len(shape) - len(node.shape)) + tuple(node.shape)
    return node.reshape(padded).expand(shape)


def _sum_axis(node: UOp, axis: int, accumulate: DType) -> UOp:
    """The sum over the (non-negative) `axis` in `accumulate`, that axis dropped."""
    summed = node.cast(accumulate).r(Ops.ADD, (axis,))
    return summed.reshape(tuple(size for index, size in enumerate(summed.shape) if index != axis))


def is_transposed_view(node: UOp) -> bool:
    """Whether `node` is a view with its last two axes exchanged (`x.T`, `x.transpose(-1, -2)`): its rows are
    columns of the memory underneath."""
    if node.op is not Ops.PERMUTE:
        return False
    order = node.arg
    count = len(order)
    return count >= 2 and order[-1] == count - 2 and order[-2] == count - 1


TRANSPOSED_COPY_MIN_DEPTH = 256
"""A packed product copies a transposed-view left operand (`x.T @ y`) contiguous first from this reduce depth on.
Read in place, each reduce step moves a whole row of x ahead and uses a few bytes of the line: at a depth of 128
those lines (8 KB) stay in L1 from one row block to the next and the in-place read is the faster (the row blocks
kept outermost, tests/unit/codegen/test_matmul_tiles.py); from 256 (16 KB, half the L1, in a few sets when the rows
are 2-3 KB apart) they are evicted first, and the copy, one pass over x, repays itself (512x768 by 2048:
0.81-0.85 of the forward's GFLOPS in place, 0.96-1.00 with the copy)."""


def copies_transposed_left(left: UOp) -> bool:
    """Whether a packed product copies its left operand contiguous first (see TRANSPOSED_COPY_MIN_DEPTH)."""
    depth = left.shape[-1]
    return is_transposed_view(left) and isinstance(depth, int) and depth >= TRANSPOSED_COPY_MIN_DEPTH


def multiply_panels_gradient(left: UOp, shape: tuple[int, ...]) -> CompositeGradient:
    """The gradient of the packed product's elementwise `rows * panels` (shape `shape`). When it applies: every
    packed product (its reduce has at least PANEL_MIN_ROWS rows; a long transposed `left` was copied first).
    The weight gradient `left.T @ dout` sums over the rows of `left`: read where it is, each reduce step moves a
    whole row of `left` ahead (2-3 KB for 512-768 columns, lines that share a few L1 sets), and the tile's six
    output rows use 24 bytes of each line. So that operand is read from a contiguous copy of `left.T` instead: the
    copy costs one pass over `left` (O(rows * depth)) against the product's O(rows * depth * columns), and the
    gradient kernel then reads both operands along the reduce, as the forward product does (a 512x768 by 2048
    weight gradient went from 0.72-0.74 of the forward's GFLOPS to 0.97-1.04, bench/README.md). The input gradient
    `dout @ panels.T` is the graph's own."""

    def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
        rows, panels = node.src
        axes = len(left.shape)
        transposed = _swap(_swap(left, axes - 2, axes - 1).contiguous(), axes - 2, axes - 1)
        rows_from_copy = _broadcast_to(_unsqueeze(_unsqueeze(transposed, axes - 2), axes + 1), shape)
        return {rows: gradient * panels, panels: gradient * rows_from_copy}

    return rule


def multiply_panels(left: UOp, right: UOp, panel: int, accumulate: DType, result_dtype: DType) -> UOp:
    """`left @ right` (at least 2-D each, one dtype, int shapes) with `right` copied into panels of `panel`
    columns, each contiguous along the reduce (see tinycore.tensor.nn._matmul_panel)."""
    *batch, depth, columns = right.shape
    if copies_transposed_left(left):
        left = left.contiguous()
    panels = _swap(right.reshape((*batch, depth, columns // panel, panel)), len(batch), len(batch) + 1).contiguous()
    rows = _unsqueeze(_unsqueeze(left, len(left.shape) - 2), len(left.shape) + 1)
    panels = _unsqueeze(panels, len(panels.shape) - 2)
    shape = broadcast_shape(int_shape(rows), int_shape(panels))
    products = _broadcast_to(rows, shape).alu(Ops.MUL, _broadcast_to(panels, shape))
    products = with_gradient(products, multiply_panels_gradient(left, shape))
    # the output's gradient copied into panels too (see _multiply_with_tensors in tinycore.tensor.nn)
    blocks = _sum_axis(products, len(shape) - 2, accumulate).contiguous_backward()
    depth_of_blocks = len(blocks.shape)
    result = _swap(blocks, depth_of_blocks - 3, depth_of_blocks - 2)
    return result.reshape((*blocks.shape[:-3], left.shape[-2], columns)).cast(result_dtype)


def multiply_in_place(left: UOp, right: UOp, accumulate: DType, result_dtype: DType) -> UOp:
    """`left @ right` (at least 2-D each, one dtype, int shapes) reading both operands where they are."""
    rows = _unsqueeze(left, len(left.shape) - 1)
    columns = _unsqueeze(_swap(right, len(right.shape) - 1, len(right.shape) - 2), len(right.shape) - 2)
    shape = broadcast_shape(int_shape(rows), int_shape(columns))
    products = _broadcast_to(rows, shape).alu(Ops.MUL, _broadcast_to(columns, shape))
    return _sum_axis(products, len(shape) - 1, accumulate).cast(result_dtype)
