"""Failures seen when tinygrad's test_ops.py runs against tinycore on DEV=CPU, each fixed and checked here against
torch: gradients of a convolution weight used twice, softplus at large inputs, the gradient of cos at large inputs,
interpolation of integer images."""
import numpy as np
import pytest
import torch

from tinycore import Tensor


def _uniform(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


@pytest.mark.parametrize("kernel", [1, 3])
def test_weight_used_by_two_convolutions_gets_both_gradients_once(kernel: int) -> None:
    inputs, weight, bias = _uniform((1, 8, 5, 5), 0), _uniform((8, 8, kernel, kernel), 1), _uniform((8,), 2)
    padding = kernel // 2
    torch_args = [torch.tensor(array, requires_grad=True) for array in (inputs, weight, bias)]
    first = torch.nn.functional.conv2d(torch_args[0], torch_args[1], torch_args[2], padding=padding).relu()
    expected = torch.nn.functional.conv2d(first, torch_args[1], torch_args[2], padding=padding)
    expected_gradients = torch.autograd.grad(expected.sum(), torch_args)
    args = [Tensor(array, requires_grad=True) for array in (inputs, weight, bias)]
    value = args[0].conv2d(args[1], args[2], padding=padding).relu().conv2d(args[1], args[2], padding=padding)
    gradients = value.sum().gradient(*args)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    for gradient, expected_gradient in zip(gradients, expected_gradients, strict=True):
        np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("low", "high", "beta"), [(-2, 2, 1.0), (300, 400, 1.0), (-400, -300, 1.0), (5, 30, 3.0)])
def test_softplus_and_its_gradient_stay_finite_at_large_inputs(low: float, high: float, beta: float) -> None:
    data = np.random.default_rng(3).uniform(low, high, (45, 65)).astype(np.float32)
    torch_input = torch.tensor(data, requires_grad=True)
    expected = torch.nn.functional.softplus(torch_input, beta=beta)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [torch_input])
    tensor = Tensor(data, requires_grad=True)
    value = tensor.softplus(beta=beta)
    (gradient,) = value.sum().gradient(tensor)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), rtol=1e-4, atol=1e-6)


def test_cos_gradient_is_minus_sin_of_the_input_at_large_inputs() -> None:
    data = np.array([1e1, 1e2, 1e3, 1e4, 1e5, 1e6, -1e1, -1e2, -1e3, -1e4, -1e5, -1e6, 0.5, -2.0], np.float32)
    torch_input = torch.tensor(data, requires_grad=True)
    expected = torch.cos(torch_input)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [torch_input])
    tensor = Tensor(data, requires_grad=True)
    value = tensor.cos()
    (gradient,) = value.sum().gradient(tensor)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("shape", "size", "align_corners", "largest_difference"),
                         [((2, 3, 64, 64), (10, 10), False, 0), ((1, 1, 6, 6), (9, 4), True, 0),
                          ((1, 2, 7, 9), (13, 5), False, 1)])
def test_linear_interpolation_of_a_uint8_image_stays_uint8_in_fixed_point(
        shape: tuple[int, ...], size: tuple[int, int], align_corners: bool, largest_difference: int) -> None:
    """torch's own uint8 kernel is matched exactly where tinygrad's test_ops compares it (downsampling); upsampling
    can round one pixel in a hundred the other way (docs/compatibility.md)."""
    image = (10 * np.random.default_rng(4).uniform(-2, 2, shape)).clip(0, None).astype(np.uint8)
    expected = torch.nn.functional.interpolate(torch.tensor(image), size=size, mode="bilinear",
                                               align_corners=align_corners).numpy()
    value = Tensor(image).interpolate(size=size, mode="linear", align_corners=align_corners).numpy()
    assert value.dtype == np.uint8
    assert np.abs(value.astype(np.int32) - expected.astype(np.int32)).max() <= largest_difference
