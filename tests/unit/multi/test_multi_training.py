"""Training steps on several CPU instances equal the single-device step (numpy oracle for the single step too)."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Context, Tensor, nn

DEVICES = ("CPU:0", "CPU:1")
RNG = np.random.default_rng(1)
BATCH, FEATURES, HIDDEN, OUTPUTS = 8, 6, 4, 2


def numpy_step(x: np.ndarray, y: np.ndarray, first: np.ndarray, second: np.ndarray,
               lr: float) -> tuple[np.ndarray, np.ndarray, float]:
    """One SGD step of the MLP below, by hand: mean squared error of relu(x @ first) @ second."""
    hidden = x @ first
    active = np.maximum(hidden, 0)
    error = active @ second - y
    loss = float((error ** 2).mean())
    grad_out = 2 * error / error.size
    grad_second = active.T @ grad_out
    grad_hidden = (grad_out @ second.T) * (hidden > 0)
    grad_first = x.T @ grad_hidden
    return first - lr * grad_first, second - lr * grad_second, loss


def tinycore_step(x: Tensor, y: Tensor, first: Tensor, second: Tensor, lr: float) -> float:
    """One SGD step with tinycore's autograd and optimizer; returns the loss."""
    optimizer = nn.optim.SGD([first, second], lr=lr)
    with Context(TRAINING=1):
        loss = ((x @ first).relu() @ second - y).square().mean().realize()  # the loss before the step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.item())


@pytest.mark.parametrize("parallel", ["data", "tensor", "single"])
def test_mlp_step_matches_single_device(parallel: str) -> None:
    x, y = RNG.standard_normal((BATCH, FEATURES)).astype(np.float32), RNG.standard_normal((BATCH, OUTPUTS))
    y = y.astype(np.float32)
    first = RNG.standard_normal((FEATURES, HIDDEN)).astype(np.float32)
    second = RNG.standard_normal((HIDDEN, OUTPUTS)).astype(np.float32)
    expected_first, expected_second, expected_loss = numpy_step(x, y, first, second, 0.1)
    x_tensor, y_tensor = Tensor(x), Tensor(y)
    first_tensor, second_tensor = Tensor(first, requires_grad=True), Tensor(second, requires_grad=True)
    if parallel == "data":  # the batch split over the devices, the weights on every device
        x_tensor, y_tensor = x_tensor.shard(DEVICES, 0), y_tensor.shard(DEVICES, 0)
        first_tensor.to_(DEVICES)
        second_tensor.to_(DEVICES)
    elif parallel == "tensor":  # the hidden units split over the devices
        x_tensor, y_tensor = x_tensor.to(DEVICES), y_tensor.to(DEVICES)
        first_tensor.shard_(DEVICES, 1)
        second_tensor.shard_(DEVICES, 0)
    loss = tinycore_step(x_tensor, y_tensor, first_tensor, second_tensor, 0.1)
    if parallel != "single":
        assert first_tensor.device == second_tensor.device == tuple(Tensor(0, device=d).device for d in DEVICES)
    assert abs(loss - expected_loss) < 1e-5
    np.testing.assert_allclose(first_tensor.numpy(), expected_first, atol=1e-5)
    np.testing.assert_allclose(second_tensor.numpy(), expected_second, atol=1e-5)


def test_jit_replays_a_data_parallel_step() -> None:
    from tinycore import TinyJit
    first = RNG.standard_normal((FEATURES, HIDDEN)).astype(np.float32)
    second = RNG.standard_normal((HIDDEN, OUTPUTS)).astype(np.float32)
    first_tensor, second_tensor = Tensor(first, requires_grad=True), Tensor(second, requires_grad=True)
    first_tensor.to_(DEVICES)
    second_tensor.to_(DEVICES)
    optimizer = nn.optim.SGD([first_tensor, second_tensor], lr=0.1)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = ((x @ first_tensor).relu() @ second_tensor - y).square().mean().realize()  # before the step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        Tensor.realize(*optimizer.params)
        return loss

    with Context(TRAINING=1):
        for _ in range(4):  # call 1 runs, call 2 captures, calls 3 and 4 replay
            x = RNG.standard_normal((BATCH, FEATURES)).astype(np.float32)
            y = RNG.standard_normal((BATCH, OUTPUTS)).astype(np.float32)
            first, second, expected_loss = numpy_step(x, y, first, second, 0.1)
            loss = step(Tensor(x).shard(DEVICES, 0), Tensor(y).shard(DEVICES, 0))
            assert abs(loss.item() - expected_loss) < 1e-5
            np.testing.assert_allclose(first_tensor.numpy(), first, atol=1e-5)
            np.testing.assert_allclose(second_tensor.numpy(), second, atol=1e-5)
    assert step.count >= 2
