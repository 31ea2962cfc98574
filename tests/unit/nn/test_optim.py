"""Optimizers: 10 steps on the same parameters and gradients as torch's optimizers (or, for LAMB, LARS and Muon,
which torch lacks, a numpy transcription of the published algorithm), equal within 1e-5."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from optimizer_references import lamb_reference, lars_reference, muon_reference

from tinycore.helpers import Context
from tinycore.nn import optim
from tinycore.tensor import Tensor

SHAPES = [(4, 3), (5,), (2, 3, 2), ()]
STEPS = 10


def _problem(seed: int = 0, shapes: list[tuple[int, ...]] = SHAPES) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Initial parameters and, for each step, one gradient per parameter."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    grads = [[rng.standard_normal(shape).astype(np.float32) for shape in shapes] for _ in range(STEPS)]
    return params, grads


def run_ours(make: Callable[[list[Tensor]], optim.Optimizer], params: list[np.ndarray],
             grads: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Our optimizer stepped with the given gradients; the final parameter values."""
    tensors = [Tensor(param.copy(), requires_grad=True) for param in params]
    optimizer = make(tensors)
    with Context(TRAINING=1):
        for step_grads in grads:
            optimizer.zero_grad()
            for tensor, grad in zip(tensors, step_grads, strict=True):
                tensor.grad = Tensor(grad)
            optimizer.step()
    return [tensor.numpy() for tensor in tensors]


def run_torch(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], params: list[np.ndarray],
              grads: list[list[np.ndarray]]) -> list[np.ndarray]:
    """torch's optimizer stepped with the given gradients; the final parameter values."""
    tensors = [torch.tensor(param.copy(), requires_grad=True) for param in params]
    optimizer = make(tensors)
    for step_grads in grads:
        optimizer.zero_grad()
        for tensor, grad in zip(tensors, step_grads, strict=True):
            tensor.grad = torch.tensor(grad)
        optimizer.step()
    return [tensor.detach().numpy() for tensor in tensors]


def assert_all_close(ours: list[np.ndarray], expected: list[np.ndarray], atol: float = 1e-5) -> None:
    for index, (got, want) in enumerate(zip(ours, expected, strict=True)):
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5, err_msg=f"parameter {index}")


TORCH_CASES: dict[str, tuple[Callable[[list[Any]], Any], Callable[[list[Any]], Any]]] = {
    "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "sgd_nesterov": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
    "sgd_weight_decay": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
                         lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1)),
    "sgd_classic": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01, classic=True),
                    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
    "adam": (lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    "adam_betas": (lambda p: optim.Adam(p, lr=0.02, b1=0.8, b2=0.99, eps=1e-6),
                   lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6)),
    "adamw": (lambda p: optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
    "adamw_decay": (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.3),
                    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.3)),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_against_torch(name: str) -> None:
    ours, theirs = TORCH_CASES[name]
    params, grads = _problem()
    assert_all_close(run_ours(ours, params, grads), run_torch(theirs, params, grads))


def test_lars() -> None:
    params, grads = _problem(1)
    ours = run_ours(lambda p: optim.LARS(p, lr=0.5, momentum=0.9, weight_decay=1e-3, tcoef=0.01), params, grads)
    assert_all_close(ours, lars_reference(params, grads, 0.5, 0.9, 1e-3, 0.01))


def test_lars_nesterov_defaults() -> None:
    params, grads = _problem(2)
    ours = run_ours(lambda p: optim.LARS(p, lr=2.0, nesterov=True), params, grads)
    assert_all_close(ours, lars_reference(params, grads, 2.0, 0.9, 1e-4, 0.001, nesterov=True))


def test_lamb() -> None:
    params, grads = _problem(3)
    ours = run_ours(lambda p: optim.LAMB(p, lr=0.01, weight_decay=0.1), params, grads)
    assert_all_close(ours, lamb_reference(params, grads, 0.01, 0.9, 0.999, 1e-6, 0.1))


def test_muon() -> None:
    params, grads = _problem(4, [(3, 5), (6, 2), (2, 3, 2), (4,)])
    ours = run_ours(lambda p: optim.Muon(p, lr=0.02), params, grads)
    assert_all_close(ours, muon_reference(params, grads, 0.02, 0.95, 0.1))


def test_muon_without_nesterov() -> None:
    params, grads = _problem(5, [(4, 4)])
    ours = run_ours(lambda p: optim.Muon(p, lr=0.01, nesterov=False, weight_decay=0.0), params, grads)
    assert_all_close(ours, muon_reference(params, grads, 0.01, 0.95, 0.0, nesterov=False))


def test_optimizer_group_steps_each_optimizer() -> None:
    params, grads = _problem(6)
    tensors = [Tensor(param.copy(), requires_grad=True) for param in params]
    group = optim.OptimizerGroup(optim.SGD(tensors[:1], lr=0.1), optim.Adam(tensors[1:], lr=0.01))
    assert isinstance(group[0], optim.SGD) and len(group.params) == len(SHAPES)
    with Context(TRAINING=1):
        for step_grads in grads:
            group.zero_grad()
            for tensor, grad in zip(tensors, step_grads, strict=True):
                tensor.grad = Tensor(grad)
            group.step()
    expected_sgd = run_torch(lambda p: torch.optim.SGD(p, lr=0.1), params[:1], [g[:1] for g in grads])
    expected_adam = run_torch(lambda p: torch.optim.Adam(p, lr=0.01), params[1:], [g[1:] for g in grads])
    assert_all_close([tensor.numpy() for tensor in tensors], expected_sgd + expected_adam)


def test_training_loop_with_backward() -> None:
    """A least-squares fit through backward() and Adam, against torch doing the same."""
    rng = np.random.default_rng(7)
    inputs, targets = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    start = rng.standard_normal((3, 1)).astype(np.float32)
    weight = Tensor(start.copy(), requires_grad=True)
    their_weight = torch.tensor(start.copy(), requires_grad=True)
    ours, theirs = optim.Adam([weight], lr=0.05), torch.optim.Adam([their_weight], lr=0.05)
    with Context(TRAINING=1):
        for _ in range(STEPS):
            ours.zero_grad()
            ((Tensor(inputs) @ weight - Tensor(targets)) ** 2).mean().backward()
            ours.step()
            theirs.zero_grad()
            ((torch.tensor(inputs) @ their_weight - torch.tensor(targets)) ** 2).mean().backward()
            theirs.step()
    np.testing.assert_allclose(weight.numpy(), their_weight.detach().numpy(), atol=1e-5, rtol=1e-5)


def test_learning_rate_is_a_tensor_that_schedules_change() -> None:
    params, grads = _problem(8, [(3,)])
    tensor = Tensor(params[0].copy(), requires_grad=True)
    optimizer = optim.SGD([tensor], lr=0.1)
    assert isinstance(optimizer.lr, Tensor) and optimizer.lr.shape == (1,)
    expected = params[0].astype(np.float64)
    with Context(TRAINING=1):
        for step, step_grads in enumerate(grads[:4]):
            learning_rate = 0.1 / (step + 1)
            optimizer.lr.assign(Tensor([learning_rate])).realize()
            optimizer.zero_grad()
            tensor.grad = Tensor(step_grads[0])
            optimizer.step()
            expected = expected - learning_rate * step_grads[0]
    np.testing.assert_allclose(tensor.numpy(), expected, atol=1e-5, rtol=1e-5)


def test_buffers_are_kept_but_not_trained() -> None:
    trained = Tensor([1.0, 2.0], requires_grad=True)
    kept = Tensor([5.0])
    kept.requires_grad = False
    optimizer = optim.SGD([trained, kept], lr=0.5)
    assert optimizer.params == [trained] and optimizer.buffers == [kept]
    with Context(TRAINING=1):
        trained.grad = Tensor([1.0, -1.0])
        optimizer.step()
    np.testing.assert_allclose(trained.numpy(), [0.5, 2.5])
    np.testing.assert_allclose(kept.numpy(), [5.0])


def test_step_outside_training_mode_says_how_to_enable_it() -> None:
    tensor = Tensor([1.0], requires_grad=True)
    optimizer = optim.Adam([tensor])
    tensor.grad = Tensor([1.0])
    with Context(TRAINING=0), pytest.raises(RuntimeError, match=r"Context\(TRAINING=1\)"):
        optimizer.step()


def test_step_without_gradient_is_a_clear_error() -> None:
    tensor = Tensor([1.0], requires_grad=True)
    optimizer = optim.SGD([tensor])
    with Context(TRAINING=1), pytest.raises(RuntimeError, match="no gradient"):
        optimizer.step()


def test_zero_grad_clears_gradients() -> None:
    tensor = Tensor([1.0, 2.0], requires_grad=True)
    optimizer = optim.SGD([tensor])
    (tensor * tensor).sum().backward()
    assert tensor.grad is not None
    optimizer.zero_grad()
    assert tensor.grad is None


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([])
    with pytest.raises(TypeError, match="must be Tensors"):
        optim.SGD([np.zeros(3)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([Tensor([1.0], requires_grad=True)], nesterov=True)


# ---- fused optimizers: one flattened vector of all parameters ----

FUSED_CASES: dict[str, Callable[[list[Tensor]], optim.Optimizer]] = {
    "sgd": lambda p: optim.SGD(p, lr=0.1, fused=True),
    "sgd_momentum": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, fused=True),
    "sgd_nesterov": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, fused=True),
    "sgd_weight_decay": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1, fused=True),
    "adam": lambda p: optim.Adam(p, lr=0.01, fused=True),
    "adamw_decay": lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.3, fused=True),
}


@pytest.mark.parametrize("name", sorted(FUSED_CASES))
def test_fused_elementwise_optimizers_match_torch(name: str) -> None:
    params, grads = _problem(seed=4)
    assert_all_close(run_ours(FUSED_CASES[name], params, grads), run_torch(TORCH_CASES[name][1], params, grads))


def test_fused_lamb_takes_norms_over_all_parameters() -> None:
    params, grads = _problem(seed=5)
    ours = run_ours(lambda p: optim.LAMB(p, lr=0.01, weight_decay=0.1, fused=True), params, grads)
    flat = lamb_reference([np.concatenate([param.reshape(-1) for param in params])],
                          [[np.concatenate([grad.reshape(-1) for grad in step])] for step in grads],
                          lr=0.01, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.1)[0]
    offsets = np.cumsum([0] + [param.size for param in params])
    expected = [flat[start:end].reshape(param.shape) for param, start, end in zip(params, offsets[:-1], offsets[1:],
                                                                                   strict=True)]
    assert_all_close(ours, expected)


def test_fused_keeps_one_state_vector_and_rejects_what_it_cannot_do() -> None:
    tensors = [Tensor(np.ones((3, 2), np.float32), requires_grad=True), Tensor(np.ones(4, np.float32),
                                                                             requires_grad=True)]
    adam = optim.Adam(tensors, fused=True)
    assert [state.shape for state in adam.m] == [(10,)] and [state.shape for state in adam.v] == [(10,)]
    with pytest.raises(ValueError, match="Muon orthogonalizes"):
        optim.Muon(tensors, fused=True)
    mixed = [Tensor(np.ones(2, np.float32), requires_grad=True), Tensor(np.ones(2, np.float16), requires_grad=True)]
    with pytest.raises(ValueError, match="one dtype"):
        optim.SGD(mixed, fused=True)
