"""The core's wave-collective interpreter (used by the NV and AMD MOCK GPUs): a work-group of several whole waves
meets at a collective op, and each wave's lanes get what `combine` computed from that wave's operands."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen.interpreter import InterpreterError
from tinycore.codegen.wave_interpreter import WaveProgram
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def _wave_sum_program(lanes: int) -> list[UOp]:
    """out[lane] = (the sum of lane numbers over the lane's wave) + 1000 * (the lane's index in its wave)."""
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(lanes), (), 0)
    size = UOp.const(dtypes.int32, lanes)
    lane = UOp(Ops.SPECIAL, dtypes.int32, (size,), "lidx0")
    value = lane.cast(dtypes.float32)
    collective = UOp(Ops.CUSTOM, dtypes.float32.vec(2), (value,), "wave_sum({0})")
    result = collective.gep(0) + collective.gep(1) * UOp.const(dtypes.float32, 1000.0)
    index = out.index(lane)
    store = index.store(result)
    return [out, size, lane, value, collective, collective.gep(0), collective.gep(1),
            UOp.const(dtypes.float32, 1000.0), collective.gep(1) * UOp.const(dtypes.float32, 1000.0), result, index,
            store]


def _combine(operands: list[list[float]]) -> list[tuple[float, ...]]:
    total = sum(values[0] for values in operands)
    return [(total, float(position)) for position in range(len(operands))]


def test_a_work_group_of_two_waves_gets_each_waves_result() -> None:
    output = np.zeros(8, np.float32)
    WaveProgram(_wave_sum_program(8), {"wave_sum": _combine}, 4)([output])
    np.testing.assert_array_equal(output, [6, 1006, 2006, 3006, 22, 1022, 2022, 3022])


def test_a_work_group_that_is_not_whole_waves_is_refused() -> None:
    with pytest.raises(InterpreterError, match="whole waves"):
        WaveProgram(_wave_sum_program(6), {"wave_sum": _combine}, 4)([np.zeros(6, np.float32)])
