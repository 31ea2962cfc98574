"""Tensor-core matmul for the CUDA renderer: a codegen choice that turns a half or bfloat16 matmul kernel into warps
of mma.sync.m16n8k16 (float accumulation), offered to the core's GPU heuristic as the renderer's `tensor_core_opt`.

The rewritten kernel: work-group = one warp (lidx0, 32 lanes); gidx1 / gidx0 pick a 16 x 8 tile of the output (gidx2
the matrix of a batched matmul); a loop over K in steps of 16 where every lane loads its fragment of A (8 values) and
B (4 values) straight from global memory and one CUSTOM op (`tc_mma_f16` or `tc_mma_bf16`, inline PTX in the CUDA
prelude) multiplies them on the tensor cores; the four accumulators of each lane are stored at its four output
positions. Fragment positions (lane = 4 g + t): A element j at row g + 8 ((j >> 1) & 1), column 2 t + (j & 1) + 8
(j >> 2); B element j at row 2 t + (j & 1) + 8 (j >> 1), column g; accumulator i at row g + 8 (i >> 1), column
2 t + (i & 1) (PTX ISA, "Matrix fragments for mma.m16n8k16"; the same for .f16 and .bf16).

Chosen only for kernels that are exactly one sum over a product of two loads of the same 16-bit float type (after
casts) with two output axes, or three where the third (the batch) indexes the output and not the rows or columns
alone, sizes multiples of 16 x 8 x 16 and no padding masks; everything else keeps the usual heuristic.
"""
from __future__ import annotations

from typing import Any

import numpy

from tinycore.codegen.matrix_units import matmul_parts
from tinycore.codegen.opt import AxisType, Kernel, axis_id, range_size
from tinycore.codegen.wave_interpreter import WaveProgram
from tinycore.dtype import DType, dtypes
from tinycore.helpers import ContextVar
from tinycore.uop.axis import new_range
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

TILE_M, TILE_N, TILE_K = 16, 8, 16
WARPS_M, WARPS_N = 2, 2
BLOCK_M, BLOCK_N = TILE_M * WARPS_M, TILE_N * WARPS_N
"""A staged block: 2 x 2 warps computing 32 x 16 outputs; each A row slice serves 2 warps, each B column slice 2."""
NV_TC_STAGING = ContextVar("NV_TC_STAGING", 1)
"""NV_TC_STAGING=0 keeps every tensor-core warp loading its fragments from global memory by itself."""
MMA_PREFIX = "tc_mma_"
MMA_HELPERS = {dtypes.float16: ("tc_mma_f16", "tc_half", "f16"),
               dtypes.bfloat16: ("tc_mma_bf16", "tc_bfloat16", "bf16")}
"""The operand type -> (helper name, C type, PTX type) of the mma helpers."""


def _mma_function(helper: str, ctype: str, ptx_type: str) -> str:
    return rf"""__device__ __forceinline__ float4 {helper}({ctype} a0, {ctype} a1, {ctype} a2, {ctype} a3, {ctype} a4,
    {ctype} a5, {ctype} a6, {ctype} a7, {ctype} b0, {ctype} b1, {ctype} b2, {ctype} b3) {{
  float4 d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, "
               "{{%8,%9}}, {{%0,%1,%2,%3}};"
               : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
               : "r"(tc_pack2(a0.bits, a1.bits)), "r"(tc_pack2(a2.bits, a3.bits)), "r"(tc_pack2(a4.bits, a5.bits)),
                 "r"(tc_pack2(a6.bits, a7.bits)), "r"(tc_pack2(b0.bits, b1.bits)), "r"(tc_pack2(b2.bits, b3.bits)));
  return d; }}"""


MMA_PRELUDE = "\n".join([
    "__device__ __forceinline__ unsigned int tc_pack2(unsigned short low, unsigned short high) {\n"
    "  return (unsigned int)low | ((unsigned int)high << 16); }",
    *(_mma_function(*names) for names in MMA_HELPERS.values())])


def _const(value: int) -> UOp:
    return UOp.const(dtypes.int32, value)


def _staged_fragments(a_value: UOp, b_value: UOp, rows: UOp, columns: UOp, k_axis: UOp, tile_m: UOp, tile_n: UOp,
                      step: UOp, threads: UOp, lane: UOp, warp_row: UOp, warp_column: UOp) -> tuple[list[UOp],
                                                                                                 list[UOp]]:
    """The fragments of a block's warps read from shared memory: each K step the block's threads copy the block's
    BLOCK_M x 16 slice of A and 16 x BLOCK_N slice of B (consecutive elements per thread) into one of two buffers
    (alternating by step, so one barrier a step suffices: a thread writes a buffer again only after every thread
    passed the next step's barrier, so after every warp read it), then each warp reads its fragments there."""
    operand = a_value.dtype
    block_threads = WARPS_M * WARPS_N * 32
    a_size, b_size = BLOCK_M * TILE_K, TILE_K * BLOCK_N
    a_shared = UOp(Ops.DEFINE_LOCAL, operand.ptr(2 * a_size, "local"), (), 0)
    b_shared = UOp(Ops.DEFINE_LOCAL, operand.ptr(2 * b_size, "local"), (), 1)
    parity = step % 2
    copies = []
    for i in range(a_size // block_threads):
        element = threads * (a_size // block_threads) + i
        value = a_value.substitute({rows: tile_m * BLOCK_M + element // TILE_K,
                                    k_axis: step * TILE_K + element % TILE_K})
        copies.append(a_shared.index(parity * a_size + element).store(value))
    for i in range(b_size // block_threads):
        element = threads * (b_size // block_threads) + i
        value = b_value.substitute({k_axis: step * TILE_K + element // BLOCK_N,
                                    columns: tile_n * BLOCK_N + element % BLOCK_N})
        copies.append(b_shared.index(parity * b_size + element).store(value))
    barrier = UOp(Ops.BARRIER, dtypes.void, tuple(copies))
    group, thread = lane // 4, lane % 4
    a_values = [UOp(Ops.LOAD, operand, (a_shared.index(parity * a_size + (warp_row + group + 8 * ((j >> 1) & 1)) *
                                                       TILE_K + thread * 2 + (j & 1) + 8 * (j >> 2)), barrier))
                for j in range(8)]
    b_values = [UOp(Ops.LOAD, operand, (b_shared.index(parity * b_size + (thread * 2 + (j & 1) + 8 * (j >> 1)) *
                                                       BLOCK_N + warp_column + group), barrier)) for j in range(4)]
    return a_values, b_values


def tensor_core_opt(kernel: Kernel, notes: list[str]) -> bool:
    """Rewrite `kernel` into tensor-core warps when it has the shape (see the module docstring); True when done."""
    parts = matmul_parts(kernel, (TILE_M, TILE_N, TILE_K), tuple(MMA_HELPERS), batched=True)
    if parts is None:
        return False
    reduce, a_value, b_value, rows, columns, k_axis, batch = (parts.reduce, parts.a_value, parts.b_value, parts.rows,
                                                              parts.columns, parts.depth, parts.batch)
    operand_type: DType = a_value.dtype
    m, n, k = range_size(rows), range_size(columns), range_size(k_axis)
    assert m is not None and n is not None and k is not None
    staged = NV_TC_STAGING.value != 0 and m % BLOCK_M == 0 and n % BLOCK_N == 0
    block_m, block_n = (BLOCK_M, BLOCK_N) if staged else (TILE_M, TILE_N)
    tile_m = new_range(m // block_m, kernel.next_id, AxisType.LOOP)
    tile_n = new_range(n // block_n, kernel.next_id + 1, AxisType.LOOP)
    step = new_range(k // TILE_K, kernel.next_id + 2, AxisType.REDUCE)
    kernel.next_id += 3
    if staged:
        threads = UOp(Ops.SPECIAL, dtypes.int32, (_const(WARPS_M * WARPS_N * 32),), "lidx0")
        warp, lane = threads // 32, threads % 32
        warp_row, warp_column = (warp // WARPS_N) * TILE_M, (warp % WARPS_N) * TILE_N
        row0, column0 = tile_m * BLOCK_M + warp_row, tile_n * BLOCK_N + warp_column
        a_values, b_values = _staged_fragments(a_value, b_value, rows, columns, k_axis, tile_m, tile_n, step, threads,
                                               lane, warp_row, warp_column)
    else:
        lane = UOp(Ops.SPECIAL, dtypes.int32, (_const(32),), "lidx0")
        row0, column0 = tile_m * TILE_M, tile_n * TILE_N
        group, thread = lane // 4, lane % 4
        a_values = [a_value.substitute({rows: row0 + group + 8 * ((j >> 1) & 1),
                                       k_axis: step * TILE_K + thread * 2 + (j & 1) + 8 * (j >> 2)}) for j in range(8)]
        b_values = [b_value.substitute({k_axis: step * TILE_K + thread * 2 + (j & 1) + 8 * (j >> 1),
                                       columns: column0 + group}) for j in range(4)]
    group, thread = lane // 4, lane % 4
    arguments = ",".join(f"{{{position}}}" for position in range(12))
    helper = MMA_HELPERS[operand_type][0]
    mma = UOp(Ops.CUSTOM, dtypes.float32.vec(4), tuple(a_values + b_values), f"{helper}({arguments})")
    store = kernel.ast.src[0]
    stores = []
    for i in range(4):
        accumulated = UOp(Ops.REDUCE, dtypes.float32, (mma.gep(i), step), Ops.ADD)
        result = accumulated if reduce.dtype == dtypes.float32 else accumulated.cast(reduce.dtype)
        where = {rows: row0 + group + 8 * (i >> 1), columns: column0 + thread * 2 + (i & 1)}
        value = store.src[1].substitute({reduce: result}).substitute(where)
        address = store.src[0].substitute(where)
        stores.append(store.replace(src=(address, value) + store.src[2:]))
    kernel.ast = kernel.ast.replace(src=tuple(stores))
    kernel.axes = ([batch] if batch is not None else []) + [tile_m, tile_n, step]
    batches = f"{range_size(batch)} x " if batch is not None else ""
    staging = f", {WARPS_M}x{WARPS_N} warps a block sharing tiles in shared memory" if staged else ""
    notes.append(f"TENSOR CORES mma.m16n8k16.{MMA_HELPERS[operand_type][2]} ({batches}{m}x{n}x{k}: "
                 f"{m // TILE_M}x{n // TILE_N} warps{staging}, axis {axis_id(rows)}/{axis_id(columns)}/"
                 f"{axis_id(k_axis)})")
    return True


WARP = 32


def warp_mma(fragments: list[list[float]]) -> list[tuple[float, ...]]:
    """The m16n8k16 product of one warp's 32 fragments (8 values of A, then 4 of B, each lane; positions in the
    module docstring), float32 products summed in float64 and rounded to float32: each lane's 4 accumulators."""
    a, b = numpy.zeros((16, 16)), numpy.zeros((16, 8))
    for lane, values in enumerate(fragments):
        group, thread = lane // 4, lane % 4
        for j in range(8):
            a[group + 8 * ((j >> 1) & 1), 2 * thread + (j & 1) + 8 * (j >> 2)] = values[j]
        for j in range(4):
            b[2 * thread + (j & 1) + 8 * (j >> 1), group] = values[8 + j]
    product = (a @ b).astype(numpy.float32)
    return [tuple(float(product[lane // 4 + 8 * (i >> 1), 2 * (lane % 4) + (i & 1)]) for i in range(4))
            for lane in range(WARP)]


def warp_program(uops: list[Any]) -> WaveProgram:
    """The interpreter program of a linear program whose warps may meet at mma ops (the MOCK GPU's, the tests')."""
    return WaveProgram(uops, {MMA_PREFIX: warp_mma}, WARP)


def uses_tensor_cores(uops: list[Any]) -> bool:
    """True when a linear program calls an mma helper."""
    return any(uop.op is Ops.CUSTOM and str(uop.arg).startswith(MMA_PREFIX) for uop in uops)
