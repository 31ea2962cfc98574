"""Optimizers on parameters that span devices (replicated or sharded), against torch's optimizers and the numpy
references of tests/helpers/optimizer_references.py; their state lives on the parameter's devices, sharded like it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from optimizer_references import lamb_reference, lars_reference, muon_reference

from tinycore import Context, Tensor, nn
from tinycore.uop.ops import Ops

DEVICES = ("CPU:0", "CPU:1")
SHAPES = [(4, 6), (8,)]
STEPS = 3


def problem(seed: int) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
    return params, [[rng.standard_normal(shape).astype(np.float32) for shape in SHAPES] for _ in range(STEPS)]


def place(tensor: Tensor, axis: int | None, devices: tuple[str, ...] = DEVICES) -> Tensor:
    """`tensor` replicated (axis None) or sharded on `axis` (vectors stay replicated when axis is 1)."""
    if axis is None or axis >= len(tensor.shape):
        return tensor.to(devices)
    return tensor.shard(devices, axis)


def run_sharded(make: Callable[[list[Tensor]], nn.optim.Optimizer], params: list[np.ndarray],
                grads: list[list[np.ndarray]], axis: int | None,
                devices: tuple[str, ...] = DEVICES) -> tuple[list[np.ndarray], nn.optim.Optimizer]:
    tensors = [place(Tensor(param.copy(), requires_grad=True), axis, devices) for param in params]
    for tensor in tensors:
        tensor.requires_grad = True
    optimizer = make(tensors)
    with Context(TRAINING=1):
        for step_grads in grads:
            optimizer.zero_grad()
            for tensor, grad in zip(tensors, step_grads, strict=True):
                tensor.grad = place(Tensor(grad), axis, devices)
            optimizer.step()
    return [tensor.numpy() for tensor in tensors], optimizer


def run_torch(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], params: list[np.ndarray],
              grads: list[list[np.ndarray]]) -> list[np.ndarray]:
    tensors = [torch.tensor(param.copy(), requires_grad=True) for param in params]
    optimizer = make(tensors)
    for step_grads in grads:
        for tensor, grad in zip(tensors, step_grads, strict=True):
            tensor.grad = torch.tensor(grad)
        optimizer.step()
    return [tensor.detach().numpy() for tensor in tensors]


CASES: dict[str, tuple[Callable[[list[Tensor]], Any], Callable[[list[np.ndarray], list[list[np.ndarray]]],
                                                                  list[np.ndarray]]]] = {
    "sgd_nesterov": (lambda p: nn.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
                     lambda w, g: run_torch(lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                                                                      weight_decay=0.01), w, g)),
    "adam": (lambda p: nn.optim.Adam(p, lr=0.02), lambda w, g: run_torch(lambda p: torch.optim.Adam(p, lr=0.02), w, g)),
    "adamw": (lambda p: nn.optim.AdamW(p, lr=0.02, weight_decay=0.1),
              lambda w, g: run_torch(lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.1), w, g)),
    "lamb": (lambda p: nn.optim.LAMB(p, lr=0.02, weight_decay=0.1),
             lambda w, g: lamb_reference(w, g, lr=0.02, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.1)),
    "lars": (lambda p: nn.optim.LARS(p, lr=0.5, momentum=0.9, weight_decay=1e-3, tcoef=0.01),
             lambda w, g: lars_reference(w, g, lr=0.5, momentum=0.9, weight_decay=1e-3, trust=0.01)),
    "muon": (lambda p: nn.optim.Muon(p, lr=0.02), lambda w, g: muon_reference(w, g, lr=0.02, momentum=0.95,
                                                                             weight_decay=0.1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_parallel_parameters(name: str) -> None:
    """The matrix sharded on its columns (norms and Muon's matmuls reduce across the devices), the vector
    replicated."""
    params, grads = problem(seed=sorted(CASES).index(name))
    ours, _ = run_sharded(CASES[name][0], params, grads, axis=1)
    for got, want in zip(ours, CASES[name][1](params, grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["adam", "lamb"])
@pytest.mark.parametrize("axis", [None, 0])
def test_replicated_and_row_sharded_parameters(name: str, axis: int | None) -> None:
    params, grads = problem(seed=10 + (axis or 0))
    ours, optimizer = run_sharded(CASES[name][0], params, grads, axis=axis)
    for got, want in zip(ours, CASES[name][1](params, grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the moments live where their parameter does, split the same way
    for param, moment in zip(optimizer.params, optimizer.m, strict=True):  # type: ignore[attr-defined]
        assert moment.device == param.device and moment.uop.op is Ops.MULTI and moment.uop.arg == param.uop.arg


def test_adamw_on_four_devices() -> None:
    devices = tuple(f"CPU:{index}" for index in range(4))
    params, grads = problem(seed=20)
    ours, _ = run_sharded(CASES["adamw"][0], params, grads, axis=0, devices=devices)
    for got, want in zip(ours, CASES["adamw"][1](params, grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_over_replicated_parameters_and_refused_over_sharded_ones() -> None:
    params, grads = problem(seed=30)
    ours, optimizer = run_sharded(lambda p: nn.optim.Adam(p, lr=0.02, fused=True), params, grads, axis=None)
    assert optimizer.m[0].device == optimizer.params[0].device  # type: ignore[attr-defined]
    for got, want in zip(ours, CASES["adam"][1](params, grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    sharded = Tensor(params[0], requires_grad=True).shard(DEVICES, 1)
    sharded.requires_grad = True
    with pytest.raises(ValueError, match="sharded on axis 1 .* use fused=False"):
        nn.optim.AdamW([sharded], fused=True)
    with pytest.raises(ValueError, match="use fused=False"):
        nn.optim.SGD([Tensor(params[1], requires_grad=True), Tensor(params[1], requires_grad=True).to(DEVICES)],
                     fused=True)


def test_adam_step_of_a_tensor_parallel_mlp_through_backward() -> None:
    """relu(x @ first) @ second with the hidden units split over the devices: Adam's step from real gradients equals
    torch's on one device."""
    rng = np.random.default_rng(40)
    x, y = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    first, second = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    ours = [Tensor(first, requires_grad=True).shard(DEVICES, 1), Tensor(second, requires_grad=True).shard(DEVICES, 0)]
    for tensor in ours:
        tensor.requires_grad = True
    optimizer = nn.optim.Adam(ours, lr=0.05)
    theirs = [torch.tensor(first, requires_grad=True), torch.tensor(second, requires_grad=True)]
    reference = torch.optim.Adam(theirs, lr=0.05)
    with Context(TRAINING=1):
        for _ in range(2):
            optimizer.zero_grad()
            ((Tensor(x).to(DEVICES) @ ours[0]).relu() @ ours[1] - Tensor(y).to(DEVICES)).square().mean().backward()
            optimizer.step()
            reference.zero_grad()
            ((torch.tensor(x) @ theirs[0]).relu() @ theirs[1] - torch.tensor(y)).square().mean().backward()
            reference.step()
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
