"""Reduces broadcast back over the axes they reduced (softmax's max and sum, layernorm's mean and variance) run inside
their consumer's kernel on the CPU, once per row: kernel counts, the hand-written numpy/torch references (odd sizes,
widths that are no multiple of the vector width, -inf and huge values), and the cases that must keep their own
kernels (a reduce over an outer axis, a reduce of the whole tensor)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import GlobalCounters, Tensor
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule

SHAPES = [(1, 1), (3, 1), (7, 13), (33, 1001), (16, 1024), (2, 3, 37)]


def _kernels(build) -> tuple[np.ndarray, int]:
    """The value `build()` realizes and how many kernels that took."""
    result = build()
    GlobalCounters.reset()
    value = result.numpy()
    return value, GlobalCounters.kernel_count


def _array(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)


def _rows(shape: tuple[int, ...]) -> int:
    """Output rows of a reduce over the last axis: 0 when there is a single row (nothing to split rows over)."""
    return int(np.prod(shape[:-1])) if int(np.prod(shape[:-1])) > 1 else 0


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_is_one_kernel_and_matches_torch(shape: tuple[int, ...]) -> None:
    array = _array(shape)
    value, kernels = _kernels(lambda: Tensor(array).softmax(-1))
    np.testing.assert_allclose(value, torch.softmax(torch.from_numpy(array), -1).numpy(), rtol=2e-6, atol=1e-7)
    assert kernels == (1 if _rows(shape) else kernels)


@pytest.mark.parametrize("shape", SHAPES)
def test_log_softmax_and_logsumexp_are_one_kernel(shape: tuple[int, ...]) -> None:
    array = _array(shape, 1)
    value, kernels = _kernels(lambda: Tensor(array).log_softmax(-1))
    # log_softmax is shifted - log(sum): a few ulps of the shifted value, up to about 20 here
    np.testing.assert_allclose(value, torch.log_softmax(torch.from_numpy(array), -1).numpy(), rtol=2e-6, atol=1e-5)
    if _rows(shape):
        assert kernels == 1
    value, kernels = _kernels(lambda: Tensor(array).logsumexp(-1))
    np.testing.assert_allclose(value, torch.logsumexp(torch.from_numpy(array), -1).numpy(), rtol=2e-6, atol=2e-6)
    if _rows(shape):
        assert kernels == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_layernorm_is_one_kernel(shape: tuple[int, ...]) -> None:
    array = _array(shape, 2) + 3
    value, kernels = _kernels(lambda: Tensor(array).layernorm(-1))
    reference = torch.nn.functional.layer_norm(torch.from_numpy(array), (shape[-1],), eps=1e-5).numpy()
    np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4)
    if _rows(shape):
        assert kernels == 1


def test_softmax_rows_with_infinities_and_huge_values() -> None:
    array = np.array([[-np.inf, 0.0, 1.0, -np.inf, 2.0],
                      [3e38, 3e38, -3e38, 0.0, 1e38],
                      [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
                      [np.inf, 1.0, 2.0, 3.0, 4.0],
                      [-1e30, -1e30, -1e30, -1e30, -1e30],
                      [88.0, 89.0, 90.0, -100.0, 0.0]], dtype=np.float32)
    with np.errstate(all="ignore"):
        shifted = array - array.max(1, keepdims=True)
        expected = np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)
    value, kernels = _kernels(lambda: Tensor(array).softmax(-1))
    np.testing.assert_allclose(value, expected, rtol=2e-6, atol=1e-7)
    assert kernels == 1
    reference = torch.logsumexp(torch.from_numpy(array), -1).numpy()
    np.testing.assert_allclose(Tensor(array).logsumexp(-1).numpy(), reference, rtol=2e-6)


@pytest.mark.parametrize("shape", [(4096, 1024), (5, 7, 33)])
def test_variance_of_rows_and_of_columns_is_one_kernel(shape: tuple[int, ...]) -> None:
    array = _array(shape, 3) + 10
    for axis in (-1, 0):
        value, kernels = _kernels(lambda axis=axis: Tensor(array).var(axis))
        np.testing.assert_allclose(value, array.astype(np.float64).var(axis, ddof=1), rtol=1e-4)
        assert kernels == 1


def test_batchnorm_variance_over_batch_and_space_is_one_kernel() -> None:
    array = _array((8, 6, 5, 7), 4) + 2
    value, kernels = _kernels(lambda: Tensor(array).var((0, 2, 3), correction=0))
    np.testing.assert_allclose(value, array.astype(np.float64).var((0, 2, 3)), rtol=1e-4)
    assert kernels == 1
    centered = Tensor(array) - Tensor(array).mean((0, 2, 3), keepdim=True)
    value, kernels = _kernels(lambda: centered * (centered * centered).mean((0, 2, 3), keepdim=True).add(1e-5).rsqrt())
    reference = torch.nn.functional.batch_norm(torch.from_numpy(array), None, None, training=True, eps=1e-5).numpy()
    np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4)
    # normalizing NCHW broadcasts the per-channel statistics over the batch axis, an outer loop: the mean and the
    # variance keep their kernels rather than being recomputed for every image
    assert kernels == 3


def test_reduce_over_an_outer_axis_keeps_its_own_kernel() -> None:
    # the rows are the inner loop: a max over axis 0 inlined would be recomputed for every row
    array = _array((37, 29), 5)
    value, kernels = _kernels(lambda: Tensor(array).softmax(0))
    np.testing.assert_allclose(value, torch.softmax(torch.from_numpy(array), 0).numpy(), rtol=2e-6, atol=1e-7)
    assert kernels == 3


def test_reduce_of_the_whole_tensor_keeps_its_own_kernel() -> None:
    # it depends on no output loop: inlined, every worker of a split kernel would compute it again
    array = _array((64, 48), 6)
    value, kernels = _kernels(lambda: Tensor(array) - Tensor(array).mean())
    np.testing.assert_allclose(value, array - array.mean(), rtol=1e-5, atol=1e-5)
    assert kernels == 2


def test_a_reduce_used_by_two_kernels_is_computed_once() -> None:
    array = _array((16, 40), 7)
    source = Tensor(array)
    top = source.max(-1, keepdim=True)
    first, second = (source - top).exp(), (source - top) * 2
    GlobalCounters.reset()
    Tensor.realize(first, second)
    assert GlobalCounters.kernel_count == 3
    shifted = array - array.max(-1, keepdims=True)
    np.testing.assert_allclose(first.numpy(), np.exp(shifted), rtol=2e-6)
    np.testing.assert_allclose(second.numpy(), shifted * 2, rtol=2e-6)


def test_fused_kernels_only_where_kernels_loop_over_rows() -> None:
    # without device facts (the GPU path takes the same rule) the max and the sum keep their kernels
    array = _array((8, 16), 8)
    softmax = Tensor(array).softmax(-1)
    assert len(create_schedule([softmax.uop]).items) == 3
    assert len(create_schedule([softmax.uop], device_facts).items) == 1
