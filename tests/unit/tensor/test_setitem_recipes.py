"""Setitems repeated over inputs of one structure (the front end replays a recorded graph) against numpy: new values
and indices every call, shared and aliased inputs, scalars, bounds checks, lazy and viewed targets."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tinycore import Context, Tensor, dtypes
from tinycore.tensor import indexing

RNG = np.random.default_rng(23)


def _indices(high: int, shape: tuple[int, ...] = (2, 3, 4)) -> np.ndarray:
    return RNG.integers(-high, high, shape).astype(np.int32)


@pytest.mark.parametrize("realize_each", [True, False])
def test_repeated_setitem_takes_each_calls_inputs(realize_each: bool) -> None:
    base = RNG.standard_normal((2, 20, 3, 40, 2)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for _ in range(5):
        first, second = _indices(20), _indices(40)
        values = RNG.standard_normal((2, 3, 4, 2, 3, 2)).astype(np.float32)
        expected[:, first, :, second, :] = values
        target[:, Tensor(first), :, Tensor(second), :] = Tensor(values)
        if realize_each:
            np.testing.assert_array_equal(target.numpy(), expected)
    np.testing.assert_array_equal(target.numpy(), expected)
    assert indexing._SETITEM_RECIPES.recipes, "repeated setitems of one structure are recorded"


def test_same_index_tensor_on_two_axes_then_two_tensors() -> None:
    base = RNG.standard_normal((6, 6, 3)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for shared in (True, False, True, False):
        first = _indices(6, (4,))
        second = first if shared else _indices(6, (4,))
        values = RNG.standard_normal((4, 3)).astype(np.float32)
        expected[first, second] = values
        index = Tensor(first).realize()
        target[index, index if shared else Tensor(second)] = Tensor(values)
        np.testing.assert_array_equal(target.numpy(), expected)


def test_indices_that_are_views_of_one_buffer() -> None:
    base = RNG.standard_normal((8, 9)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for together in (True, False, True):
        rows, columns = _indices(8, (5,)), _indices(9, (5,))
        values = RNG.standard_normal(5).astype(np.float32)
        expected[rows, columns] = values
        if together:
            both = Tensor(np.stack([rows, columns])).realize()
            target[both[0], both[1]] = Tensor(values)
        else:
            target[Tensor(rows), Tensor(columns)] = Tensor(values)
        np.testing.assert_array_equal(target.numpy(), expected)


def test_values_read_from_the_target_itself() -> None:
    base = RNG.standard_normal((7, 5)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for _ in range(3):
        rows, source = _indices(7, (3,)), _indices(7, (3,))
        expected[rows] = expected[source].copy()
        target[Tensor(rows)] = target[Tensor(source)]
        np.testing.assert_array_equal(target.numpy(), expected)
    for _ in range(2):  # then a value of the same structure that reads another buffer
        rows = _indices(7, (3,))
        other = RNG.standard_normal((7, 5)).astype(np.float32)
        expected[rows] = other[rows]
        target[Tensor(rows)] = Tensor(other)[Tensor(rows)]
        np.testing.assert_array_equal(target.numpy(), expected)


@pytest.mark.parametrize("scalars", [(0.0, -0.0, 0.0), (1, 1.5, True), (-0.0, 2.0, -0.0)])
def test_scalar_values_are_told_apart(scalars: tuple[Any, ...]) -> None:
    target = Tensor(np.ones((5, 4), np.float32)).realize()
    expected = np.ones((5, 4), np.float32)
    for scalar in scalars:
        rows = _indices(5, (3,))
        expected[rows, 1:] = scalar
        target[Tensor(rows), 1:] = scalar
        got = target.numpy()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_bounds_check_applies_after_a_recorded_call() -> None:
    target = Tensor(np.zeros((4, 3), np.float32)).realize()
    target[Tensor(np.array([0, 3], np.int32))] = Tensor(np.ones((2, 3), np.float32))
    target.realize()
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match="out of bounds"):
        target[Tensor(np.array([1, 4], np.int32))] = Tensor(np.ones((2, 3), np.float32))


def test_targets_of_other_dtypes_and_views() -> None:
    for dtype in (np.float32, np.int32, np.float16):
        base = (RNG.standard_normal((6, 4)) * 10).astype(dtype)
        expected = base.copy()
        target = Tensor(base).realize()
        for _ in range(2):
            rows = _indices(6, (2, 2))
            values = (RNG.standard_normal((2, 2, 4)) * 10).astype(np.float32)
            expected[rows] = values.astype(dtype)
            target[Tensor(rows)] = Tensor(values)
            np.testing.assert_array_equal(target.numpy(), expected)
    base = RNG.standard_normal((6, 4)).astype(np.float32)
    whole = Tensor(base).realize()
    expected = base.copy()
    for _ in range(2):
        view = whole[1:5]  # a view of a realized buffer is written in place
        rows = _indices(4, (3,))
        values = RNG.standard_normal((3, 4)).astype(np.float32)
        expected[1:5][rows] = values
        view[Tensor(rows)] = Tensor(values)
        np.testing.assert_array_equal(view.numpy(), expected[1:5])


def test_lazy_targets_and_values() -> None:
    base = RNG.standard_normal((6, 4)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for _ in range(3):
        rows = _indices(6, (3,))
        values = RNG.standard_normal((3, 4)).astype(np.float32)
        expected = expected + 1
        expected[rows] = values * 2
        target = target + 1
        target[Tensor(rows)] = Tensor(values) * 2
        np.testing.assert_allclose(target.numpy(), expected, rtol=1e-6)


def test_repeated_basic_setitem() -> None:
    base = RNG.standard_normal((6, 5)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for start in (0, 1, 0, 2):
        values = RNG.standard_normal((2, 5)).astype(np.float32)
        expected[start:start + 2] = values
        target[start:start + 2] = Tensor(values)
        np.testing.assert_array_equal(target.numpy(), expected)
    integers = Tensor(np.zeros((3, 3), np.int32)).realize()
    integers[1] = 7
    integers[1] = Tensor(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(integers.numpy(), [[0, 0, 0], [1, 2, 3], [0, 0, 0]])
    assert integers.dtype == dtypes.int32


def test_recorded_setitems_after_the_schedule_cache_is_cleared() -> None:
    from tinycore.schedule import clear_schedule_cache
    base = RNG.standard_normal((5, 6)).astype(np.float32)
    expected = base.copy()
    target = Tensor(base).realize()
    for round_ in range(6):
        if round_ == 3:
            clear_schedule_cache()  # recipes then find the new templates, not the ones they kept
        rows = _indices(5, (4,))
        values = RNG.standard_normal((4, 6)).astype(np.float32)
        expected[rows] = values
        target[Tensor(rows)] = Tensor(values)
        np.testing.assert_array_equal(target.numpy(), expected)
