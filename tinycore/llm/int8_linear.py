"""Products of many rows of activations with quantized weights in integers (prefill): x is quantized per block of 32
values to int8 with one float32 scale per block (llama.cpp's Q8_0 activations: d = amax / 127, q = round(x / d)),
each block's 32 products with the weight's integers are summed in int32, and only that sum is multiplied by the two
blocks' scales in float. No float copy of the weight is written: its integers (tinycore.nn.gguf.integer_blocks) are
written as int8 slabs of output rows. Slower than the float paths with today's codegen (INT8_PREFILL)."""
from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, NamedTuple

from tinycore.dtype import dtypes
from tinycore.helpers import ContextVar, prod
from tinycore.nn.gguf import GGML_TYPES, integer_blocks
from tinycore.tensor import Tensor

if TYPE_CHECKING:
    from tinycore.uop.uop import UOp

INT8_PREFILL = ContextVar("INT8_PREFILL", 0)
"""1: prefill products of quantized weights run in integers (int8_linear) on devices that declare int8 dot
products. Off by default: on the 2-core Zen 4 development machine (AVX-512 VNNI) the kernels codegen makes of this
graph (int32 multiplies, no vpdpbusd/vpmaddwd) took 2.4-3.5x the CPU time of the float32 slabs (docs/llm.md)."""

LANES = 8
"""Lanes of a block's int32 partial sum: a block of 32 is 32 // LANES groups whose products are added lane by lane,
then converted and scaled once per block and row. With 8 the codegen upcasts ROW_GROUP rows; with 16 it did not."""

ROW_GROUP = 4
"""Rows of x that share each block's loaded and widened weight integers: the product's output is (row groups,
outputs, ROW_GROUP), the group innermost, which the codegen upcasts whole."""


class QuantizedRows(NamedTuple):
    """Activations quantized per block of 32: `values` int8 (rows, blocks, 32), `scale` float32 (rows, blocks) and
    `sums` int32 (rows, blocks, LANES), the sum of each lane's values over the block's groups (for the weights'
    minimums)."""

    values: Tensor
    scale: Tensor
    sums: Tensor


_LAST: list[tuple[object, QuantizedRows]] = []
"""The last activations quantized, by the identity of their graph node: q, k and v (and gate and up) read the same x,
which is then quantized once."""


def quantize_rows(x: Tensor) -> QuantizedRows:
    """x (..., inputs) with inputs a multiple of 32 as QuantizedRows, realized. Per block of 32: d = amax / 127 and
    q = round(x * (127 / amax)) (halves to even), both 0 for a block of zeros. The same x (the same graph node) is
    quantized once for consecutive calls."""
    if _LAST and _LAST[0][0] is x.uop:
        return _LAST[0][1]
    inputs = x.shape[-1]
    if not isinstance(inputs, int) or inputs % 32:
        raise ValueError(f"integer products quantize x per block of 32 values: its last axis is {inputs}, not a "
                         "multiple of 32")
    rows = prod(x.shape[:-1])
    blocks = x.reshape(rows, inputs // 32, 32).cast(dtypes.float32)
    largest = blocks.abs().max(-1, keepdim=True)
    inverse = (largest > 0).where(127.0 / largest.maximum(1e-30), 0.0)
    values = (blocks * inverse).round().cast(dtypes.int8).contiguous()
    scale = (largest / 127.0).reshape(rows, inputs // 32).contiguous()
    sums = values.reshape(rows, inputs // 32, 32 // LANES, LANES).cast(dtypes.int32).sum(2).contiguous()
    Tensor.realize(values, scale, sums)
    quantized = QuantizedRows(values, scale, sums)
    _LAST[:] = [(x.uop, quantized)]
    return quantized


def forget_quantized() -> None:
    """Drop the cached quantized activations (their buffers go back to the allocator)."""
    _LAST.clear()


def fast_int8_dot_products(device: str | tuple[str, ...]) -> bool:
    """Whether kernels on `device` have fast int8 dot products (its renderer declares `int8_dot_products`)."""
    from tinycore.device.registry import Device
    name = device[0] if isinstance(device, tuple) else device
    return Device[name].renderer.int8_dot_products


def integer_slab_rows(outputs: int, inputs: int, budget_bytes: int) -> int:
    """Output rows per int8 slab of a weight (outputs, inputs): the largest divisor of `outputs` whose slab of int8
    values fits `budget_bytes` (equal slabs share their kernels), at least one row."""
    budget = max(1, budget_bytes // inputs)
    if budget >= outputs:
        return outputs
    return max(rows for rows in range(1, budget + 1) if outputs % rows == 0)


def integer_slab(row_blocks: Tensor, ggml_type: int, inputs: int, start: int | UOp, count: int) -> IntegerSlab:
    """Output rows [start, start + count) of a quantized weight (its blocks `row_blocks` in the file's order, row
    after row) as integers, realized: values int8 (count, inputs // 32, 32), scale float32 (count, inputs // 32, 2)
    (per half block of 16 values) and minimum float32 (count, inputs // 32) or None. `start` may be a bound
    Variable, but not one bound to several values in one TinyJit capture: a replay gives it one value."""
    per_row = inputs // GGML_TYPES[ggml_type][1]
    width = row_blocks.shape[1]
    chosen = row_blocks.reshape(-1, per_row * width).shrink(((start, start + count), None))
    integers = integer_blocks(chosen.reshape(count, per_row, width), ggml_type)
    blocks = inputs // 32
    values = integers.values.cast(dtypes.int8).reshape(count, blocks, 32).contiguous()
    scale = integers.scale.reshape(count, blocks, 2).contiguous()
    minimum = None if integers.minimum is None else integers.minimum.reshape(count, blocks).contiguous()
    Tensor.realize(values, scale, *(() if minimum is None else (minimum,)))
    return IntegerSlab(values, scale, minimum)


class IntegerSlab(NamedTuple):
    """Output rows of a quantized weight as int8 values per block of 32 (see integer_slab)."""

    values: Tensor
    scale: Tensor
    minimum: Tensor | None


def int8_product(quantized: QuantizedRows, slab: IntegerSlab, separate_halves: bool = False) -> Tensor:
    """x @ slab.T for activations quantized per block of 32 and a slab of weight rows as integers: float32 (rows,
    slab rows). Per block, row and output the 32 products are summed in int32 over LANES lanes (int16 vector
    products would be narrower, but the C renderer computes those lane by lane), converted once and multiplied by
    the weight's scale, then by x's; the weight's minimums come in as the minimum times x's lane sums,
    in the same sum. `separate_halves` (Q6_K): each half block of 16 has a scale of its own."""
    rows, blocks = quantized.scale.shape
    outputs = slab.values.shape[0]
    group = ROW_GROUP if rows % ROW_GROUP == 0 else 1
    row_groups = rows // group
    groups = 32 // LANES  # a half block of 16 values is groups // 2 of them
    # weight (1, outputs, 1, blocks, groups, lanes); x (row groups, 1, group, blocks, groups, lanes)
    values = slab.values.reshape(1, outputs, 1, blocks, groups, LANES).cast(dtypes.int32)
    x_values = quantized.values.reshape(row_groups, 1, group, blocks, groups, LANES).cast(dtypes.int32)
    halves: list[Tensor] = []
    for half in range(2):
        products = [x_values[..., index, :] * values[..., index, :]
                    for index in range(half * groups // 2, (half + 1) * groups // 2)]
        halves.append(functools.reduce(operator.add, products))
    scale = slab.scale.reshape(1, outputs, 1, blocks, 2, 1)
    if not separate_halves:
        term = (halves[0] + halves[1]).cast(dtypes.float32) * scale[..., 0, :]
    else:
        term = halves[0].cast(dtypes.float32) * scale[..., 0, :] + halves[1].cast(dtypes.float32) * scale[..., 1, :]
    if slab.minimum is not None:
        sums = quantized.sums.reshape(row_groups, 1, group, blocks, LANES).cast(dtypes.float32)
        term = term + sums * slab.minimum.reshape(1, outputs, 1, blocks, 1)
    x_scale = quantized.scale.reshape(row_groups, 1, group, blocks, 1)
    result = (term * x_scale).sum((-2, -1))  # (row groups, outputs, group), the group innermost as computed
    return result.contiguous().permute(0, 2, 1).reshape(rows, outputs)


def int8_linear(x: Tensor, row_blocks: Tensor, ggml_type: int, shape: tuple[int, int], slab_rows: int) -> Tensor:
    """x @ weight.T in integers for a 2-D quantized weight of `shape` (outputs, inputs) whose blocks `row_blocks`
    (block count, bytes per block) are in the file's order: x quantized per block of 32 (quantize_rows), the weight
    converted to int8 values `slab_rows` output rows at a time (integer_slab; no float copy of it), each slab
    multiplied by int8_product. Returns (..., outputs) in x's dtype."""
    outputs, inputs = shape
    quantized = quantize_rows(x)
    pieces = []
    # each slab's first row a constant (a kernel per slab): a Variable bound to another value per slab is one value
    # in a TinyJit replay, so every slab would replay the last slab's rows
    for first in range(0, outputs, slab_rows):
        slab = integer_slab(row_blocks, ggml_type, inputs, first, slab_rows)
        product = int8_product(quantized, slab, separate_halves=ggml_type == 14)
        pieces.append(product.realize() if slab_rows < outputs else product)
    result = pieces[0].cat(*pieces[1:], dim=-1) if len(pieces) > 1 else pieces[0]
    return result.cast(x.dtype).reshape(*x.shape[:-1], outputs)
