"""Writes through index tensors (setitem, scatter, scatter_reduce) into tensors that span devices, against numpy
and torch: replicated and sharded targets, the sharded axis carried by a slice, picked by an index tensor or by a
single position, and the gradient of the scattered values."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from tinycore import Tensor
from tinycore.uop.ops import Ops

DEVICES = ("CPU:0", "CPU:1")
RNG = np.random.default_rng(8)
BASE = RNG.standard_normal((6, 8)).astype(np.float32)
ROWS = np.array([0, 5, 2, -1], dtype=np.int32)
COLUMNS = np.array([7, 0, 3], dtype=np.int32)


def placed(array: np.ndarray, axis: int | None) -> Tensor:
    tensor = Tensor(array.copy())
    return (tensor.to(DEVICES) if axis is None else tensor.shard(DEVICES, axis)).realize()


SETITEM_CASES: dict[str, tuple[tuple[object, ...], np.ndarray]] = {
    "rows": ((ROWS,), np.full((4, 8), 3, np.float32)),
    "columns": ((slice(None), COLUMNS), np.arange(18, dtype=np.float32).reshape(6, 3)),
    "position_and_columns": ((4, COLUMNS), np.array([1, 2, 3], np.float32)),
    "slice_and_columns": ((slice(1, 6, 2), COLUMNS), np.full((3, 3), 9, np.float32)),
    "reversed_slice_and_columns": ((slice(5, 0, -2), COLUMNS), np.arange(9, dtype=np.float32).reshape(3, 3)),
    "rows_and_slice": ((ROWS[:2], slice(2, 7)), np.full((2, 5), -1, np.float32)),
}


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("case", sorted(SETITEM_CASES))
def test_setitem_through_index_tensors(axis: int | None, case: str) -> None:
    items, value = SETITEM_CASES[case]
    tensor = placed(BASE, axis)
    devices = tensor.device
    ours = tuple(Tensor(item) if isinstance(item, np.ndarray) else item for item in items)
    tensor[ours if len(ours) > 1 else ours[0]] = Tensor(value)  # values on one device go to each
    expected = BASE.copy()
    expected[items if len(items) > 1 else items[0]] = value
    assert tensor.device == devices and tensor.uop.op is Ops.MULTI and tensor.uop.arg == axis
    np.testing.assert_array_equal(tensor.numpy(), expected)


INDEX_1 = RNG.integers(0, 8, (6, 3))
SOURCE_1 = RNG.standard_normal((6, 3)).astype(np.float32)
INDEX_0 = RNG.integers(0, 6, (4, 8))
SOURCE_0 = RNG.standard_normal((4, 8)).astype(np.float32)
SCATTERS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "scatter_1": (lambda t: t.scatter(1, Tensor(INDEX_1.astype(np.int32)), Tensor(SOURCE_1)),
                  lambda t: t.scatter(1, torch.tensor(INDEX_1), torch.tensor(SOURCE_1))),
    "sum_0": (lambda t: t.scatter_reduce(0, Tensor(INDEX_0.astype(np.int32)), Tensor(SOURCE_0), "sum"),
              lambda t: t.scatter_reduce(0, torch.tensor(INDEX_0), torch.tensor(SOURCE_0), "sum")),
    "amax_1": (lambda t: t.scatter_reduce(1, Tensor(INDEX_1.astype(np.int32)), Tensor(SOURCE_1), "amax",
                                          include_self=False),
               lambda t: t.scatter_reduce(1, torch.tensor(INDEX_1), torch.tensor(SOURCE_1), "amax",
                                          include_self=False)),
}


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_scatter_into_a_new_tensor(axis: int | None, name: str) -> None:
    ours, theirs = SCATTERS[name]
    target = placed(BASE, axis)
    result = ours(target)
    assert result.device == target.device and result.uop.arg == axis
    np.testing.assert_allclose(result.numpy(), theirs(torch.tensor(BASE)).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0])
def test_gradient_of_scattered_values(axis: int | None) -> None:
    """scatter_reduce('sum') along the sharded axis: the values' gradient is the output gradient read at their
    positions (torch's autograd as the reference)."""
    values = Tensor(SOURCE_0, requires_grad=True)
    weights = RNG.standard_normal((6, 8)).astype(np.float32)
    result = placed(BASE, axis).scatter_reduce(0, Tensor(INDEX_0.astype(np.int32)), values, "sum")
    (result * placed(weights, axis)).sum().backward()
    their_values = torch.tensor(SOURCE_0, requires_grad=True)
    theirs = torch.tensor(BASE).scatter_reduce(0, torch.tensor(INDEX_0), their_values, "sum")
    (theirs * torch.tensor(weights)).sum().backward()
    assert values.grad is not None and their_values.grad is not None
    np.testing.assert_allclose(values.grad.numpy(), their_values.grad.numpy(), rtol=1e-6)


def test_values_on_several_devices_into_one_device_is_a_clear_error() -> None:
    target = Tensor(BASE.copy()).realize()
    with pytest.raises(ValueError, match="move the values and indices to its device"):
        target[Tensor(ROWS)] = Tensor(np.ones((4, 8), np.float32)).to(DEVICES)


def test_setitem_on_three_devices() -> None:
    """Blocks of two rows on each of three devices: a reversed slice and an index tensor along the sharded axis."""
    on = ("CPU:0", "CPU:1", "CPU:2")
    tensor = Tensor(BASE.copy()).shard(on, 0).realize()
    tensor[5:0:-2, Tensor(COLUMNS)] = Tensor(np.arange(9, dtype=np.float32).reshape(3, 3))
    tensor[Tensor(ROWS)] = Tensor(np.full((4, 8), 4, np.float32))
    expected = BASE.copy()
    expected[5:0:-2, COLUMNS] = np.arange(9, dtype=np.float32).reshape(3, 3)
    expected[ROWS] = 4
    np.testing.assert_array_equal(tensor.numpy(), expected)
