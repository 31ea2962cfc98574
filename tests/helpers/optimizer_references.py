"""numpy references for the optimizers torch lacks (LARS, LAMB, Muon), written from their papers: each takes the
initial parameters and, per step, one gradient per parameter, and returns the final parameters (float64)."""
from __future__ import annotations

import numpy as np


def lars_reference(params: list[np.ndarray], grads: list[list[np.ndarray]], lr: float, momentum: float,
                   weight_decay: float, trust: float, nesterov: bool = False) -> list[np.ndarray]:
    """LARS (You, Gitman and Ginsburg, 2017, Algorithm 1): local_lr = trust * ||w|| / (||g|| + wd * ||w||),
    v = m * v + lr * local_lr * (g + wd * w), w -= v (Nesterov: w -= lr-scaled update + m * v)."""
    weights = [param.astype(np.float64) for param in params]
    velocity = [np.zeros_like(weight) for weight in weights]
    for step_grads in grads:
        for index, grad in enumerate(step_grads):
            weight, grad64 = weights[index], grad.astype(np.float64)
            weight_norm, grad_norm = np.linalg.norm(weight), np.linalg.norm(grad64)
            local_lr = trust * weight_norm / (grad_norm + weight_decay * weight_norm) \
                if weight_norm > 0 and grad_norm > 0 else 1.0
            scaled = lr * local_lr * (grad64 + weight_decay * weight)
            velocity[index] = momentum * velocity[index] + scaled
            step = scaled + momentum * velocity[index] if nesterov else velocity[index]
            weights[index] = weight - step
    return weights


def lamb_reference(params: list[np.ndarray], grads: list[list[np.ndarray]], lr: float, b1: float, b2: float,
                   eps: float, weight_decay: float) -> list[np.ndarray]:
    """LAMB (You et al., 2019, Algorithm 2): Adam's bias-corrected moments, r = m_hat / (sqrt(v_hat) + eps) + wd * w,
    trust ratio ||w|| / ||r|| (1 if either is zero), w -= lr * trust * r."""
    weights = [param.astype(np.float64) for param in params]
    first = [np.zeros_like(weight) for weight in weights]
    second = [np.zeros_like(weight) for weight in weights]
    for step, step_grads in enumerate(grads, start=1):
        for index, grad in enumerate(step_grads):
            grad64 = grad.astype(np.float64)
            first[index] = b1 * first[index] + (1 - b1) * grad64
            second[index] = b2 * second[index] + (1 - b2) * grad64 ** 2
            m_hat, v_hat = first[index] / (1 - b1 ** step), second[index] / (1 - b2 ** step)
            update = m_hat / (np.sqrt(v_hat) + eps) + weight_decay * weights[index]
            weight_norm, update_norm = np.linalg.norm(weights[index]), np.linalg.norm(update)
            trust = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
            weights[index] = weights[index] - lr * trust * update
    return weights


def newton_schulz_reference(matrix: np.ndarray, steps: int, coefficients: tuple[float, float, float]) -> np.ndarray:
    """Muon's quintic Newton-Schulz iteration (Jordan et al., 2024) on the wide orientation of `matrix`."""
    a, b, c = coefficients
    transposed = matrix.shape[0] > matrix.shape[1]
    x = matrix.T if transposed else matrix
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if transposed else x


def muon_reference(params: list[np.ndarray], grads: list[list[np.ndarray]], lr: float, momentum: float,
                   weight_decay: float, steps: int = 5, nesterov: bool = True,
                   coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315)) -> list[np.ndarray]:
    """Muon: b = m * b + g, u = g + m * b (Nesterov) or b, u = NewtonSchulz(u as (rows, -1)),
    w = w * (1 - lr * wd) - lr * u. (tinygrad's variant, followed here, omits the max(1, rows/cols) ** 0.5 scale
    of the reference implementation; the reference's scale is 1 for the wide matrices of the scaled test.)"""
    weights = [param.astype(np.float64) for param in params]
    buffers = [np.zeros_like(weight) for weight in weights]
    for step_grads in grads:
        for index, grad in enumerate(step_grads):
            grad64 = grad.astype(np.float64)
            buffers[index] = momentum * buffers[index] + grad64
            update = grad64 + momentum * buffers[index] if nesterov else buffers[index]
            shape = update.shape
            update = newton_schulz_reference(update.reshape(shape[0], -1), steps, coefficients).reshape(shape)
            weights[index] = weights[index] * (1 - lr * weight_decay) - lr * update
    return weights
