"""The C renderer's post rules (tiny_cpu/lowering.py): the UOps they make, and kernels through them against torch."""
from __future__ import annotations

import numpy as np
import torch
from tiny_cpu.lowering import c_lowering

from tinycore import Tensor, dtypes
from tinycore.dtype import DType
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.uop import UOp


def _rewrite(uop: UOp) -> UOp:
    return graph_rewrite(UOp(Ops.SINK, dtypes.void, (uop,)), c_lowering).src[0]


def _variable(name: str, dtype: DType = dtypes.int32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 100))


def test_lanes_under_one_scalar_condition_become_one_select_of_whole_vectors() -> None:
    condition, scalar = _variable("c", dtypes.bool), _variable("s")
    vector = UOp(Ops.VECTORIZE, dtypes.int32.vec(4), tuple(_variable(f"v{lane}") for lane in range(4)))
    lanes = [UOp(Ops.WHERE, dtypes.int32, (condition, scalar, vector.gep(lane))) for lane in range(4)]
    result = _rewrite(UOp(Ops.VECTORIZE, dtypes.int32.vec(4), tuple(lanes)))
    assert result.op is Ops.WHERE and result.src[0] is condition and result.src[2] is vector
    assert result.src[1].op is Ops.VECTORIZE and result.src[1].src == (scalar,) * 4


def test_lanes_under_different_conditions_stay_lanes() -> None:
    conditions = [_variable(f"c{lane}", dtypes.bool) for lane in range(2)]
    lanes = tuple(UOp(Ops.WHERE, dtypes.int32, (condition, _variable("a"), _variable("b"))) for condition in conditions)
    vectorized = UOp(Ops.VECTORIZE, dtypes.int32.vec(2), lanes)
    assert _rewrite(vectorized) is vectorized


def test_narrow_integer_vectors_widen_lane_by_lane() -> None:
    narrow = UOp(Ops.VECTORIZE, dtypes.uint8.vec(4), tuple(_variable(f"v{lane}", dtypes.uint8) for lane in range(4)))
    to_float = _rewrite(narrow.cast(dtypes.float32.vec(4)))
    assert to_float.op is Ops.CAST and to_float.dtype == dtypes.float32.vec(4)
    lanes = to_float.src[0]
    assert lanes.op is Ops.VECTORIZE and lanes.dtype == dtypes.int32.vec(4)
    assert [(lane.op, lane.dtype, lane.src[0].arg) for lane in lanes.src] == [
        (Ops.CAST, dtypes.int32, (position,)) for position in range(4)]
    to_short = _rewrite(narrow.cast(dtypes.int16.vec(4)))
    assert to_short.op is Ops.VECTORIZE and all(lane.dtype == dtypes.int16 for lane in to_short.src)
    wide = UOp(Ops.VECTORIZE, dtypes.int32.vec(4), tuple(_variable(f"w{lane}") for lane in range(4)))
    assert _rewrite(wide.cast(dtypes.float32.vec(4))).src[0] is wide  # 32-bit lanes convert whole


def test_cumulative_maximum_indices_match_torch() -> None:
    """The index kernel selects under scalar comparisons in int vectors (the rewritten form)."""
    values = np.random.default_rng(5).uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    values[1] = values[0]  # ties pick the last index, as torch does
    maximum, indices = Tensor(values).cummax(0)
    np.testing.assert_array_equal(maximum.numpy(), torch.cummax(torch.tensor(values), 0)[0].numpy())
    np.testing.assert_array_equal(indices.numpy(), torch.cummax(torch.tensor(values), 0)[1].numpy())


def test_widened_bytes_match_numpy() -> None:
    values = np.arange(256, dtype=np.uint8)[::-1].copy()
    np.testing.assert_array_equal((Tensor(values).cast(dtypes.float32) * 2).numpy(), values.astype(np.float32) * 2)
    np.testing.assert_array_equal((Tensor(values).cast(dtypes.int32) - 300).numpy(), values.astype(np.int32) - 300)


def test_math_of_halves_in_float32_matches_torch() -> None:
    values = np.linspace(0.25, 8.0, 37, dtype=np.float16)
    halves = torch.tensor(values)
    for ours, theirs in ((Tensor(values).sqrt(), halves.sqrt()), (Tensor(values).exp2(), halves.exp2()),
                         (Tensor(values).log2(), halves.log2()), (Tensor(values).sin(), halves.sin())):
        assert ours.dtype == dtypes.float16
        np.testing.assert_allclose(ours.numpy().astype(np.float32), theirs.float().numpy(), rtol=2e-3, atol=2e-3)


def test_integer_pow_is_computed_in_float64() -> None:
    base = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("b", 0, 100))
    power = _rewrite(base.alu(Ops.POW, base))
    assert power.op is Ops.CAST and power.dtype == dtypes.int32
    assert power.src[0].op is Ops.POW and power.src[0].dtype == dtypes.float64
    assert all(source.op is Ops.CAST and source.dtype == dtypes.float64 for source in power.src[0].src)
    half = UOp(Ops.DEFINE_VAR, dtypes.float16, (), ("h", 0, 100))
    assert _rewrite(half.alu(Ops.SQRT)).src[0].dtype == dtypes.float32
    single = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("f", 0, 100)).alu(Ops.SQRT)
    assert _rewrite(single) is single
