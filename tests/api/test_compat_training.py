"""tinygrad-style training loops against torch: optimizer steps whose parameters read each other (x and W of
x @ W trained together), and ten steps scheduled without a realize in between (each step's writes ordered after the
previous step's reads)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tinycore.helpers import Context
from tinycore.nn import optim
from tinycore.tensor import Tensor

STEPS = 10


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return (rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32),
            rng.standard_normal((1, 3)).astype(np.float32))


def _torch_lamb_step(params: list[torch.Tensor], state: dict[str, Any], lr: float, b1: float, b2: float, eps: float,
                     weight_decay: float) -> None:
    """One LAMB step (You et al., 2019, Algorithm 2) written with torch tensors."""
    state["t"] = state.get("t", 0) + 1
    with torch.no_grad():
        for index, param in enumerate(params):
            assert param.grad is not None
            first = state.setdefault(("m", index), torch.zeros_like(param))
            second = state.setdefault(("v", index), torch.zeros_like(param))
            first.mul_(b1).add_((1 - b1) * param.grad)
            second.mul_(b2).add_((1 - b2) * param.grad ** 2)
            update = (first / (1 - b1 ** state["t"])) / ((second / (1 - b2 ** state["t"])).sqrt() + eps)
            update = update + weight_decay * param
            weight_norm, update_norm = param.norm(), update.norm()
            trust = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
            param.sub_(lr * trust * update)


OptimizerPair = tuple[Callable[[list[Tensor]], optim.Optimizer], Callable[[list[torch.Tensor]], Callable[[], None]]]


def _torch_stepper(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]
                   ) -> Callable[[list[torch.Tensor]], Callable[[], None]]:
    def build(params: list[torch.Tensor]) -> Callable[[], None]:
        return make(params).step
    return build


def _lamb_stepper(params: list[torch.Tensor]) -> Callable[[], None]:
    state: dict[str, Any] = {}
    return lambda: _torch_lamb_step(params, state, 0.01, 0.9, 0.999, 1e-6, 0.1)


CASES: dict[str, OptimizerPair] = {
    "sgd": (lambda p: optim.SGD(p, lr=0.01), _torch_stepper(lambda p: torch.optim.SGD(p, lr=0.01))),
    "sgd_nesterov": (lambda p: optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.01),
                     _torch_stepper(lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True,
                                                              weight_decay=0.01))),
    "adam": (lambda p: optim.Adam(p, lr=0.01), _torch_stepper(lambda p: torch.optim.Adam(p, lr=0.01))),
    "adamw": (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
              _torch_stepper(lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1))),
    "lamb": (lambda p: optim.LAMB(p, lr=0.01, weight_decay=0.1), _lamb_stepper),
}


def _torch_reference(case: str) -> list[np.ndarray]:
    x_start, w_start, m_start = _data()
    x, weight = torch.tensor(x_start, requires_grad=True), torch.tensor(w_start, requires_grad=True)
    mask = torch.tensor(m_start)
    step = CASES[case][1]([x, weight])
    for _ in range(STEPS):
        x.grad = weight.grad = None
        (x.matmul(weight).relu().log_softmax(1) * mask + mask).sum().backward()
        step()
    return [x.detach().numpy(), weight.detach().numpy()]


def _ours(case: str, realize_each_step: bool) -> list[np.ndarray]:
    x_start, w_start, m_start = _data()
    x, weight, mask = Tensor(x_start), Tensor(w_start), Tensor(m_start)  # requires_grad None, as tinygrad's
    optimizer = CASES[case][0]([x, weight])
    pending: list[Tensor] = []
    with Context(TRAINING=1):
        for _ in range(STEPS):
            out = x.matmul(weight).relu().log_softmax(1).mul(mask).add(mask).sum()
            optimizer.zero_grad()
            out.backward()
            if realize_each_step:
                optimizer.step()
            else:
                pending = optimizer.schedule_step()
        Tensor.realize(*pending) if pending else None
    return [x.numpy(), weight.numpy()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameters_that_read_each_other_step_like_torch(case: str) -> None:
    expected = _torch_reference(case)
    for got, want in zip(_ours(case, realize_each_step=True), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ten_steps_without_realize_match_torch(case: str) -> None:
    expected = _torch_reference(case)
    for got, want in zip(_ours(case, realize_each_step=False), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
