"""Scatter reductions by sorting and segmenting (tinycore/tensor/segments.py) against numpy's ufunc.at and torch, and
when the lowering is chosen."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tinycore import Context, Tensor
from tinycore.dtype import dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.tensor import segments

AT = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _values(rng: np.random.Generator, reduce: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if reduce == "prod":  # products of 1 and -1 stay exact in every dtype
        return (rng.integers(0, 2, shape) * 2 - 1).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.integers(-20, 20, shape).astype(dtype) / 4  # sums exact in any order
    return rng.integers(-1000, 1000, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("reduce", sorted(AT))
def test_one_axis_many_repeats_matches_numpy(reduce: str, dtype: Any) -> None:
    rng = np.random.default_rng(5)
    index = rng.integers(-37, 37, 200).astype(np.int32)
    values = _values(rng, reduce, (200,), dtype)
    base = rng.integers(1, 3, 37).astype(dtype)
    expected = base.copy()
    AT[reduce].at(expected, index, values)
    with Context(SCATTER_SORT=1):
        got = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(values), reduce).numpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("reduce", sorted(AT))
def test_rows_along_each_axis_match_numpy(reduce: str) -> None:
    rng = np.random.default_rng(6)
    base = rng.integers(1, 3, (9, 7)).astype(np.float32)
    for dim in (0, 1):
        index = rng.integers(0, base.shape[dim], (11, 7) if dim == 0 else (9, 13)).astype(np.int32)
        values = _values(rng, reduce, index.shape, np.float32)
        expected = base.copy()
        rows, columns = np.indices(index.shape)
        AT[reduce].at(expected, (index, columns) if dim == 0 else (rows, index), values)
        with Context(SCATTER_SORT=1):
            got = Tensor(base).scatter_reduce(dim, Tensor(index), Tensor(values), reduce).numpy()
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_matches_torch(reduce: str, include_self: bool) -> None:
    rng = np.random.default_rng(7)
    base = rng.uniform(0.5, 1.5, (6, 5)).astype(np.float32)
    index = rng.integers(0, 6, (40, 5)).astype(np.int64)
    source = rng.uniform(0.5, 1.5, (40, 5)).astype(np.float32)
    expected = torch.tensor(base).scatter_reduce(0, torch.tensor(index), torch.tensor(source), reduce,
                                                 include_self=include_self).numpy()
    with Context(SCATTER_SORT=1):
        got = Tensor(base).scatter_reduce(0, Tensor(index.astype(np.int32)), Tensor(source), reduce,
                                          include_self=include_self).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["empty", "all same", "one value", "out of range"])
def test_edge_cases(case: str) -> None:
    base = np.arange(1, 6, dtype=np.float32)
    index = {"empty": np.zeros(0, np.int32), "all same": np.full(33, -1, np.int32),
             "one value": np.array([2], np.int32), "out of range": np.array([7, 1, -9, 1, 5], np.int32)}[case]
    values = np.arange(len(index), dtype=np.float32) + 1
    expected = base.copy()
    kept = (index >= -5) & (index < 5)  # out-of-range coordinates write nothing (without CHECK_INDEX)
    np.add.at(expected, index[kept], values[kept])
    with Context(SCATTER_SORT=1):
        got = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(values), "sum").numpy()
    np.testing.assert_array_equal(got, expected)


def test_float_sums_are_deterministic_and_close_to_numpy() -> None:
    rng = np.random.default_rng(8)
    index = rng.integers(0, 10, 300).astype(np.int32)
    values = rng.standard_normal(300).astype(np.float32)
    expected = np.zeros(10, np.float64)
    np.add.at(expected, index, values.astype(np.float64))
    with Context(SCATTER_SORT=1):
        runs = [Tensor.zeros(10).contiguous().scatter_reduce(0, Tensor(index), Tensor(values), "sum").numpy()
                for _ in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_allclose(runs[0], expected, rtol=1e-4, atol=1e-4)


def test_index_add_style_scatter_and_bools() -> None:
    rng = np.random.default_rng(9)
    index = rng.integers(0, 4, (30, 3)).astype(np.int32)
    expected = np.zeros((4, 3), np.float32)
    np.add.at(expected, (index, np.indices(index.shape)[1]), 1.0)
    with Context(SCATTER_SORT=1):
        got = Tensor.zeros(4, 3).contiguous().scatter(0, Tensor(index), 1.0, reduce="add").numpy()
        flags = Tensor(np.zeros(6, bool)).scatter_reduce(0, Tensor(np.array([1, 1, 4], np.int32)),
                                                         Tensor(np.array([False, True, False])), "amax").numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(flags, [False, True, False, False, False, False])


class _Renderer(RendererContract):
    def __init__(self, threads: bool, atomic: frozenset):
        self.has_threads = threads
        self.atomic_dtypes = atomic


def test_when_the_lowering_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    target = Tensor.zeros(50).contiguous()
    many = Tensor.ones(segments.SORT_MIN_ITERATIONS)
    few = Tensor.ones(segments.SORT_MIN_ITERATIONS - 1)
    for renderer, wanted in ((_Renderer(False, frozenset()), True), (_Renderer(True, frozenset()), False),
                             (_Renderer(False, frozenset({dtypes.float32})), False)):
        monkeypatch.setattr(segments, "_renderer_of", lambda device, renderer=renderer: renderer)
        assert segments.sorts_scatter(target, many, "add", []) is wanted
        assert segments.sorts_scatter(target, few, "add", []) is False  # one work-item's loop is cheaper
        assert segments.sorts_scatter(target, many, None, []) is False  # plain writes: last one wins, in order
        with Context(SCATTER_SORT=0):
            assert segments.sorts_scatter(target, many, "add", []) is False
        with Context(SCATTER_SORT=1):
            assert segments.sorts_scatter(target, few, "add", []) is True
            assert segments.sorts_scatter(target, few.reshape(1, -1), "add", [0, 1]) is False  # nothing repeats


@pytest.mark.parametrize("reduce", ["sum", "amin"])
def test_pairs_too_wide_for_one_int32_sort_as_two_arrays(reduce: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "PACKED_LIMIT", 0)  # as for a target of 2**31 / P elements or more
    rng = np.random.default_rng(10)
    index = rng.integers(-9, 9, 45).astype(np.int32)
    values = _values(rng, reduce, (45,), np.float32)
    base = rng.integers(1, 3, 9).astype(np.float32)
    expected = base.copy()
    AT[reduce].at(expected, index, values)
    with Context(SCATTER_SORT=1):
        got = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(values), reduce).numpy()
    np.testing.assert_array_equal(got, expected)


def test_gather_gradient_sorted_matches_numpy() -> None:
    rng = np.random.default_rng(11)
    table = rng.standard_normal((20, 3)).astype(np.float32)
    rows = rng.integers(-20, 20, 70).astype(np.int32)
    upstream = rng.integers(-8, 8, (70, 3)).astype(np.float32)
    expected = np.zeros_like(table)
    np.add.at(expected, rows, upstream)
    with Context(SCATTER_SORT=1):
        weights = Tensor(table, requires_grad=True)
        (weights[Tensor(rows)] * Tensor(upstream)).sum().backward()
        assert weights.grad is not None
        got = weights.grad.numpy()
    np.testing.assert_array_equal(got, expected)
