"""constant_difference(s): the integer gap between two index expressions, read off `x + c` forms over one shared node
where it can be, from full linear forms otherwise. Expected gaps are worked out by hand."""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import Variable, constant_difference, constant_differences
from tinycore.uop.uop import UOp

x, y = Variable("x", 0, 99), Variable("y", 0, 9)


def _add(left: UOp, right: UOp) -> UOp:
    """left + right as one ADD node, unfolded (the tests choose the exact structure)."""
    return UOp(Ops.ADD, dtypes.int32, (left, right))


def _int(value: int) -> UOp:
    return UOp.const(dtypes.int32, value)


def test_offsets_over_one_shared_node() -> None:
    scaled = UOp(Ops.MUL, dtypes.int32, (x, _int(4)))
    base = _add(scaled, y)
    assert constant_difference(_add(base, _int(3)), _add(base, _int(5))) == 2
    assert constant_difference(base, _add(base, _int(1))) == 1
    assert constant_difference(_add(base, _int(7)), base) == -7
    assert constant_difference(base, base) == 0
    assert constant_difference(_int(4), _int(9)) == 5


def test_offsets_through_the_linear_forms() -> None:
    # (x + 1) + 4 and x + 3: different nodes under the constant, equal terms: 5 - 3 apart
    assert constant_difference(_add(x, _int(3)), _add(_add(x, _int(1)), _int(4))) == 2
    # y + x + 2 and x + y: the same terms in another order
    assert constant_difference(_add(_add(y, x), _int(2)), _add(x, y)) == -2
    assert constant_difference(_int(3), _add(x, _int(3))) is None  # x is not a constant
    assert constant_difference(x, y) is None
    assert constant_difference(x, UOp(Ops.MUL, dtypes.int32, (x, _int(2)))) is None  # 2x - x = x


def test_differences_of_a_row_of_lanes() -> None:
    row = _add(UOp(Ops.MUL, dtypes.int32, (x, _int(16))), y)
    lanes = [row, _add(row, _int(1)), _add(_add(y, _int(2)), UOp(Ops.MUL, dtypes.int32, (x, _int(16)))),
             _add(row, _int(3)), _add(x, _int(4))]
    assert constant_differences(row, lanes) == [0, 1, 2, 3, None]
    assert constant_differences(row, []) == []
