"""Edge values of the ops WGSL computes with explicit guards (math out of its domain, integer division by zero, NaN
comparisons, bool arithmetic, narrow integers wrapping), on the WebGPU adapter, checked against numpy."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

# no subnormals: CPU adapters flush them to zero, numpy does not
FLOATS = np.array([0.0, -0.0, -1.0, -2.5, -np.inf, np.inf, np.nan, 2.0, 0.5, 3.0, 1e30, -1e30], dtype=np.float32)


def on_webgpu(array: np.ndarray) -> Tensor:
    """`array` as a WEBGPU tensor."""
    return Tensor(array, device="WEBGPU")


def _trunc_division(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C's truncating quotient and remainder of integer arrays, 0 where the divisor is 0 (as the constant folder),
    wrapped to the dtype of `a` (the most negative value divided by -1 is itself)."""
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(wide_b == 0, 1, wide_b)
    quotient = np.where(wide_b == 0, 0, np.sign(wide_a) * np.sign(safe) * (np.abs(wide_a) // np.abs(safe)))
    remainder = np.where(wide_b == 0, 0, wide_a - quotient * safe)
    return quotient.astype(a.dtype), remainder.astype(a.dtype)


@pytest.mark.parametrize("op", ["log2", "sqrt", "sin"])
def test_math_out_of_domain(webgpu: Any, op: str) -> None:
    """log2 of 0 and -0 is -inf, of negatives NaN; sqrt of negatives NaN; sin of infinities NaN; NaN stays NaN."""
    values = FLOATS[(np.abs(FLOATS) < 1e4) | ~np.isfinite(FLOATS)] if op == "sin" else FLOATS  # sin: no huge phase
    with np.errstate(all="ignore"):
        expected = getattr(np, op)(values)
    result = getattr(on_webgpu(values), op)().numpy()
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_allclose(result, expected, rtol=2e-6, atol=0)
    if webgpu.renderer.has_f16:
        halves = values[(np.abs(values) < 1e4) | ~np.isfinite(values)].astype(np.float16)
        with np.errstate(all="ignore"):
            expected16 = getattr(np, op)(halves.astype(np.float32))
        result16 = getattr(on_webgpu(halves), op)().numpy().astype(np.float32)
        np.testing.assert_allclose(result16, expected16, rtol=2e-3, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint8, np.int16, np.uint16])
def test_integer_division_by_zero_and_overflow(webgpu: Any, dtype: Any) -> None:
    """Truncating division and remainder: 0 where the divisor is 0, the most negative value over -1 is itself."""
    info = np.iinfo(dtype)
    a = np.array([7, info.min, info.min, 0, info.max, 7, info.max, 5, 3, info.min + 1, 0, 9], dtype=np.int64)
    b = np.array([0, -1, 0, 0, -1, -2, 2, 3, info.max, 1, 5, -4], dtype=np.int64)
    if info.min == 0:
        b = np.abs(b)
    a, b = a.astype(dtype), b.astype(dtype)
    quotient, remainder = _trunc_division(a, b)
    x, y = on_webgpu(a), on_webgpu(b)
    np.testing.assert_array_equal(x.div(y, rounding_mode="trunc").numpy(), quotient)
    np.testing.assert_array_equal(x.fmod(y).numpy(), remainder)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal((x // y).numpy(), np.where(b == 0, 0, a // np.where(b == 0, 1, b)))
    constant_quotient, constant_remainder = _trunc_division(a, np.full_like(a, 3))
    np.testing.assert_array_equal(x.div(3, rounding_mode="trunc").numpy(), constant_quotient)
    np.testing.assert_array_equal(x.fmod(3).numpy(), constant_remainder)


def test_float_comparisons_with_nan(webgpu: Any) -> None:
    """!= is true when either side is NaN, == and < are false; infinities and signed zeros compare as numbers."""
    a, b = FLOATS, np.roll(FLOATS, 3)
    x, y = on_webgpu(a), on_webgpu(b)
    np.testing.assert_array_equal((x != y).numpy(), a != b)
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal((x != x).numpy(), a != a)


def test_float_max_without_nan(webgpu: Any) -> None:
    """maximum on infinities and signed zeros (the WGSL select keeps the first operand on ties)."""
    a = FLOATS[~np.isnan(FLOATS)]
    b = np.roll(a, 5)
    np.testing.assert_array_equal(on_webgpu(a).maximum(on_webgpu(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(on_webgpu(a).max().numpy(), a.max())


def test_bool_arithmetic(webgpu: Any) -> None:
    """bool operands: sums are or, products and, differences and xor are !=, < is (not a) and b, any/all reduce."""
    a = np.array([False, False, True, True, True, False, True, False])
    b = np.array([False, True, False, True, True, True, False, False])
    x, y = on_webgpu(a), on_webgpu(b)
    np.testing.assert_array_equal((x + y).numpy(), a | b)
    np.testing.assert_array_equal((x * y).numpy(), a & b)
    np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal((x != y).numpy(), a != b)
    np.testing.assert_array_equal(x.maximum(y).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(x.reshape(2, 4).any(axis=1).numpy(), a.reshape(2, 4).any(axis=1))
    np.testing.assert_array_equal(x.reshape(2, 4).all(axis=1).numpy(), a.reshape(2, 4).all(axis=1))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32])
def test_narrow_and_unsigned_wrapping(webgpu: Any, dtype: Any) -> None:
    """Results of narrow integer ops wrap to their width; negating an unsigned integer wraps."""
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 0, 1, 100, info.max // 2 + 1], dtype=np.int64).astype(dtype)
    b = np.array([info.max, 1, info.max, 3, 7, 2], dtype=np.int64).astype(dtype)
    x, y = on_webgpu(a), on_webgpu(b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((x + y).numpy(), a + b)
        np.testing.assert_array_equal((x - y).numpy(), a - b)
        np.testing.assert_array_equal((x * y).numpy(), a * b)
        np.testing.assert_array_equal((-x).numpy(), -a)
        np.testing.assert_array_equal((x << 3).numpy(), a << dtype(3))
        np.testing.assert_array_equal((x >> 1).numpy(), a >> dtype(1))
        np.testing.assert_array_equal(x.maximum(y).numpy(), np.maximum(a, b))
        np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal(x.cast(dtypes.float32).numpy(), a.astype(np.float32))


def test_casts_to_bool_and_edge_constants(webgpu: Any) -> None:
    """A conversion to bool is != 0 (NaN is true, -0 false); the extreme constants of each type keep their values."""
    np.testing.assert_array_equal(on_webgpu(FLOATS).cast(dtypes.bool).numpy(), FLOATS.astype(bool))
    integers = np.array([0, -1, 5, -2**31], dtype=np.int32)
    np.testing.assert_array_equal(on_webgpu(integers).cast(dtypes.bool).numpy(), integers.astype(bool))
    np.testing.assert_array_equal(on_webgpu(integers.astype(np.int8)).cast(dtypes.bool).numpy(),
                                  integers.astype(np.int8).astype(bool))
    for value, dtype, numpy_dtype in ((-2**31, dtypes.int32, np.int32), (2**32 - 1, dtypes.uint32, np.uint32),
                                      (-128, dtypes.int8, np.int8), (float("-inf"), dtypes.float32, np.float32),
                                      (float("nan"), dtypes.float32, np.float32), (1e-30, dtypes.float32, np.float32),
                                      (-0.1, dtypes.float32, np.float32)):
        result = (Tensor.full((3,), value, dtype=dtype, device="WEBGPU") + Tensor.zeros(3, dtype=dtype,
                                                                                      device="WEBGPU")).numpy()
        np.testing.assert_array_equal(result, np.full(3, value, dtype=numpy_dtype))
    if webgpu.renderer.has_f16:
        for value in (float("inf"), float("nan"), -0.1, 65504.0):
            result = (Tensor.full((3,), value, dtype=dtypes.float16, device="WEBGPU") * 1).numpy()
            np.testing.assert_array_equal(result, np.full(3, value, dtype=np.float16))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int16, np.uint16])
def test_packed_words_edge_values(webgpu: Any, dtype: Any) -> None:
    """Buffers of bools and 8/16-bit integers are u32 words (wgsl_lowering): each element read from and written to its
    word at every offset (a view starting mid-word too), neighbours written by other threads at the same time, gated
    reads (a pad) giving the pad value."""
    if dtype == np.bool_:
        values = np.array([True, False, False, True, True, True, False, True, False, False, True], dtype=np.bool_)
    else:
        info = np.iinfo(dtype)
        values = np.array([info.min, info.max, -1, 0, 1, info.min + 1, info.max - 1, 2, -2, 85, 170], dtype=np.int64)
        values = values.astype(dtype)
    tensor = on_webgpu(values).realize()
    np.testing.assert_array_equal((tensor + 0 if dtype != np.bool_ else tensor.logical_not()).numpy(),
                                  values + 0 if dtype != np.bool_ else ~values)
    for start in (1, 2, 3):
        np.testing.assert_array_equal(tensor[start:].flip(0).numpy(), values[start:][::-1])
    padded = tensor[1:8].pad(((3, 2),), value=True if dtype == np.bool_ else 5)
    np.testing.assert_array_equal(padded.numpy(), np.pad(values[1:8], (3, 2), constant_values=5 if dtype != np.bool_
                                                         else True))
    np.testing.assert_array_equal(tensor.cast(dtypes.int32).numpy(), values.astype(np.int32))
