"""TinyTensor: the PyTorch tensor of the tiny device, a wrapper subclass holding a TinyStorage and a view of it."""
from __future__ import annotations

import os

import numpy as np
import torch

from tiny_torch.dtypes import to_tiny_dtype, to_torch_dtype
from tiny_torch.storage import TinyStorage
from tinycore import Device, Tensor

DEVICE_NAME = "tiny"


DEVICES_VARIABLE = "TINY_TORCH_DEVICES"
_parsed_devices: dict[str, tuple[str, ...]] = {}


def configured_devices() -> tuple[str, ...]:
    """The tinycore devices that TINY_TORCH_DEVICES names for tiny:0, tiny:1, ... (comma-separated tinycore device
    names, such as "CPU,CPU:1" or "CL,CPU"), or () when it is not set."""
    text = os.environ.get(DEVICES_VARIABLE, "")
    if text not in _parsed_devices:
        _parsed_devices[text] = tuple(name.strip() for name in text.split(",") if name.strip())
    return _parsed_devices[text]


def tinycore_device(index: int | None) -> str:
    """The tinycore device behind `tiny:index`: the index-th device of TINY_TORCH_DEVICES when it is set, else
    instance `index` of DEV's default device."""
    names = configured_devices()
    if names:
        if (index or 0) >= len(names):
            raise RuntimeError(f"tiny:{index} does not exist: {DEVICES_VARIABLE} names {len(names)} device(s) "
                               f"({', '.join(names)}); use an index below {len(names)} or name more devices there")
        return names[index or 0]
    return Device.DEFAULT if not index else f"{Device.DEFAULT}:{index}"


_TORCH_DEVICES: dict[int, torch.device] = {}
"""torch.device("tiny", index) per index: every operator's result is a new TinyTensor, and building the device
object each time cost about a quarter of making the tensor."""


def _torch_device(index: int) -> torch.device:
    device = _TORCH_DEVICES.get(index)
    if device is None:
        device = _TORCH_DEVICES[index] = torch.device(DEVICE_NAME, index)
    return device


class TinyTensor(torch.Tensor):
    """A tensor on `tiny:N`: sizes, strides and storage offset as PyTorch sees them, values in a TinyStorage."""

    tiny_storage: TinyStorage

    @staticmethod
    def __new__(cls, storage: TinyStorage, size: tuple[int, ...], stride: tuple[int, ...], offset: int,
                index: int = 0, requires_grad: bool = False) -> TinyTensor:
        """Wrap `storage` viewed as (size, stride, offset) on tiny:index."""
        result = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=to_torch_dtype(storage.dtype),
            device=_torch_device(index), requires_grad=requires_grad)
        result.tiny_storage = storage
        return result

    def tiny_value(self) -> Tensor:
        """The current value of this view as a lazy tinycore Tensor."""
        return self.tiny_storage.read(tuple(self.shape), tuple(self.stride()), self.storage_offset())

    def tiny_write(self, value: Tensor) -> None:
        """Store `value` (broadcast to this view's shape, cast to its dtype) into the viewed elements."""
        shape = tuple(self.shape)
        if tuple(value.shape) != shape:
            value = value.reshape((1,) * (len(shape) - len(value.shape)) + tuple(value.shape)).expand(shape)
        self.tiny_storage.write(shape, tuple(self.stride()), self.storage_offset(), value)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        """Every aten operator on a tiny tensor arrives here (below autograd): see tiny_torch.dispatch."""
        from tiny_torch.dispatch import defer_backward_error, dispatch
        try:
            return dispatch(func, args, kwargs or {})
        except Exception as error:
            if torch._C._current_graph_task_id() == -1:
                raise
            # an exception crossing PyTorch's autograd engine from a Python backend aborts the process, so it is
            # kept and raised when backward() returns (see tiny_torch.dispatch.defer_backward_error)
            return defer_backward_error(func, args, kwargs or {}, error)

    def __coerce_same_metadata_as_tangent__(self, expected_metadata: object,
                                            expected_type: type | None = None) -> TinyTensor:
        """A gradient flowing into a compiled backward graph is used as it is: the graph was traced with tiny tensors
        taken for plain tensors on `tiny` (see tiny_torch.compiler), so there is no other metadata to match."""
        return self

    def tolist(self) -> object:  # type: ignore[override]
        """The elements as nested Python lists (a number for a 0-d tensor), read back through the CPU: PyTorch's
        own tolist refuses tensor subclasses."""
        with torch._C.DisableTorchFunctionSubclass():
            return torch.Tensor.cpu(self).tolist()

    def __repr__(self, *, tensor_contents: object = None) -> str:  # type: ignore[override]
        return f"{self.cpu()!r}".replace("tensor(", "tiny_tensor(", 1)[:-1] + f", device='{self.device}')"


def restride(tensor: TinyTensor, source: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...],
             offset: int) -> None:
    """Give `tensor` the sizes, strides and storage offset of a view of `source`'s PyTorch storage (in-place view
    operators, set_). PyTorch's meta kernel of set_ does it: the tiny device has no kernel of its own for it, and
    as_strided_ would check the new view against the bounds of `tensor`'s old storage."""
    with torch.utils._mode_utils.no_dispatch():
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            torch._C.DispatchKeySet(torch._C.DispatchKey.Meta), tensor, source.untyped_storage(), offset, size, stride)


def wrap(value: Tensor, index: int = 0) -> TinyTensor:
    """A new contiguous tiny tensor owning a storage with `value`'s elements."""
    shape = tuple(int(extent) for extent in value.shape)
    stride, running = [], 1
    for extent in reversed(shape):
        stride.append(running)
        running *= max(extent, 1)
    numel = int(np.prod(shape)) if shape else 1
    return TinyTensor(TinyStorage(value.reshape(numel)), shape, tuple(reversed(stride)), 0, index)


def from_cpu(tensor: torch.Tensor, index: int = 0) -> Tensor:
    """A CPU PyTorch tensor as a tinycore Tensor on the tinycore device of tiny:index."""
    dtype = to_tiny_dtype(tensor.dtype)
    data = tensor.detach().resolve_conj().resolve_neg().contiguous()
    if tensor.dtype == torch.bfloat16:
        return Tensor(data.float().numpy(), device=tinycore_device(index)).cast(dtype)
    return Tensor(data.numpy(), device=tinycore_device(index), dtype=dtype)


def to_cpu(value: Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A tinycore Tensor's values as a new CPU PyTorch tensor of `dtype`."""
    shape = tuple(int(extent) for extent in value.shape)
    source = value.float() if dtype == torch.bfloat16 else value
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    return torch.from_numpy(np.array(source.numpy(), copy=True).reshape(shape)).to(dtype)
