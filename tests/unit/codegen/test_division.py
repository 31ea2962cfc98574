"""The pass "guarded division": an integer division or remainder by a possible 0 gives 0, a signed one by -1 wraps as
numpy does (hand-computed values and numpy)."""
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
    a, b = _load(1, dtypes.uint32), _load(2, dtypes.uint32)
    guarded = guard_divisions([_store(a.alu(Ops.IDIV, b))])
    select = guarded[0].src[1]
    is_zero = b.alu(Ops.CMPEQ, UOp.const(dtypes.uint32, 0))
    assert select.op is Ops.WHERE and select.src[:2] == (is_zero, UOp.const(dtypes.uint32, 0))
    division = select.src[2]
    assert division.op is Ops.IDIV and division.src[0] is a
    assert division.src[1] is UOp(Ops.WHERE, dtypes.uint32, (is_zero, UOp.const(dtypes.uint32, 1), b))
    assert guard_divisions(guarded) == guarded  # a guarded division is left alone


def test_a_signed_division_also_avoids_minus_one_and_negates_there():
    a, b = _load(1), _load(2)
    guarded = guard_divisions([_store(a.alu(Ops.IDIV, b))])
    is_zero, is_minus_one = b.alu(Ops.CMPEQ, UOp.const(I32, 0)), b.alu(Ops.CMPEQ, UOp.const(I32, -1))
    outer = guarded[0].src[1]
    assert outer.op is Ops.WHERE and outer.src[:2] == (is_zero, UOp.const(I32, 0))
    inner = outer.src[2]
    assert inner.op is Ops.WHERE and inner.src[:2] == (is_minus_one, a.alu(Ops.NEG))
    division = inner.src[2]
    assert division.op is Ops.IDIV and division.src[0] is a
    assert division.src[1] is UOp(Ops.WHERE, I32, (is_zero.alu(Ops.OR, is_minus_one), UOp.const(I32, 1), b))
    assert guard_divisions(guarded) == guarded


def test_constant_divisors_and_floats_are_left_alone():
    a = _load(1)
    floats = _load(1, dtypes.float32).alu(Ops.IDIV, _load(2, dtypes.float32))
    for value in (a.alu(Ops.MOD, UOp.const(I32, 3)), a.alu(Ops.IDIV, UOp.const(I32, -2)), floats):
        store = _store(value)
        assert guard_divisions([store]) == [store]


def test_integer_division_by_zero_gives_zero_on_the_default_device():
    dividend, divisor = [7, -7, 9, 5, -3, 0], [2, 2, 0, 0, -2, 0]
    quotient = (Tensor(dividend, dtype=I32) // Tensor(divisor, dtype=I32)).numpy()
    np.testing.assert_array_equal(quotient, [3, -4, 0, 0, 1, 0])  # floor division (Python's //), 0 by zero


def test_int_min_by_minus_one_wraps_as_numpy_instead_of_trapping():
    # x86's idiv raises SIGFPE on int min / -1 (the process died before the guard); numpy wraps the quotient
    for dtype, numpy_dtype in ((dtypes.int8, np.int8), (dtypes.int16, np.int16), (dtypes.int32, np.int32),
                               (dtypes.int64, np.int64)):
        low = np.iinfo(numpy_dtype).min
        dividend = np.array([low, low, 7, -7, low + 1, 5], dtype=numpy_dtype)
        divisor = np.array([-1, 1, -1, -1, -1, 0], dtype=numpy_dtype)
        with np.errstate(over="ignore", divide="ignore"):
            expected_quotient, expected_remainder = dividend // divisor, dividend % divisor
        expected_quotient[divisor == 0] = 0
        expected_remainder[divisor == 0] = 0
        left, right = Tensor(dividend), Tensor(divisor)
        np.testing.assert_array_equal((left // right).numpy(), expected_quotient, err_msg=str(dtype))
        np.testing.assert_array_equal((left % right).numpy(), expected_remainder, err_msg=str(dtype))
