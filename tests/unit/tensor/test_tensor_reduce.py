"""Reduce Tensor operations against numpy and torch: axes (int, tuple, negative, None), keepdim, dtypes, errors."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tinycore import Tensor, dtypes

RNG = np.random.default_rng(1)
CASES = [((), None), ((5,), 0), ((5,), -1), ((2, 3), None), ((2, 3), 1), ((2, 3), (0, 1)), ((2, 3, 4), (0, 2)),
         ((2, 3, 4), -2), ((1, 4), 0), ((3, 0), 1), ((3, 0), 0)]


def _close(got: Tensor, expected: Any, atol: float = 1e-5) -> None:
    result = got.numpy()
    expected = np.asarray(expected)
    assert result.shape == expected.shape, f"shape {result.shape} != {expected.shape}"
    np.testing.assert_allclose(result, expected, atol=atol, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape, axis", CASES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_prod(shape: tuple, axis: Any, keepdim: bool) -> None:
    values = RNG.uniform(-2, 2, shape).astype(np.float32)
    numpy_axis = axis if shape else None
    _close(Tensor(values).sum(axis, keepdim), values.sum(numpy_axis, keepdims=keepdim))
    _close(Tensor(values).prod(axis, keepdim), values.prod(numpy_axis, keepdims=keepdim))
    if values.size:
        with np.errstate(invalid="ignore"):
            _close(Tensor(values).mean(axis, keepdim), values.mean(numpy_axis, keepdims=keepdim))


@pytest.mark.parametrize("shape, axis", [case for case in CASES if 0 not in case[0]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min(shape: tuple, axis: Any, keepdim: bool) -> None:
    values = RNG.uniform(-2, 2, shape).astype(np.float32)
    numpy_axis = axis if shape else None
    _close(Tensor(values).max(axis, keepdim), values.max(numpy_axis, keepdims=keepdim))
    _close(Tensor(values).min(axis, keepdim), values.min(numpy_axis, keepdims=keepdim))


def test_reductions_of_empty_axes_give_identities() -> None:
    empty = Tensor.ones(3, 0)
    assert empty.sum(1).tolist() == [0.0, 0.0, 0.0]
    assert empty.prod(1).tolist() == [1.0, 1.0, 1.0]
    assert empty.max(1).tolist() == [float("-inf")] * 3
    assert empty.sum(0).shape == (0,)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.int16])
def test_integer_min_max_keep_extremes(dtype: Any) -> None:
    low, high = dtypes.min(dtype), dtypes.max(dtype)
    values = Tensor([low, 0, high, 1], dtype=dtype)
    assert values.max().item() == high and values.min().item() == low
    assert values.max().dtype == dtype


# sum's dtype: tinygrad's rule (torch would give int64 for every integer type)
SUM_DTYPES = [(dtypes.bool, dtypes.int32), (dtypes.int8, dtypes.int32), (dtypes.uint8, dtypes.uint32),
              (dtypes.int16, dtypes.int32), (dtypes.int32, dtypes.int32), (dtypes.int64, dtypes.int64),
              (dtypes.uint32, dtypes.uint32), (dtypes.float16, dtypes.float16), (dtypes.float32, dtypes.float32)]


@pytest.mark.parametrize("source, expected", SUM_DTYPES)
def test_sum_dtype_table(source: Any, expected: Any) -> None:
    assert Tensor.ones(4, dtype=source).sum().dtype == expected


def test_sum_accumulates_wider_than_the_input() -> None:
    assert Tensor([100, 100, 100], dtype=dtypes.int8).sum().item() == 300
    assert Tensor([True] * 5).sum().item() == 5
    assert Tensor([1.0, 2.0], dtype=dtypes.float16).sum(dtype=dtypes.float32).dtype == dtypes.float32
    assert Tensor([2, 3], dtype=dtypes.int8).prod().dtype == dtypes.int8


def test_mean_dtypes() -> None:
    assert Tensor([1, 2]).mean().dtype == dtypes.float32 and Tensor([1, 2]).mean().item() == 1.5
    assert Tensor([1.0, 2.0], dtype=dtypes.float16).mean().dtype == dtypes.float16
    assert Tensor([True, False]).mean().item() == 0.5


@pytest.mark.parametrize("shape, axis", [((6,), None), ((3, 4), 1), ((3, 4), (0, 1)), ((2, 3, 4), -1)])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(shape: tuple, axis: Any, correction: int) -> None:
    values = RNG.uniform(-2, 2, shape).astype(np.float32)
    reference = torch.tensor(values)
    _close(Tensor(values).var(axis, correction=correction), torch.var(reference, axis, correction=correction))
    _close(Tensor(values).std(axis, keepdim=True, correction=correction),
           torch.std(reference, axis, keepdim=True, correction=correction))
    variance, mean = Tensor(values).var_mean(axis, correction=correction)
    expected_variance, expected_mean = torch.var_mean(reference, axis, correction=correction)
    _close(variance, expected_variance)
    _close(mean, expected_mean)
    deviation, _ = Tensor(values).std_mean(axis, correction=correction)
    _close(deviation, torch.std(reference, axis, correction=correction))


@pytest.mark.parametrize("shape, axis", [((7,), None), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((1, 5), 0)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(shape: tuple, axis: Any, keepdim: bool) -> None:
    values = RNG.integers(-3, 3, shape).astype(np.float32)
    reference = torch.tensor(values)
    got_max = Tensor(values).argmax(axis, keepdim)
    assert got_max.dtype == dtypes.int32
    expected_max = torch.argmax(reference, axis, keepdim) if axis is not None else \
        torch.argmax(reference).reshape((1,) * len(shape) if keepdim else ())
    np.testing.assert_array_equal(got_max.numpy(), expected_max.numpy())
    expected_min = torch.argmin(reference, axis, keepdim) if axis is not None else \
        torch.argmin(reference).reshape((1,) * len(shape) if keepdim else ())
    np.testing.assert_array_equal(Tensor(values).argmin(axis, keepdim).numpy(), expected_min.numpy())


def test_argmax_picks_the_first_maximum() -> None:
    assert Tensor([1, 3, 3, 0]).argmax().item() == 1
    assert Tensor([[5, 5], [1, 7]]).argmin(1).tolist() == [0, 0]


@pytest.mark.parametrize("shape, axis", [((5,), None), ((3, 4), 1), ((3, 4), (0, 1)), ((2, 0), 1)])
def test_any_all(shape: tuple, axis: Any) -> None:
    values = RNG.integers(0, 2, shape).astype(bool)
    np.testing.assert_array_equal(Tensor(values).any(axis).numpy(), values.any(axis))
    np.testing.assert_array_equal(Tensor(values).all(axis).numpy(), values.all(axis))
    numbers = values.astype(np.float32) * 2.5
    np.testing.assert_array_equal(Tensor(numbers).any(axis).numpy(), numbers.any(axis))
    assert Tensor(values).any(axis).dtype == dtypes.bool


@pytest.mark.parametrize("shape, axis", [((5,), None), ((3, 4), 1), ((2, 3, 4), (0, 2))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(shape: tuple, axis: Any, keepdim: bool) -> None:
    values = RNG.uniform(-50, 50, shape).astype(np.float32)
    expected = torch.logsumexp(torch.tensor(values), axis if axis is not None else tuple(range(len(shape))), keepdim)
    _close(Tensor(values).logsumexp(axis, keepdim), expected.numpy(), atol=1e-4)
    assert Tensor([float("-inf"), float("-inf")]).logsumexp().item() == float("-inf")


@pytest.mark.parametrize("shape, axis", [((6,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1), ((1,), 0)])
def test_cumulative_scans(shape: tuple, axis: int) -> None:
    values = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    reference = torch.tensor(values)
    _close(Tensor(values).cumsum(axis), np.cumsum(values, axis))
    _close(Tensor(values).cumprod(axis), np.cumprod(values, axis))
    maximum, maximum_index = Tensor(values).cummax(axis)
    _close(maximum, torch.cummax(reference, axis)[0])
    np.testing.assert_array_equal(maximum_index.numpy(), torch.cummax(reference, axis)[1].numpy())
    minimum, minimum_index = Tensor(values).cummin(axis)
    _close(minimum, torch.cummin(reference, axis)[0])
    np.testing.assert_array_equal(minimum_index.numpy(), torch.cummin(reference, axis)[1].numpy())
    _close(Tensor(values).logcumsumexp(axis), torch.logcumsumexp(reference, axis), atol=1e-5)


def test_cumsum_of_integers_and_scalars() -> None:
    assert Tensor([1, 2, 3], dtype=dtypes.int8).cumsum().dtype == dtypes.int32
    assert Tensor([True, True, False]).cumsum().tolist() == [1, 2, 2]
    assert Tensor(3.0).cumsum().item() == 3.0


def test_reduce_axis_errors() -> None:
    with pytest.raises(IndexError, match="out of range"):
        Tensor.ones(2, 3).sum(2)
    with pytest.raises(IndexError, match="out of range"):
        Tensor.ones(2, 3).max(-3)
    with pytest.raises(ValueError, match="same dimension"):
        Tensor.ones(2, 3).sum((1, -1))
    with pytest.raises(TypeError):
        Tensor.ones(2, 3).sum(1.0)
