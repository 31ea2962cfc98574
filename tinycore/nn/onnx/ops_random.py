"""Random ONNX operators, seeded: RandomNormal, RandomUniform, their *Like forms, Multinomial and Bernoulli.

A node with a `seed` attribute draws the same values on every run (numpy's PCG64 generator seeded with it); a node
without one draws fresh values each run. The draws are made on the host and copied to the device.
"""
from __future__ import annotations

import numpy as np

from tinycore.dtype import DType
from tinycore.nn.onnx.common import device_dtype, host_tensor, onnx_dtype
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor


def _generator(seed: float | None) -> np.random.Generator:
    return np.random.default_rng(None if seed is None else int(seed))


def _to_tensor(values: np.ndarray, dtype: DType, device: str | None = None) -> Tensor:
    return Tensor(values.astype(np.float32), device=device).cast(dtype)


@onnx_op("RandomNormal", 1)
def random_normal(shape: list[int], dtype: int = 1, mean: float = 0.0, scale: float = 1.0,
                  seed: float | None = None) -> Tensor:
    """Normal samples of `shape`."""
    values = _generator(seed).normal(mean, scale, size=tuple(shape))
    return _to_tensor(values, onnx_dtype(dtype, "RandomNormal"))


@onnx_op("RandomUniform", 1)
def random_uniform(shape: list[int], dtype: int = 1, high: float = 1.0, low: float = 0.0,
                   seed: float | None = None) -> Tensor:
    """Uniform samples in [low, high) of `shape`."""
    values = _generator(seed).uniform(low, high, size=tuple(shape))
    return _to_tensor(values, onnx_dtype(dtype, "RandomUniform"))


@onnx_op("RandomNormalLike", 1)
def random_normal_like(x: Tensor, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0,
                       seed: float | None = None) -> Tensor:
    """Normal samples of x's shape (and x's dtype unless `dtype` is given)."""
    values = _generator(seed).normal(mean, scale, size=tuple(x.shape))
    return _to_tensor(values, onnx_dtype(dtype, "RandomNormalLike") if dtype is not None else x.dtype, x.device)


@onnx_op("RandomUniformLike", 1)
def random_uniform_like(x: Tensor, dtype: int | None = None, high: float = 1.0, low: float = 0.0,
                        seed: float | None = None) -> Tensor:
    """Uniform samples in [low, high) of x's shape."""
    values = _generator(seed).uniform(low, high, size=tuple(x.shape))
    return _to_tensor(values, onnx_dtype(dtype, "RandomUniformLike") if dtype is not None else x.dtype, x.device)


@onnx_op("Bernoulli", 15)
def bernoulli(x: Tensor, dtype: int | None = None, seed: float | None = None) -> Tensor:
    """1 with probability x, else 0, elementwise."""
    draws = _generator(seed).uniform(0.0, 1.0, size=tuple(x.shape)) < x.numpy()
    return _to_tensor(draws, onnx_dtype(dtype, "Bernoulli") if dtype is not None else x.dtype, x.device)


@onnx_op("Multinomial", 7)
def multinomial(x: Tensor, dtype: int = 6, sample_size: int = 1, seed: float | None = None) -> Tensor:
    """`sample_size` class indices per row, drawn from the softmax-free log-probabilities in x."""
    logits = x.numpy().astype(np.float64)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    generator = _generator(seed)
    samples = np.stack([generator.choice(row.size, size=sample_size, p=row) for row in probabilities])
    chosen = device_dtype(onnx_dtype(dtype, "Multinomial"), x.device)
    return host_tensor(samples.astype(np.int64), x.device).cast(chosen)


@onnx_op("Dropout", 1, domain="com.microsoft")
def dropout_contrib(x: Tensor) -> Tensor:
    """Inference dropout: x unchanged."""
    return x


