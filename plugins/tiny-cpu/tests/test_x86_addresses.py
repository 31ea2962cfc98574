"""Element addresses folded into x86 addressing (tiny_cpu.x86.addresses): constants in the displacement, the sum of
the index's values hoisted out of the loops it does not vary in and shared, and a broadcast reading memory itself.
The kernels run and are compared with numpy; the inner loop's instructions are counted."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.isel import Selection, VectorX86Contract

from tinycore import Tensor
from tinycore.codegen import linearize
from tinycore.engine.memory import device_facts
from tinycore.renderer.isa import Instruction, Label, Memory, VirtualRegister
from tinycore.schedule import create_schedule

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
RNG = np.random.default_rng(45)


def _selected(expression: Tensor) -> tuple[Selection, bytes, tuple]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    selection = Selection(linearize(items[0].ast, VectorX86Contract()))
    return selection, selection.select(), items[0].buffers


def _run(expression: Tensor, inputs: list[tuple[Tensor, np.ndarray]], shape: tuple[int, ...]) -> np.ndarray:
    _, code, buffers = _selected(expression)
    output = np.full(shape, np.nan, np.float32)
    arrays = [output]
    for buffer in buffers[1:]:
        matches = [array for tensor, array in inputs if tensor.uop.base is buffer or tensor.uop is buffer]
        assert len(matches) == 1
        arrays.append(matches[0])
    executable = ExecutableCode(code)
    executable.function(None, *[ctypes.c_void_p] * len(arrays))(*[array.ctypes.data for array in arrays])
    return output


def _innermost_loop(program: list[Instruction]) -> list[Instruction]:
    """The instructions between the innermost loop's top label and its back jump (a jmp, or a loop tested at the
    bottom's conditional jump)."""
    bound = {i.operands[0]: position for position, i in enumerate(program) if i.op == "label"}
    loops = [(bound[i.operands[0]], position) for position, i in enumerate(program)
             if i.op.startswith("j") and isinstance(i.operands[0], Label) and bound[i.operands[0]] < position]
    head, back_jump = min(loops, key=lambda loop: loop[1] - loop[0])
    return program[head + 1:back_jump]


def _integer_instructions(body: list[Instruction]) -> list[Instruction]:
    return [i for i in body if i.operands and isinstance(i.operands[0], VirtualRegister)
            and i.operands[0].kind == "gpr"]


def test_a_matmul_tile_forms_each_inputs_addresses_once_per_reduce_step() -> None:
    left, right = RNG.standard_normal((24, 64)).astype(np.float32), RNG.standard_normal((64, 48)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    selection, _, _ = _selected(a @ b)
    body = _innermost_loop(selection.builder.program)
    broadcasts = [i for i in body if i.op == "vbroadcastss"]
    assert len(broadcasts) >= 4 and all(isinstance(i.operands[1], Memory) for i in broadcasts)  # no scalar load
    # the rows of the left input differ only in the displacement: one index register serves them all
    assert len({(i.operands[1].base, i.operands[1].index) for i in broadcasts}) == 1  # type: ignore[union-attr]
    assert len({i.operands[1].disp for i in broadcasts}) == len(broadcasts)  # type: ignore[union-attr]
    # the counter widened and summed with the invariant part, for each input: the row offsets were hoisted
    integer = [i.op for i in _integer_instructions(body)]
    assert sorted(integer) == ["add", "cmp", "imul", "lea", "lea", "movsxd", "movsxd"], integer
    expected = left @ right
    np.testing.assert_allclose(_run(a @ b, [(a, left), (b, right)], (24, 48)), expected, rtol=1e-5, atol=1e-5)


def test_a_reduce_whose_rows_end_in_stores_after_the_loop_matches_numpy() -> None:
    # sums formed inside the reduce loop must not be reused after it (it may run zero times, and its counter moved)
    wide = RNG.standard_normal((6, 40, 16)).astype(np.float32)
    w = Tensor(wide).realize()
    expression = (w * 2.0).sum(1) + w[:, 3, :]
    np.testing.assert_allclose(_run(expression, [(w, wide)], (6, 16)), (wide * 2).sum(1) + wide[:, 3, :], rtol=1e-5,
                               atol=1e-5)


def test_a_convolution_window_matches_numpy() -> None:
    image = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    weight = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x, k = Tensor(image).realize(), Tensor(weight).realize()
    expected = np.zeros((2, 4, 7, 9), np.float32)
    for row in range(3):
        for column in range(3):
            window = image[:, :, row:row + 7, column:column + 9]
            expected += np.einsum("bchw,oc->bohw", window, weight[:, :, row, column])
    result = _run(x.conv2d(k), [(x, image), (k, weight)], (2, 4, 7, 9))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_shifted_padded_reads_fold_their_offsets_into_displacements() -> None:
    rows = RNG.standard_normal((7, 13)).astype(np.float32)
    m = Tensor(rows).realize()
    padded = m.pad(((1, 1), (2, 2)))
    expression = padded[:-2, :-4] + padded[2:, 4:] * 3.0 - padded[1:-1, 2:-2]
    numpy_padded = np.pad(rows, ((1, 1), (2, 2)))
    expected = numpy_padded[:-2, :-4] + numpy_padded[2:, 4:] * np.float32(3) - numpy_padded[1:-1, 2:-2]
    selection, _, _ = _selected(expression)
    displacements = {operand.disp for i in selection.builder.program for operand in i.operands
                     if isinstance(operand, Memory) and operand.index is not None}
    assert len(displacements) > 1  # the shifts became displacements of one shared index
    np.testing.assert_allclose(_run(expression, [(m, rows)], (7, 13)), expected, rtol=1e-6, atol=1e-6)


def test_a_broadcast_after_a_store_to_its_element_reads_the_stored_value() -> None:
    # a scalar read only to be broadcast is read by the broadcast itself, unless a store comes in between
    rows = RNG.standard_normal((8, 8)).astype(np.float32)
    m = Tensor(rows).realize()
    expression = m * m[:, :1]
    np.testing.assert_array_equal(_run(expression, [(m, rows)], (8, 8)), rows * rows[:, :1])
