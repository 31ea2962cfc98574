"""Lanes put back into vectors (tiny_cpu.x86.lanes): the integer steps of the decomposed exp2, devectorized by
codegen, selected as AVX2 integer vector instructions; values compared with numpy, and the lanes' scalar code
checked to be gone (or kept where another UOp reads a lane)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.isel import Selection, VectorX86Contract
from tiny_cpu.x86.lanes import vector_lanes

from tinycore import Tensor, dtypes
from tinycore.codegen import linearize
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
VALUES = np.linspace(-30, 30, 8 * 64, dtype=np.float32)
FUNCTIONS = {
    "exp": (lambda a: a.exp(), np.exp),
    "exp2": (lambda a: a.exp2(), np.exp2),
    "sigmoid": (lambda a: a.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    "softmax of rows": (lambda a: a.reshape(8, 64).softmax(-1),
                        lambda v: np.exp(v.reshape(8, 64) - v.reshape(8, 64).max(1, keepdims=True))
                        / np.exp(v.reshape(8, 64) - v.reshape(8, 64).max(1, keepdims=True)).sum(1, keepdims=True)),
}


def _selection(expression: Tensor) -> tuple[Selection, bytes, tuple]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    selection = Selection(linearize(items[0].ast, VectorX86Contract()))
    return selection, selection.select(), items[0].buffers


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_exp2_integer_steps_are_vector_instructions_and_match_numpy(name: str) -> None:
    build, reference = FUNCTIONS[name]
    a = Tensor(VALUES).realize()
    selection, code, buffers = _selection(build(a))
    assert selection.lanes_built, "no VECTORIZE of lanes was rebuilt as a vector"
    ops = [instruction.op for instruction in selection.builder.program]
    assert "vpslld" in ops and "vpsrld" in ops
    assert not {"shl", "shr", "shlx", "shrx"} & set(ops), "the lanes' scalar shifts are still selected"
    expected = reference(VALUES).astype(np.float32)
    output = np.full(expected.shape, np.nan, np.float32)
    assert len(buffers) == 2
    ExecutableCode(code).function(None, ctypes.c_void_p, ctypes.c_void_p)(output.ctypes.data, VALUES.ctypes.data)
    np.testing.assert_allclose(output, expected, rtol=3e-6, atol=1e-7)


def test_a_lane_read_elsewhere_keeps_its_scalar_code() -> None:
    vector = UOp(Ops.NOOP, dtypes.float32.vec(4))
    one = UOp(Ops.CONST, dtypes.uint32, (), 1)
    lanes, shifted = [], []
    for lane in range(4):
        element = UOp(Ops.GEP, dtypes.float32, (vector,), (lane,))
        bits = UOp(Ops.BITCAST, dtypes.uint32, (element,))
        shifted.append(UOp(Ops.SHR, dtypes.uint32, (bits, one)))
        lanes.append(UOp(Ops.BITCAST, dtypes.float32, (shifted[-1],)))
    rebuilt = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), tuple(lanes))
    other = UOp(Ops.ADD, dtypes.uint32, (shifted[0], one))  # lane 0's shift is read outside the lanes too
    program = [vector, one]
    for uop in lanes:
        program += [uop.src[0].src[0].src[0], uop.src[0].src[0], uop.src[0], uop]
    program += [rebuilt, other]
    built, skipped = vector_lanes(program)
    assert built == {rebuilt}
    lane_zero = {shifted[0], shifted[0].src[0], shifted[0].src[0].src[0]}
    assert not lane_zero & skipped  # kept, with what it reads
    assert lanes[0] in skipped and set(lanes[1:]) | set(shifted[1:]) <= skipped


def test_lanes_that_differ_in_op_or_constant_stay_scalar() -> None:
    vector = UOp(Ops.NOOP, dtypes.float32.vec(4))
    counts = [UOp(Ops.CONST, dtypes.uint32, (), value) for value in (1, 1, 2, 1)]  # lane 2 shifts by another count
    lanes = []
    for lane in range(4):
        bits = UOp(Ops.BITCAST, dtypes.uint32, (UOp(Ops.GEP, dtypes.float32, (vector,), (lane,)),))
        lanes.append(UOp(Ops.BITCAST, dtypes.float32, (UOp(Ops.SHR, dtypes.uint32, (bits, counts[lane])),)))
    rebuilt = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), tuple(lanes))
    assert vector_lanes([vector, *counts, *lanes, rebuilt]) == (set(), set())
