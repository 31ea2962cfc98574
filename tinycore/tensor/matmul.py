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


def multiply_panels(left: UOp, right: UOp, panel: int, accumulate: DType, result_dtype: DType) -> UOp:
    """`left @ right` (at least 2-D each, one dtype, int shapes) with `right` copied into panels of `panel`
    columns, each contiguous along the reduce (see tinycore.tensor.nn._matmul_panel)."""
    *batch, depth, columns = right.shape
    panels = _swap(right.reshape((*batch, depth, columns // panel, panel)), len(batch), len(batch) + 1).contiguous()
    rows = _unsqueeze(_unsqueeze(left, len(left.shape) - 2), len(left.shape) + 1)
    panels = _unsqueeze(panels, len(panels.shape) - 2)
    shape = broadcast_shape(int_shape(rows), int_shape(panels))
    products = _broadcast_to(rows, shape).alu(Ops.MUL, _broadcast_to(panels, shape))
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
