"""`Tensor.is_param` / `is_param_()` as in tinygrad 0.14: the flag that tells an optimizer which of its tensors to
train; the others are buffers it only keeps realized. Oracle: torch's SGD over the trained tensors only."""
import numpy as np
import torch

from tinycore import Tensor, nn


def test_is_param_defaults_and_setters() -> None:
    weight = Tensor([1.0, 2.0])
    assert weight.is_param is True
    assert weight.is_param_(False) is weight and weight.is_param is False
    weight.is_param = True
    assert weight.is_param is True
    assert Tensor([1.0], requires_grad=False).is_param is False
    norm = nn.BatchNorm2d(3)
    assert norm.weight.is_param is True
    assert norm.running_mean.is_param is False and norm.running_var.is_param is False


def test_optimizer_trains_only_params() -> None:
    start_weight, start_scale = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 0.25, 2.0], np.float32)
    torch_weight = torch.tensor(start_weight, requires_grad=True)
    torch_scale = torch.tensor(start_scale, requires_grad=True)
    torch_optimizer = torch.optim.SGD([torch_weight], lr=0.1)  # the scale is not trained
    (torch_weight * torch_scale).square().sum().backward()
    torch_optimizer.step()

    weight, scale = Tensor(start_weight), Tensor(start_scale).is_param_(False)
    optimizer = nn.optim.SGD([weight, scale], lr=0.1)
    assert optimizer.params == [weight] and optimizer.buffers == [scale]
    with Tensor.train():
        optimizer.zero_grad()
        (weight * scale).square().sum().backward()
        optimizer.step()
    np.testing.assert_allclose(weight.numpy(), torch_weight.detach().numpy(), rtol=1e-6)
    np.testing.assert_equal(scale.numpy(), start_scale)


def test_clone_copies_the_gradient() -> None:
    start = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    reference = torch.tensor(start, requires_grad=True)
    reference.mul(5.0).add(5.0).mean().backward()
    assert reference.grad is not None
    source = Tensor(start, requires_grad=True)
    source.mul(5.0).add(5.0).mean().backward()
    copied = source.clone()
    assert copied.grad is not None and copied.grad is not source.grad
    np.testing.assert_allclose(copied.grad.numpy(), reference.grad.numpy(), rtol=1e-6)
    np.testing.assert_equal(copied.numpy(), start)
