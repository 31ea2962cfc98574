"""Conformance, indexing: integer-tensor indexing (loads at addresses read from an index) and assignment through
index tensors (stores at such addresses) against numpy (torch's gather and scatter semantics written with numpy's
indexing, gradients by central differences), and against torch as well where it is installed.

Covered: 1-D to 5-D, negative indices, broadcast index tensors, basic and advanced indices mixed, repeated indices
(plain assignment: the last write wins; reductions: every value counts), empty index tensors, int32 and int64
indices. Indexed axes are longer than the one-hot limit (so the gather and scatter kernels run) except where a test
says otherwise.
"""
from __future__ import annotations

from typing import Any

import numpy
import pytest

from tinycore.dtype import dtypes
from tinycore.helpers import Context
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.testing.references import gather, numeric_gradients, optional_torch, scatter, scatter_reduce
from tinycore.testing.support import assert_matches, require_dtype, sample

pytestmark = pytest.mark.conformance_category("indexing")

SHAPES = [(11,), (9, 3), (2, 9, 3), (2, 3, 9, 2), (2, 2, 3, 9, 2)]


def _indices(size: int, shape: tuple[int, ...], seed: int, dtype: type[numpy.integer] = numpy.int32) -> numpy.ndarray:
    """Random indices in [-size, size) (negative ones included, repeats likely)."""
    return numpy.random.default_rng(seed).integers(-size, size, size=shape).astype(dtype)


def _index_dtype(capabilities: DeviceCapabilities, name: str) -> type[numpy.integer]:
    if name == "int64":
        require_dtype(capabilities, dtypes.int64)
        return numpy.int64
    return numpy.int32


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{len(shape)}d" for shape in SHAPES])
def test_getitem_one_axis(device: str, capabilities: DeviceCapabilities, shape: tuple[int, ...],
                          index_dtype: str) -> None:
    """x[..., idx, ...] on the axis of size 9 (11 in 1-D) with negative and repeated indices equals numpy."""
    dtype = _index_dtype(capabilities, index_dtype)
    data = sample(shape, seed=1)
    axis = shape.index(max(shape))
    index = _indices(shape[axis], (4, 3), seed=2, dtype=dtype)
    key = (slice(None),) * axis + (index,)
    got = Tensor(data, device=device)[(slice(None),) * axis + (Tensor(index, device=device),)]
    assert_matches(got, data[key], f"x{list(shape)} indexed on axis {axis} by {index_dtype} indices on {device}")


def test_getitem_broadcast_and_mixed(device: str) -> None:
    """Broadcast index tensors on several axes, with slices, ints and None around them (numpy placement)."""
    data = sample((6, 7, 8, 5), seed=3)
    tensor = Tensor(data, device=device)
    rows, columns = _indices(6, (3, 1), seed=4), _indices(7, (1, 4), seed=5)
    depth = _indices(8, (4,), seed=6)
    cases: list[tuple[str, Any, Any]] = [
        ("x[r, c]", (rows, columns), None),
        ("x[1:, :, d, ::2]", (slice(1, None), slice(None), depth, slice(None, None, 2)), None),
        ("x[r, :, d]", (rows, slice(None), depth), None),  # separated: index axes go first
        ("x[None, 2, c, :, 1:3]", (None, 2, columns, slice(None), slice(1, 3)), None),
        ("x[..., d, 1:4]", (Ellipsis, depth, slice(1, 4)), None),
    ]
    for name, key, _ in cases:
        tensor_key = tuple(Tensor(item, device=device) if isinstance(item, numpy.ndarray) else item for item in key)
        assert_matches(tensor[tensor_key], data[key], f"{name} on {device}")


def test_getitem_edge_cases(device: str) -> None:
    """Empty index tensors, a tiny axis (one-hot form), bool and int data, and out-of-range indices reading 0."""
    data = sample((10, 3), seed=7)
    tensor = Tensor(data, device=device)
    empty = numpy.zeros((0,), numpy.int32)
    assert_matches(tensor[Tensor(empty, device=device)], data[empty], f"x[empty] on {device}")
    assert_matches(tensor[:, Tensor(empty, device=device)], data[:, empty], f"x[:, empty] on {device}")
    tiny = _indices(3, (5,), seed=8)
    assert_matches(tensor[:, Tensor(tiny, device=device)], data[:, tiny], f"x[:, idx] over 3 columns on {device}")
    flags = sample((12,), dtypes.bool, seed=9)
    picks = _indices(12, (7,), seed=10)
    assert_matches(Tensor(flags, device=device)[Tensor(picks, device=device)], flags[picks], f"bool[idx] on {device}")
    counts = sample((12,), dtypes.int32, seed=11)
    assert_matches(Tensor(counts, device=device)[Tensor(picks, device=device)], counts[picks],
                   f"int32[idx] on {device}")
    outside = numpy.array([0, 10, 25, -11, 9], numpy.int32)
    expected = numpy.where(((outside >= -10) & (outside < 10))[:, None], data[numpy.clip(outside, -10, 9)], 0)
    assert_matches(tensor[Tensor(outside, device=device)], expected, f"out-of-range rows read zeros on {device}")


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_matches_reference(device: str, dim: int) -> None:
    """gather(dim, index) with an index smaller than the tensor on the other axes, negative values included."""
    data = sample((7, 6, 8), seed=12)
    shape = [5, 4, 6]
    shape[dim] = 9
    index = numpy.random.default_rng(13).integers(0, data.shape[dim], size=shape).astype(numpy.int32)
    expected = gather(data, dim, index)
    torch = optional_torch()
    if torch is not None:
        assert_matches(expected, torch.tensor(data).gather(dim, torch.tensor(index, dtype=torch.int64)).numpy(),
                       "the numpy oracle of gather against torch")
    negative = numpy.where(index % 2 == 1, index - data.shape[dim], index).astype(numpy.int32)
    got = Tensor(data, device=device).gather(dim, Tensor(negative, device=device))
    assert_matches(got, expected, f"gather(dim={dim}) of (7, 6, 8) by {tuple(shape)} indices on {device}")


def test_setitem_repeated_last_write_wins(device: str) -> None:
    """x[idx] = v with repeated indices keeps the value of the last repeat (numpy's result), on 1-D and 2-D."""
    base = sample((12,), seed=14)
    index = numpy.array([3, 7, 3, -1, 11, 7, 3, 0], numpy.int32)
    values = numpy.arange(8, dtype=numpy.float32)
    tensor = Tensor(base, device=device).realize()
    tensor[Tensor(index, device=device)] = Tensor(values, device=device)
    expected = base.copy()
    expected[index] = values
    assert_matches(tensor, expected, f"x[idx] = v with repeats on {device}")
    grid = sample((9, 6), seed=15)
    rows = numpy.array([[8, 2], [2, -7]], numpy.int32)
    assigned = Tensor(grid, device=device)
    assigned[Tensor(rows, device=device), 1:5] = 5.0
    expected_grid = grid.copy()
    expected_grid[rows, 1:5] = 5.0
    assert_matches(assigned, expected_grid, f"lazy x[rows, 1:5] = 5 on {device}")


def test_setitem_combined_basic_and_advanced(device: str) -> None:
    """numpy's example x[:, ind_1, :, ind_2, :] = v, at a small size, with int64 indices where declared."""
    data = sample((2, 20, 3, 40, 2), seed=16)
    generator = numpy.random.default_rng(17)
    first, second = generator.integers(0, 20, (2, 3, 4)), generator.integers(-40, 40, (2, 3, 4))
    values = sample((2, 3, 4, 2, 3, 2), seed=18)
    tensor = Tensor(data, device=device).realize()
    tensor[:, Tensor(first.astype(numpy.int32), device=device), :, Tensor(second.astype(numpy.int32), device=device),
           :] = Tensor(values, device=device)
    expected = data.copy()
    expected[:, first, :, second, :] = values
    assert_matches(tensor, expected, f"x[:, ind_1, :, ind_2, :] = v on {device}")


def test_setitem_reading_itself(device: str) -> None:
    """x[idx] += 1 with repeats adds once per distinct index (numpy), and x[idx] = x[other] reads the old values."""
    base = sample((10,), seed=19)
    index = numpy.array([1, 4, 1, 1, 9], numpy.int32)
    other = numpy.array([4, 1, 0, 2, 1], numpy.int32)
    tensor = Tensor(base, device=device).realize()
    tensor[Tensor(index, device=device)] += 1
    expected = base.copy()
    expected[index] += 1
    assert_matches(tensor, expected, f"x[idx] += 1 on {device}")
    tensor[Tensor(index, device=device)] = tensor[Tensor(other, device=device)]
    expected[index] = expected[other]
    assert_matches(tensor, expected, f"x[idx] = x[other] on {device}")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_reference(device: str, reduce: str, include_self: bool) -> None:
    """scatter_reduce along dim 0 with many repeated indices: every value counts (no lost updates)."""
    base = sample((6, 5), seed=20, low=0.5, high=1.5)
    index = numpy.random.default_rng(21).integers(0, 6, (9, 4)).astype(numpy.int32)
    source = sample((9, 5), seed=22, low=0.5, high=1.5)
    expected = scatter_reduce(base, 0, index, source[:, :4], reduce, include_self=include_self)
    torch = optional_torch()
    if torch is not None:
        assert_matches(expected, torch.tensor(base).scatter_reduce(
            0, torch.tensor(index, dtype=torch.int64), torch.tensor(source[:, :4]), reduce,
            include_self=include_self).numpy(), "the numpy oracle of scatter_reduce against torch", rtol=1e-5)
    got = Tensor(base, device=device).scatter_reduce(0, Tensor(index, device=device), Tensor(source, device=device),
                                                     reduce, include_self=include_self)
    assert_matches(got, expected, f"scatter_reduce({reduce}, include_self={include_self}) on {device}",
                   rtol=1e-5, atol=1e-5)


NUMPY_AT = {"sum": numpy.add, "prod": numpy.multiply, "amax": numpy.maximum, "amin": numpy.minimum}


@pytest.mark.parametrize("dtype_name", ["float32", "int32"])
@pytest.mark.parametrize("reduce", sorted(NUMPY_AT))
def test_scatter_reduce_many_duplicates_match_numpy(device: str, capabilities: DeviceCapabilities, reduce: str,
                                                    dtype_name: str) -> None:
    """scatter_reduce of 70,000 values (300 on interpreters) into 37 elements, about 1,900 per element, equals
    numpy's ufunc.at: no update is lost whether the device combines them with atomics or in order."""
    count = 70000 if capabilities.large_grids else 300
    generator = numpy.random.default_rng(40)
    index = generator.integers(-37, 37, count).astype(numpy.int32)
    if dtype_name == "float32":
        low, high = (0.999, 1.001) if reduce == "prod" else (-4.0, 4.0)
        values = generator.uniform(low, high, count).astype(numpy.float32)
    else:  # products of 1 and -1 keep int32 exact
        values = (generator.integers(0, 2, count) * 2 - 1 if reduce == "prod" else
                  generator.integers(-1000, 1000, count)).astype(numpy.int32)
    base = generator.uniform(1, 2, 37).astype(numpy.float32).astype(values.dtype)
    expected = base.copy()
    NUMPY_AT[reduce].at(expected, index, values)
    got = Tensor(base, device=device).scatter_reduce(0, Tensor(index, device=device), Tensor(values, device=device),
                                                     reduce)
    tolerance = 1e-2 if reduce == "sum" else 1e-5  # float sums of 1,900 values in another order
    assert_matches(got, expected, f"scatter_reduce({reduce}) of {count} {dtype_name} values into 37 on {device}",
                   rtol=tolerance, atol=tolerance)


def test_scatter_matches_reference(device: str) -> None:
    """scatter along dim 1 with distinct indices per row, a scalar source, and reduce='add' with repeats."""
    base = sample((4, 7), seed=23)
    index = numpy.stack([numpy.random.default_rng(24 + row).permutation(7)[:5] for row in range(4)]).astype(
        numpy.int32)
    source = sample((4, 5), seed=25)
    expected = scatter(base, 1, index, source)
    assert_matches(Tensor(base, device=device).scatter(1, Tensor(index, device=device), Tensor(source, device=device)),
                   expected, f"scatter(1, index, src) on {device}")
    expected = scatter(base, 1, index, 2.5)
    assert_matches(Tensor(base, device=device).scatter(1, Tensor(index, device=device), 2.5), expected,
                   f"scatter(1, index, 2.5) on {device}")
    repeated = numpy.random.default_rng(26).integers(0, 7, (4, 9)).astype(numpy.int32)
    wide = sample((4, 9), seed=27)
    expected = scatter_reduce(base, 1, repeated, wide, "sum")
    got = Tensor(base, device=device).scatter(1, Tensor(repeated, device=device), Tensor(wide, device=device),
                                              reduce="add")
    assert_matches(got, expected, f"scatter(reduce='add') with repeats on {device}", rtol=1e-5, atol=1e-5)
    torch = optional_torch()
    if torch is not None:
        torch_index = torch.tensor(index, dtype=torch.int64)
        assert_matches(scatter(base, 1, index, source), torch.tensor(base).scatter(1, torch_index, torch.tensor(
            source)).numpy(), "the numpy oracle of scatter against torch")
        assert_matches(expected, torch.tensor(base).scatter_add(1, torch.tensor(repeated, dtype=torch.int64),
                                                                torch.tensor(wide)).numpy(),
                       "the numpy oracle of scatter_add against torch", rtol=1e-5, atol=1e-5)


def test_gradients_match_numerical_gradients(device: str) -> None:
    """Gradients through x[idx] (repeats accumulate), gather, scatter (src and self) and an embedding lookup, against
    central differences of the same function in numpy (and torch's autograd, where installed)."""
    data = sample((9, 6), seed=28)
    rows = numpy.array([[2, -1, 2], [0, 8, 2]], numpy.int32)
    index = numpy.random.default_rng(29).integers(0, 6, (9, 4)).astype(numpy.int32)
    weights = sample((2, 3, 6), seed=30)
    src = sample((9, 4), seed=31)
    scatter_index = numpy.stack([numpy.random.default_rng(32 + row).permutation(6)[:4] for row in range(9)]).astype(
        numpy.int32)

    def run(module: Any, make: Any, index_of: Any) -> list[numpy.ndarray]:
        x, y = make(data), make(src)
        picked = (x[index_of(rows)] * make(weights)).sum()
        gathered = (x.gather(1, index_of(index)) * y).sum()
        scattered = (x.scatter(1, index_of(scatter_index), y) * make(data)).sum()
        (picked + gathered + scattered).backward()
        return [x.grad.numpy() if module is Tensor else x.grad.detach().numpy(),
                y.grad.numpy() if module is Tensor else y.grad.detach().numpy()]

    def on_numpy(x: numpy.ndarray, y: numpy.ndarray) -> numpy.ndarray:
        return ((x[rows] * weights).sum() + (gather(x, 1, index) * y).sum()
                + (scatter(x, 1, scatter_index, y) * data).sum())

    expected = numeric_gradients(on_numpy, [data, src])
    got = run(Tensor, lambda array: Tensor(array, device=device, requires_grad=True) if array is data or array is src
              else Tensor(array, device=device), lambda array: Tensor(array, device=device))
    for name, value, reference in zip(("x", "src"), got, expected, strict=True):
        assert_matches(value, reference, f"gradient of {name} through indexing on {device}", rtol=1e-4, atol=1e-4)
    torch = optional_torch()
    if torch is not None:
        from_torch = run(torch, lambda array: torch.tensor(array, requires_grad=True) if array is data or array is src
                         else torch.tensor(array), lambda array: torch.tensor(array, dtype=torch.int64))
        for name, value, reference in zip(("x", "src"), got, from_torch, strict=True):
            assert_matches(value, reference, f"gradient of {name} through indexing on {device} against torch",
                           rtol=1e-5, atol=1e-5)


def test_gathers_inside_larger_graphs(device: str) -> None:
    """Gathers of computed values, of a reduce, of a gather, and feeding a reduce and a matmul, against numpy."""
    first, second = sample((40, 16), seed=33), sample((40, 16), seed=34)
    weights = sample((16, 8), seed=35)
    index = numpy.random.default_rng(36).integers(0, 40, (24,)).astype(numpy.int32)
    x, y, w, i = (Tensor(first, device=device), Tensor(second, device=device), Tensor(weights, device=device),
                  Tensor(index, device=device))
    cases = [
        ("(x + y)[i]", (x + y)[i], (first + second)[index]),
        ("x.sum(1)[i]", x.sum(1)[i], first.sum(1)[index]),
        ("x[i].sum(0)", x[i].sum(0), first[index].sum(0)),
        ("x[i] @ w", x[i] @ w, first[index] @ weights),
        ("x[i][i % 24]", x[i][i % 24], first[index][index % 24]),
        ("x[(i * 7) % 40]", x[(i * 7) % 40], first[(index * 7) % 40]),
    ]
    for name, got, expected in cases:
        assert_matches(got, expected, f"{name} on {device}", rtol=1e-4, atol=1e-4)


SORTED_CASES = {"random": 13, "empty": 0, "all_same": 9}


@pytest.mark.parametrize("case", sorted(SORTED_CASES))
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype_name", ["float32", "int32"])
def test_scatter_reduce_sorted_and_segmented(device: str, reduce: str, dtype_name: str, case: str) -> None:
    """The sort-and-segment lowering (SCATTER_SORT=1; a device without atomics for the dtype takes it by default
    for large scatters): scatter_reduce of 13 values with repeats, of none, and of 9 onto one element, along dim 0
    of a (5, 2) tensor, equals numpy's ufunc.at (mean: its sum over its count, rounded down for integers)."""
    count = SORTED_CASES[case]
    generator = numpy.random.default_rng(50 + count)
    index = numpy.full((count, 2), -2, numpy.int32) if case == "all_same" else \
        generator.integers(-5, 5, (count, 2)).astype(numpy.int32)
    if dtype_name == "float32":
        values = (generator.integers(0, 2, (count, 2)) * 2 - 1 if reduce == "prod" else
                  generator.uniform(-4.0, 4.0, (count, 2))).astype(numpy.float32)
    else:
        values = (generator.integers(0, 2, (count, 2)) * 2 - 1 if reduce == "prod" else
                  generator.integers(-1000, 1000, (count, 2))).astype(numpy.int32)
    base = generator.integers(1, 3, (5, 2)).astype(values.dtype)
    if reduce == "mean":
        expected = scatter_reduce(base, 0, index % 5, values, "mean")
    else:
        expected = base.copy()
        NUMPY_AT[reduce].at(expected, (index, numpy.arange(2)[None, :].repeat(count, 0)), values)
    with Context(SCATTER_SORT=1):
        got = Tensor(base, device=device).scatter_reduce(0, Tensor(index, device=device).reshape(count, 2),
                                                         Tensor(values, device=device).reshape(count, 2), reduce)
        got.realize()
    assert_matches(got, expected, f"sorted scatter_reduce({reduce}) of {count} {dtype_name} values on {device}",
                   rtol=1e-5, atol=1e-5)


def test_index_tensors_read_through_a_shifted_view(device: str) -> None:
    """Index tensors that read their neighbour through a pad (`k[i + 1]`, zero past the end) inside a gather and a
    scatter: the load past the end stays masked inside the address (an interpreter reports any read outside a
    buffer)."""
    keys = numpy.array([0, 1, 1, 2, 4, 4, 3, 3], numpy.int32)
    values = numpy.arange(1, 9, dtype=numpy.float32)
    later = numpy.append(keys[1:], -1)
    index = numpy.where(later != keys, keys, 5).astype(numpy.int32)
    tensor_keys = Tensor(keys, device=device).contiguous()
    shifted = tensor_keys.pad(((0, 1),), value=-1).shrink(((1, 9),))
    tensor_index = shifted.ne(tensor_keys).where(tensor_keys, 5)
    table = numpy.arange(10, dtype=numpy.float32) * 3
    expected_gather = numpy.where(index < 5, table[numpy.minimum(index, 4)], 0).astype(numpy.float32)
    got_gather = Tensor(table[:5], device=device)[tensor_index]
    assert_matches(got_gather, expected_gather, f"gather through a shifted index on {device}")
    expected = numpy.zeros(5, numpy.float32)
    kept = index < 5
    numpy.add.at(expected, index[kept], values[kept])
    got = Tensor(numpy.zeros(5, numpy.float32), device=device).scatter_reduce(0, tensor_index,
                                                                          Tensor(values, device=device), "sum")
    assert_matches(got, expected, f"scatter through a shifted index on {device}")
