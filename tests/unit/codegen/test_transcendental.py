"""float32 exp2 and log2 written as arithmetic (codegen/transcendental.py) against numpy's float64 results rounded
to float32: dense grids over the whole range, denormals, and the special values. Runs on the default device, and
on the decomposition directly through the CPU renderer when that renderer asks for it."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor
from tinycore.codegen.transcendental import decompose_transcendentals
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps between `got` and `want` (0 where both are nan; -0 and 0 are 0 apart)."""
    def ordered(values: np.ndarray) -> np.ndarray:
        bits = values.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    both_nan = np.isnan(got) & np.isnan(want)
    return np.where(both_nan, 0, np.abs(ordered(got) - ordered(want)))


def rounded(function: np.ufunc, values: np.ndarray) -> np.ndarray:
    """`function` in float64, rounded once to float32."""
    with np.errstate(all="ignore"):
        return function(values.astype(np.float64)).astype(np.float32)


def test_exp2_dense_grid_within_one_ulp() -> None:
    values = np.linspace(-155.0, 130.0, 1_000_003, dtype=np.float32)
    values = np.concatenate([values, np.linspace(-1.0, 1.0, 200_001, dtype=np.float32)])
    distance = ulp_distance(Tensor(values).exp2().numpy(), rounded(np.exp2, values))
    assert distance.max() <= 1, values[distance.argmax()]


def test_exp2_special_values() -> None:
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 128.0, 127.99999, -149.0, -149.5, -150.0, -126.0,
                       -126.5, 1e-45, -1e-45, 3e38, -3e38, 200.0, -200.0], dtype=np.float32)
    got = Tensor(values).exp2().numpy()
    want = rounded(np.exp2, values)
    assert ulp_distance(got, want).max() <= 1
    exact = [0, 1, 2, 3, 4, 5, 7, 9, 10, 14, 15, 16, 17]  # exact powers of two, overflow, underflow, nan
    np.testing.assert_array_equal(got[exact], want[exact])


def test_log2_log_uniform_values_within_one_ulp() -> None:
    generator = np.random.default_rng(0)
    magnitudes = generator.uniform(-149.0, 128.0, 1_000_000)
    values = np.exp2(magnitudes).astype(np.float32)
    values = np.concatenate([values, np.linspace(0.5, 2.0, 300_001, dtype=np.float32),
                             np.arange(1, 100_000, dtype=np.int32).view(np.float32)])  # denormals
    values = values[np.isfinite(values) & (values > 0)]
    distance = ulp_distance(Tensor(values).log2().numpy(), rounded(np.log2, values))
    assert distance.max() <= 1, values[distance.argmax()]


def test_log2_special_values() -> None:
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5, 1e-45, 1.17e-38, -1.0, 3.4e38,
                       1.0000001, 0.99999994, 2.0 ** -149, 2.0 ** 127], dtype=np.float32)
    got = Tensor(values).log2().numpy()
    want = rounded(np.log2, values)
    np.testing.assert_array_equal(got, want)


def test_functions_built_on_exp2_and_log2_match_numpy() -> None:
    values = np.linspace(-30.0, 30.0, 4099, dtype=np.float32)
    positive = np.abs(values) + np.float32(1e-3)
    tensor = Tensor(values)
    np.testing.assert_allclose(tensor.exp().numpy(), np.exp(values.astype(np.float64)), rtol=3e-6)
    np.testing.assert_allclose(Tensor(positive).log().numpy(), np.log(positive.astype(np.float64)), rtol=3e-6,
                               atol=1e-7)
    np.testing.assert_allclose(tensor.sigmoid().numpy(), 1 / (1 + np.exp(-values.astype(np.float64))), rtol=3e-6,
                               atol=1e-30)
    np.testing.assert_allclose(tensor.tanh().numpy(), np.tanh(values.astype(np.float64)), rtol=3e-6, atol=1e-6)
    np.testing.assert_allclose((Tensor(positive) ** 1.7).numpy(), positive.astype(np.float64) ** 1.7, rtol=1e-5)


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2])
def test_decomposition_leaves_no_transcendental_and_skips_other_dtypes(op: Ops) -> None:
    single = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    double = UOp(Ops.DEFINE_VAR, dtypes.float64, (), ("y", 0, 1))
    rewritten = decompose_transcendentals(UOp(Ops.SINK, dtypes.void, (UOp(op, dtypes.float32, (single,)),
                                                                       UOp(op, dtypes.float64, (double,)))))
    remaining = [node for node in rewritten.toposort if node.op is op]
    assert [node.dtype for node in remaining] == [dtypes.float64]
