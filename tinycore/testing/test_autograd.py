"""Conformance, autograd: gradients computed on the device against numerical gradients of the same function written
with numpy (central differences in float64), and against torch's autograd as well where torch is installed."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy
import pytest

from tinycore.tensor import Tensor
from tinycore.testing.references import numeric_gradients, optional_torch
from tinycore.testing.support import assert_matches, sample

pytestmark = pytest.mark.conformance_category("autograd")


def _log_softmax(x: numpy.ndarray, axis: int) -> numpy.ndarray:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - numpy.log(numpy.exp(shifted).sum(axis, keepdims=True))


GRAPHS: list[tuple[str, list[tuple[int, ...]], Callable[..., Any], Callable[..., Any]]] = [
    ("elementwise", [(3, 4), (3, 4)], lambda x, y: ((x * y).exp() + x / (y * y + 1)).sum(),
     lambda x, y: (numpy.exp(x * y) + x / (y * y + 1)).sum()),
    ("broadcast", [(3, 1), (1, 4)], lambda x, y: (x * y + x).tanh().sum(), lambda x, y: numpy.tanh(x * y + x).sum()),
    ("matmul_relu", [(3, 5), (5, 4)], lambda x, y: (x @ y).relu().sum(), lambda x, y: numpy.maximum(x @ y, 0).sum()),
    ("max_and_mean", [(4, 5)], lambda x: x.max(1)[0].sum() + x.mean() if not isinstance(x, Tensor) else
     x.max(1).sum() + x.mean(), lambda x: x.max(1).sum() + x.mean()),
    ("log_softmax", [(3, 6)], lambda x: (x.log_softmax(1) * x).sum(), lambda x: (_log_softmax(x, 1) * x).sum()),
    ("movement", [(2, 3, 4)], lambda x: (x.permute(2, 0, 1)[1:3].flip(0) * x[:, :, 1:3].permute(2, 0, 1)).sum(),
     lambda x: (x.transpose(2, 0, 1)[1:3][::-1] * x[:, :, 1:3].transpose(2, 0, 1)).sum()),
    ("sqrt_sigmoid", [(3, 4)], lambda x: (x * x + 1).sqrt().sigmoid().sum(),
     lambda x: (1 / (1 + numpy.exp(-numpy.sqrt(x * x + 1)))).sum()),
]
"""(name, input shapes, the graph on Tensors (and on torch tensors), the same graph on numpy arrays)."""


def _torch_gradients(function: Callable[..., Any], arrays: list[numpy.ndarray]) -> list[numpy.ndarray] | None:
    """torch's gradients of `function` at `arrays`, or None when torch is not installed."""
    torch = optional_torch()
    if torch is None:
        return None
    references = [torch.tensor(array, requires_grad=True) for array in arrays]
    function(*references).backward()
    return [reference.grad.numpy() for reference in references]


@pytest.mark.parametrize("name,shapes,function,numpy_function", GRAPHS, ids=[item[0] for item in GRAPHS])
def test_gradients_match_numerical_gradients(device: str, name: str, shapes: list[tuple[int, ...]],
                                             function: Callable[..., Any], numpy_function: Callable[..., Any]) -> None:
    """backward() on the device gives the numerical gradient of every input (and torch's, where installed)."""
    arrays = [sample(shape, seed=60 + position) for position, shape in enumerate(shapes)]
    inputs = [Tensor(array, device=device, requires_grad=True) for array in arrays]
    function(*inputs).backward()
    expected = numeric_gradients(numpy_function, arrays)
    from_torch = _torch_gradients(function, arrays)
    for position, tensor in enumerate(inputs):
        if tensor.grad is None:
            raise AssertionError(f"{name} on {device}: input {position} has no gradient after backward()")
        gradient = tensor.grad.numpy()
        assert_matches(gradient, expected[position], f"{name} on {device}: gradient of input {position}",
                       rtol=1e-4, atol=1e-4)
        if from_torch is not None:
            assert_matches(gradient, from_torch[position], f"{name} on {device}: gradient of input {position} "
                           "against torch", rtol=1e-4, atol=1e-5)


def test_gradient_of_reused_input(device: str) -> None:
    """An input used on two paths gets the sum of both paths' gradients: d(x * x + sin(x))/dx = 2x + cos(x)."""
    data = sample((5,), seed=70)
    tensor = Tensor(data, device=device, requires_grad=True)
    (tensor * tensor + tensor.sin()).sum().backward()
    expected = (2 * data.astype(numpy.float64) + numpy.cos(data.astype(numpy.float64))).astype(numpy.float32)
    assert_matches(tensor.grad, expected, f"gradient of x * x + sin(x) on {device}", rtol=1e-5)
