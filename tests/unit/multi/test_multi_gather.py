"""Indexing with integer tensors (gathers) on tensors that span devices, against numpy: replicated and sharded
sources, index tensors on one device, replicated or sharded, the sharded axis indexed or carried, and gradients."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor, dtypes, nn
from tinycore.uop.ops import Ops

RNG = np.random.default_rng(3)
SOURCE = RNG.standard_normal((6, 8)).astype(np.float32)
ROWS = np.array([0, 5, 2, -1, 3, 5], dtype=np.int32)
COLUMNS = np.array([[1, 7], [0, -2]], dtype=np.int32)


def devices(count: int) -> tuple[str, ...]:
    return tuple(f"CPU:{index}" for index in range(count))


def placed(array: np.ndarray, on: tuple[str, ...], axis: int | None) -> Tensor:
    tensor = Tensor(array)
    return tensor.to(on) if axis is None else tensor.shard(on, axis)


def sharded_axis(tensor: Tensor) -> int | None:
    assert isinstance(tensor.device, tuple) and tensor.uop.op is Ops.MULTI
    return tensor.uop.arg


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_rows_columns_and_both(count: int, axis: int | None) -> None:
    on = devices(count)
    source = SOURCE[:, :6] if count == 3 else SOURCE  # every axis divisible by the device count
    tensor = placed(source, on, axis)
    rows, columns = ROWS % source.shape[0], COLUMNS % source.shape[1]
    cases = [
        (tensor[Tensor(rows)], source[rows]),                              # index tensor on one device
        (tensor[:, Tensor(columns)], source[:, columns]),
        (tensor[Tensor(rows[:2]), Tensor(columns[0])], source[rows[:2], columns[0]]),
        (tensor[[0, 5, 2, 4, 1, 3, 0, 2, 5, 1]], source[[0, 5, 2, 4, 1, 3, 0, 2, 5, 1]]),  # host list: a gather
        (tensor[Tensor(np.array([-1, -6], dtype=np.int32))], source[[-1, -6]]),  # negative: from the end
    ]
    for result, expected in cases:
        assert result.device == tensor.device
        np.testing.assert_array_equal(result.numpy(), expected)


def test_where_the_result_is_sharded() -> None:
    """Carrying the sharded axis keeps it sharded (moved to its output position); indexing it gives a replicated
    (allreduced) result; a replicated source indexed by a sharded index is sharded like the index."""
    on = devices(2)
    assert sharded_axis(placed(SOURCE, on, 1)[Tensor(ROWS)]) == 1
    assert sharded_axis(placed(SOURCE, on, 0)[:, Tensor(COLUMNS)]) == 0
    assert sharded_axis(placed(SOURCE, on, 1)[:, Tensor(COLUMNS)]) is None
    index = placed(np.array([[1, 2], [3, 0], [5, 4], [0, 0]], dtype=np.int32), on, 0)
    result = placed(SOURCE, on, None)[index]
    assert sharded_axis(result) == 0
    np.testing.assert_array_equal(result.numpy(), SOURCE[index.numpy()])


@pytest.mark.parametrize("source_axis", [None, 0, 1])
@pytest.mark.parametrize("index_axis", [None, 0, 1])
def test_embedding_lookup_and_its_gradient(source_axis: int | None, index_axis: int | None) -> None:
    """A table sharded by rows (vocabulary) or columns (features), token ids replicated or sharded by batch or by
    position: the lookup and the table's gradient (np.add.at of the output gradient) equal numpy's."""
    on = devices(2)
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    ids = RNG.integers(0, 10, (4, 6)).astype(np.int32)
    weight = Tensor(table, requires_grad=True)
    weight.to_(on) if source_axis is None else weight.shard_(on, source_axis)
    scale = np.arange(1, 5, dtype=np.float32)
    looked_up = weight[placed(ids, on, index_axis)]
    (looked_up * Tensor(scale).to(on)).sum().backward()
    np.testing.assert_array_equal(looked_up.numpy(), table[ids])
    expected = np.zeros_like(table)
    np.add.at(expected, ids, np.broadcast_to(scale, ids.shape + (4,)))
    assert weight.grad is not None and weight.grad.device == weight.device
    np.testing.assert_allclose(weight.grad.numpy(), expected, rtol=1e-6)


def test_embedding_layer_with_a_sharded_table() -> None:
    on = devices(2)
    layer = nn.Embedding(12, 6)
    table = layer.weight.numpy()
    layer.weight.shard_(on, 1)
    ids = RNG.integers(0, 12, (3, 5)).astype(np.int32)
    result = layer(Tensor(ids).to(on))
    assert sharded_axis(result) == 2
    np.testing.assert_array_equal(result.numpy(), table[ids])


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.bool, dtypes.float16])
def test_other_dtypes_across_blocks(dtype: object) -> None:
    """The sharded axis indexed: partial results are summed (OR for bool), so other dtypes come back exactly."""
    on = devices(2)
    values = (SOURCE * 10).astype(np.int32)
    source = values > 0 if dtype == dtypes.bool else values.astype(np.float16 if dtype == dtypes.float16 else np.int32)
    result = placed(source, on, 0)[Tensor(ROWS)]
    assert result.dtype == dtype
    np.testing.assert_array_equal(result.numpy(), source[ROWS])


def test_gather_method_along_either_axis() -> None:
    on = devices(2)
    index = RNG.integers(0, 8, (6, 2)).astype(np.int32)
    for axis in (0, 1):
        result = placed(SOURCE, on, axis).gather(1, Tensor(index))
        np.testing.assert_array_equal(result.numpy(), np.take_along_axis(SOURCE, index, 1))


def test_index_on_other_devices_is_a_clear_error() -> None:
    index = Tensor(ROWS).to(devices(3)[1:])
    with pytest.raises(ValueError, match="different device tuples"):
        placed(SOURCE, devices(2), 0)[index]


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_small_axes_selected_by_a_mask(axis: int | None) -> None:
    """Indexed axes of at most four elements are picked by comparing with a range (made on every device)."""
    source = SOURCE[:4, :4]
    index = np.array([[3, 0, 1], [2, 2, -1]], dtype=np.int32)
    result = placed(source, devices(2), axis)[:, Tensor(index)]
    np.testing.assert_array_equal(result.numpy(), source[:, index])
