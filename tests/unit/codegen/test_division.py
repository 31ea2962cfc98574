"""The pass "guarded division": an integer division or remainder by a possible 0 gives 0 (hand-computed values)."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.codegen.division import guard_divisions
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

I32 = dtypes.int32


def _load(position: int, dtype=I32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(4), (), position).index(UOp.const(I32, 0)).load()


def _store(value: UOp) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, value.dtype.ptr(4), (), 0).index(UOp.const(I32, 0)).store(value)


def test_a_division_by_a_variable_gets_a_nonzero_divisor_and_zero_where_it_was_zero():
    a, b = _load(1), _load(2)
    guarded = guard_divisions([_store(a.alu(Ops.IDIV, b))])
    select = guarded[0].src[1]
    is_zero = b.alu(Ops.CMPEQ, UOp.const(I32, 0))
    assert select.op is Ops.WHERE and select.src[:2] == (is_zero, UOp.const(I32, 0))
    division = select.src[2]
    assert division.op is Ops.IDIV and division.src[0] is a
    assert division.src[1] is UOp(Ops.WHERE, I32, (is_zero, UOp.const(I32, 1), b))
    assert guard_divisions(guarded) == guarded  # a guarded division is left alone


def test_constant_divisors_and_floats_are_left_alone():
    a = _load(1)
    for value in (a.alu(Ops.MOD, UOp.const(I32, 3)), _load(1, dtypes.float32).alu(Ops.IDIV, _load(2, dtypes.float32))):
        store = _store(value)
        assert guard_divisions([store]) == [store]


def test_integer_division_by_zero_gives_zero_on_the_default_device():
    dividend, divisor = [7, -7, 9, 5, -3, 0], [2, 2, 0, 0, -2, 0]
    quotient = (Tensor(dividend, dtype=I32) // Tensor(divisor, dtype=I32)).numpy()
    np.testing.assert_array_equal(quotient, [3, -4, 0, 0, 1, 0])  # floor division (Python's //), 0 by zero
