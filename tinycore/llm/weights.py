"""Model weights as stored in a GGUF file: quantized blocks stay raw bytes (uint8) on the device and are dequantized
by Tensor ops inside the kernels that read them, so resident weight memory stays near the file's size."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tinycore.dtype import dtypes
from tinycore.engine.jit import TinyJit
from tinycore.engine.realize import capturing
from tinycore.helpers import prod
from tinycore.llm.int8_linear import INT8_PREFILL, fast_int8_dot_products, int8_linear, integer_slab_rows
from tinycore.nn.gguf import (
    GGML_TYPES,
    LANE_TYPES,
    block_lane_terms,
    dequantize,
    gguf_load_blocks,
    k_lane_parts,
    k_minimum_lanes,
    q6_k_groups,
    q6_k_scales,
)
from tinycore.tensor import Tensor

if TYPE_CHECKING:
    from tinycore.uop.uop import UOp

PLAIN_TYPES = {0: "F32", 1: "F16", 30: "BF16"}
"""ggml types held as tensors of their own dtype."""

LANE_ROWS = 4
"""Rows of activations up to which the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) multiply in lane form,
the weight's blocks converted in the kernel for every row (decode, a batch's decode step of a few sequences). Was
16 while each slab of the slabs below cost ~3 ms of Python; with the slab products replayed (`_slab_linear`), one
product of each 1B shape (2048 x 2048, 8192 x 2048, 2048 x 8192; 2 threads, CPU time, load ~10) took in lane form /
in slabs: Q8_0 5 rows 102 / 34 ms, 8 rows 53 / 39, 16 rows 91 / 42; Q4_0 7 rows 103 / 31 ms."""

GROUPED_LANE_ROWS = 32
"""Rows of activations up to which Q4_0, Q4_1, Q5_0 and Q5_1 multiply in lane form when the row count is a multiple
of ROW_GROUP (then a block's conversion serves ROW_GROUP rows, below). Was 64 while the slabs paid ~3 ms of Python
each; with them replayed, one product of each 1B shape (as for LANE_ROWS) in lane form / in slabs: Q4_0 8 rows 26 /
26 ms, 16 rows 41 / 39, 32 rows 64 / 64, 64 rows 164 / 104; a 1B Q4_0 prompt of 64 tokens took 5.1-5.2 s of CPU
time in lane form and 2.8-3.0 s in slabs. Q8_0 (no row groups) keeps LANE_ROWS."""

ROW_GROUP = 4
"""Rows of x that share each block's loaded and converted values in the lane form of several rows (`_lane_linear`):
the codegen upcasts an output axis of this size whole."""

GROUPED_TYPES = (2, 3, 6, 7)
"""ggml types (Q4_0, Q4_1, Q5_0, Q5_1) whose lane form takes rows in groups of ROW_GROUP. Not Q8_0, whose x operands
are x itself: its rows grouped this way measured 3-4x slower (not looked into)."""

CHUNK_INPUTS = 1024
"""Inputs per column chunk (tinycore.llm.weights.GGUFWeight.repack) of the 32-value block types' weights with more
than 2 * CHUNK_INPUTS inputs. x's operands of a row of 8192 inputs (32 KB for Q8_0, 40 KB for Q4_0) overflow a
32 KB L1 cache while every output row reads them; a chunk's (4-5 KB) stays. 2048 x 8192 matvec, one thread:
Q4_0 1.25-1.34 -> 1.18-1.19 ms, Q8_0 2.06 -> 1.20 ms; 512 or 2048 inputs per chunk were slower, and 8192 x 2048
gained nothing from 2 chunks."""

FUSED_ROWS = 4
"""Rows of activations up to which a quantized matmul dequantizes inside its kernel (decode of a batch of sequences);
above, the weight is dequantized once into slabs (prefill)."""

SLAB_BYTES = 8 << 20
"""The largest float32 temporary of a dequantized weight while several rows of activations run (prefill): a larger
weight is dequantized and multiplied a slab of output rows at a time, so the temporaries stay small beside the
quantized weights instead of a float32 copy of the largest matrix (4-8x its quantized size)."""


class GGUFWeight:
    """One weight tensor of a GGUF file: `data` holds the file's bytes on the device (the tensor itself for F32, F16
    and BF16; uint8 blocks (block count, bytes per block) for quantized types, row after row, or after `repack`
    column chunk after column chunk: `chunks` of them), `shape` its logical shape."""

    def __init__(self, name: str, ggml_type: int, shape: tuple[int, ...], data: Tensor):
        self.name, self.ggml_type, self.shape, self.data = name, ggml_type, tuple(shape), data
        self.chunks = 1

    def repack(self, chunks: int) -> None:
        """Store a 2-D weight of a 32-value block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as `chunks` column chunks,
        (chunks, outputs, blocks per chunk, bytes per block): a one-row product then runs chunk by chunk over every
        output row, so x's operands for one chunk stay in the L1 cache while all rows read them, and adds the
        chunks' partial sums at the end. The copy replaces the old bytes (no extra resident memory)."""
        blocks = self.shape[-1] // 32 if len(self.shape) == 2 else 0
        if self.ggml_type not in LANE_TYPES or self.chunks != 1 or chunks < 1 or not blocks or blocks % chunks:
            raise ValueError(f"cannot repack {self!r} ({self.chunks} chunks now) into {chunks} column chunks: needs "
                             f"a 2-D Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 weight whose {blocks} blocks a row split evenly")
        if chunks == 1:
            return
        outputs, width = self.shape[0], self.data.shape[1]
        chunked = self.data.reshape(outputs, chunks, blocks // chunks, width).permute(1, 0, 2, 3)
        self.data, self.chunks = chunked.reshape(-1, width).contiguous().realize(), chunks

    def _row_blocks(self) -> Tensor:
        """The quantized blocks in the file's order (row after row), a view of `data` whatever its chunking."""
        if self.chunks == 1:
            return self.data
        outputs, width = self.shape[0], self.data.shape[1]
        chunked = self.data.reshape(self.chunks, outputs, -1, width)
        return chunked.permute(1, 0, 2, 3).reshape(-1, width)

    @property
    def type_name(self) -> str:
        """The ggml type's name ("Q4_K", "F16", ...)."""
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        """The bytes this weight takes on the device."""
        return int(self.data.nbytes())

    def float(self) -> Tensor:
        """The weight as float32 of its logical shape (lazy: fused into whatever consumes it)."""
        if self.ggml_type in PLAIN_TYPES:
            return self.data.cast(dtypes.float32).reshape(self.shape)
        return dequantize(self._row_blocks(), self.ggml_type).reshape(self.shape)

    def rows(self, start: int | UOp, count: int) -> Tensor:
        """Rows [start, start + count) of a 2-D weight as float32 (count, columns), dequantizing only those rows'
        blocks. `start` may be a bound Variable."""
        rows, columns = self.shape[0], prod(self.shape[1:])
        if self.ggml_type in PLAIN_TYPES:
            flat = self.data.reshape(rows, columns)
            return flat.shrink(((start, start + count), None)).cast(dtypes.float32)
        blocks_per_row = columns // GGML_TYPES[self.ggml_type][1]
        per_row = self._row_blocks().reshape(rows, blocks_per_row * self.data.shape[1])
        chosen = per_row.shrink(((start, start + count), None)).reshape(count * blocks_per_row, self.data.shape[1])
        # rows are taken to be stored (prefill slabs): the K types' scales unpacked once per sub-block, not per value
        return dequantize(chosen, self.ggml_type, stored_scales=True).reshape(count, columns)

    def gather_rows(self, indices: Tensor) -> Tensor:
        """Rows `indices` (an integer tensor of any shape) of the leading axis, as float32 of shape
        indices.shape + the remaining axes; only the chosen rows' blocks are dequantized."""
        rest = self.shape[1:]
        if self.ggml_type in PLAIN_TYPES:
            return self.data.reshape(self.shape[0], prod(rest))[indices].cast(dtypes.float32).reshape(
                *indices.shape, *rest)
        per_row = self._row_blocks().reshape(self.shape[0], -1)
        chosen = per_row[indices].reshape(-1, self.data.shape[1])
        return dequantize(chosen, self.ggml_type).reshape(*indices.shape, *rest)

    def linear(self, x: Tensor) -> Tensor:
        """x @ weight.T for a weight of shape (out, in). For one row of x (decode; up to LANE_ROWS rows for the
        32-value block types, and up to GROUPED_LANE_ROWS rows in groups of ROW_GROUP for those but Q8_0) the
        dequantization is part of the matmul's kernel, so no float copy of the weight is
        written; for more rows (prefill) the weight is dequantized once into temporaries, a slab at a time, and the
        matmul runs on floats, which costs less than dequantizing it again for every row. With INT8_PREFILL=1 on a
        device that declares int8 dot products, prefill multiplies in integers instead
        (tinycore.llm.int8_linear: x quantized per block of 32, slabs of the weight's bytes, codegen's int8 dot
        product op)."""
        rows = prod(x.shape[:-1])
        if self.ggml_type in LANE_TYPES and isinstance(rows, int) and len(self.shape) == 2 and (
                rows <= LANE_ROWS or (rows <= GROUPED_LANE_ROWS and self._row_group(rows) > 1)):
            return self._lane_linear(x)
        if self.ggml_type == 14 and isinstance(rows, int) and rows <= FUSED_ROWS and len(self.shape) == 2:
            return self._q6_k_lane_linear(x)
        if self.ggml_type in (12, 13) and isinstance(rows, int) and rows <= FUSED_ROWS and len(self.shape) == 2:
            return self._k_lane_linear(x)
        if self.ggml_type in PLAIN_TYPES or not isinstance(rows, int) or rows <= FUSED_ROWS or len(self.shape) != 2:
            return x.matmul(self.float().T)
        outputs, inputs = self.shape
        if INT8_PREFILL.value and inputs % 32 == 0 and fast_int8_dot_products(x.device):
            return int8_linear(x, self._row_blocks(), self.ggml_type, (outputs, inputs),
                               integer_slab_rows(outputs, inputs, SLAB_BYTES))
        return _slab_linear(x, self)

    def _row_group(self, rows: int) -> int:
        """ROW_GROUP when the lane form takes these rows of x in groups (a GROUPED_TYPES weight, more rows than one
        group and a whole number of groups), else 1."""
        grouped = self.ggml_type in GROUPED_TYPES and rows > ROW_GROUP and rows % ROW_GROUP == 0
        return ROW_GROUP if grouped else 1

    def _lane_linear(self, x: Tensor) -> Tensor:
        """x @ weight.T for a few rows of x (one in decode) and a weight whose blocks of 32 hold one scale each
        (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; tinycore.nn.gguf.block_lane_terms). Each block is 4 groups of 8 values (one
        vector each); the block's integer lane terms times their x operands are added elementwise into one 8-wide
        partial per block, and only that partial is multiplied by the block's scale, so the scale costs one
        multiply per block instead of one per value. The x operands (x's groups combined per term: the nibble and
        high-bit terms need x scaled or mixed) and x's sums per lane (for the offset of unsigned values, or the
        blocks' minimums) are computed once per step, shared by every output row. With several rows of x the
        scales, broadcast over those rows, are a small kernel of their own (one float per block). A repacked weight
        (`chunks` > 1) sums each column chunk over all output rows into partials, then adds the partials."""
        outputs, inputs = self.shape
        rows = prod(x.shape[:-1])
        blocks = inputs // 32
        chunks = self.chunks
        per_chunk = blocks // chunks
        # more than ROW_GROUP rows: (row groups, outputs, ROW_GROUP) with the group innermost, which the codegen
        # upcasts, so a block is loaded and converted once for ROW_GROUP rows; the groups outermost, so that one
        # group's x operands stay in cache while the weight streams past (all rows' did not: 160 KB for 16 rows)
        group = self._row_group(rows)
        width = self.data.shape[1]
        if group > 1:
            data = self.data.reshape(chunks, 1, outputs, 1, per_chunk, width)
            xg = x.reshape(rows // group, group, chunks, per_chunk, 4, 8).permute(2, 0, 1, 3, 4, 5).unsqueeze(2)
        else:
            data = self.data.reshape(chunks, outputs, 1, per_chunk, width)
            xg = x.reshape(1, rows, chunks, per_chunk, 4, 8).permute(2, 0, 1, 3, 4, 5)
        lanes = block_lane_terms(data, self.ggml_type)
        xg = xg.cast(dtypes.float32)
        coefficients = [coefficient for coefficient, _ in lanes.terms]
        partial: Tensor | None = None
        if coefficients == [_GROUP[group] for group in range(4)] and lanes.offset == 0 and lanes.minimum is None:
            operands = [xg[..., group, :] for group in range(4)]  # plain groups: x itself, no kernel of its own
        else:
            # x's sums per lane first (negated times the offset, so the kernel's multiply-add chain starts with
            # them; or for the minimums), then each term's operand: one small kernel per step
            sums = tuple(tuple(-lanes.offset if lanes.offset else 1.0 for _ in range(8)) for _ in range(4))
            together = (xg.unsqueeze(-3) * _constant((sums, *coefficients), xg.device)).sum(-2).contiguous()
            operands = [together[..., index + 1, :] for index in range(len(lanes.terms))]
            first = together[..., 0, :]
            partial = first if lanes.offset else None
        for operand, (_, values) in zip(operands, lanes.terms, strict=True):
            term = operand * values.cast(dtypes.float32)
            partial = term if partial is None else partial + term
        assert partial is not None
        scaled = partial * lanes.scale.unsqueeze(-1)
        if lanes.minimum is not None:
            scaled = scaled + first * lanes.minimum.unsqueeze(-1)
        result = scaled.sum((-2, -1))
        result = result[0] if chunks == 1 else result.contiguous().sum(0)
        if group > 1:  # (groups, outputs, group) -> (rows, outputs)
            return result.contiguous().permute(0, 2, 1).cast(x.dtype).reshape(*x.shape[:-1], outputs)
        return result.T.cast(x.dtype).reshape(*x.shape[:-1], outputs)

    def _k_lane_linear(self, x: Tensor) -> Tensor:
        """x @ weight.T for up to FUSED_ROWS rows of x (one in decode; a batch's decode step, a short prompt) and a
        Q4_K or Q5_K weight in lane form: each sub-block of 32 values is 4 groups of 8 whose products with x are
        added into one 8-wide partial, multiplied once by the sub-block's
        6-bit scale; the minimums come off as x's sums per sub-block (a small kernel once per step) times the
        block's vector of 8 minimums (`k_minimum_lanes`, sub-blocks as lanes: one 8-wide multiply-add per block);
        the block's two sums are multiplied once by its factors d and dmin. Several rows of x are one more output
        axis (the blocks' factors, broadcast over the rows, then become small kernels of their own): 4 rows of a
        1024 x 2048 Q4_K product took about 500 us of kernel time on one thread, against 820-850 us for the
        plain product of the dequantized weight (its float32 copy a kernel of its own)."""
        outputs, inputs = self.shape
        blocks = inputs // 256
        rows = prod(x.shape[:-1])
        data = self.data.reshape(outputs, 1, blocks, self.data.shape[1])
        groups, scales, _, factor, minimum_factor = k_lane_parts(data, self.ggml_type)
        xg = x.reshape(1, rows, blocks, 8, 4, 8).cast(dtypes.float32)
        # x's sum per sub-block, negated (the kernel adds dmin * (minimum * -sum)): one small kernel per step. The
        # minimums are one vector per block with the sub-blocks as lanes, so their term is one 8-wide product
        # added into the same 8 lanes as the values' partials (the reduce sums every lane of both alike)
        sums = (-xg.sum((4, 5))).contiguous()
        offsets = sums * k_minimum_lanes(data).cast(dtypes.float32)
        scaled: Tensor | None = None
        for sub in range(8):
            partial = xg[:, :, :, sub, 0] * groups[4 * sub].cast(dtypes.float32)
            for group in range(1, 4):
                partial = partial + xg[:, :, :, sub, group] * groups[4 * sub + group].cast(dtypes.float32)
            term = partial * scales[sub]
            scaled = term if scaled is None else scaled + term
        assert scaled is not None
        result = (scaled * factor + offsets * minimum_factor).sum((2, 3))
        return result.T.cast(x.dtype).reshape(*x.shape[:-1], outputs)

    def _q6_k_lane_linear(self, x: Tensor) -> Tensor:
        """x @ weight.T for up to FUSED_ROWS rows of x (their axis leading the outputs') and a Q6_K weight, as
        _lane_linear does it (4 rows of 8192 x 2048, 2 threads: 16-17 ms of CPU time, against 22-26 ms for the
        dequantized weight's kernel and a plain product): each sub-block of 16 values is
        2 groups of 8 whose products with x are added into one 8-wide partial, multiplied once by the sub-block's
        scale; the 16 scaled partials of a block are added and multiplied once by the block's factor. The values
        stay unsigned (0..63) and the offset 32 comes off as 32 * x's sums per sub-block and lane."""
        outputs, inputs = self.shape
        blocks = inputs // 256
        data = self.data.reshape(1, outputs, blocks, self.data.shape[1])
        groups = q6_k_groups(data)
        scales, factor = q6_k_scales(data)
        xg = x.reshape(prod(x.shape[:-1]), 1, blocks, 16, 2, 8).cast(dtypes.float32)  # rows lead the outputs
        correction = (xg.sum(4) * -32).contiguous()
        total: Tensor | None = None
        for sub in range(16):
            partial = xg[:, :, :, sub, 0] * groups[2 * sub].cast(dtypes.float32) + \
                xg[:, :, :, sub, 1] * groups[2 * sub + 1].cast(dtypes.float32)
            scaled = (correction[:, :, :, sub] + partial) * scales[..., sub:sub + 1]
            total = scaled if total is None else total + scaled
        assert total is not None
        result = (total * factor.unsqueeze(-1)).sum((2, 3))
        return result.cast(x.dtype).reshape(*x.shape[:-1], outputs)

    def __repr__(self) -> str:
        return f"GGUFWeight({self.name!r}, {self.type_name}, shape={self.shape})"


_GROUP = [tuple(tuple(1.0 if other == group else 0.0 for _ in range(8)) for other in range(4)) for group in range(4)]
"""The lane coefficients that take x's group g as it is."""


_CONSTANTS: dict[tuple[object, str], Tensor] = {}


def _constant(values: tuple[object, ...], device: str | tuple[str, ...]) -> Tensor:
    """`values` as a float32 tensor on `device`, realized once: every product that reads the same x then shares one
    operand kernel (a new constant buffer per weight would make each weight's operands a node of its own)."""
    name = device if isinstance(device, str) else device[0]
    if (values, name) not in _CONSTANTS:
        _CONSTANTS[(values, name)] = Tensor(list(values), dtype=dtypes.float32, device=name).realize()
    return _CONSTANTS[(values, name)]


def _slab_rows(outputs: int, inputs: int) -> int:
    """Output rows per slab of a weight (outputs, inputs) dequantized to float32 at most SLAB_BYTES at a time: the
    largest divisor of `outputs` within the budget (equal slabs share their kernels), at least one row."""
    budget = max(1, SLAB_BYTES // (inputs * 4))
    if budget >= outputs:
        return outputs
    return max(rows for rows in range(1, budget + 1) if outputs % rows == 0)


SLAB_PRODUCTS = 16
"""Captured slab products (`_slab_linear`) kept, one per weight type, shape and shape of x: a prompt's chunks share
them; a new shape of x (a prompt's last, shorter chunk) adds one, and the oldest goes beyond this many."""

_slab_products: dict[tuple[object, ...], TinyJit[None]] = {}


def _slab_linear(x: Tensor, weight: GGUFWeight) -> Tensor:
    """x @ weight.T a slab of output rows at a time (`_slab_product`), as a TinyJit per weight type, shape and shape
    of x whose inputs are x, the weight's bytes and the result's buffer: the many products of a prompt's chunk
    (every layer's weights of one shape) replay the captured kernels instead of building, scheduling and launching
    each slab's graph in Python again (about 3 ms a slab: more than its kernels take). The replay's slabs go back to
    the allocator after each call (`free_intermediates`), so the captures hold no float copy of a weight between
    calls. Inside another TinyJit's capture (a batch's decode step) the slabs are realized as they come."""
    # x stored once: left lazy, every slab recomputed it (the norm before q, silu(gate) * up before down)
    x = x.contiguous().realize()
    outputs = weight.shape[0]
    if capturing() or not isinstance(x.device, str) or x.dtype != dtypes.float32:
        return _slab_product(x, weight.data, None, weight.ggml_type, weight.shape, weight.chunks)
    key = (weight.ggml_type, weight.shape, weight.chunks, tuple(weight.data.shape), x.shape, x.device)
    product = _slab_products.pop(key, None)
    if product is None:
        if len(_slab_products) >= SLAB_PRODUCTS:
            _slab_products.pop(next(iter(_slab_products)))
        ggml_type, shape, chunks = weight.ggml_type, weight.shape, weight.chunks

        def product_into(x: Tensor, data: Tensor, out: Tensor) -> None:
            # returns nothing: a TinyJit that returns its input `out` would point that tensor, which the caller
            # keeps, at the next call's `out` on each replay
            _slab_product(x, data, out, ggml_type, shape, chunks)
        product = TinyJit(product_into)
    _slab_products[key] = product  # last used last: the first is the one to drop
    out = Tensor.empty(*x.shape[:-1], outputs, dtype=dtypes.float32, device=x.device)
    product(x, weight.data, out)
    captured = product.captured
    if captured is not None:
        captured.free_intermediates()
    return out


def _slab_product(x: Tensor, data: Tensor, out: Tensor | None, ggml_type: int, shape: tuple[int, ...],
                  chunks: int) -> Tensor:
    """x @ weight.T for the weight of `ggml_type` and `shape` whose bytes are `data` (`chunks` column chunks):
    its output rows dequantized a slab at a time (`_slab_rows`), each slab multiplied and realized before the
    next is made, the pieces joined into `out` (assigned; lazy when `out` is None). Each slab's first row is a
    constant: one kernel per slab, so that a capture replays each with its own rows (a Variable bound to another
    value in each slab is one value in a captured replay: every slab would read the last one's rows)."""
    weight = GGUFWeight("slab product", ggml_type, shape, data)
    weight.chunks = chunks
    outputs, inputs = shape
    slab = _slab_rows(outputs, inputs)
    if slab == outputs:  # one slab: the product goes straight into `out`
        joined = x.matmul(weight.rows(0, outputs).contiguous().T)
    else:
        pieces = [x.matmul(weight.rows(first, slab).contiguous().T).realize() for first in range(0, outputs, slab)]
        joined = pieces[0].cat(*pieces[1:], dim=-1)
    return joined if out is None else out.assign(joined)


def load_gguf_weights(path: str | os.PathLike[str], device: str | None = None) -> tuple[dict[str, Any],
                                                                                       dict[str, GGUFWeight]]:
    """The metadata and the weights of a GGUF file, each weight's bytes copied from the file (through DISK) to
    `device` now, without dequantizing; the 32-value block types' weights with more than 2 * CHUNK_INPUTS inputs
    are repacked into column chunks of CHUNK_INPUTS (GGUFWeight.repack)."""
    metadata, tensors = gguf_load_blocks(os.fspath(path), device)
    weights: dict[str, GGUFWeight] = {}
    for name in list(tensors):  # one at a time: peak memory stays one tensor above the weights
        # popped, so that a repacked weight's file-order bytes are freed as soon as the copy is made
        ggml_type, shape, data = tensors.pop(name)
        weight = weights[name] = GGUFWeight(name, ggml_type, shape, data)
        del data
        inputs = weight.shape[-1]
        if ggml_type in LANE_TYPES and len(shape) == 2 and inputs > 2 * CHUNK_INPUTS and inputs % CHUNK_INPUTS == 0:
            weight.repack(inputs // CHUNK_INPUTS)  # from the file's bytes: no device copy in the file's order stays
        weight.data.realize()
    return metadata, weights
