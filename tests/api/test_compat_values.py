"""Values tinygrad programs read, against numpy and torch: half-precision tolist, int64 ranges, nonzero of zeros,
isclose at inf and nan, scatter with repeated indices, normalize with p=0 and p=inf, stack of a sequence, einsum
formulas with more than one ellipsis."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.errors import ArgumentError
from tinycore.tensor import Tensor

RNG = np.random.default_rng(9)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_half_precision_tolist_and_item(dtype: object) -> None:
    values = [[1.5, -2.25, 65504.0 if dtype == dtypes.float16 else 3.0e38], [0.0, -0.0, 0.099975586]]
    expected = torch.tensor(values, dtype=torch.float16 if dtype == dtypes.float16 else torch.bfloat16)
    assert Tensor(values, dtype=dtype).tolist() == expected.float().tolist()
    assert Tensor(1.5, dtype=dtype).item() == 1.5


@pytest.mark.parametrize("start, stop, step", [(2 ** 31, 2 ** 31 + 3, 1), (-2 ** 31 - 2, -2 ** 31 + 1, 1),
                                               (0, 2 ** 33, 2 ** 31), (5, -2 ** 32, -2 ** 31)])
def test_arange_past_int32_is_int64(start: int, stop: int, step: int) -> None:
    result = Tensor.arange(start, stop, step)
    expected = np.arange(start, stop, step)
    assert result.dtype == dtypes.int64
    np.testing.assert_array_equal(result.numpy(), expected)


def test_arange_inside_int32_stays_the_default_int() -> None:
    assert Tensor.arange(5).dtype == dtypes.int32
    np.testing.assert_array_equal(Tensor.arange(10, 0, -3).numpy(), np.arange(10, 0, -3))


@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 0, 3)])
def test_nonzero_of_all_zeros(shape: tuple[int, ...]) -> None:
    result = Tensor.zeros(*shape).nonzero()
    expected = torch.zeros(shape).nonzero()
    assert result.shape == tuple(expected.shape)
    assert result.numpy().size == 0


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_at_inf_and_nan_matches_torch(equal_nan: bool) -> None:
    first = np.array([np.inf, -np.inf, np.nan, np.inf, 1.0, np.nan, 0.0, 1e-9, -np.inf, 1.0, 3.0], np.float32)
    second = np.array([np.inf, np.inf, np.nan, 1.0, np.inf, 1.0, 0.0, 0.0, -np.inf, 1.00001, 3.1], np.float32)
    expected = torch.isclose(torch.tensor(first), torch.tensor(second), equal_nan=equal_nan).numpy()
    np.testing.assert_array_equal(Tensor(first).isclose(Tensor(second), equal_nan=equal_nan).numpy(), expected)
    close, far = Tensor(first[:1]).allclose(Tensor(second[:1])), Tensor(first[1:2]).allclose(Tensor(second[1:2]))
    assert close.shape == () and close.dtype == dtypes.bool  # a 0-d bool Tensor, as tinygrad 0.14 returns
    assert close.item() is True and far.item() is False


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_with_repeated_indices_matches_torch(dim: int) -> None:
    base = RNG.standard_normal((6, 7)).astype(np.float32)
    index = RNG.integers(0, base.shape[dim], (5, 7) if dim == 0 else (6, 5))
    source = RNG.standard_normal(index.shape).astype(np.float32)
    expected = torch.tensor(base).scatter(dim, torch.tensor(index), torch.tensor(source)).numpy()
    np.testing.assert_array_equal(Tensor(base).scatter(dim, Tensor(index), Tensor(source)).numpy(), expected)
    summed = torch.tensor(base).scatter_reduce(dim, torch.tensor(index), torch.tensor(source), reduce="sum").numpy()
    ours = Tensor(base).scatter_reduce(dim, Tensor(index), Tensor(source), reduce="sum").numpy()
    np.testing.assert_allclose(ours, summed, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("dim", [0, 1])
def test_normalize_matches_torch(p: float, dim: int) -> None:
    values = np.array([[1.0, -2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.5, -4.0]], np.float32)
    expected = torch.nn.functional.normalize(torch.tensor(values), p=p, dim=dim).numpy()
    np.testing.assert_allclose(Tensor(values).normalize(p=p, dim=dim).numpy(), expected, rtol=1e-6, atol=1e-7)


def test_stack_and_cat_of_a_sequence_passed_as_one_argument() -> None:
    first, second = np.array([1, 2]), np.array([3, 4])
    np.testing.assert_array_equal(Tensor.stack((Tensor(first), Tensor(second))).numpy(), np.stack((first, second)))
    np.testing.assert_array_equal(Tensor.stack([Tensor(first), Tensor(second)], dim=1).numpy(),
                                  np.stack([first, second], axis=1))
    np.testing.assert_array_equal(Tensor.cat((Tensor(first), Tensor(second))).numpy(), np.concatenate((first, second)))


def test_einsum_with_two_ellipses_in_an_operand_is_a_clear_error() -> None:
    with pytest.raises(ArgumentError, match="more than one '...'"):
        Tensor.einsum("...i...,i->...", Tensor.ones(2, 3, 2), Tensor.ones(3))
    with pytest.raises(RuntimeError):  # what tinygrad and torch raise
        Tensor.einsum("i...,i->......", Tensor.ones(3, 2), Tensor.ones(3))
    operands = RNG.standard_normal((2, 3, 4)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(Tensor.einsum("...j,jk->...k", *(Tensor(array) for array in operands)).numpy(),
                               np.einsum("...j,jk->...k", *operands), rtol=1e-5, atol=1e-5)
