"""Tensor.training, Tensor.train(), Tensor.no_grad, Tensor.inference_mode() and Tensor.test(), as tinygrad
programs use them. Oracles: torch (dropout's scaling, SGD's update) and hand-computed values."""
import numpy as np
import pytest
import torch

from tinycore import Context, Tensor
from tinycore.nn.optim import SGD


@pytest.fixture(autouse=True)
def _modes_restored():
    training, no_grad = Tensor.training, Tensor.no_grad
    yield
    Tensor.training, Tensor.no_grad = training, no_grad


def test_setting_training_turns_dropout_on_and_off() -> None:
    Tensor.training = True
    dropped = Tensor.ones(4096).dropout(0.5).numpy()
    assert set(np.unique(dropped).tolist()) == {0.0, 2.0}  # kept values scaled by 1/(1-p), as torch
    Tensor.training = False
    np.testing.assert_equal(Tensor.ones(4096).dropout(0.5).numpy(), np.ones(4096))


def test_optimizer_steps_when_training_is_set() -> None:
    data = np.array([1.0, -2.0, 3.0], np.float32)
    expected = torch.tensor(data, requires_grad=True)
    torch_sgd = torch.optim.SGD([expected], lr=0.1)
    (expected * expected).sum().backward()
    torch_sgd.step()
    Tensor.training = True
    weight = Tensor(data, requires_grad=True)
    optimizer = SGD([weight], lr=0.1)
    (weight * weight).sum().backward()
    optimizer.step()
    np.testing.assert_allclose(weight.numpy(), expected.detach().numpy(), rtol=1e-6)


def test_train_is_a_decorator_and_a_context_manager_that_restore_the_mode() -> None:
    Tensor.training = False
    seen = []

    @Tensor.train()
    def step() -> None:
        seen.append(Tensor.training)
        with Tensor.train(False):
            seen.append(Tensor.training)
        seen.append(Tensor.training)

    step()
    assert seen == [True, False, True]
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
    assert Tensor.training is False


def test_training_is_the_training_context_variable() -> None:
    with Context(TRAINING=1):
        assert Tensor.training is True
    with Tensor.train():
        from tinycore.helpers import TRAINING
        assert TRAINING.value == 1


def test_mode_is_restored_after_an_exception() -> None:
    with pytest.raises(ZeroDivisionError), Tensor.train():
        raise ZeroDivisionError
    assert Tensor.training is False


@pytest.mark.parametrize("switch", ["inference_mode", "test"])
def test_no_grad_modes_record_no_gradient_path(switch: str) -> None:
    weight = Tensor([1.0, 2.0], requires_grad=True)
    other = Tensor([3.0, 4.0], requires_grad=True)
    with getattr(Tensor, switch)():
        assert Tensor.no_grad is True
        frozen = (weight * 3).sum()
    assert Tensor.no_grad is False
    loss = frozen + (other * other).sum()
    loss.backward()
    # torch leaves weight.grad None; tinycore gives a tensor found in the graph without a gradient path zeros
    assert weight.grad is None or not weight.grad.numpy().any()
    np.testing.assert_allclose(other.grad.numpy(), [6.0, 8.0])
    np.testing.assert_allclose(frozen.numpy(), 9.0)


def test_no_grad_flag_can_be_set_directly() -> None:
    weight = Tensor([1.0, 2.0], requires_grad=True)
    Tensor.no_grad = True
    value = weight * 2
    Tensor.no_grad = False
    assert not value.requires_grad
    (gradient,) = (value.sum() + weight.sum()).gradient(weight)
    np.testing.assert_allclose(gradient.numpy(), [1.0, 1.0])


def test_a_jitted_training_step_wrapped_in_train_matches_torch() -> None:
    """tinygrad's training examples: `@TinyJit` over `@Tensor.train()`. The loss is realized before the step (a lazy
    loss read after `opt.step()` sees the updated weights, in tinygrad as here)."""
    from tinycore import TinyJit
    from tinycore.nn import Linear
    from tinycore.nn.state import get_parameters
    rng = np.random.default_rng(0)
    inputs, labels = rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)
    model = Linear(4, 3)
    expected_model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        expected_model.weight.copy_(torch.tensor(model.weight.numpy()))
        expected_model.bias.copy_(torch.tensor(model.bias.numpy()))
    optimizer = SGD(get_parameters(model), lr=0.1)
    expected_optimizer = torch.optim.SGD(expected_model.parameters(), lr=0.1)

    @TinyJit
    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(x).cross_entropy(y).backward().realize()
        optimizer.step()
        return loss

    Tensor.training = False
    for _ in range(4):
        loss = step(Tensor(inputs), Tensor(labels)).item()
        expected_optimizer.zero_grad()
        expected = torch.nn.functional.cross_entropy(expected_model(torch.tensor(inputs)), torch.tensor(labels).long())
        expected.backward()
        expected_optimizer.step()
        np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
    assert Tensor.training is False
    np.testing.assert_allclose(model.weight.numpy(), expected_model.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
