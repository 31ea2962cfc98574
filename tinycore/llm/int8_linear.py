"""Products of many rows of activations with quantized weights in integers (prefill): x is quantized per block of 32
values to int8 with one float32 scale per block (llama.cpp's Q8_0 activations: d = amax / 127, q = round(x / d)),
each block's 32 products with the weight's integers are summed in int32 lanes of 4 adjacent bytes (one
tinycore.codegen.int8_dot.dot4_bytes each: a vpdpbusd lane on CPUs with VNNI), and only those sums are multiplied by
the two blocks' scales in float. No float copy of the weight is written: its integers
(tinycore.nn.gguf.integer_blocks) are written as slabs of output rows, 4 bytes per int32 word. Off by default
(INT8_PREFILL): still slower than the float32 slabs here."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tinycore.codegen.int8_dot import dot4_bytes
from tinycore.dtype import dtypes
from tinycore.helpers import ContextVar, prod
from tinycore.nn.gguf import GGML_TYPES, integer_blocks
from tinycore.tensor import Tensor

if TYPE_CHECKING:
    from tinycore.uop.uop import UOp

INT8_PREFILL = ContextVar("INT8_PREFILL", 0)
"""1: prefill products of quantized weights run in integers (int8_linear) on devices that declare int8 dot
products. Off by default: on the 2-core Zen 4 development machine (AVX-512 VNNI) the product kernel runs on vpdpbusd
with a register tile of 4 rows x 2 outputs (tinycore.codegen.optimize.Heuristic.dot4_tile), as fast as the float32
slabs' register-tiled FMA product, but a whole linear (the slab conversions and the minimums' product included) is
still 0.95-1.22x the float32 slabs' CPU time for Q8_0 and Q4_0 and 1.33-1.44x for Q4_K (docs/llm.md, "Prefill in
integers")."""

LANES = 8
"""int32 lanes of a block: each holds 4 adjacent values (a word of 4 bytes), its 4 products summed by one dot4_bytes,
then converted and scaled once per block and row. With 8 the codegen upcasts ROW_GROUP rows; with 16 it did not."""

ROW_GROUP = 4
"""Rows of x that share each block's loaded weight words: the product's output is (outputs, row groups, ROW_GROUP),
the group innermost, which the codegen upcasts whole."""


class QuantizedRows(NamedTuple):
    """Activations quantized per block of 32: `words` int32 (rows, blocks, LANES), each 4 adjacent int8 values of the
    block, `scale` float32 (rows, blocks), `sums` int32 (rows, blocks, 2), the values of each half block summed (for
    the weight's minimums), and `offsets` int32 (rows, blocks, LANES), each word's 4 values summed times -128 (taking
    the weight's offset of 128 back out, see integer_slab)."""

    words: Tensor
    scale: Tensor
    sums: Tensor
    offsets: Tensor


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
    sums = values.reshape(rows, inputs // 32, 2, 16).cast(dtypes.int32).sum(-1).contiguous()
    lanes = values.reshape(rows, inputs // 32, LANES, 4).cast(dtypes.int32)
    words, offsets = pack_words(lanes), (lanes.sum(-1) * -128).contiguous()
    Tensor.realize(words, scale, sums, offsets)
    quantized = QuantizedRows(words, scale, sums, offsets)
    _LAST[:] = [(x.uop, quantized)]
    return quantized


def pack_words(values: Tensor) -> Tensor:
    """int32 values (..., 4) in -128..255 as one int32 word each (..., ), value i in byte i (the lowest first, as a
    little-endian int8 buffer bitcast to int32 holds them), built in one kernel with the values."""
    unsigned = values.cast(dtypes.uint32) & 255
    word = unsigned[..., 0] | unsigned[..., 1] << 8 | unsigned[..., 2] << 16 | unsigned[..., 3] << 24
    return word.bitcast(dtypes.int32).contiguous()


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
    after row) as integers, realized: words int32 (count, inputs // 32, LANES), each 4 adjacent values plus 128 as
    unsigned bytes (vpdpbusd multiplies unsigned bytes by signed ones), scale float32 (count, inputs // 32, 2)
    (per half block of 16 values) and minimum float32 (count, inputs // 32) or None. `start` may be a bound
    Variable, but not one bound to several values in one TinyJit capture: a replay gives it one value."""
    per_row = inputs // GGML_TYPES[ggml_type][1]
    width = row_blocks.shape[1]
    chosen = row_blocks.reshape(-1, per_row * width).shrink(((start, start + count), None))
    integers = integer_blocks(chosen.reshape(count, per_row, width), ggml_type)
    blocks = inputs // 32
    # offset by 128 to unsigned bytes, vpdpbusd's first operand (int8_product takes the offset back out)
    words = pack_words((integers.values.cast(dtypes.int32) + 128).reshape(count, blocks, LANES, 4))
    scale = integers.scale.reshape(count, blocks, 2).contiguous()
    minimum = None if integers.minimum is None else integers.minimum.reshape(count, blocks).contiguous()
    Tensor.realize(words, scale, *(() if minimum is None else (minimum,)))
    return IntegerSlab(words, scale, minimum)


class IntegerSlab(NamedTuple):
    """Output rows of a quantized weight per block of 32 (see integer_slab): `words` int32 (rows, blocks, LANES), each
    4 of the block's values as unsigned bytes (value + 128)."""

    words: Tensor
    scale: Tensor
    minimum: Tensor | None


def int8_product(quantized: QuantizedRows, slab: IntegerSlab, separate_halves: bool = False) -> Tensor:
    """x @ slab.T for activations quantized per block of 32 and a slab of weight rows as integers: float32 (rows,
    slab rows). Each int32 lane of a block holds 4 adjacent bytes; its 4 products are one dot4_bytes of the weight's
    offset bytes (unsigned) and x's (signed), which codegen turns into one vpdpbusd lane where the renderer declares
    int8 dot products; the offset of 128 comes back out in the same int32 sum (x's `offsets`), so the lane is exact.
    Each lane is converted once and multiplied by the weight block's scale and x block's; the weight's minimums come in
    as a small product of their own (minimum times x's half block sums and scale). `separate_halves` (Q6_K): each
    half block of 16 has a scale of its own."""
    rows, blocks = quantized.scale.shape
    outputs = slab.words.shape[0]
    group = ROW_GROUP if rows % ROW_GROUP == 0 else 1
    row_groups = rows // group
    # weight (outputs, 1, 1, blocks, lanes) and x (1, row groups, group, blocks, lanes), broadcast before the bytes are
    # taken apart: the scheduler gives a broadcast computed node a buffer of its own (fusion.RECOMPUTE_LIMIT), and the
    # words, not their bytes, are what the dot product reads. Outputs outermost: one output row's words stay in cache
    # while every row group passes (x's words for 64 rows are 128 KB, the slab's several MB)
    full = (outputs, row_groups, group, blocks, LANES)
    weight_shape, x_shape = (outputs, 1, 1, blocks), (1, row_groups, group, blocks)
    words = slab.words.reshape(*weight_shape, LANES).expand(full)
    x_words = quantized.words.reshape(*x_shape, LANES).expand(full)
    offsets = quantized.offsets.reshape(*x_shape, LANES).expand(full)
    lanes = (dot4_bytes(words, x_words) + offsets).cast(dtypes.float32)
    scale = slab.scale.reshape(*weight_shape, 2, 1)
    x_scale = quantized.scale.reshape(*x_shape, 1)
    # lanes 0-3 are the first half block's 16 bytes: with separate halves (Q6_K) their own scale. The lanes times the
    # weight's scale (broadcast), then a multiply-add with x's (broadcast): two vector ops per block, row and output,
    # where the two scales' scalar product and its broadcast were three (a 4096 x 2048 Q8_0 slab times 64 rows, one
    # thread, load 3.5-3.9: 9.2-9.4 -> 8.9-9.2 ms; Q4_K 9.9-10.3 -> 9.7-10.0 ms)
    weight_scale = scale.expand(*weight_shape, 2, LANES // 2).reshape(*weight_shape, LANES) if separate_halves \
        else scale[..., 0, :]
    term = lanes * weight_scale * x_scale
    products = term.sum((-2, -1)).contiguous()  # (outputs, row groups, group), the group innermost as computed
    products = products.reshape(outputs, rows).permute(1, 0)
    if slab.minimum is None:
        return products
    # the weight's minimum per block times x's half block sums: a small product of its own
    x_terms = (quantized.sums.cast(dtypes.float32) * quantized.scale.reshape(rows, blocks, 1)).reshape(rows, blocks * 2)
    weight_terms = slab.minimum.reshape(outputs, blocks, 1).expand(outputs, blocks, 2).reshape(outputs, blocks * 2)
    return products + x_terms @ weight_terms.T


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
