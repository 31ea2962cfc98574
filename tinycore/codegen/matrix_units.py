"""Recognising kernels that a GPU's matrix units can take (tensor cores, WMMA, MFMA): exactly one sum over the
product of two factors of one of the instruction's input dtypes (half or bfloat16 loads, or values cast to it) with
two output axes, each factor indexed by one output axis and the reduce axis, or (when the caller handles batches)
three, the third indexing the output and not the rows or columns alone; sizes multiples of the instruction's tile and
no padding masks. A renderer's `tensor_core_opt` uses `matmul_parts` and then rewrites the kernel for its own
instruction.
"""
from __future__ import annotations

from dataclasses import dataclass

from tinycore.codegen.opt import AxisType, Kernel, range_size
from tinycore.codegen.optimize import axis_stride, strip_casts
from tinycore.dtype import DType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


@dataclass(frozen=True)
class MatmulParts:
    """The pieces of a matmul kernel: the REDUCE, the factor indexed by `rows` (A) and the one indexed by `columns`
    (B), both of one asked dtype, the three axes, and the batch axis of a batched matmul (else None)."""

    reduce: UOp
    a_value: UOp
    b_value: UOp
    rows: UOp
    columns: UOp
    depth: UOp
    batch: UOp | None = None


def matrix_operand(node: UOp, dtype: DType | tuple[DType, ...] = dtypes.float16) -> UOp | None:
    """The value of (one of) `dtype` under a factor of the product (a load of it, or a value cast to it), else None."""
    kinds = dtype if isinstance(dtype, tuple) else (dtype,)
    while node.dtype not in kinds and node.op is Ops.CAST:
        node = node.src[0]
    return node if node.dtype in kinds else None


def matmul_parts(kernel: Kernel, tile: tuple[int, int, int], dtype: DType | tuple[DType, ...] = dtypes.float16,
                 batched: bool = False) -> MatmulParts | None:
    """The MatmulParts of `kernel` when it has the shape (module docstring) with both factors of one of `dtype`,
    rows, columns and depth multiples of `tile`, and (when `batched`) possibly a batch axis; else None."""
    ast = kernel.ast
    reduces = kernel.reduce_ops
    loops = [kernel.axes[i] for i in kernel.axes_of(AxisType.LOOP)]
    reduce_axes = [kernel.axes[i] for i in kernel.axes_of(AxisType.REDUCE)]
    if len(ast.src) != 1 or len(reduces) != 1 or reduces[0].arg is not Ops.ADD or \
            len(loops) not in ((2, 3) if batched else (2,)) or len(reduce_axes) != 1 or \
            len(kernel.axes) != len(loops) + 1 or reduces[0].src[1:] != (reduce_axes[0],):
        return None
    store_index = ast.src[0].src[0]
    if store_index.op is not Ops.INDEX or len(store_index.src) != 2:
        return None
    product = strip_casts(reduces[0].src[0])
    if product.op is not Ops.MUL:
        return None
    operands = [matrix_operand(source, dtype) for source in product.src]
    if operands[0] is None or operands[1] is None or operands[0].dtype != operands[1].dtype:
        return None
    loads = [strip_casts(operand) for operand in operands if operand is not None]
    if any(load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX or len(load.src[0].src) != 2 for load in loads):
        return None
    depth = reduce_axes[0]
    for (first, second), (first_value, second_value) in (((loads[0], loads[1]), (operands[0], operands[1])),
                                                         ((loads[1], loads[0]), (operands[1], operands[0]))):
        rows = columns = None
        others = []
        for axis in loops:
            in_first, in_second = axis_stride(first.src[0].src[1], axis), axis_stride(second.src[0].src[1], axis)
            if in_first not in (0, None) and in_second == 0:
                rows = axis
            elif in_first == 0 and in_second not in (0, None):
                columns = axis
            else:
                others.append(axis)
        batch = others[0] if len(others) == 1 else None
        if rows is None or columns is None or len(others) > 1 or (batch is not None and (
                axis_stride(store_index.src[1], batch) in (0, None) or range_size(batch) is None)):
            continue
        sizes = (range_size(rows), range_size(columns), range_size(depth))
        if any(size is None or size % step for size, step in zip(sizes, tile, strict=True)):
            return None
        return MatmulParts(reduces[0], first_value, second_value, rows, columns, depth, batch)
    return None
