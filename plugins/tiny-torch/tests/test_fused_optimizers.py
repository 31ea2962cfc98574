"""The fused optimizer steps (`fused=True`) on the tiny device against PyTorch's own CPU fused kernels: the same
model, data and hyperparameters, four steps, parameters compared; and a step skipped when found_inf is set."""
from __future__ import annotations

import numpy as np
import pytest
import tiny_torch
import torch

CASES = [
    ("Adam", {}),
    ("Adam", {"amsgrad": True, "weight_decay": 0.1}),
    ("Adam", {"maximize": True, "betas": (0.8, 0.95)}),
    ("AdamW", {"weight_decay": 0.1}),
    ("AdamW", {"amsgrad": True}),
    ("SGD", {}),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"momentum": 0.5, "dampening": 0.2, "maximize": True}),
    ("Adagrad", {"lr_decay": 0.1, "weight_decay": 0.1}),
]


def _train(device: str, name: str, options: dict[str, object], lr: float | torch.Tensor = 0.05) -> list[np.ndarray]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    optimizer = getattr(torch.optim, name)(model.parameters(), lr=lr, fused=True, **options)
    inputs = torch.randn(4, 5).to(device)
    for _ in range(4):
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [parameter.detach().cpu().numpy() for parameter in model.parameters()]


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{name}-{sorted(options)}" for name, options in CASES])
def test_fused_step_matches_pytorch_cpu(name: str, options: dict[str, object]) -> None:
    before = set(tiny_torch.fallbacks_hit())
    expected, actual = _train("cpu", name, options), _train("tiny", name, options)
    for reference, value in zip(expected, actual, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=2e-6)
    assert set(tiny_torch.fallbacks_hit()) == before, "the fused step must run on tinycore, not the CPU fallback"


def test_fused_adam_with_a_tensor_learning_rate() -> None:
    expected = _train("cpu", "Adam", {}, lr=torch.tensor(0.02))
    actual = _train("tiny", "Adam", {}, lr=torch.tensor(0.02))
    for reference, value in zip(expected, actual, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("found", [0.0, 1.0])
def test_fused_adam_skips_the_step_when_found_inf_is_set(found: float) -> None:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(6).astype(np.float32) for _ in range(4)]
    results = {}
    for device in ("cpu", "tiny"):
        param, grad, average, square = (torch.tensor(value, device=device) for value in values)
        square = square.abs()
        step = torch.tensor(3.0, device=device)
        torch._fused_adam_([param], [grad], [average], [square], [], [step], lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
                           grad_scale=torch.tensor(2.0, device=device), found_inf=torch.tensor(found, device=device))
        results[device] = [tensor.cpu().numpy() for tensor in (param, average, square)]
    for reference, value in zip(results["cpu"], results["tiny"], strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-7)
    if found:
        np.testing.assert_array_equal(results["tiny"][0], values[0])


def _train_with_snapshots(device: str, steps: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """A fused Adam run whose learning rate changes every step (a scheduler), with copies and lazy values of the
    parameters taken between steps: the replayed step must leave those as they were when taken."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, fused=True, amsgrad=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    inputs = torch.randn(4, 5).to(device)
    clones, lazies = [], []
    for step in range(steps):
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        if step == 3:
            clones = [parameter.detach().clone() for parameter in model.parameters()]
            lazies = [parameter.detach() * 2 for parameter in model.parameters()]
        optimizer.step()
        scheduler.step()
    finals = [parameter.detach().cpu().numpy() for parameter in model.parameters()]
    return finals, [value.cpu().numpy() for value in clones], [value.cpu().numpy() for value in lazies]


def test_replayed_adam_follows_a_scheduled_rate_and_keeps_earlier_copies() -> None:
    expected, actual = _train_with_snapshots("cpu", 7), _train_with_snapshots("tiny", 7)
    for reference_group, value_group in zip(expected, actual, strict=True):
        for reference, value in zip(reference_group, value_group, strict=True):
            np.testing.assert_allclose(value, reference, rtol=1e-5, atol=2e-6)


def _step_compiles(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> int:
    """One optimizer step after `loss`'s backward: the number of kernels it compiled."""
    from tinycore.engine import realize
    optimizer.zero_grad()
    loss.backward()
    before = len(realize._runners)
    optimizer.step()
    return len(realize._runners) - before


def test_replayed_step_launches_no_new_compilation_and_counts_steps() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 2).to("tiny")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    inputs = torch.randn(3, 6).to("tiny")
    compiled = [_step_compiles(model, optimizer, model(inputs).square().sum()) for _ in range(6)]
    assert compiled[3:] == [0, 0, 0], compiled
    steps = [float(optimizer.state[parameter]["step"].cpu()) for parameter in model.parameters()]
    assert steps == [6.0, 6.0]


def test_replayed_sgd_with_momentum_matches_pytorch_cpu_and_compiles_nothing_new() -> None:
    results, compiled = [], []
    for device in ("cpu", "tiny"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                    fused=True)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
        inputs = torch.randn(4, 5).to(device)
        for _ in range(6):
            count = _step_compiles(model, optimizer, model(inputs).square().mean())
            scheduler.step()
            if device == "tiny":
                compiled.append(count)
        results.append([parameter.detach().cpu().numpy() for parameter in model.parameters()])
    assert compiled[3:] == [0, 0, 0], compiled
    for reference, value in zip(*results, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=2e-6)


def test_compiled_model_with_fused_adam_matches_pytorch_cpu_over_replayed_steps() -> None:
    # from the third step the forward, backward and Adam graphs replay with new buffers as inputs and outputs every
    # step (the whole-buffer input path of TinyJit, outputs in freshly made buffers): losses and parameters stay
    # PyTorch's on the CPU
    import torch._dynamo
    torch._dynamo.reset()
    results, losses = [], []
    for device in ("cpu", "tiny"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05, fused=True)
        step_model = torch.compile(model, backend="tiny") if device == "tiny" else model
        data = [(torch.randn(4, 5), torch.randint(0, 3, (4,))) for _ in range(6)]
        device_losses = []
        for inputs, labels in data:
            loss = torch.nn.functional.cross_entropy(step_model(inputs.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            device_losses.append(loss.item())
        losses.append(device_losses)
        results.append([parameter.detach().cpu().numpy() for parameter in model.parameters()])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for reference, value in zip(*results, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=2e-6)
