"""TinyJit functions that return lazy tensors, and slicing with bound Variables, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import TinyJit, Variable
from tinycore.tensor import Tensor

RNG = np.random.default_rng(5)


def test_jit_realizes_the_lazy_tensors_it_returns() -> None:
    @TinyJit
    def add_and_scale(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a + b, (a * b).sum()

    for _ in range(4):
        first, second = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
        total, dot = add_and_scale(Tensor(first).realize(), Tensor(second).realize())
        np.testing.assert_allclose(total.numpy(), first + second, rtol=1e-6)
        np.testing.assert_allclose(dot.numpy(), (first * second).sum(), rtol=1e-5)
    assert add_and_scale.captured_kernel_count >= 1


MATRIX = np.arange(20, dtype=np.float32).reshape(4, 5)


@pytest.mark.parametrize("value", [1, 2, 3, 5])
def test_slices_with_a_bound_variable_match_numpy(value: int) -> None:
    v = Variable("v", 1, 5)
    t = Tensor(MATRIX)
    np.testing.assert_allclose(t[:, :v.bind(value)].sum(1).numpy(), MATRIX[:, :value].sum(1))
    np.testing.assert_allclose(t[:, v.bind(value):].sum(1).numpy(), MATRIX[:, value:].sum(1))
    np.testing.assert_allclose((t[:v.bind(min(value, 4))] * 2).sum(0).numpy(), (MATRIX[:min(value, 4)] * 2).sum(0))
    row = Variable("row", 0, 3)
    np.testing.assert_allclose(t[row.bind(min(value, 3))].numpy(), MATRIX[min(value, 3)])


@pytest.mark.parametrize("value", [1, 2, 3])
def test_shrink_with_variables_feeding_a_reduce_matches_numpy(value: int) -> None:
    v = Variable("v", 1, 3)
    bound = v.bind(value)
    t = Tensor(MATRIX)
    np.testing.assert_allclose(t.shrink(((0, 4), (0, bound))).sum(1).numpy(), MATRIX[:, :value].sum(1))
    np.testing.assert_allclose(t.shrink(((bound, 4), None)).max(0).numpy(), MATRIX[value:].max(0))
    np.testing.assert_allclose(t.shrink((None, (bound, bound + 2))).sum().numpy(), MATRIX[:, value:value + 2].sum())


def test_jit_with_a_symbolic_slice_replays_each_binding() -> None:
    v = Variable("v", 1, 5)

    @TinyJit
    def prefix_sums(t: Tensor, length: object) -> Tensor:
        return t[:, :length].sum(1) * 1.0

    t = Tensor(MATRIX).realize()
    for value in (2, 3, 1, 5, 4):
        np.testing.assert_allclose(prefix_sums(t, v.bind(value)).numpy(), MATRIX[:, :value].sum(1))


def test_symbolic_slice_errors_are_clear() -> None:
    v = Variable("v", 1, 5)
    t = Tensor(MATRIX)
    with pytest.raises(TypeError, match="step 1"):
        t[:, :v.bind(3):2]
    with pytest.raises(TypeError, match="Variables"):
        t[:, :v.bind(3)] = 1.0
