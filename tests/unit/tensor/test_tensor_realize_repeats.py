"""Tensors whose lazy graphs are equal (one hash-consed node) still get buffers of their own when realized together,
so writing one never changes the other (as in tinygrad and torch); checked against numpy values."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor


def test_equal_graphs_realized_together_are_separate_buffers():
    keys, values = Tensor.zeros(2, 3).contiguous(), Tensor.zeros(2, 3).contiguous()
    Tensor.realize(keys, values)
    keys.assign(Tensor.ones(2, 3)).realize()
    np.testing.assert_array_equal(keys.numpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(values.numpy(), np.zeros((2, 3), np.float32))


def test_separate_buffers_hold_the_computed_values():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    source = Tensor(data)
    first, second, third = (source * 2 + 1), (source * 2 + 1), (source - 1)
    first.realize(second, third)
    first.assign(first * 10).realize()
    np.testing.assert_allclose(first.numpy(), (data * 2 + 1) * 10)
    np.testing.assert_allclose(second.numpy(), data * 2 + 1)
    np.testing.assert_allclose(third.numpy(), data - 1)


def test_an_assign_realized_twice_in_one_call_runs_once():
    counter = Tensor.zeros(3).contiguous().realize()
    step = counter.assign(counter + 1)
    Tensor.realize(step, step)
    np.testing.assert_array_equal(counter.numpy(), np.ones(3, np.float32))
