"""TinyJit replays that pass the same realized tensors again skip the input checks (engine/jit.py _KnownInputs):
the results must stay those of numpy when the inputs are written in place, alternate, change shape, or carry bound
Variables next to the tensors."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor, TinyJit, Variable
from tinycore.engine.jit import JitInputError

RNG = np.random.default_rng(7)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _three_kernels(value: Tensor) -> Tensor:
    for _ in range(3):
        value = (value * 2 + 1).contiguous()
    return value.realize()


def _expected(value: np.ndarray) -> np.ndarray:
    for _ in range(3):
        value = value * 2 + 1
    return value


def test_same_tensor_written_in_place_between_replays() -> None:
    jitted = TinyJit(_three_kernels)
    values = _random(8)
    x = Tensor(values).realize()
    for _ in range(6):
        result = jitted(x).numpy()
        np.testing.assert_allclose(result, _expected(values), rtol=1e-6)
        values = _random(8)
        x.assign(Tensor(values)).realize()


def test_alternating_inputs_read_their_own_buffers() -> None:
    jitted = TinyJit(_three_kernels)
    first_values, second_values = _random(5), _random(5)
    first, second = Tensor(first_values).realize(), Tensor(second_values).realize()
    for _ in range(3):
        np.testing.assert_allclose(jitted(first).numpy(), _expected(first_values), rtol=1e-6)
        np.testing.assert_allclose(jitted(second).numpy(), _expected(second_values), rtol=1e-6)


def test_changed_shape_after_known_inputs_still_raises() -> None:
    jitted = TinyJit(_three_kernels)
    x = Tensor(_random(4)).realize()
    for _ in range(4):
        jitted(x)
    with pytest.raises(JitInputError, match="changed from shape"):
        jitted(Tensor(_random(6)).realize())


def test_bound_variable_inside_a_list_next_to_a_tensor() -> None:
    width = Variable("known_inputs_width", 1, 8)

    def partial_sum(items: list) -> Tensor:
        tensor, bound = items
        return tensor[:bound].sum().realize()

    jitted = TinyJit(partial_sum)
    values = np.arange(8, dtype=np.float32) + 1
    x = Tensor(values).realize()
    for count in (3, 5, 2, 7, 4, 4, 1):
        result = jitted([x, width.bind(count)]).numpy()
        np.testing.assert_allclose(result, values[:count].sum(), rtol=1e-6)
