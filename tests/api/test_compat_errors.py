"""Exception types tinygrad programs catch: the type tinygrad 0.14 raises for each mistake (RuntimeError for shapes
that do not fit, IndexError for shapes that do not broadcast and axes out of range, AttributeError for an unknown
dtype name), while `except ValueError` / `except TypeError` code written for earlier tinycore keeps working.

Each mistake is checked to be one for torch too (it raises RuntimeError for most of them)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

A, B = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)

# name: (our call, torch's same mistake, the type tinygrad raises, the type earlier tinycore raised)
CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None, type[Exception], type[Exception]]] = {
    "cat": (lambda: Tensor(A).cat(Tensor(B)), lambda: torch.cat([torch.tensor(A), torch.tensor(B)]),
            RuntimeError, ValueError),
    "matmul": (lambda: Tensor(A).matmul(Tensor(B)), lambda: torch.tensor(A) @ torch.tensor(B), RuntimeError,
               ValueError),
    "dot_1d": (lambda: Tensor.ones(3).dot(Tensor.ones(4)), lambda: torch.ones(3).dot(torch.ones(4)), RuntimeError,
               ValueError),
    "reshape": (lambda: Tensor(A).reshape(4, 2), lambda: torch.tensor(A).reshape(4, 2), RuntimeError, ValueError),
    "reshape_two_minus_one": (lambda: Tensor(A).reshape(-1, -1), lambda: torch.tensor(A).reshape(-1, -1),
                              RuntimeError, ValueError),
    "permute": (lambda: Tensor(A).permute(0, 0), lambda: torch.tensor(A).permute(0, 0), RuntimeError, ValueError),
    "flip": (lambda: Tensor(A).flip(0, 0), lambda: torch.tensor(A).flip(0, 0), RuntimeError, ValueError),
    "pad": (lambda: Tensor(A).pad(((-3, 0), (0, 0))),
            lambda: torch.nn.functional.pad(torch.tensor(A), (0, 0, -3, 0)), RuntimeError, ValueError),
    "roll": (lambda: Tensor(A).roll((1, 2), (0,)), lambda: torch.tensor(A).roll((1, 2), (0,)), RuntimeError,
             ValueError),
    "gather": (lambda: Tensor(A).gather(0, Tensor([[[0]]])),
               lambda: torch.tensor(A).gather(0, torch.tensor([[[0]]])), RuntimeError, ValueError),
    "scatter": (lambda: Tensor(A).scatter(0, Tensor([[[0]]]), 1.0),
                lambda: torch.tensor(A).scatter(0, torch.tensor([[[0]]]), 1.0), RuntimeError, ValueError),
    "conv2d_window": (lambda: Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3)),
                      lambda: torch.nn.functional.conv2d(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 3, 3)),
                      RuntimeError, ValueError),
    "conv2d_channels": (lambda: Tensor.ones(1, 2, 4, 4).conv2d(Tensor.ones(1, 3, 3, 3)),
                        lambda: torch.nn.functional.conv2d(torch.ones(1, 2, 4, 4), torch.ones(1, 3, 3, 3)),
                        RuntimeError, ValueError),
    "one_hot_of_floats": (lambda: Tensor([1.0, 2.0]).one_hot(3),
                          lambda: torch.nn.functional.one_hot(torch.tensor([1.0, 2.0]), 3), RuntimeError, TypeError),
    "cross_entropy_shapes": (lambda: Tensor.ones(2, 3).cross_entropy(Tensor.ones(4, 3)),
                             lambda: torch.nn.functional.cross_entropy(torch.ones(2, 3), torch.ones(4, 3)),
                             RuntimeError, ValueError),
    "cross_entropy_smoothing": (lambda: Tensor.ones(2, 3).cross_entropy(Tensor([0, 1]), label_smoothing=2.0),
                                lambda: torch.nn.functional.cross_entropy(torch.ones(2, 3), torch.tensor([0, 1]),
                                                                          label_smoothing=2.0),
                                RuntimeError, ValueError),
    "broadcast": (lambda: Tensor(A) + Tensor(B), lambda: torch.tensor(A) + torch.tensor(B), IndexError, ValueError),
    "cummax_axis_of_0d": (lambda: Tensor(1.0).cummax(1), lambda: torch.tensor(1.0).cummax(1), IndexError,
                          IndexError),
    "cumsum_axis_of_0d": (lambda: Tensor(1.0).cumsum(1), lambda: torch.tensor(1.0).cumsum(1), IndexError,
                          IndexError),
    "unknown_dtype_name": (lambda: Tensor(A).cast("notadtype"), None, AttributeError, TypeError),
    "int_to_negative_int_power": (lambda: Tensor([2]) ** -1, lambda: torch.tensor([2]) ** -1, RuntimeError,
                                  TypeError),
    "linspace_negative_steps": (lambda: Tensor.linspace(0, 1, -2), lambda: torch.linspace(0, 1, -2), RuntimeError,
                                ValueError),
    "multinomial_of_a_scalar": (lambda: Tensor(2.0).multinomial(1), lambda: torch.tensor(2.0).multinomial(1),
                                AssertionError, ValueError),
    "multinomial_no_samples": (lambda: Tensor([1.0, 9.0]).multinomial(0),
                               lambda: torch.tensor([1.0, 9.0]).multinomial(0), AssertionError, ValueError),
    "multinomial_more_than_weights": (lambda: Tensor([1.0, 9.0]).multinomial(3),
                                      lambda: torch.tensor([1.0, 9.0]).multinomial(3), AssertionError, ValueError),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_mistakes_raise_what_tinygrad_raises(name: str) -> None:
    ours, theirs, tinygrad_type, earlier_type = CASES[name]
    if theirs is not None:
        with pytest.raises((RuntimeError, IndexError, ValueError)):  # torch agrees that the call is a mistake
            theirs()
    with pytest.raises(tinygrad_type) as error:
        ours()
    assert isinstance(error.value, earlier_type), "code catching the earlier type must still catch it"
    assert len(str(error.value)) > 20, "the message says what was wrong"


def test_good_calls_next_to_the_mistakes_still_work() -> None:
    np.testing.assert_array_equal((Tensor([2]) ** 2).numpy(), [4])
    np.testing.assert_allclose((Tensor([2.0]) ** -1).numpy(), [0.5])
    np.testing.assert_array_equal(Tensor(3.0).cumsum(0).numpy(), np.cumsum(np.float32(3.0)))
    np.testing.assert_array_equal(Tensor(3.0).cummax(-1)[0].numpy(), 3.0)
    assert Tensor(A).cast("float16").dtype == dtypes.float16
    loss = Tensor([[1.0, 2.0, 3.0]]).cross_entropy(Tensor([2]), label_smoothing=1.0)
    expected = torch.nn.functional.cross_entropy(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([2]),
                                                 label_smoothing=1.0)
    np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-6)
