"""Conformance, autograd: gradients computed on the device against torch (CPU) for the same graphs."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tinycore.tensor import Tensor
from tinycore.testing.support import assert_matches, not_built, sample

pytestmark = pytest.mark.conformance_category("autograd")


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        not_built("torch is not installed: install torch to check gradients")
    return torch


GRAPHS: list[tuple[str, list[tuple[int, ...]], Callable[..., Any]]] = [
    ("elementwise", [(3, 4), (3, 4)], lambda x, y: ((x * y).exp() + x / (y * y + 1)).sum()),
    ("broadcast", [(3, 1), (1, 4)], lambda x, y: (x * y + x).tanh().sum()),
    ("matmul_relu", [(3, 5), (5, 4)], lambda x, y: (x @ y).relu().sum()),
    ("max_and_mean", [(4, 5)], lambda x: x.max(1)[0].sum() + x.mean() if not isinstance(x, Tensor) else
     x.max(1).sum() + x.mean()),
    ("log_softmax", [(3, 6)], lambda x: (x.log_softmax(1) * x).sum()),
    ("movement", [(2, 3, 4)], lambda x: (x.permute(2, 0, 1)[1:3].flip(0) * x[:, :, 1:3].permute(2, 0, 1)).sum()),
    ("sqrt_sigmoid", [(3, 4)], lambda x: (x * x + 1).sqrt().sigmoid().sum()),
]


@pytest.mark.parametrize("name,shapes,function", GRAPHS, ids=[item[0] for item in GRAPHS])
def test_gradients_match_torch(device: str, name: str, shapes: list[tuple[int, ...]],
                               function: Callable[..., Any]) -> None:
    """backward() on the device gives torch's gradients for every input."""
    torch = _torch()
    arrays = [sample(shape, seed=60 + position) for position, shape in enumerate(shapes)]
    inputs = [Tensor(array, device=device, requires_grad=True) for array in arrays]
    function(*inputs).backward()
    references = [torch.tensor(array, requires_grad=True) for array in arrays]
    function(*references).backward()
    for position, (tensor, reference) in enumerate(zip(inputs, references, strict=True)):
        if tensor.grad is None:
            raise AssertionError(f"{name} on {device}: input {position} has no gradient after backward()")
        assert_matches(tensor.grad, reference.grad.numpy(), f"{name} on {device}: gradient of input {position}",
                       rtol=1e-4, atol=1e-5)


def test_gradient_of_reused_input(device: str) -> None:
    """An input used on two paths gets the sum of both paths' gradients."""
    torch = _torch()
    data = sample((5,), seed=70)
    tensor = Tensor(data, device=device, requires_grad=True)
    reference = torch.tensor(data, requires_grad=True)
    for value in (tensor, reference):
        (value * value + value.sin()).sum().backward()
    assert_matches(tensor.grad, reference.grad.numpy(), f"gradient of x * x + sin(x) on {device}", rtol=1e-5)
