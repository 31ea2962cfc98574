"""Gradient edge cases as tinygrad and torch give them: zeros of the right shape where an input's contribution
folds away, gradients for requires_grad=None ("not decided") leaves, comparisons inside a differentiated graph, and
finite gradients at extreme inputs; each against torch."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from tinycore import nn
from tinycore.tensor import Tensor

RNG = np.random.default_rng(3)


def _torch_grads(function: Callable[..., torch.Tensor], *arrays: np.ndarray) -> list[np.ndarray]:
    inputs = [torch.tensor(array, requires_grad=True) for array in arrays]
    function(*inputs).sum().backward()
    return [tensor.grad.numpy() if tensor.grad is not None else np.zeros(tensor.shape, np.float32)
            for tensor in inputs]


def _our_grads(function: Callable[..., Tensor], *arrays: np.ndarray, through_backward: bool) -> list[np.ndarray]:
    if through_backward:
        inputs = [Tensor(array, requires_grad=True) for array in arrays]
        function(*inputs).sum().backward()
        assert all(tensor.grad is not None for tensor in inputs)
        return [tensor.grad.numpy() for tensor in inputs if tensor.grad is not None]
    inputs = [Tensor(array) for array in arrays]
    return [gradient.numpy() for gradient in function(*inputs).sum().gradient(*inputs)]


EMPTY_CASES: dict[str, tuple[Callable[..., Tensor], Callable[..., torch.Tensor], list[tuple[int, ...]]]] = {
    "cat_zero_size": (lambda a, b: a.cat(b, dim=1) * 2, lambda a, b: torch.cat([a, b], dim=1) * 2, [(2, 0), (2, 3)]),
    "expand_to_zero_size": (lambda a: a.expand(0, 3), lambda a: a.expand(0, 3), [(1, 3)]),
    "mean_over_zero_size": (lambda a: a.mean(axis=1), lambda a: a.mean(dim=1), [(2, 0)]),
    "sum_over_zero_size_axis": (lambda a: a.sum(axis=1) + 1, lambda a: a.sum(dim=1) + 1, [(3, 0)]),
    "negative_pad": (lambda a: a.pad(((-1, -1), (1, -2))),
                     lambda a: torch.nn.functional.pad(a, (1, -2, -1, -1)), [(4, 5)]),
    "copysign": (lambda a, b: a.copysign(b), lambda a, b: torch.copysign(a, b), [(6,), (6,)]),
}


@pytest.mark.parametrize("through_backward", [True, False], ids=["backward", "gradient"])
@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_inputs_whose_contribution_folds_away_get_zeros(case: str, through_backward: bool) -> None:
    ours, theirs, shapes = EMPTY_CASES[case]
    arrays = [RNG.standard_normal(shape).astype(np.float32) for shape in shapes]
    expected = _torch_grads(theirs, *arrays)
    got = _our_grads(ours, *arrays, through_backward=through_backward)
    assert len(got) == len(expected)
    for mine, reference in zip(got, expected, strict=True):
        assert mine.shape == reference.shape
        np.testing.assert_allclose(mine, reference, atol=1e-6)


def test_undecided_parameters_of_fresh_layers_receive_gradients() -> None:
    """Fresh nn layers (requires_grad None) and a comparison in the graph: every parameter gets torch's gradient."""
    conv, linear = nn.Conv2d(1, 3, 3), nn.Linear(3 * 4 * 4, 5)
    assert conv.weight.requires_grad is None
    layers = [conv, Tensor.relu, lambda x: x.flatten(1), linear]
    images = RNG.standard_normal((2, 1, 6, 6)).astype(np.float32)
    out = Tensor(images).sequential(layers)
    (out * (out < 0.1)).sum().backward()

    torch_conv, torch_linear = torch.nn.Conv2d(1, 3, 3), torch.nn.Linear(3 * 4 * 4, 5)
    with torch.no_grad():
        for theirs, mine in ((torch_conv, conv), (torch_linear, linear)):
            theirs.weight.copy_(torch.tensor(mine.weight.numpy()))
            assert mine.bias is not None
            theirs.bias.copy_(torch.tensor(mine.bias.numpy()))
    torch_images = torch.tensor(images, requires_grad=True)
    torch_out = torch_linear(torch.relu(torch_conv(torch_images)).flatten(1))
    (torch_out * (torch_out < 0.1)).sum().backward()
    for mine, theirs in ((conv.weight, torch_conv.weight), (conv.bias, torch_conv.bias),
                         (linear.weight, torch_linear.weight), (linear.bias, torch_linear.bias)):
        assert mine is not None and mine.grad is not None and theirs.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), atol=1e-5, rtol=1e-5)


def test_backward_from_an_empty_tensor_through_fresh_layers() -> None:
    """tinygrad's `Tensor.empty(...).sequential(layers).sum().backward()` fills every parameter's .grad."""
    layers = [nn.Conv2d(1, 2, 3), Tensor.relu, nn.Conv2d(2, 2, 3)]
    Tensor.empty(4, 1, 14, 14).sequential(layers).sum().backward()
    for layer in (layers[0], layers[2]):
        assert isinstance(layer, nn.Conv2d)
        assert layer.weight.grad is not None and layer.weight.grad.shape == layer.weight.shape
        assert layer.bias is not None and layer.bias.grad is not None and layer.bias.grad.shape == (2,)
    # the last bias's gradient is the number of output positions (4 images of 10 x 10), whatever the input holds
    last = layers[2]
    assert isinstance(last, nn.Conv2d) and last.bias is not None and last.bias.grad is not None
    np.testing.assert_allclose(last.bias.grad.numpy(), [400.0, 400.0])


def test_tensors_with_requires_grad_false_get_no_gradient() -> None:
    kept, trained = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    kept.requires_grad = False
    (kept * trained).sum().backward()
    assert kept.grad is None
    assert trained.grad is not None
    np.testing.assert_allclose(trained.grad.numpy(), [1.0, 2.0])


def test_comparisons_do_not_stop_backward() -> None:
    values = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
    expected = _torch_grads(lambda x: (x < 0.4).float() * x * x + torch.where(x > 0, x * 3, -x), values)
    x = Tensor(values)
    ((x < 0.4).float() * x * x + (x > 0).where(x * 3, -x)).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), expected[0], atol=1e-6)


EXTREME = np.array([-1000.0, -100.0, -50.0, -20.0, -1.0, 0.0, 1.0, 20.0, 50.0, 100.0, 1000.0], np.float32)

EXTREME_CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "gelu_tanh": (lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "silu": (lambda x: x.silu(), torch.nn.functional.silu),
    "abs": (lambda x: x.abs(), torch.abs),
}


@pytest.mark.parametrize("case", sorted(EXTREME_CASES))
def test_gradients_at_extreme_inputs_are_finite_as_torch(case: str) -> None:
    ours, theirs = EXTREME_CASES[case]
    inputs = np.concatenate([EXTREME, np.array([-0.0, 1e-3, -1e-3], np.float32)])
    torch_input = torch.tensor(inputs, requires_grad=True)
    torch_output = theirs(torch_input)
    torch_output.sum().backward()
    x = Tensor(inputs)
    output = ours(x)
    (gradient,) = output.sum().gradient(x)
    got = gradient.numpy()
    assert np.isfinite(got).all(), got
    assert torch_input.grad is not None
    np.testing.assert_allclose(got, torch_input.grad.numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(output.numpy(), torch_output.detach().numpy(), atol=1e-6, rtol=1e-5)
