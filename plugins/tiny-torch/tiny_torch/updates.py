"""In-place updates of whole storages (an optimizer step) replayed through a TinyJit.

Building an optimizer step's lazy graph in Python costs far more than running it: a dozen tinycore ops for each of
the model's tensors, every step, before the schedule cache can even be asked. When every tensor the step reads and
writes is a whole contiguous storage, the step is instead captured once in a TinyJit, keyed by the tensors' sizes
and dtypes and the step's options, and later steps replay its kernels.

The replay writes into fresh buffers, passed to it as inputs, that then become the written storages' values: no
buffer that a storage held before the step is written, so tensors that share one (a clone is the same buffer until
something is computed into it) or lazy values that read one keep the values they had, as the lazy path's writes do.
Numbers that may change from step to step (a scheduled learning rate) reach the replay as one small buffer.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

import torch

from tiny_torch.dispatch import PENDING, flush
from tiny_torch.storage import TinyStorage, is_buffer, new_flat
from tiny_torch.wrapper import TinyTensor
from tinycore import Tensor, TinyJit
from tinycore.dtype import dtypes

UpdateFunction = Callable[[list[Tensor], list[Tensor]], list[Tensor]]
"""(values read, numbers as 0-d float32 tensors) -> new values for the written tensors, in their order."""

_JITS: dict[Hashable, _UpdateJit] = {}
_JIT_LIMIT = 64  # distinct steps (model layouts times options) kept; past that the cache starts over


class _UpdateJit(NamedTuple):
    jit: TinyJit
    numbers: list[tuple[tuple[float, ...], Tensor]]  # the last numbers and their buffer, reused while unchanged


def _whole_storage(tensor: torch.Tensor) -> bool:
    """True when `tensor` views all of a plain TinyStorage, contiguously from its first element."""
    if not isinstance(tensor, TinyTensor) or type(tensor.tiny_storage) is not TinyStorage:
        return False
    return tensor.storage_offset() == 0 and tensor.numel() == tensor.tiny_storage.numel and tensor.is_contiguous()


def jitted_update(key: Hashable, reads: Sequence[torch.Tensor], writes: Sequence[torch.Tensor],
                  numbers: Sequence[float], update: UpdateFunction) -> bool:
    """Write `update(values of reads, numbers)` into `writes` through a TinyJit kept under `key` (which must fix
    what `update` does besides its inputs). False, with nothing done, when a tensor is not a whole storage or a
    storage is written twice: the caller then takes its lazy path."""
    if not all(_whole_storage(tensor) for tensor in (*reads, *writes)):
        return False
    written = {id(tensor.tiny_storage) for tensor in writes}  # type: ignore[attr-defined]
    if len(written) != len(writes):
        return False
    unique: list[TinyStorage] = []
    place: dict[int, int] = {}
    positions = []
    for tensor in reads:
        storage = tensor.tiny_storage  # type: ignore[attr-defined]
        if id(storage) not in place:
            place[id(storage)] = len(unique)
            unique.append(storage)
        positions.append(place[id(storage)])
    if len({id(storage.flat) for storage in unique}) != len(unique):
        return False
    for storage in unique:
        if not is_buffer(storage.flat):
            PENDING[id(storage)] = storage
    if PENDING:
        flush()
    shapes = tuple(tuple(tensor.shape) for tensor in reads)
    full_key = (key, tuple(positions), shapes, tuple((tuple(tensor.shape), tensor.dtype) for tensor in writes),
                tuple(storage.dtype for storage in unique), len(numbers))
    entry = _JITS.get(full_key)
    if entry is None:
        if len(_JITS) >= _JIT_LIMIT:
            _JITS.clear()
        entry = _JITS[full_key] = _UpdateJit(TinyJit(_body(update, positions, shapes, len(numbers))), [])
    device = unique[0].flat.device
    values = tuple(float(number) for number in numbers)
    if not entry.numbers or entry.numbers[0][0] != values:
        entry.numbers[:] = [(values, Tensor(list(values) or [0.0], dtype=dtypes.float32, device=device).realize())]
    targets = [new_flat(tensor.tiny_storage.numel, tensor.tiny_storage.dtype, device)  # type: ignore[attr-defined]
               for tensor in writes]
    entry.jit(entry.numbers[0][1], *(storage.flat for storage in unique), *targets)
    for tensor, target in zip(writes, targets, strict=True):
        storage = tensor.tiny_storage  # type: ignore[attr-defined]
        storage.flat = target
        storage.version += 1
        storage.realized = True
        storage.pending_writes = 0
        PENDING.pop(id(storage), None)
    return True


def _body(update: UpdateFunction, positions: list[int], shapes: tuple[tuple[int, ...], ...],
          number_count: int) -> Callable[..., None]:
    """The function the TinyJit captures: the reads rebuilt from their storages' buffers, the update written into
    the target buffers that follow them."""
    storage_count = max(positions, default=-1) + 1

    def body(numbers: Tensor, *buffers: Tensor) -> None:
        flats, targets = buffers[:storage_count], buffers[storage_count:]
        values = [flats[position].reshape(shape) for position, shape in zip(positions, shapes, strict=True)]
        scalars = [numbers.shrink(((index, index + 1),)).reshape(()) for index in range(number_count)]
        results = update(values, scalars)
        for target, value in zip(targets, results, strict=True):
            target.assign(value.cast(target.dtype).reshape(target.shape[0]))
    return body
