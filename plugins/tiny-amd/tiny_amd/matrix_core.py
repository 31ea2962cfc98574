"""Matrix-core matmul kernels: C (float32, M x N) = A (M x K) @ B (K x N) with A and B half or bfloat16, one
wavefront per 16 x 16 tile of C, the product of each 16 x 16 x 16 step done by the target's matrix instruction:

- gfx11 (RDNA3, wave32): V_WMMA_F32_16X16X16_{F16,BF16}; every lane holds a whole row of A's and a whole column of
  B's 16 x 16 block (lanes 16..31 repeat lanes 0..15), and C's element (2 i + lane / 16, lane % 16) in slot i.
- gfx12 (RDNA4, wave32): the _gfx12 forms; lanes 0..15 hold K 0..7 of their row / column, lanes 16..31 K 8..15, and
  C's element (i + 8 (lane / 16), lane % 16) in slot i.
- gfx90a / gfx942 (CDNA, wave64): V_MFMA_F32_16X16X16{F16,BF16_1K}; lane holds K 4 (lane / 16) .. + 3 of its row /
  column and C's element (4 (lane / 16) + i, lane % 16) in slot i.

The generic codegen has no matrix-instruction op yet, so these kernels are rendered here from the target and the
dtype (`matrix_core_matmul`), compiled like any other and inspected by the tests (the instruction is in the code
object); running them needs the hardware.
"""
from __future__ import annotations

from tiny_amd.renderer import PRELUDE
from tiny_amd.target import parse_target
from tinycore.dtype import DType, dtypes

_TILE = 16


def _instruction(kind: str, dtype: DType) -> tuple[str, int, str, int]:
    """(builtin call with a, b, c, operand lanes, operand element type, accumulator lanes) for a target kind."""
    half = dtype == dtypes.float16
    element = "_Float16" if half else "short"
    if kind == "wmma":
        name = "wmma_f32_16x16x16_f16_w32" if half else "wmma_f32_16x16x16_bf16_w32"
        return f"__builtin_amdgcn_{name}(a, b, c)", 16, element, 8
    if kind == "wmma-gfx12":
        name = "wmma_f32_16x16x16_f16_w32_gfx12" if half else "wmma_f32_16x16x16_bf16_w32_gfx12"
        return f"__builtin_amdgcn_{name}(a, b, c)", 8, element, 8
    name = "mfma_f32_16x16x16f16" if half else "mfma_f32_16x16x16bf16_1k"
    return f"__builtin_amdgcn_{name}(a, b, c, 0, 0, 0)", 4, element, 4


def _layout(kind: str) -> tuple[str, str]:
    """(the first K of a lane's operand slots, the row of C in accumulator slot i) as C expressions of `lane`."""
    if kind == "wmma":
        return "0", "2 * i + lane / 16"
    if kind == "wmma-gfx12":
        return "8 * (lane / 16)", "i + 8 * (lane / 16)"
    return "4 * (lane / 16)", "4 * (lane / 16) + i"


def matrix_core_matmul(arch: str, dtype: DType, rows: int, columns: int, depth: int,
                       name: str = "matrix_core_matmul") -> tuple[str, tuple[int, int, int], tuple[int, int, int]]:
    """(source, global_size, local_size) of C = A @ B for `arch`; sizes must be multiples of 16."""
    if dtype not in (dtypes.float16, dtypes.bfloat16):
        raise ValueError(f"matrix-core matmul takes float16 or bfloat16 inputs, not {dtype}")
    if rows % _TILE or columns % _TILE or depth % _TILE or min(rows, columns, depth) <= 0:
        raise ValueError(f"matrix-core matmul sizes must be positive multiples of 16, got {rows}x{depth} @ "
                         f"{depth}x{columns}")
    target = parse_target(arch)
    call, lanes, element, accumulator_lanes = _instruction(target.matrix_core, dtype)
    first_k, c_row = _layout(target.matrix_core)
    storage = "_Float16" if dtype == dtypes.float16 else "unsigned short"
    source = f"""{PRELUDE}
typedef {element} tc_operand __attribute__((ext_vector_type({lanes})));
typedef float tc_accumulator __attribute__((ext_vector_type({accumulator_lanes})));
extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, {target.wave_size})))
void {name}(float* data0, const {storage}* data1, const {storage}* data2) {{
  int lane = (int)__builtin_amdgcn_workitem_id_x();
  int tile_column = (int)__builtin_amdgcn_workgroup_id_x() * 16, tile_row = (int)__builtin_amdgcn_workgroup_id_y() * 16;
  tc_accumulator c = {{}};
  for (int k = 0; k < {depth}; k += 16) {{
    tc_operand a, b;
    for (int slot = 0; slot < {lanes}; slot++) {{
      int kk = k + {first_k} + slot;
      a[slot] = __builtin_bit_cast({element}, data1[(tile_row + lane % 16) * {depth} + kk]);
      b[slot] = __builtin_bit_cast({element}, data2[kk * {columns} + tile_column + lane % 16]);
    }}
    c = {call};
  }}
  for (int i = 0; i < {accumulator_lanes}; i++)
    data0[(tile_row + {c_row}) * {columns} + tile_column + lane % 16] = c[i];
}}
"""
    return source, (columns // _TILE, rows // _TILE, 1), (target.wave_size, 1, 1)
