"""float32 exp2, log2 and sin/cos written as arithmetic (codegen/transcendental.py) against numpy's float64 results
rounded to float32: dense grids over the whole range, denormals, and the special values. Runs on the default device,
and on the decomposition directly through the CPU renderer when that renderer asks for it."""
from __future__ import annotations

import numpy as np
import pytest
from ulp import ulp_distance

from tinycore import Tensor
from tinycore.codegen.transcendental import decompose_transcendentals
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


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


def test_exp2_underflow_is_positive_zero_and_masked_softmax_matches_numpy() -> None:
    # below -150 exp2 selects +0 (its lanes compute 2**0 instead of underflowing, which x86 runs as microcode
    # assists); -150 itself rounds to +0 too, just above it to the least denormal
    values = np.array([-np.inf, -3e38, -1000.0, -150.5, -150.0, -149.99, -149.0, -127.0], dtype=np.float32)
    got = Tensor(values).exp2().numpy()
    np.testing.assert_array_equal(got.view(np.uint32)[:5], np.zeros(5, np.uint32))
    np.testing.assert_array_equal(got, rounded(np.exp2, values))
    # a causal mask's -inf scores: exp of them is exactly 0 and the rows still sum to 1
    scores = np.random.default_rng(0).standard_normal((4, 33, 33)).astype(np.float32)
    masked = np.where(np.tril(np.ones((33, 33), bool)), scores, -np.inf).astype(np.float32)
    expected = np.exp(masked - masked.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    result = Tensor(masked).softmax(-1).numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-7)
    assert (result[:, np.triu_indices(33, 1)[0], np.triu_indices(33, 1)[1]] == 0).all()


def test_exp2_and_exp_of_every_kind_of_nan_are_nan() -> None:
    # exp2 selects nothing for nan: the clamps keep it and every later step carries it, whatever its sign or payload
    patterns = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                         0x7FC00001, 0x7FD55555], dtype=np.uint32).view(np.float32)
    assert np.isnan(patterns).all()
    assert np.isnan(Tensor(patterns).exp2().numpy()).all()
    assert np.isnan(Tensor(patterns).exp().numpy()).all()


def test_exp2_decomposition_converts_no_float_to_int() -> None:
    # a float -> int conversion of nan is poison in LLVM IR: the powers of two come from bit casts instead
    single = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    for fused in (False, True):
        rewritten = decompose_transcendentals(UOp(Ops.SINK, dtypes.void, (UOp(Ops.EXP2, dtypes.float32, (single,)),)),
                                              fused)
        assert not any(node.op is Ops.CAST and dtypes.is_int(node.dtype.scalar) for node in rewritten.toposort)
        assert any(node.op is Ops.BITCAST for node in rewritten.toposort)

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


def _sine_grids() -> np.ndarray:
    generator = np.random.default_rng(1)
    dense = np.linspace(-20.0, 20.0, 1_000_001, dtype=np.float32)
    every_exponent = generator.integers(0, 2 ** 31 - 2 ** 23, 1_000_000, dtype=np.int64).astype(np.int32).view(
        np.float32)  # uniform over the bit patterns of positive finite floats: every binade alike
    near_quadrants = (np.arange(1, 300_001) * (np.pi / 2)).astype(np.float32)  # r tiny after the reduction
    # the float32 closest to a multiple of pi/2 (16367173 * 2**72) and its neighbours, the top of the range
    hard = np.array([3.4028235e38, 16367173 * 2.0 ** 72, 2.0 ** 127, 1.0e30, 8.5e37, 2.0 ** 24, 102940.4,
                     0.5, 0.49999997, 0.7853982, 2.0 ** -12, 2.0 ** -12 * 1.0000001], dtype=np.float32)
    hard = np.concatenate([hard, np.nextafter(hard[1:], np.float32(np.inf)), np.nextafter(hard, np.float32(0))])
    values = np.concatenate([dense, every_exponent, near_quadrants, hard])
    return np.concatenate([values, -values])


@pytest.mark.parametrize(("name", "reference"), [("sin", np.sin), ("cos", np.cos)])
def test_sin_and_cos_within_one_ulp_over_the_whole_range(name: str, reference: np.ufunc) -> None:
    values = _sine_grids()
    distance = ulp_distance(getattr(Tensor(values), name)().numpy(), rounded(reference, values))
    assert distance.max() <= 1, values[distance.argmax()]


def test_sin_cos_tan_special_values() -> None:
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, -3e-39, 1e-30, -2.0 ** -13],
                      dtype=np.float32)
    sine = Tensor(values).sin().numpy()
    np.testing.assert_array_equal(sine, rounded(np.sin, values))
    numbers = ~np.isnan(sine)
    np.testing.assert_array_equal(np.signbit(sine[numbers]), np.signbit(rounded(np.sin, values)[numbers]))  # -0
    np.testing.assert_array_equal(Tensor(values).cos().numpy(), rounded(np.cos, values))
    tangent = np.linspace(-1.5, 1.5, 30_001, dtype=np.float32)
    np.testing.assert_allclose(Tensor(tangent).tan().numpy(), np.tan(tangent.astype(np.float64)), rtol=5e-7)


def test_sin_decomposition_reads_cos_from_its_tensor_form() -> None:
    single = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    cosine = UOp(Ops.SIN, dtypes.float32, (UOp.const(dtypes.float32, np.pi / 2) + (-single),))
    rewritten = decompose_transcendentals(UOp(Ops.SINK, dtypes.void, (cosine,)))
    assert not any(node.op is Ops.SIN for node in rewritten.toposort)
    # no rounded pi/2 - x is left: the argument is reduced from x itself
    assert not any(node.op is Ops.ADD and any(source.op is Ops.CONST and source.arg == np.float32(np.pi / 2)
                                               for source in node.src) for node in rewritten.toposort)


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN])
def test_decomposition_leaves_no_transcendental_and_skips_other_dtypes(op: Ops) -> None:
    single = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    double = UOp(Ops.DEFINE_VAR, dtypes.float64, (), ("y", 0, 1))
    rewritten = decompose_transcendentals(UOp(Ops.SINK, dtypes.void, (UOp(op, dtypes.float32, (single,)),
                                                                       UOp(op, dtypes.float64, (double,)))))
    remaining = [node for node in rewritten.toposort if node.op is op]
    assert [node.dtype for node in remaining] == [dtypes.float64]
