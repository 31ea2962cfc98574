"""One tensor over devices of different families (CPU with CL on PoCL, CPU with WEBGPU on Mesa's software adapter,
CL with WEBGPU), against numpy: the blocks copy between the families through the host. As in
tests/unit/codegen/test_codegen_gpu.py, a device that cannot be opened here fails these tests rather than skipping
them (the core test session installs every in-tree plugin)."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Context, Tensor, nn

PAIRS = [("CPU", "CL"), ("CPU", "WEBGPU"), ("CL", "WEBGPU")]
RNG = np.random.default_rng(5)


@pytest.mark.parametrize("devices", PAIRS, ids=["+".join(pair) for pair in PAIRS])
def test_sharded_ops_across_families(devices: tuple[str, str]) -> None:
    values = RNG.standard_normal((6, 4)).astype(np.float32)
    other = RNG.standard_normal((4, 3)).astype(np.float32)
    tensor = Tensor(values).shard(devices, 0)
    assert tensor.device == devices
    np.testing.assert_array_equal(tensor.numpy(), values)
    np.testing.assert_allclose((tensor * 2 + 1).exp().numpy(), np.exp(values * 2 + 1), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(0).numpy(), values.sum(0), rtol=1e-5, atol=1e-6)  # allreduced
    np.testing.assert_allclose((tensor @ Tensor(other).to(devices)).numpy(), values @ other, rtol=1e-5, atol=1e-5)
    rows = np.array([5, 0, 3], dtype=np.int32)
    np.testing.assert_array_equal(tensor[Tensor(rows)].numpy(), values[rows])
    np.testing.assert_array_equal(tensor.to(devices[1]).numpy(), values)


@pytest.mark.parametrize("devices", PAIRS, ids=["+".join(pair) for pair in PAIRS])
def test_data_parallel_sgd_step_across_families(devices: tuple[str, str]) -> None:
    x, y = RNG.standard_normal((8, 5)).astype(np.float32), RNG.standard_normal((8, 2)).astype(np.float32)
    weight = RNG.standard_normal((5, 2)).astype(np.float32)
    param = Tensor(weight, requires_grad=True)
    param.to_(devices)
    optimizer = nn.optim.SGD([param], lr=0.1)
    with Context(TRAINING=1):
        optimizer.zero_grad()
        ((Tensor(x).shard(devices, 0) @ param - Tensor(y).shard(devices, 0)).square().mean()).backward()
        optimizer.step()
    expected = weight - 0.1 * 2 * x.T @ (x @ weight - y) / y.size
    np.testing.assert_allclose(param.numpy(), expected, rtol=1e-5, atol=1e-5)
