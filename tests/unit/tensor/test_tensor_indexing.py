"""Indexing, gather/scatter, masked selection and sorting against numpy and torch."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tinycore import Tensor, dtypes

RNG = np.random.default_rng(3)
VALUES = RNG.uniform(-5, 5, (3, 4, 5)).astype(np.float32)


def _equal(got: Tensor, expected: Any) -> None:
    expected_array = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    result = got.numpy()
    assert result.shape == expected_array.shape, f"shape {result.shape} != {expected_array.shape}"
    np.testing.assert_allclose(result, expected_array, rtol=1e-6, atol=1e-6)


BASIC_INDICES = [1, -1, (0, 2), (slice(None), 1), slice(1, None), slice(None, None, 2), slice(None, None, -1),
                 (slice(1, 3), slice(None, None, -2), 4), (Ellipsis, 0), (None, 1, None), (Ellipsis, None),
                 (slice(5, 1), 0), (slice(-2, None), slice(None), slice(1, -1, 3)), (2, -1, -5),
                 (slice(None, None, 3), Ellipsis, slice(4, 0, -2)), ()]


@pytest.mark.parametrize("index", BASIC_INDICES)
def test_basic_indexing_matches_numpy(index: Any) -> None:
    _equal(Tensor(VALUES)[index], VALUES[index])


ADVANCED_INDICES = [[0, 2], [[0, 1], [2, 2]], (slice(None), [3, 0, 3]), ([0, 2], [1, 3]), ([0, 2], slice(None), [4, 0]),
                    (Ellipsis, [1, -1]), (1, [0, 3], slice(1, 3)), ([[1], [2]], [0, 3])]


@pytest.mark.parametrize("index", ADVANCED_INDICES)
def test_list_indexing_matches_numpy(index: Any) -> None:
    _equal(Tensor(VALUES)[index], VALUES[index])


@pytest.mark.parametrize("index", ADVANCED_INDICES)
def test_tensor_indexing_matches_numpy(index: Any) -> None:
    def to_tensor(item: Any) -> Any:
        return Tensor(item) if isinstance(item, list) else item
    converted = tuple(to_tensor(item) for item in index) if isinstance(index, tuple) else to_tensor(index)
    _equal(Tensor(VALUES)[converted], VALUES[index])


def test_index_tensors_of_other_dtypes_and_negative_values() -> None:
    _equal(Tensor(VALUES)[Tensor([-1, 0], dtype=dtypes.int64)], VALUES[[-1, 0]])
    _equal(Tensor(VALUES)[Tensor([2], dtype=dtypes.uint8), 1], VALUES[[2], 1])
    assert Tensor([True, False, True])[Tensor([2, 0])].tolist() == [True, True]
    assert Tensor([5, 6, 7], dtype=dtypes.int8)[Tensor([2, 2])].tolist() == [7, 7]


def test_bool_mask_indexing() -> None:
    mask = VALUES > 0
    _equal(Tensor(VALUES)[Tensor(mask)], VALUES[mask])
    _equal(Tensor(VALUES)[Tensor(mask[:, :, 0])], VALUES[mask[:, :, 0]])
    _equal(Tensor(VALUES)[1, Tensor(mask[0, :, 0])], VALUES[1, mask[0, :, 0]])
    _equal(Tensor(VALUES)[[True, False, True]], VALUES[[True, False, True]])
    with pytest.raises(IndexError, match="mask"):
        Tensor(VALUES)[Tensor(mask[0])]


def test_indexing_errors() -> None:
    tensor = Tensor(VALUES)
    with pytest.raises(IndexError, match="out of bounds"):
        tensor[3]
    with pytest.raises(IndexError, match="out of bounds"):
        tensor[0, -5]
    with pytest.raises(IndexError, match="too many"):
        tensor[0, 0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        tensor[..., 0, ...]
    with pytest.raises(IndexError, match="out of bounds"):
        tensor[[0, 5]]
    with pytest.raises(IndexError):
        tensor[Tensor([0.5])]
    with pytest.raises(IndexError):
        tensor["a"]
    with pytest.raises(ValueError, match="step"):
        tensor[::0]


SET_INDICES = [1, (slice(None), 2), (slice(None, None, 2), slice(1, None, -1)), (Ellipsis, slice(None, None, -3)),
               (0, 1, 2), (None, 2)]


@pytest.mark.parametrize("index", SET_INDICES)
def test_setitem_basic(index: Any) -> None:
    expected = VALUES.copy()
    expected[index] = -1.5
    tensor = Tensor(VALUES)
    tensor[index] = -1.5
    _equal(tensor, expected)
    expected = VALUES.copy()
    replacement = RNG.uniform(-1, 1, expected[index].shape).astype(np.float32)
    expected[index] = replacement
    tensor = Tensor(VALUES).realize()
    tensor[index] = Tensor(replacement)
    _equal(tensor, expected)


def test_setitem_advanced_and_broadcast() -> None:
    expected = VALUES.copy()
    expected[[0, 2], 1] = np.arange(5, dtype=np.float32)
    tensor = Tensor(VALUES)
    tensor[Tensor([0, 2]), 1] = Tensor(np.arange(5, dtype=np.float32))
    _equal(tensor, expected)
    expected = VALUES.copy()
    expected[VALUES > 1] = 0
    tensor = Tensor(VALUES)
    tensor[Tensor(VALUES > 1)] = 0
    _equal(tensor, expected)
    integers = Tensor([1, 2, 3, 4])
    integers[1:3] = 9
    assert integers.tolist() == [1, 9, 9, 4] and integers.dtype == dtypes.int32


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim: int) -> None:
    source = VALUES[0]
    index = RNG.integers(0, source.shape[dim], (2, 3))
    expected = torch.gather(torch.tensor(source), dim, torch.tensor(index))
    _equal(Tensor(source).gather(dim, Tensor(index)), expected)


def test_gather_errors() -> None:
    with pytest.raises(ValueError, match="number of dimensions"):
        Tensor.ones(2, 3).gather(0, Tensor([0, 1]))
    with pytest.raises(TypeError):
        Tensor.ones(2, 3).gather(0, Tensor([[0.5]]))
    with pytest.raises(ValueError, match="larger"):
        Tensor.ones(2, 3).gather(0, Tensor([[0, 1, 0, 1]]))


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dim: int) -> None:
    base = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    source = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    permutation = np.stack([RNG.permutation(base.shape[dim])[:2] for _ in range(base.shape[1 - dim])], 1 - dim)
    index = torch.tensor(permutation)
    expected = torch.tensor(base).scatter(dim, index, torch.tensor(source))
    _equal(Tensor(base).scatter(dim, Tensor(permutation), Tensor(source)), expected)
    expected = torch.tensor(base).scatter(dim, index, 2.5)
    _equal(Tensor(base).scatter(dim, Tensor(permutation), 2.5), expected)
    expected = torch.tensor(base).scatter(dim, index, torch.tensor(source), reduce="add")
    _equal(Tensor(base).scatter(dim, Tensor(permutation), Tensor(source), reduce="add"), expected)
    expected = torch.tensor(base).scatter(dim, index, torch.tensor(source), reduce="multiply")
    _equal(Tensor(base).scatter(dim, Tensor(permutation), Tensor(source), reduce="multiply"), expected)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_with_duplicates(reduce: str, include_self: bool) -> None:
    base = RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    source = RNG.uniform(0.5, 1.5, (4, 4)).astype(np.float32)
    index = np.array([[0, 1, 2, 0], [2, 2, 1, 0], [0, 0, 0, 0], [1, 2, 2, 1]])
    expected = torch.tensor(base).scatter_reduce(0, torch.tensor(index), torch.tensor(source), reduce,
                                                 include_self=include_self)
    got = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(source), reduce, include_self=include_self)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5)


def test_scatter_errors() -> None:
    with pytest.raises(ValueError, match="reduce"):
        Tensor.ones(2, 2).scatter(0, Tensor([[0, 1]]), 1.0, reduce="max")
    with pytest.raises(ValueError, match="reduce"):
        Tensor.ones(2, 2).scatter_reduce(0, Tensor([[0, 1]]), Tensor.ones(1, 2), "median")


def test_masked_fill_masked_select_nonzero() -> None:
    mask = VALUES[0] > 0
    _equal(Tensor(VALUES[0]).masked_fill(Tensor(mask), -9.0), np.where(mask, -9.0, VALUES[0]))
    _equal(Tensor(VALUES[0]).masked_select(Tensor(mask)), VALUES[0][mask])
    _equal(Tensor(VALUES[0]).masked_select(Tensor(mask[0])), torch.tensor(VALUES[0]).masked_select(
        torch.tensor(mask[0])))
    nonzero = Tensor(mask).nonzero()
    assert nonzero.dtype == dtypes.int32
    np.testing.assert_array_equal(nonzero.numpy(), np.argwhere(mask))
    assert Tensor([0, 0]).nonzero().shape == (0, 1)
    assert Tensor([0, 3, 0, 4]).nonzero(size=3, fill_value=-1).tolist() == [[1], [3], [-1]]


@pytest.mark.parametrize("shape, dim", [((7,), -1), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((1, 1), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort(shape: tuple, dim: int, descending: bool) -> None:
    values = RNG.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    expected_values, expected_indices = torch.sort(torch.tensor(values), dim, descending)
    got_values, got_indices = Tensor(values).sort(dim, descending)
    _equal(got_values, expected_values)
    np.testing.assert_array_equal(got_indices.numpy(), expected_indices.numpy())
    np.testing.assert_array_equal(Tensor(values).argsort(dim, descending).numpy(), expected_indices.numpy())


def test_sort_is_stable_for_ties() -> None:
    values, indices = Tensor([3, 1, 3, 1, 2]).sort()
    assert values.tolist() == [1, 1, 2, 3, 3] and indices.tolist() == [1, 3, 4, 0, 2]


@pytest.mark.parametrize("k, largest", [(1, True), (3, True), (2, False), (0, True)])
def test_topk(k: int, largest: bool) -> None:
    values = RNG.permutation(20).reshape(4, 5).astype(np.float32)
    expected_values, expected_indices = torch.topk(torch.tensor(values), k, largest=largest)
    got_values, got_indices = Tensor(values).topk(k, largest=largest)
    _equal(got_values, expected_values)
    np.testing.assert_array_equal(got_indices.numpy(), expected_indices.numpy())
    with pytest.raises(ValueError, match="topk"):
        Tensor(values).topk(6)


def test_check_index_raises_naming_index_and_axis() -> None:
    """With CHECK_INDEX=1 an out-of-range index tensor raises IndexError naming the value and the axis; without it,
    out-of-range rows read zeros (tinygrad's semantics)."""
    from tinycore import Context
    data = np.arange(40, dtype=np.float32).reshape(8, 5)
    index = Tensor(np.array([1, 9, -2], np.int32))
    expected = np.stack([data[1], np.zeros(5, np.float32), data[-2]])
    _equal(Tensor(data)[index], expected)
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match=r"index 9 .* dimension 0 with size 8"):
        Tensor(data)[index]
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match=r"index -6 .* dimension 1 with size 5"):
        Tensor(data).gather(1, Tensor(np.array([[0, -6]] * 8, np.int32)))
    with Context(CHECK_INDEX=1):
        _equal(Tensor(data)[:, Tensor(np.array([4, -5], np.int32))], data[:, [4, -5]])
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match=r"index 5 .* dimension 1 with size 5"):
        target = Tensor(data).realize()
        target[:, Tensor(np.array([5], np.int32))] = 1.0
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match=r"index -9 .* dimension 0 with size 8"):
        Tensor(data).scatter(0, Tensor(np.array([[-9, 0, 0, 0, 0]], np.int32)), 1.0)
    skipped = Tensor(data).realize()
    skipped[Tensor(np.array([8, -9, 3], np.int32))] = -1.0  # out of range: nothing written there
    expected_written = data.copy()
    expected_written[3] = -1.0
    _equal(skipped, expected_written)


def test_gather_kernel_loads_at_loaded_addresses() -> None:
    """x[idx] over a long axis is one kernel without a reduce whose address holds a load of the index (cost
    proportional to the output); a scatter's repeatable axis is a SEQUENTIAL loop, its one-to-one axis a LOOP."""
    from tinycore.codegen.opt import AxisType
    from tinycore.schedule import create_schedule
    from tinycore.uop.ops import Ops
    table = Tensor.empty(100000, 64)
    rows = Tensor.empty(512, dtype=dtypes.int32)
    items = create_schedule([table[rows].uop]).items
    assert len(items) == 1
    nodes = items[0].ast.toposort
    assert not any(node.op is Ops.REDUCE for node in nodes)
    addresses = [node for node in nodes if node.op is Ops.INDEX and
                 any(inner.op is Ops.LOAD for inner in node.src[1].toposort)]
    assert addresses, "the table is read at an address computed from a loaded index"
    added = table.scatter_reduce(0, rows.reshape(512, 1).expand(512, 64), Tensor.empty(512, 64), "sum")
    kernels = [item for item in create_schedule([added.uop]).items if not item.is_copy]
    scatter_ast = kernels[-1].ast
    kinds = {node.arg[1] for node in scatter_ast.toposort if node.op is Ops.RANGE}
    assert kinds == {AxisType.SEQUENTIAL, AxisType.LOOP}


def test_embedding_and_its_gradient_match_torch() -> None:
    """nn.Embedding is a gather: values and the weight gradient (repeated tokens accumulate) equal torch's."""
    from tinycore import nn
    embedding = nn.Embedding(30, 6)
    tokens = np.array([[3, 29, 3], [0, 3, 7]], np.int32)
    reference = torch.nn.Embedding(30, 6)
    reference.weight.data = torch.tensor(embedding.weight.numpy())
    embedding.weight.requires_grad = True
    scale = RNG.uniform(-1, 1, (2, 3, 6)).astype(np.float32)
    (embedding(Tensor(tokens)) * Tensor(scale)).sum().backward()
    (reference(torch.tensor(tokens, dtype=torch.int64)) * torch.tensor(scale)).sum().backward()
    _equal(embedding(Tensor(tokens)), reference(torch.tensor(tokens, dtype=torch.int64)).detach())
    assert embedding.weight.grad is not None
    _equal(embedding.weight.grad, reference.weight.grad)


SETITEM_KEYS = [
    ("ints_and_index", lambda i: (1, i)),
    ("negative_step_slice", lambda i: (slice(None, None, -2), i)),
    ("index_then_strided", lambda i: (i, slice(1, 5, 3))),
    ("none_and_ellipsis", lambda i: (None, Ellipsis, i)),
    ("two_separated", lambda i: (i, slice(None), i % 5)),
    ("host_list", lambda i: ([0, 2, 2, -1, 1, 0], slice(None), 3)),
    ("bool_mask", lambda i: (np.array([True, False, True]),)),
]


@pytest.mark.parametrize("name,key", SETITEM_KEYS, ids=[name for name, _ in SETITEM_KEYS])
def test_setitem_with_index_tensors_matches_numpy(name: str, key: Any) -> None:
    """x[key] = v for keys mixing index tensors with ints, strided and reversed slices, None, Ellipsis, host lists
    and bool masks (numpy's placement rules, repeated indices: last write wins)."""
    data = RNG.uniform(-5, 5, (3, 6, 5)).astype(np.float32)
    index = np.array([[2, -1], [0, 2]], np.int32)
    numpy_key = key(index)
    expected = data.copy()
    values = RNG.uniform(-5, 5, expected[numpy_key].shape).astype(np.float32)
    expected[numpy_key] = values
    tensor_key = key(Tensor(index))
    tensor = Tensor(data).realize()
    tensor[tensor_key] = Tensor(values)
    _equal(tensor, expected)


def test_assign_of_a_gather_from_itself() -> None:
    """x.assign(x[perm]) reads the old rows (the gathered value is computed before the in-place write)."""
    data = RNG.uniform(-5, 5, (8, 3)).astype(np.float32)
    permutation = np.array([7, 0, 6, 1, 5, 2, 4, 3], np.int32)
    tensor = Tensor(data).realize()
    tensor.assign(tensor[Tensor(permutation)]).realize()
    _equal(tensor, data[permutation])


def test_jitted_lookup_takes_new_indices() -> None:
    """A TinyJit-captured embedding lookup and scatter-add reads each call's index buffer."""
    from tinycore import TinyJit
    table = Tensor(RNG.uniform(-1, 1, (20, 4)).astype(np.float32)).realize()

    @TinyJit
    def step(tokens: Tensor) -> Tensor:
        return (table[tokens] * 2).realize()

    for call in range(4):
        tokens = np.random.default_rng(call).integers(0, 20, (5,)).astype(np.int32)
        _equal(step(Tensor(tokens)), table.numpy()[tokens] * 2)


def test_setitem_gradients_match_torch() -> None:
    """Through x[idx] = v on a computed x: overwritten elements of x get no gradient, v gets the gradient of the
    elements it was written to (torch's rule, repeated rows included)."""
    base = RNG.uniform(-1, 1, (6, 4)).astype(np.float32)
    values = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    weights = RNG.uniform(-1, 1, (6, 4)).astype(np.float32)
    index = np.array([1, 4, 1], np.int64)
    torch_base, torch_values = torch.tensor(base, requires_grad=True), torch.tensor(values, requires_grad=True)
    reference = torch_base * 2
    reference[torch.tensor(index)] = torch_values
    (reference * torch.tensor(weights)).sum().backward()
    ours_base, ours_values = Tensor(base, requires_grad=True), Tensor(values, requires_grad=True)
    ours = ours_base * 2
    ours[Tensor(index.astype(np.int32))] = ours_values
    (ours * Tensor(weights)).sum().backward()
    assert ours_base.grad is not None and ours_values.grad is not None
    _equal(ours_base.grad, torch_base.grad)
    _equal(ours_values.grad, torch_values.grad)


def test_jitted_setitem_and_gather_gradient() -> None:
    """TinyJit replays an in-place x[pos] = v with new positions, and a gather's gradient (a scatter-add into a
    fresh buffer) with new indices; values against numpy."""
    from tinycore import TinyJit
    cache = Tensor.zeros(16, 4).contiguous().realize()
    expected_cache = np.zeros((16, 4), np.float32)

    @TinyJit
    def write(positions: Tensor, values: Tensor) -> Tensor:
        cache[positions] = values
        return cache.realize()

    weight = Tensor(np.ones((10, 3), np.float32), requires_grad=True).realize()

    @TinyJit
    def gradient(indices: Tensor) -> Tensor:
        weight.grad = None
        (weight[indices] * 2).sum().backward()
        assert weight.grad is not None
        return weight.grad.realize()

    for call in range(4):
        generator = np.random.default_rng(call)
        positions = generator.integers(0, 16, (3,)).astype(np.int32)
        values = generator.standard_normal((3, 4)).astype(np.float32)
        expected_cache[positions] = values
        _equal(write(Tensor(positions), Tensor(values)), expected_cache)
        indices = generator.integers(0, 10, (5,)).astype(np.int32)
        expected_gradient = np.zeros((10, 3), np.float32)
        np.add.at(expected_gradient, indices, 2.0)
        _equal(gradient(Tensor(indices)), expected_gradient)


def test_long_host_lists_gather() -> None:
    """Host index lists with many runs (a GATHER rather than a concatenation of slices) equal numpy."""
    data = RNG.uniform(-5, 5, (12, 3)).astype(np.float32)
    rows = [5, 1, 7, 2, 9, 0, -1, 11]
    _equal(Tensor(data)[rows], data[rows])
    _equal(Tensor(data)[:, [2, 0, 1, 0, 2, 1]], data[:, [2, 0, 1, 0, 2, 1]])
