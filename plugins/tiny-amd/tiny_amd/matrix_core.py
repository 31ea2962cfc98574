"""Matrix-core matmul kernels: C (float32, M x N) = A (M x K) @ B (K x N) with A and B half or bfloat16, one
wavefront per 16 x 16 tile of C, the product of each 16 x 16 x 16 step done by the target's matrix instruction:

- gfx11 (RDNA3, wave32): V_WMMA_F32_16X16X16_{F16,BF16}; every lane holds a whole row of A's and a whole column of
  B's 16 x 16 block (lanes 16..31 repeat lanes 0..15), and C's element (2 i + lane / 16, lane % 16) in slot i.
- gfx12 (RDNA4, wave32): the _gfx12 forms; lanes 0..15 hold K 0..7 of their row / column, lanes 16..31 K 8..15, and
  C's element (i + 8 (lane / 16), lane % 16) in slot i.
- gfx90a / gfx942 (CDNA, wave64): V_MFMA_F32_16X16X16{F16,BF16_1K}; lane holds K 4 (lane / 16) .. + 3 of its row /
  column and C's element (4 (lane / 16) + i, lane % 16) in slot i.

Two ways in: `matrix_core_matmul` renders such a kernel directly from the target and the dtype (half or bfloat16);
and the codegen choice (`matrix_core_opt`, the HIP renderer's `tensor_core_opt`, asked first by the core's GPU
heuristic) rewrites any half matmul kernel of Tensor programs into waves of the target's instruction, through a
CUSTOM op calling a prelude helper. The MOCK GPU runs that op with a wave-collective interpreter
(tinycore.codegen.wave_interpreter) that uses the lane layouts above; the layouts themselves follow AMD's ISA
documents and were never checked on hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy

from tiny_amd.renderer import PRELUDE
from tiny_amd.target import parse_target
from tinycore.codegen.matrix_units import MatmulParts, matmul_parts
from tinycore.codegen.opt import AxisType, Kernel, axis_id, range_size
from tinycore.codegen.wave_interpreter import Combine
from tinycore.dtype import DType, dtypes
from tinycore.uop.axis import new_range
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

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


# ---- the codegen choice: a half matmul kernel rewritten into waves of the target's matrix instruction ----

@dataclass(frozen=True)
class MatrixInstruction:
    """One 16 x 16 x 16 matrix instruction on `dtype` (half or bfloat16) inputs and where its operands and results live
    in a wave: `operands` values of A (and of B) per lane, `results` floats of C per lane."""

    kind: str
    dtype: DType
    helper: str
    builtin: str
    wave_size: int
    operands: int
    results: int

    def operand_depth(self, lane: UOp | int, slot: int) -> UOp | int:
        """The K index (within the 16-step) of the lane's operand `slot` (row lane % 16 of A, column of B)."""
        if self.kind == "wmma":
            return slot
        return lane // 16 * (8 if self.kind == "wmma-gfx12" else 4) + slot

    def result_row(self, lane: UOp | int, slot: int) -> UOp | int:
        """The row of C (within the tile) in the lane's result `slot` (its column is lane % 16)."""
        if self.kind == "wmma":
            return lane // 16 + 2 * slot
        return lane // 16 * (8 if self.kind == "wmma-gfx12" else 4) + slot

    def prelude(self) -> str:
        """The helper that gathers a lane's operands into the instruction's vectors and runs it on a zero C (bfloat16
        arrives as its bits, the renderer's storage type, and goes in as the instruction's 16-bit integer lanes)."""
        half = self.dtype == dtypes.float16
        parameter, element = ("_Float16", "_Float16") if half else ("unsigned short", "short")
        vector = f"tc_{'half' if half else 'short'}{self.operands}"
        parameters = ", ".join(f"{parameter} {side}{i}" for side in "ab" for i in range(self.operands))
        a_items = ", ".join(f"({element})a{i}" for i in range(self.operands))
        b_items = ", ".join(f"({element})b{i}" for i in range(self.operands))
        zero_tail = ", 0, 0, 0" if self.kind == "mfma" else ""
        return (f"typedef {element} {vector} __attribute__((ext_vector_type({self.operands})));\n"
                f"typedef float float{self.results} __attribute__((ext_vector_type({self.results})));\n"
                f"TC_DEVICE float{self.results} {self.helper}({parameters}) {{\n"
                f"  {vector} a = {{{a_items}}}, b = {{{b_items}}};\n"
                f"  float{self.results} c = {{}};\n"
                f"  return {self.builtin}(a, b, c{zero_tail}); }}")

    def combine(self, fragments: list[list[float]]) -> list[tuple[float, ...]]:
        """What the wave's instruction computes from every lane's operands: every lane's results (the MOCK GPU's
        stand-in for the matrix unit; products of halves are exact in float32, sums rounded once from float64)."""
        a, b = numpy.zeros((_TILE, _TILE)), numpy.zeros((_TILE, _TILE))
        for lane, values in enumerate(fragments):
            for slot in range(self.operands):
                depth = self._int(self.operand_depth(lane, slot))
                a[lane % _TILE, depth], b[depth, lane % _TILE] = values[slot], values[self.operands + slot]
        product = (a @ b).astype(numpy.float32)
        return [tuple(float(product[self._int(self.result_row(lane, slot)), lane % _TILE])
                      for slot in range(self.results)) for lane in range(len(fragments))]

    @staticmethod
    def _int(value: UOp | int) -> int:
        """A position computed from a concrete lane (always an int then)."""
        assert isinstance(value, int), f"expected an int, got {value}"
        return value


def matrix_instruction(arch: str, dtype: DType = dtypes.float16) -> MatrixInstruction:
    """The matrix instruction of `arch` for `dtype` (float16 or bfloat16) inputs."""
    target = parse_target(arch)
    call, operands, _element, results = _instruction(target.matrix_core, dtype)
    suffix = "f16" if dtype == dtypes.float16 else "bf16"
    return MatrixInstruction(target.matrix_core, dtype, f"tc_{target.matrix_core.replace('-', '_')}_{suffix}",
                             call.split("(")[0], target.wave_size, operands, results)


def matrix_instructions(arch: str) -> tuple[MatrixInstruction, ...]:
    """The half and the bfloat16 matrix instruction of `arch`."""
    return matrix_instruction(arch, dtypes.float16), matrix_instruction(arch, dtypes.bfloat16)


def matrix_core_opt(instructions: tuple[MatrixInstruction, ...], kernel: Kernel, notes: list[str]) -> bool:
    """Rewrite a half or bfloat16 matmul `kernel` into one wave per 16 x 16 tile of the output, each K step of 16 one
    matrix instruction (CUSTOM op calling the instruction's helper), the steps summed in float32; True when done.
    Kernels of another shape keep the usual heuristic."""
    for instruction in instructions:
        parts = matmul_parts(kernel, (_TILE, _TILE, _TILE), instruction.dtype)
        if parts is not None:
            _rewrite(instruction, parts, kernel, notes)
            return True
    return False


def _rewrite(instruction: MatrixInstruction, parts: MatmulParts, kernel: Kernel, notes: list[str]) -> None:
    m, n, k = range_size(parts.rows), range_size(parts.columns), range_size(parts.depth)
    assert m is not None and n is not None and k is not None
    tile_m = new_range(m // _TILE, kernel.next_id, AxisType.LOOP)
    tile_n = new_range(n // _TILE, kernel.next_id + 1, AxisType.LOOP)
    step = new_range(k // _TILE, kernel.next_id + 2, AxisType.REDUCE)
    kernel.next_id += 3
    lane = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, instruction.wave_size),), "lidx0")
    a_values = [parts.a_value.substitute({parts.rows: tile_m * _TILE + lane % _TILE,
                                          parts.depth: step * _TILE + instruction.operand_depth(lane, slot)})
                for slot in range(instruction.operands)]
    b_values = [parts.b_value.substitute({parts.depth: step * _TILE + instruction.operand_depth(lane, slot),
                                          parts.columns: tile_n * _TILE + lane % _TILE})
                for slot in range(instruction.operands)]
    arguments = ",".join(f"{{{position}}}" for position in range(2 * instruction.operands))
    product = UOp(Ops.CUSTOM, dtypes.float32.vec(instruction.results), tuple(a_values + b_values),
                  f"{instruction.helper}({arguments})")
    store = kernel.ast.src[0]
    stores = []
    for slot in range(instruction.results):
        accumulated = UOp(Ops.REDUCE, dtypes.float32, (product.gep(slot), step), Ops.ADD)
        result = accumulated if parts.reduce.dtype == dtypes.float32 else accumulated.cast(parts.reduce.dtype)
        where = {parts.rows: tile_m * _TILE + instruction.result_row(lane, slot),
                 parts.columns: tile_n * _TILE + lane % _TILE}
        value = store.src[1].substitute({parts.reduce: result}).substitute(where)
        stores.append(store.replace(src=(store.src[0].substitute(where), value) + store.src[2:]))
    kernel.ast = kernel.ast.replace(src=tuple(stores))
    kernel.axes = [tile_m, tile_n, step]
    axes = f"{axis_id(parts.rows)}/{axis_id(parts.columns)}/{axis_id(parts.depth)}"
    notes.append(f"MATRIX CORES {instruction.builtin} ({m}x{n}x{k}: {m // _TILE}x{n // _TILE} waves of "
                 f"{instruction.wave_size}, axis {axes})")


def uses_matrix_cores(uops: list[UOp], instruction: MatrixInstruction) -> bool:
    """True when a linear program calls the instruction's helper."""
    return any(uop.op is Ops.CUSTOM and str(uop.arg).startswith(instruction.helper) for uop in uops)


def collectives(arch: str) -> dict[str, Combine]:
    """The wave-collective ops of `arch`'s matrix instructions, for tinycore.codegen.wave_interpreter."""
    return {instruction.helper: instruction.combine for instruction in matrix_instructions(arch)}
