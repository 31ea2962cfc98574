"""Training over several processes (and hosts) on MPI: ranks, broadcast, allreduce, gradient averaging, data split.

tinycore does not run its own cluster runtime: the processes are started by an MPI launcher (`mpiexec -n 4 python
train.py`, or a cluster's srun) and talk through mpi4py. Within a process a tensor may still span several devices
(`Tensor.shard`); across processes, values travel through host memory: a tensor is realized, its bytes handed to MPI,
and the result wrapped in a new tensor on the same device(s).

    from tinycore import distributed
    distributed.init()                                    # once, under mpiexec
    distributed.broadcast_parameters(params)              # every rank starts from rank 0's weights
    ... loss.backward()
    distributed.allreduce_gradients(params)               # each .grad becomes the mean over the ranks
    optimizer.step()

Install: `pip install mpich mpi4py` (or mpi4py against the cluster's own MPI). Run: `mpiexec -n 2 python train.py`.
"""
from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy

from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.tensor import Tensor

INSTALL_HINT = "pip install mpich mpi4py"
"""The command that installs an MPI and its Python binding from PyPI."""

LAUNCH_HINT = "mpiexec -n 2 python your_script.py"
"""How a distributed program is started (each of the 2 processes is one rank)."""

LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK",
                      "MPI_LOCALRANKID")
"""Environment variables that MPI launchers set in the processes they start (MPICH/Hydra, PMIx, Open MPI,
MVAPICH). Their absence means the program was started as a plain process."""

DEFAULT_BUCKET_BYTES = 25 * 2 ** 20
"""Gradients are sent in buckets of about this many bytes: one MPI call per bucket, several buckets in flight."""

REDUCTIONS = ("sum", "mean", "max", "min")
"""The reductions `allreduce` accepts."""

# mpi4py's communicator and module are untyped (the binding may not be installed at all)
Communicator = Any


class DistributedError(RuntimeError):
    """A distributed operation used wrongly: not initialized, not under a launcher, tensors that differ by rank."""


class MPIUnavailableError(ImportError):
    """mpi4py (or the MPI library it loads) is missing."""


@dataclass
class CommunicationStats:
    """Time and bytes spent in MPI calls by this process since the last `reset_stats()`."""
    seconds: float = 0.0
    bytes: int = 0
    calls: int = 0
    by_operation: dict[str, float] = field(default_factory=dict)

    def add(self, operation: str, seconds: float, size: int, call: bool = True) -> None:
        """Count one MPI operation (or, with call=False, more time spent in one already counted)."""
        self.seconds += seconds
        self.bytes += size
        self.calls += int(call)
        self.by_operation[operation] = self.by_operation.get(operation, 0.0) + seconds


@dataclass
class _Group:
    """The initialized process group: the MPI module and the world communicator."""
    mpi: ModuleType
    comm: Communicator


_group: _Group | None = None
stats = CommunicationStats()
"""This process's communication counters (`distributed.stats.seconds`: time in MPI calls)."""


def launched() -> bool:
    """True when this process was started by an MPI launcher (mpiexec, mpirun, srun with PMI/PMIx)."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def _import_mpi() -> ModuleType:
    """mpi4py.MPI, or an MPIUnavailableError that names the command to install it."""
    try:
        return importlib.import_module("mpi4py.MPI")
    except ImportError as error:
        raise MPIUnavailableError(f"tinycore.distributed needs mpi4py and an MPI library: {INSTALL_HINT} (or "
                                  f"`pip install mpi4py` against your cluster's MPI); importing it failed: "
                                  f"{error}") from error


def init(require_launcher: bool = True) -> None:
    """Join the process group of the MPI job this process belongs to (idempotent).

    Raises DistributedError when the process was not started by an MPI launcher (a plain `python script.py` would
    train alone while believing it is distributed) unless `require_launcher=False`, which then runs as a group of
    one; raises MPIUnavailableError (an ImportError) when mpi4py is not installed."""
    global _group
    if _group is not None:
        return
    if require_launcher and not launched():
        variables = ", ".join(LAUNCHER_VARIABLES)
        raise DistributedError(f"this process was not started by an MPI launcher (none of {variables} is set): "
                               f"run it as `{LAUNCH_HINT}` (MPI from `{INSTALL_HINT}`), or call "
                               "init(require_launcher=False) to run as a group of one")
    mpi = _import_mpi()
    _group = _Group(mpi, mpi.COMM_WORLD)


def is_initialized() -> bool:
    """True after `init()`."""
    return _group is not None


def _require() -> _Group:
    if _group is None:
        raise DistributedError("tinycore.distributed is not initialized: call distributed.init() first (and start the "
                               f"program as `{LAUNCH_HINT}`)")
    return _group


def rank() -> int:
    """This process's index in the group, 0 .. world_size() - 1."""
    return int(_require().comm.Get_rank())


def world_size() -> int:
    """The number of processes in the group."""
    return int(_require().comm.Get_size())


def barrier() -> None:
    """Wait until every process of the group reaches this call."""
    group = _require()
    started = time.perf_counter()
    group.comm.Barrier()
    stats.add("barrier", time.perf_counter() - started, 0)


def reset_stats() -> None:
    """Zero the communication counters in `stats`."""
    stats.seconds, stats.bytes, stats.calls = 0.0, 0, 0
    stats.by_operation.clear()


# ---- tensors to and from host arrays ----

def _wire_dtype(dtype: DType) -> numpy.dtype:
    """The numpy dtype a tensor of `dtype` travels as: its own, except half-precision floats, which MPI cannot reduce
    (they travel as float32 and are rounded back on arrival)."""
    if dtype in (dtypes.float16, dtypes.bfloat16) or dtype.name.startswith("fp8"):
        return numpy.dtype(numpy.float32)
    return numpy.dtype(to_numpy_dtype(dtype))


def _host_array(tensor: Tensor) -> numpy.ndarray:
    """The tensor's values in a fresh, contiguous host array of its wire dtype (gathered if it spans devices)."""
    return numpy.ascontiguousarray(tensor.numpy(), dtype=_wire_dtype(tensor.dtype))


def _like(values: numpy.ndarray, template: Tensor) -> Tensor:
    """`values` as a tensor with `template`'s dtype, device(s) and sharding."""
    device = template.device
    if isinstance(device, tuple):
        result = Tensor(values, device=device[0]).cast(template.dtype)
        return result.shard_like(template) if template.uop.arg is not None else result.to(device)
    return Tensor(values, device=device).cast(template.dtype)


def _check_same_shapes(tensors: Sequence[Tensor], what: str) -> None:
    """Every rank must pass tensors of the same shapes and dtypes, or MPI would mix up buffers silently."""
    group = _require()
    signature = [(tuple(tensor.shape), tensor.dtype.name) for tensor in tensors]
    signatures = group.comm.allgather(signature)
    for other_rank, other in enumerate(signatures):
        if other != signature:
            raise DistributedError(f"{what}: rank {group.comm.Get_rank()} passed {signature} but rank {other_rank} "
                                   f"passed {other}; every rank must pass tensors of the same shapes and dtypes in the "
                                   "same order")


def _mpi_op(group: _Group, op: str) -> Any:
    if op not in REDUCTIONS:
        raise ValueError(f"unknown reduction {op!r}: use one of {', '.join(REDUCTIONS)}")
    return {"sum": group.mpi.SUM, "mean": group.mpi.SUM, "max": group.mpi.MAX, "min": group.mpi.MIN}[op]


def broadcast(tensor: Tensor, root: int = 0) -> Tensor:
    """Rank `root`'s value of `tensor` on every rank (a new tensor on this rank's device(s), same dtype)."""
    return broadcast_many([tensor], root)[0]


def broadcast_many(tensors: Sequence[Tensor], root: int = 0) -> list[Tensor]:
    """Rank `root`'s values of `tensors` on every rank, sent as one message."""
    group = _require()
    if not 0 <= root < group.comm.Get_size():
        raise ValueError(f"root {root} is not a rank of this group of {group.comm.Get_size()} processes")
    tensors = list(tensors)
    _check_same_shapes(tensors, "broadcast")
    arrays = [_host_array(tensor) for tensor in tensors]
    flat = _pack(arrays)
    started = time.perf_counter()
    group.comm.Bcast(flat, root=root)
    stats.add("broadcast", time.perf_counter() - started, flat.nbytes)
    return [_like(values, tensor) for values, tensor in zip(_unpack(flat, arrays), tensors, strict=True)]


def broadcast_parameters(params: Sequence[Tensor], root: int = 0) -> None:
    """Overwrite every parameter with rank `root`'s value (in place, realized), so all ranks start alike."""
    params = list(params)
    for param, value in zip(params, broadcast_many(params, root), strict=True):
        param.assign(value)
    Tensor.realize(*params)


def allreduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """The elementwise reduction (`sum`, `mean`, `max`, `min`) of `tensor` over every rank, on every rank."""
    return allreduce_many([tensor], op)[0]


class PendingAllreduce:
    """An allreduce in flight (from `start_allreduce`): `wait()` gives the reduced tensors. Work done between the
    two (drawing the next batch, say) overlaps the transfer as far as the MPI library progresses on its own (MPICH:
    inside MPI calls, or always with MPIR_CVAR_ASYNC_PROGRESS=1)."""

    def __init__(self, group: _Group, op: str, tensors: list[Tensor],
                 buckets: list[tuple[Any, numpy.ndarray, list[int], list[numpy.ndarray]]]):
        self._group, self._op, self._tensors, self._buckets = group, op, tensors, buckets
        self._results: list[Tensor] | None = None
        self.on_done: Callable[[list[Tensor]], None] | None = None
        """Called once with the reduced tensors when they arrive (allreduce_gradients assigns the .grad there)."""

    def wait(self) -> list[Tensor]:
        """Wait for every bucket; the reduced tensors, in the order given (a second call returns the same)."""
        if self._results is not None:
            return self._results
        values: list[numpy.ndarray] = [numpy.empty(0)] * len(self._tensors)
        for request, flat, indices, arrays in self._buckets:
            started = time.perf_counter()
            request.Wait()
            # what counts is the time spent starting and waiting; a bucket in flight behind other work costs nothing
            stats.add("allreduce", time.perf_counter() - started, 0, call=False)
            if self._op == "mean":
                flat /= self._group.comm.Get_size()
            for index, piece in zip(indices, _unpack(flat, arrays), strict=True):
                values[index] = piece
        self._results = [_like(piece, tensor) for piece, tensor in zip(values, self._tensors, strict=True)]
        if self.on_done is not None:
            self.on_done(self._results)
        return self._results


def start_allreduce(tensors: Sequence[Tensor], op: str = "sum", bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                    check_shapes: bool = True) -> PendingAllreduce:
    """Start `allreduce_many` and return at once with the transfers in flight; `.wait()` for the results."""
    group = _require()
    mpi_op = _mpi_op(group, op)
    tensors = list(tensors)
    if check_shapes and tensors:
        _check_same_shapes(tensors, f"allreduce({op!r})")
    integers = sorted({tensor.dtype.name for tensor in tensors if _wire_dtype(tensor.dtype).kind not in "fc"})
    if op == "mean" and integers:
        raise TypeError(f"allreduce 'mean' of {', '.join(integers)} tensors would round: use 'sum' and divide, or "
                        "cast to a float dtype first")
    if tensors:
        Tensor.realize(*tensors)
    buckets = []
    for indices in _buckets(tensors, bucket_bytes):
        arrays = [_host_array(tensors[index]) for index in indices]
        flat = _pack(arrays)
        started = time.perf_counter()
        request = group.comm.Iallreduce(group.mpi.IN_PLACE, flat, op=mpi_op)
        stats.add("allreduce", time.perf_counter() - started, flat.nbytes)
        buckets.append((request, flat, indices, arrays))
    return PendingAllreduce(group, op, tensors, buckets)


def allreduce_many(tensors: Sequence[Tensor], op: str = "sum", bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                   check_shapes: bool = True) -> list[Tensor]:
    """`allreduce` of several tensors, realized together and sent in buckets of about `bucket_bytes`.

    Each bucket is one non-blocking MPI allreduce: while it is in flight the next bucket is copied out of the
    devices, so communication overlaps the host copies. `check_shapes=False` skips the (one small message) check
    that every rank passed the same shapes, for loops that already know it."""
    return start_allreduce(tensors, op, bucket_bytes, check_shapes).wait()


def _gradients_of(params: list[Tensor]) -> list[Tensor]:
    missing = [index for index, param in enumerate(params) if param.grad is None]
    if missing:
        raise DistributedError(f"parameter(s) {missing} have no gradient: call loss.backward() before "
                               "allreduce_gradients(), and pass only parameters the loss depends on")
    return [param.grad for param in reversed(params) if param.grad is not None]


def allreduce_gradients(params: Sequence[Tensor], average: bool = True, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                        wait: bool = True) -> PendingAllreduce:
    """Replace each parameter's `.grad` by its mean (or sum, `average=False`) over the ranks.

    Call it after `loss.backward()` and before `optimizer.step()`: with every rank's loss a mean over its part of
    the batch, the mean of the gradients is the gradient of the loss over the whole (global) batch. Buckets are
    filled from the last parameter backwards, the order in which backward finishes them in a model's usual layout.
    With `wait=False` it returns with the transfers in flight and the gradients are replaced when the returned
    handle's `wait()` is called (do other work in between, and call it before the optimizer steps)."""
    params = list(params)
    pending = start_allreduce(_gradients_of(params), "mean" if average else "sum", bucket_bytes)

    def assign(reduced: list[Tensor]) -> None:
        for param, gradient in zip(reversed(params), reduced, strict=True):
            param.grad = gradient
    pending.on_done = assign
    if wait:
        pending.wait()
    return pending


def shard_indices(length: int, rank_index: int | None = None, size: int | None = None) -> range:
    """The indices 0 .. length-1 that rank `rank_index` of `size` owns: contiguous blocks, the first
    `length % size` ranks one longer. Defaults: this process's rank and the group's size."""
    if rank_index is None or size is None:
        rank_index = rank() if rank_index is None else rank_index
        size = world_size() if size is None else size
    if size < 1 or not 0 <= rank_index < size:
        raise ValueError(f"rank {rank_index} is not in a group of {size} processes")
    base, left = divmod(length, size)
    start = rank_index * base + min(rank_index, left)
    return range(start, start + base + (1 if rank_index < left else 0))


# ---- packing arrays into one message ----

def _buckets(tensors: Sequence[Tensor], bucket_bytes: int) -> list[list[int]]:
    """Consecutive tensors grouped so that each group has one wire dtype and about `bucket_bytes` bytes."""
    buckets: list[list[int]] = []
    size, dtype = 0, None
    for index, tensor in enumerate(tensors):
        wire = _wire_dtype(tensor.dtype)
        nbytes = tensor.numel() * wire.itemsize
        if not buckets or wire != dtype or (size and size + nbytes > bucket_bytes):
            buckets.append([])
            size, dtype = 0, wire
        buckets[-1].append(index)
        size += nbytes
    return buckets


def _pack(arrays: Sequence[numpy.ndarray]) -> numpy.ndarray:
    """One contiguous vector holding `arrays` back to back (they share a dtype; a single one is not copied)."""
    if len(arrays) == 1:
        return arrays[0].reshape(-1)
    return numpy.concatenate([array.reshape(-1) for array in arrays])


def _unpack(flat: numpy.ndarray, arrays: Sequence[numpy.ndarray]) -> list[numpy.ndarray]:
    """`flat` cut back into arrays of the shapes of `arrays`."""
    pieces, start = [], 0
    for array in arrays:
        pieces.append(flat[start:start + array.size].reshape(array.shape))
        start += array.size
    return pieces


__all__ = ["init", "is_initialized", "launched", "rank", "world_size", "barrier", "broadcast", "broadcast_many",
           "broadcast_parameters", "allreduce", "allreduce_many", "start_allreduce", "PendingAllreduce",
           "allreduce_gradients", "shard_indices", "stats",
           "reset_stats", "CommunicationStats", "DistributedError", "MPIUnavailableError"]
