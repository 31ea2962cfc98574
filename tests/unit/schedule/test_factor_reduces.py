"""Uniform factors taken out of sums and reduces moved under broadcasts they do not reduce
(tinycore/schedule/factor.py): values against numpy and torch, and the rewritten graphs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor
from tinycore.schedule.factor import _uniform_value, factor_reduces
from tinycore.uop.ops import Ops


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _reduces(node) -> list:
    return [found for found in node.toposort if found.op is Ops.REDUCE_AXIS]


def test_a_uniform_factor_is_taken_out_of_a_sum() -> None:
    y = _array(6, 40)
    scaled = (Tensor(y) * 0.25).sum(1)
    (rewritten,) = factor_reduces([scaled.uop])
    (reduce,) = _reduces(rewritten)
    assert reduce.src[0].op is not Ops.MUL, "the factor is still inside the sum"
    np.testing.assert_allclose(scaled.numpy(), 0.25 * y.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_a_reduce_moves_under_a_broadcast_it_does_not_reduce() -> None:
    y = _array(8, 30)
    summed = Tensor(y).reshape(1, 8, 30).expand(5, 8, 30).sum(2)
    maxed = Tensor(y).reshape(1, 8, 30).expand(5, 8, 30).max(2)
    for tensor, reference in ((summed, np.broadcast_to(y.sum(1), (5, 8))),
                              (maxed, np.broadcast_to(y.max(1), (5, 8)))):
        (rewritten,) = factor_reduces([tensor.uop])
        (reduce,) = _reduces(rewritten)
        assert reduce.src[0].shape == (1, 8, 30), "the reduce still runs over the broadcast"
        np.testing.assert_allclose(tensor.numpy(), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [(0,), (0, 1)])
def test_a_reduce_over_a_broadcast_axis_is_kept(axes: tuple[int, ...]) -> None:
    # summing the broadcast axis counts each value once per copy: no rewrite, the count is in the result
    y = _array(1, 7)
    summed = Tensor(y).expand(4, 7).sum(axes)
    (rewritten,) = factor_reduces([summed.uop])
    assert rewritten is summed.uop
    np.testing.assert_allclose(summed.numpy(), np.broadcast_to(y, (4, 7)).sum(axes), rtol=1e-5, atol=1e-5)


def test_factors_that_are_not_uniform_stay_inside() -> None:
    x, y = _array(5, 9), _array(5, 9, seed=1)
    product = (Tensor(x) * Tensor(y)).sum(1)
    padded = (Tensor(np.float32([2.0])).pad((0, 8)).reshape(1, 9).expand(5, 9) * Tensor(y)).sum(1)
    for tensor in (product, padded):
        (rewritten,) = factor_reduces([tensor.uop])
        assert rewritten is tensor.uop
    np.testing.assert_allclose(product.numpy(), (x.astype(np.float64) * y).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(padded.numpy(), 2 * y[:, 0], rtol=1e-6)


@pytest.mark.parametrize("loss", ["mean", "sum"])
def test_gradient_of_a_mean_through_a_product_is_a_row_sum(loss: str) -> None:
    # d/dh mean(h @ W) is the broadcast constant times W's row sums: no kernel multiplies the whole batch by W again
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 96), dtype=np.float32)
    source, weight = Tensor(x, requires_grad=True), Tensor(w)
    output = (source @ weight).relu() @ weight
    (output.mean() if loss == "mean" else output.sum()).backward()
    assert source.grad is not None
    rewritten = factor_reduces([source.grad.uop])[0]
    uniform_products = [reduce for reduce in _reduces(source.grad.uop) if reduce.src[0].op is Ops.MUL and
                        any(_uniform_value(operand) is not None for operand in reduce.src[0].src)]
    assert uniform_products, "the gradient graph no longer has the shape this test is about"
    assert not any(reduce.src[0].op is Ops.MUL and any(_uniform_value(operand) is not None
                                                       for operand in reduce.src[0].src)
                   for reduce in _reduces(rewritten)), "a sum still multiplies by a broadcast constant"
    found = source.grad.numpy()
    reference_x = torch.from_numpy(x).double().requires_grad_(True)
    reference = (reference_x @ torch.from_numpy(w).double()).relu() @ torch.from_numpy(w).double()
    (reference.mean() if loss == "mean" else reference.sum()).backward()
    assert reference_x.grad is not None
    expected = reference_x.grad.numpy()
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
