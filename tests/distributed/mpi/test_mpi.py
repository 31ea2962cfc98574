"""Collectives between MPI processes against numpy: every rank makes its data from a seed of its rank, so each
rank can compute every other rank's data, and the expected result, with numpy alone."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tinycore import Context, Tensor, distributed, dtypes, nn

distributed.init()
RANK, WORLD = distributed.rank(), distributed.world_size()


def rank_data(rank: int, shape: tuple[int, ...], dtype: str = "float32", salt: int = 0) -> np.ndarray:
    """The array that `rank` contributes (any rank can compute any rank's)."""
    rng = np.random.default_rng(1000 * salt + rank)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50 if np.dtype(dtype).kind == "i" else 0, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def test_rank_and_world_size_match_the_launcher() -> None:
    assert WORLD == int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", WORLD)))
    from mpi4py import MPI
    assert sorted(MPI.COMM_WORLD.allgather(RANK)) == list(range(WORLD))


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float16"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_allreduce_equals_numpy(dtype: str, op: str) -> None:
    shape = (3, 5)
    mine = Tensor(rank_data(RANK, shape, dtype, salt=1))
    result = distributed.allreduce(mine, op)
    everyone = np.stack([rank_data(rank, shape, dtype, salt=1) for rank in range(WORLD)])
    expected = {"sum": everyone.sum(0, dtype=dtype), "max": everyone.max(0), "min": everyone.min(0)}[op]
    assert result.dtype == mine.dtype and result.shape == shape
    tolerance = 1e-2 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(result.numpy(), expected, rtol=tolerance, atol=tolerance)


def test_allreduce_mean_and_integer_mean_refused() -> None:
    result = distributed.allreduce(Tensor(rank_data(RANK, (7,), salt=2)), "mean")
    expected = np.mean([rank_data(rank, (7,), salt=2) for rank in range(WORLD)], axis=0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="use 'sum' and divide"):
        distributed.allreduce(Tensor([1, 2, 3], dtype=dtypes.int32), "mean")
    with pytest.raises(ValueError, match="unknown reduction"):
        distributed.allreduce(Tensor([1.0]), "product")


def test_allreduce_refuses_shapes_that_differ_by_rank() -> None:
    with pytest.raises(distributed.DistributedError, match="same shapes"):
        distributed.allreduce(Tensor(np.zeros(RANK + 1, np.float32)))


def test_broadcast_sends_root_values() -> None:
    root = WORLD - 1
    mine = Tensor(rank_data(RANK, (2, 3), salt=3))
    result = distributed.broadcast(mine, root=root)
    np.testing.assert_array_equal(result.numpy(), rank_data(root, (2, 3), salt=3))
    with pytest.raises(ValueError, match="not a rank"):
        distributed.broadcast(mine, root=WORLD)


def test_broadcast_parameters_overwrites_in_place() -> None:
    layer = nn.Linear(4, 3)
    layer.weight.assign(Tensor(rank_data(RANK, (3, 4), salt=4))).realize()
    params = nn.state.get_parameters(layer)
    distributed.broadcast_parameters(params)
    np.testing.assert_array_equal(layer.weight.numpy(), rank_data(0, (3, 4), salt=4))


def test_bucketed_allreduce_of_many_tensors() -> None:
    shapes = [(5,), (3, 4), (2, 2, 2), (1,), (6, 1)]
    mine = [Tensor(rank_data(RANK, shape, salt=10 + index)) for index, shape in enumerate(shapes)]
    # 40 bytes per bucket: several buckets in flight at once
    results = distributed.allreduce_many(mine, "sum", bucket_bytes=40)
    for index, (shape, result) in enumerate(zip(shapes, results, strict=True)):
        expected = np.sum([rank_data(rank, shape, salt=10 + index) for rank in range(WORLD)], axis=0)
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_shard_indices_split_the_data_set() -> None:
    from mpi4py import MPI
    mine = distributed.shard_indices(103)
    everyone = MPI.COMM_WORLD.allgather(list(mine))
    assert sorted(index for part in everyone for index in part) == list(range(103))
    assert max(map(len, everyone)) - min(map(len, everyone)) <= 1


BATCH, FEATURES, OUTPUTS = 4 * 12, 5, 3


def global_batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole batch and the initial weights (the same on every rank)."""
    rng = np.random.default_rng(7)
    return (rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
            rng.standard_normal((BATCH, OUTPUTS)).astype(np.float32),
            rng.standard_normal((FEATURES, OUTPUTS)).astype(np.float32))


def numpy_gradient(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """d/dw of mean((x @ w - y)^2), by hand."""
    return 2 * x.T @ (x @ weight - y) / (x.shape[0] * y.shape[1])


def local_loss(weight: Tensor) -> Tensor:
    x, y, _ = global_batch()
    part = distributed.shard_indices(BATCH)
    return ((Tensor(x[part.start:part.stop]) @ weight - Tensor(y[part.start:part.stop])).square()).mean()


def test_allreduced_gradient_is_the_mean_of_each_ranks_gradient() -> None:
    x, y, weight = global_batch()
    param = Tensor(weight, requires_grad=True)
    local_loss(param).backward()
    distributed.allreduce_gradients([param], average=False)
    parts = [distributed.shard_indices(BATCH, rank, WORLD) for rank in range(WORLD)]
    expected = sum(numpy_gradient(x[p.start:p.stop], y[p.start:p.stop], weight) for p in parts)
    assert param.grad is not None
    np.testing.assert_allclose(param.grad.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_distributed_step_equals_the_full_batch_step(optimizer: str) -> None:
    """Each rank's loss over its quarter of the batch, gradients averaged: the step of one process on the whole
    batch (equal blocks per rank, so the mean of the means is the mean)."""
    x, y, weight = global_batch()
    param = Tensor(weight, requires_grad=True)
    lr = 0.05
    optim = nn.optim.SGD([param], lr=lr) if optimizer == "SGD" else nn.optim.Adam([param], lr=lr)
    with Context(TRAINING=1):
        for _ in range(2):
            optim.zero_grad()
            local_loss(param).backward()
            distributed.allreduce_gradients(optim.params)
            optim.step()
    expected, m, v = weight.copy(), np.zeros_like(weight), np.zeros_like(weight)
    for step in range(1, 3):
        gradient = numpy_gradient(x, y, expected)
        if optimizer == "SGD":
            expected = expected - lr * gradient
        else:
            m, v = 0.9 * m + 0.1 * gradient, 0.999 * v + 0.001 * gradient ** 2
            expected = expected - lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    np.testing.assert_allclose(param.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gradients_of_a_parameter_on_two_devices() -> None:
    """A rank may itself shard its work over devices; the reduced gradient keeps the parameter's devices."""
    x, y, weight = global_batch()
    devices = ("CPU:0", "CPU:1")
    param = Tensor(weight, requires_grad=True).to(devices)
    part = distributed.shard_indices(BATCH)
    inputs = Tensor(x[part.start:part.stop]).shard(devices, 0)
    targets = Tensor(y[part.start:part.stop]).shard(devices, 0)
    ((inputs @ param - targets).square()).mean().backward()
    distributed.allreduce_gradients([param])
    assert param.grad is not None and param.grad.device == param.device
    np.testing.assert_allclose(param.grad.numpy(), numpy_gradient(x, y, weight), rtol=1e-5, atol=1e-5)


def test_communication_is_counted() -> None:
    distributed.reset_stats()
    distributed.allreduce(Tensor(np.ones(10, np.float32)))
    distributed.barrier()
    assert distributed.stats.calls >= 2 and distributed.stats.bytes >= 40
    assert set(distributed.stats.by_operation) >= {"allreduce", "barrier"}


def test_a_plain_process_may_run_as_a_group_of_one() -> None:
    """init(require_launcher=False) outside mpiexec: rank 0 of 1, and a collective returns the value itself."""
    import subprocess
    import sys
    if RANK == 0:
        environment = {name: value for name, value in os.environ.items()
                       if not name.startswith(("PMI", "MPI_", "HYDRA", "OMPI", "PMIX"))}
        code = ("from tinycore import Tensor, distributed; distributed.init(require_launcher=False); "
                "print(distributed.rank(), distributed.world_size(), "
                "distributed.allreduce(Tensor([1.5, 2.5])).tolist())")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                                timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.split("\n")[-2] == "0 1 [1.5, 2.5]"
    distributed.barrier()


def test_gradients_reduced_while_other_work_runs() -> None:
    """allreduce_gradients(wait=False): the gradients are replaced only at wait(), with the same values."""
    x, y, weight = global_batch()
    param = Tensor(weight, requires_grad=True)
    local_loss(param).backward()
    local = param.grad
    pending = distributed.allreduce_gradients([param], wait=False)
    assert param.grad is local  # nothing replaced yet
    overlapped = (Tensor(x) * 2).sum().numpy()  # other work while the transfer is in flight
    pending.wait()
    assert param.grad is not None and param.grad is not local
    np.testing.assert_allclose(param.grad.numpy(), numpy_gradient(x, y, weight), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(overlapped, (x * 2).sum(), rtol=1e-5)
    assert pending.wait()[0] is param.grad  # a second wait gives the same tensors


def test_allreduce_of_a_sharded_tensor_keeps_its_sharding() -> None:
    devices = ("CPU:0", "CPU:1")
    mine = Tensor(rank_data(RANK, (4, 6), salt=50)).shard(devices, 1)
    result = distributed.allreduce(mine, "max")
    assert result.device == mine.device and result.uop.arg == 1
    expected = np.max([rank_data(rank, (4, 6), salt=50) for rank in range(WORLD)], axis=0)
    np.testing.assert_array_equal(result.numpy(), expected)
