"""Multi-device tensors on independent CPU instances, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Context, Tensor
from tinycore.uop.multi import allreduce_method

DEVICES = {count: tuple(f"CPU:{index}" for index in range(count)) for count in (2, 3, 4)}
RNG = np.random.default_rng(0)


def values(*shape: int) -> np.ndarray:
    """Small random float32 values."""
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_shard_round_trip(count: int, axis: int | None) -> None:
    data = values(12, 12)
    tensor = Tensor(data).shard(DEVICES[count], axis)
    assert tensor.shape == (12, 12)
    assert tensor.device == tuple(Tensor(0, device=name).device for name in DEVICES[count])
    np.testing.assert_array_equal(tensor.numpy(), data)
    np.testing.assert_array_equal(tensor.to("CPU").numpy(), data)
    np.testing.assert_array_equal(tensor.realize().numpy(), data)


def test_to_tuple_replicates_and_shard_like() -> None:
    data = values(4, 6)
    replicated = Tensor(data).to(DEVICES[2])
    np.testing.assert_array_equal(replicated.numpy(), data)
    sharded = Tensor(data).shard(DEVICES[2], axis=1)
    other = Tensor(data * 2).shard_like(sharded)
    assert other.device == sharded.device and other.uop.arg == 1
    assert sharded.shard_like(sharded) is sharded
    np.testing.assert_array_equal((other + sharded).numpy(), data * 3)
    in_place = Tensor(data)
    assert in_place.shard_(DEVICES[2], 0) is in_place
    np.testing.assert_array_equal(in_place.numpy(), data)
    np.testing.assert_array_equal(Tensor(data, device=DEVICES[3]).numpy(), data)
    np.testing.assert_array_equal(Tensor.zeros(3, 4, device=DEVICES[2]).numpy(), np.zeros((3, 4)))


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_elementwise_per_shard(count: int, axis: int | None) -> None:
    first, second = values(12, 12), values(12, 12)
    left, right = Tensor(first).shard(DEVICES[count], axis), Tensor(second).shard(DEVICES[count], axis)
    replicated = Tensor(second).to(DEVICES[count])
    np.testing.assert_allclose((left * right + 1).numpy(), first * second + 1, rtol=1e-6)
    np.testing.assert_allclose((left - replicated).exp().numpy(), np.exp(first - second), rtol=1e-5)
    np.testing.assert_allclose(left.relu().where(left, right).numpy(), np.where(first > 0, first, second))
    np.testing.assert_allclose((left < right).numpy(), first < second)
    np.testing.assert_allclose(left.cast("int32").numpy(), first.astype(np.int32))


@pytest.mark.parametrize("axis", [0, 1])
def test_movement_per_shard(axis: int) -> None:
    data = values(8, 8)
    tensor = Tensor(data).shard(DEVICES[2], axis)
    np.testing.assert_array_equal(tensor.T.numpy(), data.T)
    split = (8, 4, 2) if axis == 0 else (8, 2, 4)  # the columns' blocks of 4 stay whole
    np.testing.assert_array_equal(tensor.reshape(split).numpy(), data.reshape(split))
    np.testing.assert_array_equal(tensor.reshape(64).numpy() if axis == 0 else tensor.reshape(2, 4, 8).numpy(),
                                  data.reshape(64) if axis == 0 else data.reshape(2, 4, 8))
    np.testing.assert_array_equal(tensor.unsqueeze(1).expand(8, 5, 8).numpy(),
                                  np.broadcast_to(data[:, None], (8, 5, 8)))
    other = 1 - axis
    bounds = [slice(None), slice(None)]
    bounds[other] = slice(1, 4)
    np.testing.assert_array_equal(tensor[tuple(bounds)].numpy(), data[tuple(bounds)])
    padding = [(0, 0), (0, 0)]
    padding[other] = (2, 2)
    np.testing.assert_array_equal(tensor.pad(tuple(padding)).numpy(), np.pad(data, padding))
    np.testing.assert_array_equal(tensor.flip(other).numpy(), np.flip(data, other))


@pytest.mark.parametrize("count", [2, 3])
def test_movement_across_shards(count: int) -> None:
    data = values(12, 4)
    tensor = Tensor(data).shard(DEVICES[count], 0)
    np.testing.assert_array_equal(tensor[1:5].numpy(), data[1:5])  # inside and across blocks
    np.testing.assert_array_equal(tensor[6:12].numpy(), data[6:12])
    np.testing.assert_array_equal(tensor.pad(((1, 2), (0, 0))).numpy(), np.pad(data, ((1, 2), (0, 0))))
    np.testing.assert_array_equal(tensor.flip(0).numpy(), np.flip(data, 0))
    np.testing.assert_allclose((tensor.flip(0) + tensor).sum(0).numpy(), (np.flip(data, 0) + data).sum(0),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="sharded axis"):
        tensor.reshape((3, 16) if count == 2 else (4, 12))  # blocks of 24 (16) values are no whole rows of 16 (12)


def test_uneven_and_bad_shards_raise() -> None:
    with pytest.raises(RuntimeError, match="evenly"):
        Tensor(values(7, 2)).shard(DEVICES[2], 0)
    with pytest.raises(ValueError, match="different devices"):
        Tensor(values(4, 4)).shard(DEVICES[2], 0) + Tensor(values(4, 4)).shard(DEVICES[3][1:], 0)
    with pytest.raises(ValueError, match="different devices"):
        Tensor(values(4, 4)).shard(DEVICES[2], 0) + Tensor(values(4, 4), device="CPU:3")
    with pytest.raises(RuntimeError, match="already on"):
        Tensor(values(4, 4)).shard(DEVICES[2], 0).shard(DEVICES[2], 1)


@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(count: int, axis: int | None) -> None:
    data = values(12, 12)
    tensor = Tensor(data).shard(DEVICES[count], axis)
    np.testing.assert_allclose(tensor.sum().numpy(), data.sum(), rtol=1e-5)
    np.testing.assert_allclose(tensor.sum(axis=0).numpy(), data.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tensor.max(axis=1).numpy(), data.max(1))
    np.testing.assert_allclose(tensor.mean(axis=0, keepdim=True).numpy(), data.mean(0, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tensor.softmax(axis=0).numpy(),
                               np.exp(data) / np.exp(data).sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(tensor.min().numpy(), data.min())


@pytest.mark.parametrize("sharded", ["left_rows", "left_cols", "right_cols", "right_rows"])
def test_matmul_with_a_sharded_operand(sharded: str) -> None:
    left, right = values(8, 12), values(12, 4)
    devices = DEVICES[2]
    left_tensor = Tensor(left).shard(devices, 0 if sharded == "left_rows" else 1) if sharded.startswith("left") \
        else Tensor(left).to(devices)
    right_tensor = Tensor(right).shard(devices, 1 if sharded == "right_cols" else 0) if sharded.startswith("right") \
        else Tensor(right).to(devices)
    if sharded == "left_cols":
        right_tensor = Tensor(right).shard(devices, 0)  # contracting both sharded axes: partial sums, allreduced
    np.testing.assert_allclose((left_tensor @ right_tensor).numpy(), left @ right, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["naive", "ring", "all2all"])
@pytest.mark.parametrize("count", [2, 3, 4])
@pytest.mark.parametrize("numel", [1, 5, 1001])
def test_allreduce_variants(method: str, count: int, numel: int) -> None:
    data = values(count, numel)
    settings = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0},
                "all2all": {"RING": 0, "ALL2ALL": 2}}[method]
    with Context(**settings):
        if numel >= count:
            assert allreduce_method(count, numel) == method
        tensor = Tensor(data).shard(DEVICES[count], 0)
        total, largest = tensor.sum(axis=0), tensor.max(axis=0)
        np.testing.assert_allclose(total.numpy(), data.sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(largest.numpy(), data.max(0))
        for part in total.uop.src:  # every device holds the whole sum
            np.testing.assert_allclose(Tensor(part).numpy(), data.sum(0), rtol=1e-5, atol=1e-6)
        counts = Tensor((data > 0).astype(np.int32)).shard(DEVICES[count], 0).sum(axis=0)
        np.testing.assert_array_equal(counts.numpy(), (data > 0).sum(0))


@pytest.mark.parametrize("numel", [255_999, 256_000, 256_001, 256_003])
def test_allreduce_default_choice_around_the_threshold(numel: int) -> None:
    assert allreduce_method(2, numel) == "naive"
    expected = "ring" if numel > 256_000 else "naive"
    assert allreduce_method(3, numel) == expected
    with Context(ALL2ALL=1):
        assert allreduce_method(3, numel) == ("all2all" if numel > 256_000 else "naive")
    data = RNG.integers(-100, 100, (3, numel)).astype(np.float32)
    total = Tensor(data).shard(DEVICES[3], 0).sum(axis=0)
    np.testing.assert_array_equal(total.numpy(), data.sum(0))


@pytest.mark.parametrize("method", ["naive", "ring", "all2all"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "uint8"])
def test_allreduce_dtypes(method: str, dtype: str) -> None:
    data = RNG.integers(0, 50, (3, 10)).astype(dtype)
    settings = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0},
                "all2all": {"RING": 0, "ALL2ALL": 2}}[method]
    with Context(**settings):
        tensor = Tensor(data).shard(DEVICES[3], 0)
        np.testing.assert_array_equal(tensor.max(axis=0).numpy(), data.max(0))
        total = tensor.sum(axis=0, dtype=dtype)
        assert total.numpy().dtype == np.dtype(dtype)
        np.testing.assert_array_equal(total.numpy(), data.sum(0, dtype=dtype))
