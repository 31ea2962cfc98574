"""The shape of the x86 selection's loops and loads, beside gcc's: a loop of constant trip count tested at its
bottom (one jump per trip), and a vector load read once by the next instruction folded into it as a memory operand.
Kernels run as machine code against numpy; the code is read back with capstone."""

from __future__ import annotations

import ctypes

import capstone
import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.function import FunctionBuilder, fold_loads
from tiny_cpu.x86.isel import Selection, VectorX86Contract

from tinycore import Tensor
from tinycore.codegen import linearize
from tinycore.engine.memory import device_facts
from tinycore.renderer.isa import Memory
from tinycore.schedule import create_schedule

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
_DECODER = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
RNG = np.random.default_rng(7)


def _run(expression: Tensor, inputs: list[tuple[Tensor, np.ndarray]], shape: tuple[int, ...]) -> tuple[np.ndarray,
                                                                                                        bytes]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    code = Selection(linearize(items[0].ast, VectorX86Contract())).select()
    arrays = [np.full(shape, np.nan, np.float32)]
    for buffer in items[0].buffers[1:]:
        matches = [array for tensor, array in inputs if tensor.uop.base is buffer or tensor.uop is buffer]
        assert len(matches) == 1
        arrays.append(matches[0])
    ExecutableCode(code).function(None, *[ctypes.c_void_p] * len(arrays))(*[array.ctypes.data for array in arrays])
    return arrays[0], code


def test_a_reduce_loop_of_constant_count_is_tested_at_its_bottom_and_reads_memory_in_its_arithmetic() -> None:
    left, right = RNG.standard_normal((6, 512)).astype(np.float32), RNG.standard_normal((6, 512)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    got, code = _run((a * b + 1.5).relu().sum(1), [(a, left), (b, right)], (6,))
    np.testing.assert_allclose(got, np.maximum(left * right + np.float32(1.5), 0).sum(1), rtol=1e-5)
    instructions = list(_DECODER.disasm(code, 0))
    mnemonics = [i.mnemonic for i in instructions]
    assert "jmp" not in mnemonics and "jl" in mnemonics  # every loop here runs a constant, non-zero count
    backward = [i for i in instructions if i.mnemonic == "jl"]
    assert all(int(i.op_str, 16) < i.address for i in backward)
    # the loaded vectors read once are the arithmetic's memory operands, as gcc writes them
    folded = [i for i in instructions if i.mnemonic in ("vmulps", "vaddps", "vfmadd231ps") and "ptr" in i.op_str]
    assert folded, [f"{i.mnemonic} {i.op_str}" for i in instructions]


def test_a_loop_of_variable_count_is_tested_at_its_top_and_may_run_zero_times() -> None:
    from tinycore import Variable

    values = RNG.standard_normal(40).astype(np.float32)
    data = Tensor(values).realize()
    expression = (data[:Variable("n", 1, 40).bind(5)] * 2).sum()
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    selection = Selection(linearize(items[0].ast, VectorX86Contract()))
    code = selection.select()
    mnemonics = [i.mnemonic for i in _DECODER.disasm(code, 0)]
    assert "jge" in mnemonics and "jmp" in mnemonics  # the bound is known only at run time
    function = ExecutableCode(code).function(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
    for count in (0, 1, 7, 40):  # 0: the loop body never runs (the test at the top skips it)
        output = np.full(1, np.nan, np.float32)
        function(output.ctypes.data, values.ctypes.data, count)
        np.testing.assert_allclose(output[0], (values[:count] * 2).sum(), rtol=1e-5, atol=1e-6)


def test_fold_loads_takes_only_a_load_read_once_by_the_next_instruction() -> None:
    builder = FunctionBuilder(integer_arguments=2)  # out, data: 4 ymm rows
    out, data = builder.arguments
    rows = [builder.value("vec", 256) for _ in range(4)]
    first, second, total = builder.value("vec", 256), builder.value("vec", 256), builder.value("vec", 256)
    builder.emit("vmovups", rows[0], Memory(data, None, 1, 0, 256))
    builder.emit("vmovups", rows[1], Memory(data, None, 1, 32, 256))
    builder.emit("vaddps", first, rows[0], rows[1])  # rows[1], read once right after its load: folded
    builder.emit("vmovups", rows[2], Memory(data, None, 1, 64, 256))
    builder.emit("vmovups", rows[3], Memory(data, None, 1, 96, 256))
    builder.emit("vmulps", second, rows[2], rows[2])  # rows[2] read twice: kept; rows[3] not read next: kept
    builder.emit("vaddps", total, first, rows[3])
    builder.emit("vaddps", total, total, second)
    builder.emit("vmovups", Memory(out, None, 1, 0, 256), total)
    builder.ret()
    folded = fold_loads(builder.program)
    assert len(folded) == len(builder.program) - 1
    reads = [i for i in folded if i.op == "vaddps" and isinstance(i.operands[2], Memory)]
    assert len(reads) == 1 and reads[0].operands[2] == Memory(data, None, 1, 32, 256)
    code = builder.assemble()
    matrix = RNG.standard_normal((4, 8)).astype(np.float32)
    output = np.zeros(8, np.float32)
    ExecutableCode(code).function(None, ctypes.c_void_p, ctypes.c_void_p)(output.ctypes.data, matrix.ctypes.data)
    np.testing.assert_allclose(output, (matrix[0] + matrix[1] + matrix[3]) + matrix[2] * matrix[2], rtol=1e-6)


@pytest.mark.parametrize("start", range(17))
def test_align_pads_with_no_ops_capstone_reads_as_such(start: int) -> None:
    from tiny_cpu.x86.assembler import Assembler

    assembler = Assembler()
    assembler.code += b"\x90" * start
    assembler.align(16)
    assert len(assembler.code) == -(-start // 16) * 16
    padding = bytes(assembler.code[start:])
    decoded = list(_DECODER.disasm(padding, start))
    assert sum(i.size for i in decoded) == len(padding)  # every byte is an instruction capstone reads
    assert all(i.mnemonic == "nop" for i in decoded) and len(decoded) <= 2  # the longest no-ops, not 15 single bytes


def test_loop_tops_are_aligned_to_sixteen_bytes() -> None:
    from tiny_cpu.x86.isel import LOOP_ALIGNMENT

    left, right = RNG.standard_normal((6, 512)).astype(np.float32), RNG.standard_normal((6, 512)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    got, code = _run((a * b).sum(1), [(a, left), (b, right)], (6,))
    np.testing.assert_allclose(got, (left * right).sum(1), rtol=1e-5)
    instructions = list(_DECODER.disasm(code, 0))
    tops = {int(i.op_str, 16) for i in instructions if i.mnemonic == "jl"}
    assert tops and all(top % LOOP_ALIGNMENT == 0 for top in tops)
