"""Edge cases tinygrad's own edge-case tests raise: assignment through a view reaches the tensor that owns the
buffer, optimizers refuse negative settings. Oracle: torch."""
import numpy as np
import pytest
import torch

from tinycore import Tensor
from tinycore.nn import optim


def test_assign_through_a_permuted_view_updates_the_owner() -> None:
    data = np.arange(6).reshape(2, 3).astype(np.float32)
    expected = torch.tensor(data)
    expected.t().copy_(torch.tensor([[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]))
    owner = Tensor(data).contiguous().realize()
    owner.permute(1, 0).assign(Tensor([[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]))
    np.testing.assert_equal(owner.numpy(), expected.numpy())


def test_assign_through_a_shrunk_view_updates_the_owner() -> None:
    data = np.arange(9).reshape(3, 3).astype(np.float32)
    expected = torch.tensor(data)
    expected[1:3, 1:3] = torch.ones(2, 2)
    owner = Tensor(data).contiguous().realize()
    view = owner.shrink(((1, 3), (1, 3)))
    view.assign(Tensor.ones(2, 2))
    np.testing.assert_equal(owner.numpy(), expected.numpy())
    np.testing.assert_equal(view.numpy(), np.ones((2, 2), np.float32))


@pytest.mark.parametrize("setting", [{"momentum": -0.1}, {"weight_decay": -0.1}])
def test_sgd_refuses_negative_settings_as_torch(setting: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        torch.optim.SGD([torch.tensor([1.0], requires_grad=True)], lr=0.1, **setting)
    with pytest.raises(ValueError):
        optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1, **setting)


def test_adamw_refuses_a_negative_weight_decay_as_torch() -> None:
    with pytest.raises(ValueError):
        torch.optim.AdamW([torch.tensor([1.0], requires_grad=True)], lr=0.1, weight_decay=-0.1)
    with pytest.raises(ValueError):
        optim.AdamW([Tensor([1.0], requires_grad=True)], lr=0.1, weight_decay=-0.1)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_a_large_learning_rate_survives_a_half_default_float(name: str) -> None:
    """The rate is kept in at least float32: under DEFAULT_FLOAT=half, 1e10 was inf and every weight with it."""
    from tinycore import Context, dtypes
    data = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    expected = torch.tensor(data, requires_grad=True)
    expected_optimizer = getattr(torch.optim, name)([expected], lr=1e10)
    (expected * expected).sum().backward()
    expected_optimizer.step()
    with Context(DEFAULT_FLOAT="HALF", TRAINING=1):
        weight = Tensor(data, requires_grad=True)
        optimizer = getattr(optim, name)([weight], lr=1e10)
        assert dtypes.default_float == dtypes.half and optimizer.lr.dtype == dtypes.float32
        (weight * weight).sum().backward()
        optimizer.step()
        np.testing.assert_allclose(weight.numpy(), expected.detach().numpy(), rtol=1e-4)
