"""`x + -y` selected as a subtraction, and a load folded from either source of an instruction whose sources commute:
the kernels run as machine code against numpy, and the code is read back with capstone."""

from __future__ import annotations

import ctypes

import capstone
import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.function import FunctionBuilder, fold_loads
from tiny_cpu.x86.isel import Selection, VectorX86Contract

from tinycore import Tensor, dtypes
from tinycore.codegen import linearize
from tinycore.engine.memory import device_facts
from tinycore.renderer.isa import Memory
from tinycore.schedule import create_schedule

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
_DECODER = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
RNG = np.random.default_rng(11)


def _run(expression: Tensor, inputs: list[tuple[Tensor, np.ndarray]], shape: tuple[int, ...],
         dtype: type = np.float32) -> tuple[np.ndarray, list[str]]:
    """The kernel's output (one kernel, run as machine code) and its instructions as capstone reads them."""
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    code = Selection(linearize(items[0].ast, VectorX86Contract())).select()
    arrays = [np.full(shape, np.nan, dtype)]
    for buffer in items[0].buffers[1:]:
        matches = [array for tensor, array in inputs if tensor.uop.base is buffer or tensor.uop is buffer]
        assert len(matches) == 1
        arrays.append(matches[0])
    ExecutableCode(code).function(None, *[ctypes.c_void_p] * len(arrays))(*[array.ctypes.data for array in arrays])
    return arrays[0], [f"{i.mnemonic} {i.op_str}" for i in _DECODER.disasm(code, 0)]


CASES = {
    "a - b": (lambda a, b: a - b, lambda a, b: a - b),
    "-a + b": (lambda a, b: -a + b, lambda a, b: -a + b),
    "-a - b": (lambda a, b: -a - b, lambda a, b: -a - b),
    "a * 2 - b * 3": (lambda a, b: a * 2 - b * 3, lambda a, b: a * np.float32(2) - b * np.float32(3)),
}


@pytest.mark.parametrize("size", [64, 37])  # vectors of 8, and a scalar tail
@pytest.mark.parametrize("case", CASES)
def test_a_negated_term_is_subtracted_with_numpy_answers(case: str, size: int) -> None:
    build, reference = CASES[case]
    left, right = RNG.standard_normal(size).astype(np.float32), RNG.standard_normal(size).astype(np.float32)
    left[:3], right[:3] = [np.inf, 0.0, -0.0], [np.inf, -0.0, -0.0]  # inf - inf is nan; signed zeros as IEEE's
    a, b = Tensor(left).realize(), Tensor(right).realize()
    got, code = _run(build(a, b), [(a, left), (b, right)], (size,))
    with np.errstate(invalid="ignore"):  # inf - inf
        expected = reference(left, right)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    assert any(line.startswith(("vsubps", "vsubss")) for line in code), code
    if case != "-a - b":  # one of the two negations stays an xor there
        assert not any(line.startswith("vxorps") for line in code), code


def test_a_negated_float64_term_is_subtracted() -> None:
    left, right = RNG.standard_normal(19), RNG.standard_normal(19)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    got, code = _run(a.cast(dtypes.float64) - b.cast(dtypes.float64), [(a, left), (b, right)], (19,), np.float64)
    np.testing.assert_array_equal(got, left - right)
    assert any(line.startswith("vsubsd") for line in code) and not any(line.startswith("vxorpd") for line in code)


def test_a_negation_read_twice_is_kept() -> None:
    left, right = RNG.standard_normal(64).astype(np.float32), RNG.standard_normal(64).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    negated = -b
    got, _ = _run((a + negated) * negated, [(a, left), (b, right)], (64,))
    np.testing.assert_array_equal(got, (left - right) * -right)


def test_a_load_is_folded_from_either_source_of_an_add_multiply_or_fma_but_not_of_max_or_subtract() -> None:
    builder = FunctionBuilder(integer_arguments=2)  # out, data: 5 ymm rows
    out, data = builder.arguments
    rows = [builder.value("vec", 256) for _ in range(5)]
    summed, largest, difference, total = (builder.value("vec", 256) for _ in range(4))
    builder.emit("vmovups", rows[4], Memory(data, None, 1, 128, 256))  # read by every instruction: kept
    builder.emit("vmovups", rows[0], Memory(data, None, 1, 0, 256))
    builder.emit("vaddps", summed, rows[0], rows[4])  # the load is the first source: the sources trade places
    builder.emit("vmovups", rows[1], Memory(data, None, 1, 32, 256))
    builder.emit("vmaxps", largest, rows[1], rows[4])  # max(NaN, x) is x, max(x, NaN) is NaN: kept in order
    builder.emit("vmovups", rows[2], Memory(data, None, 1, 64, 256))
    builder.emit("vsubps", difference, rows[2], rows[4])
    builder.emit("vmovaps", total, summed)
    builder.emit("vmovups", rows[3], Memory(data, None, 1, 96, 256))
    builder.emit("vfmadd231ps", total, rows[3], rows[4])  # total += rows[3] * rows[4]: a factor, folded
    builder.emit("vaddps", total, total, largest)
    builder.emit("vaddps", total, total, difference)
    builder.emit("vmovups", Memory(out, None, 1, 0, 256), total)
    builder.ret()
    folded = fold_loads(builder.program)
    assert len(folded) == len(builder.program) - 2
    reads = {i.op: i.operands[2] for i in folded if len(i.operands) > 2 and isinstance(i.operands[2], Memory)}
    assert reads == {"vaddps": Memory(data, None, 1, 0, 256), "vfmadd231ps": Memory(data, None, 1, 96, 256)}
    code = builder.assemble()
    lines = [f"{i.mnemonic} {i.op_str}" for i in _DECODER.disasm(code, 0)]
    assert sum("ptr" in line for line in lines if line.startswith(("vaddps", "vfmadd231ps"))) == 2, lines
    assert not any("ptr" in line for line in lines if line.startswith(("vmaxps", "vsubps"))), lines
    matrix = RNG.standard_normal((5, 8)).astype(np.float32)
    matrix[1, :2] = np.nan
    output = np.zeros(8, np.float32)
    ExecutableCode(code).function(None, ctypes.c_void_p, ctypes.c_void_p)(output.ctypes.data, matrix.ctypes.data)
    # vmaxps returns its second source where either is NaN: rows[4], not the NaN of rows[1]
    largest_expected = np.where(np.isnan(matrix[1]), matrix[4], np.maximum(matrix[1], matrix[4]))
    expected = ((matrix[0] + matrix[4]) + matrix[3] * matrix[4]) + largest_expected + (matrix[2] - matrix[4])
    np.testing.assert_allclose(output, expected, rtol=1e-5)
