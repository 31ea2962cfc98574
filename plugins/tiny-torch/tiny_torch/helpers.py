"""The helpers tinygrad's torch backend module exposes to its users and tests (`unwrap`, `wrap`,
`calculate_storage_offset`, `update_metadata`), with the same names and meanings over tinycore Tensors."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from tiny_torch.wrapper import TinyTensor, configured_devices, restride
from tiny_torch.wrapper import wrap as wrap_on
from tinycore import Tensor
from tinycore.uop import Ops


def _not_tiny(tensor: object, what: str) -> RuntimeError:
    device = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
    return RuntimeError(f"{what} takes a tensor on the tiny device, got one on {device}; move it there first with "
                        f".to('tiny')")


def unwrap(tensor: torch.Tensor) -> Tensor:
    """The lazy tinycore Tensor holding the values of a tiny tensor (its view of the storage). RuntimeError for a
    tensor of another device: its memory is not tinycore's."""
    if not isinstance(tensor, TinyTensor):
        raise _not_tiny(tensor, "unwrap")
    return tensor.tiny_value()


def device_index(device: str) -> int:
    """The N of `tiny:N` that a tinycore device name stands for (its place in TINY_TORCH_DEVICES when that is set,
    else the instance number after the colon)."""
    names = configured_devices()
    if names:
        if device not in names:
            raise RuntimeError(f"tinycore device {device} is not among TINY_TORCH_DEVICES ({', '.join(names)}); add "
                               f"it there to use it as a tiny device")
        return names.index(device)
    _, _, instance = device.partition(":")
    return int(instance) if instance.isdigit() else 0


def wrap(value: Tensor) -> torch.Tensor:
    """A tiny tensor (contiguous, storage offset 0) owning `value`'s elements, on the tiny device of its tinycore
    device."""
    if not isinstance(value, Tensor):
        raise TypeError(f"wrap takes a tinycore Tensor, got {type(value).__name__}")
    device = value.device if isinstance(value.device, str) else value.device[0]
    return wrap_on(value, device_index(device))


def calculate_storage_offset(value: Tensor) -> int:
    """The element offset at which `value` starts inside the buffer it was sliced from: each shrink in its graph
    adds its starts times the row-major strides of the shape it shrank."""
    offset = 0
    for node in value.uop.toposort:
        if node.op is Ops.SHRINK:
            shape = tuple(int(extent) for extent in node.src[0].shape)
            strides = [int(np.prod(shape[dim + 1:])) for dim in range(len(shape))]
            offset += sum(int(start) * stride for (start, _), stride in zip(node.arg, strides, strict=True))
    return offset


def update_metadata(tensor: torch.Tensor, size: list[int], stride: list[int], storage_offset: int) -> None:
    """Give a tiny tensor new sizes, strides and storage offset over its storage. RuntimeError for a tensor of another
    device, or a view that reaches past the storage's end."""
    if not isinstance(tensor, TinyTensor):
        raise _not_tiny(tensor, "update_metadata")
    size, stride = [int(extent) for extent in size], [int(step) for step in stride]
    empty = any(extent == 0 for extent in size)
    last = storage_offset + sum((extent - 1) * step for extent, step in zip(size, stride, strict=True))
    if storage_offset < 0 or any(step < 0 for step in stride) or (not empty and last >= tensor.tiny_storage.numel):
        raise RuntimeError(f"update_metadata: the view (size {size}, stride {stride}, offset {storage_offset}) reaches "
                           f"past the storage of {tensor.tiny_storage.numel} elements")
    restride(tensor, tensor, tuple(size), tuple(stride), int(storage_offset))


mod = SimpleNamespace(wrap=wrap, unwrap=unwrap, update_metadata=update_metadata)
"""tinygrad's backend names its C++ extension `mod`; its tests call `mod.update_metadata`."""
