"""softmax and log_softmax built on nodes (tinycore.tensor.row_functions) are the very nodes the Tensor operations
make, and match torch (values and gradients)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor

RNG = np.random.default_rng(3)
CASES = [((7, 13), -1), ((7, 13), 0), ((2, 3, 5), 1), ((2, 3, 5), -3), ((11,), 0), ((4, 1), 1)]


def _reference(source: Tensor, axis: int, log: bool) -> Tensor:
    """The Tensor-operation spelling softmax and log_softmax use for other dtypes."""
    shifted = source - source.max(axis, keepdim=True)
    if log:
        return shifted - shifted.exp().sum(axis, keepdim=True).log()
    exponent = shifted.exp()
    return exponent / exponent.sum(axis, keepdim=True)


@pytest.mark.parametrize("shape, axis", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_same_nodes_as_the_tensor_operations(shape: tuple[int, ...], axis: int, dtype: type, log: bool) -> None:
    source = Tensor(RNG.standard_normal(shape).astype(dtype))
    found = source.log_softmax(axis) if log else source.softmax(axis)
    assert found.uop is _reference(source, axis, log).uop


@pytest.mark.parametrize("shape, axis", CASES)
@pytest.mark.parametrize("log", [False, True])
def test_values_and_gradients_match_torch(shape: tuple[int, ...], axis: int, log: bool) -> None:
    data = (RNG.standard_normal(shape) * 5).astype(np.float32)
    upstream = RNG.standard_normal(shape).astype(np.float32)
    source = Tensor(data, requires_grad=True)
    found = source.log_softmax(axis) if log else source.softmax(axis)
    (found * Tensor(upstream)).sum().backward()
    theirs = torch.tensor(data, requires_grad=True)
    expected = torch.log_softmax(theirs, axis) if log else torch.softmax(theirs, axis)
    (expected * torch.from_numpy(upstream)).sum().backward()
    np.testing.assert_allclose(found.numpy(), expected.detach().numpy(), rtol=2e-5, atol=2e-6)
    assert source.grad is not None and theirs.grad is not None
    np.testing.assert_allclose(source.grad.numpy(), theirs.grad.numpy(), rtol=2e-4, atol=2e-5)


def test_other_dtypes_and_bad_axes_take_the_tensor_path() -> None:
    halves = Tensor(RNG.standard_normal((3, 4)).astype(np.float16))
    np.testing.assert_allclose(halves.softmax(-1).numpy().astype(np.float32),
                               torch.softmax(torch.tensor(halves.numpy()).float(), -1).numpy(), rtol=2e-3, atol=1e-3)
    integers = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    np.testing.assert_allclose(integers.softmax(-1).numpy(),
                               torch.softmax(torch.arange(12.0).reshape(3, 4), -1).numpy(), rtol=1e-6)
    scalar = Tensor(np.float32(2.5))
    assert scalar.softmax().item() == 1.0 and scalar.log_softmax().item() == 0.0
    empty = Tensor(np.zeros((0, 4), np.float32))
    assert empty.softmax(-1).shape == (0, 4) and empty.log_softmax(0).shape == (0, 4)
    with pytest.raises(IndexError):
        Tensor(RNG.standard_normal((3, 4)).astype(np.float32)).softmax(2)
