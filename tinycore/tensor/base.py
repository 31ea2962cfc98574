"""The bottom of the Tensor's class chain: what every mixin may call, declared once, and the names they share.

The Tensor is a chain of mixins, each subclassing the one below it (movement, elementwise, reduce, creation,
indexing, nn, linalg, keccak, extras; tensor.py's Tensor on top), so a mixin sees the methods of the mixins under it
and speaks of tensors as `Self`. What a mixin calls from above it (tensor.py's primitives, or a method of a higher
mixin) is declared here, for the type checker only: at run time the class that defines it is found first. No mixin
names the Tensor class, so none imports tensor.py; code without a tensor at hand (a lowering hook) asks
`tensor_class` for the class tensor.py registered.
"""
from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypeVar, Union, overload

from tinycore.dtype import ConstType, DType, DTypeLike
from tinycore.helpers import DEV
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from typing import Any, Self

    import numpy

    from tinycore.device.registry import _DeviceRegistry

NestedValues: TypeAlias = Union[ConstType, "numpy.generic", Sequence["NestedValues"]]
"""Python (or numpy) scalars, or lists and tuples of them nested to any depth."""
TensorData: TypeAlias = Union[NestedValues, "numpy.ndarray", bytes, bytearray, memoryview, UOp, pathlib.Path, None]
"""What `Tensor(data)` accepts."""
TensorT = TypeVar("TensorT", bound="TensorBase")
"""A tensor of some class in the chain (for functions outside it that give back tensors of the class they got)."""
Operand: TypeAlias = Union[TensorT, NestedValues, "numpy.ndarray", UOp]
"""The other side of an operation on a TensorT: a tensor, scalars (nested lists of them become tensors), a numpy
array, or a symbolic int."""
AxisArg: TypeAlias = Union[int, Sequence[int], None]
"""Reduce axes: one axis, several, or None for all of them."""

_DEVICE_REGISTRY: _DeviceRegistry | None = None
"""tinycore.device.registry.Device once loaded: every Tensor() asks it for its device, and an import statement on
that path costs about a microsecond per call."""


_PLUGIN_MANAGER: list[Callable[[], object]] = []
"""tinycore.plugins.manager.get_plugin_manager once the registry is loaded (imported with it)."""
_default_for: tuple[object, object, str] | None = None
"""(DEV's targets, the plugin manager, the default device the registry named for them), kept while both are the same
objects when DEV names a device: the registry's answer then depends on them alone (it checks the named device once
per name and manager). Every Tensor() without a device asks, and the registry's property is about ten Python calls."""


def _load_device_registry() -> _DeviceRegistry:
    """tinycore.device.registry.Device, imported on first use (the registry's module imports this one's users)."""
    global _DEVICE_REGISTRY
    from tinycore.device.registry import Device
    from tinycore.plugins.manager import get_plugin_manager
    _PLUGIN_MANAGER[:] = [get_plugin_manager]
    _DEVICE_REGISTRY = Device
    return Device


def default_device() -> str:
    """The default device (`canonical_device(None)`), as every Tensor made without a device asks."""
    known = _default_for  # _default_device's hit tested here first: one Python call fewer per new Tensor
    # DEV._targets is what the `targets` property returns (a property call): while DEV holds a malformed value it is
    # the empty tuple, which `_default_for` never holds, so the property's error is raised on the slow path
    if known is not None and known[0] is DEV._targets and known[1] is _PLUGIN_MANAGER[0]():
        return known[2]
    return _default_device(_DEVICE_REGISTRY or _load_device_registry())


def _default_device(registry: _DeviceRegistry) -> str:
    """`registry.DEFAULT`, from `_default_for` when DEV's targets and the plugin manager are the ones it was found
    with (DEV's setter makes new targets, so `Context(DEV=...)` and `Device.DEFAULT = ...` miss it)."""
    global _default_for
    targets, manager = DEV.targets, _PLUGIN_MANAGER[0]()
    known = _default_for
    if known is not None and known[0] is targets and known[1] is manager:
        return known[2]
    name = registry.DEFAULT
    # without a device in DEV the registry chooses one by probing, and reset() forgets that choice: not kept here
    _default_for = (targets, manager, name) if any(target.device for target in targets) else None
    return name


@overload
def canonical_device(device: str | None) -> str: ...


@overload
def canonical_device(device: tuple[str, ...] | list[str]) -> tuple[str, ...]: ...


@overload
def canonical_device(device: str | tuple[str, ...] | None) -> str | tuple[str, ...]: ...


def canonical_device(device: str | tuple[str, ...] | list[str] | None) -> str | tuple[str, ...]:
    """The canonical name of `device` (the default device for None), through the device registry; a tuple or list
    of names (several devices) gives a tuple of canonical names."""
    registry = _DEVICE_REGISTRY or _load_device_registry()
    if device is None:
        return _default_device(registry)
    if isinstance(device, (tuple, list)):
        names = tuple(canonical_device(name) for name in device)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"a multi-device tensor needs one or more distinct devices, got {tuple(device)}")
        return names
    if not isinstance(device, str):
        raise TypeError(f"device must be a device name such as 'CPU', got {type(device).__name__} {device!r}")
    return registry.canonicalize(device)


class TensorBase:
    """What the mixins of the Tensor call and do not define below themselves (see the module's docstring)."""

    if TYPE_CHECKING:
        uop: UOp
        grad: TensorBase | None
        _requires_grad: bool | None

        def __init__(self, data: Any = None, device: str | tuple[str, ...] | list[str] | None = None,
                     dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> None: ...

        # tensor.py: the constructor's helpers, the node builders, properties and realization
        @classmethod
        def _wrap(cls, uop: UOp, requires_grad: bool | None = None) -> Self: ...
        def _mark_leaf(self) -> Self: ...
        def _result(self, uop: UOp, *others: object) -> Self: ...
        def _alu(self, op: Ops, *others: Self) -> Self: ...
        def _const(self, value: ConstType, dtype: DType | None = None, shape: Sequence[int] | None = None) -> Self:
            ...
        def const_like(self, value: ConstType, dtype: DTypeLike | None = None) -> Self: ...
        @property
        def requires_grad(self) -> bool | None: ...
        @requires_grad.setter
        def requires_grad(self, value: bool | None) -> None: ...
        @property
        def shape(self) -> tuple[Any, ...]: ...
        @property
        def dtype(self) -> DType: ...
        @property
        def device(self) -> Any: ...
        @property
        def ndim(self) -> int: ...
        def numel(self) -> int: ...
        def size(self, dim: int | None = None) -> Any: ...
        def cast(self, dtype: DTypeLike) -> Self: ...
        def bitcast(self, dtype: DTypeLike) -> Self: ...
        def realize(self, *lst: Self, do_update_stats: bool = True) -> Self: ...
        def numpy(self) -> numpy.ndarray: ...
        def item(self) -> ConstType: ...
        def to(self, device: str | tuple[str, ...] | None) -> Self: ...
        def contiguous(self) -> Self: ...
        def contiguous_backward(self) -> Self: ...
        def detach(self) -> Self: ...
        def assign(self, value: Self | TensorData) -> Self: ...
        def replace(self, other: Self) -> Self: ...

        # the mixins above movement that lower ones call
        def where(self, x: Self | ConstType, y: Self | ConstType) -> Self: ...  # elementwise
        def ceil(self) -> Self: ...  # elementwise
        def prod(self, axis: AxisArg = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Self: ...
        def max(self, axis: AxisArg = None, keepdim: bool = False) -> Self: ...  # reduce
        def all(self, axis: AxisArg = None, keepdim: bool = False) -> Self: ...  # reduce
        @classmethod
        def full(cls, shape: tuple[Any, ...], fill_value: ConstType, dtype: DTypeLike | None = None,
                 device: str | tuple[str, ...] | None = None) -> Self: ...  # creation
        @classmethod
        def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
                   dtype: DTypeLike | None = None, device: str | None = None) -> Self: ...  # creation
        def ones_like(self) -> Self: ...  # creation
        def argsort(self, dim: int = -1, descending: bool = False) -> Self: ...  # indexing
        def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]: ...
        def _pool(self, kernel: Sequence[int], stride: int | Sequence[int] = 1,
                  dilation: int | Sequence[int] = 1) -> Self: ...  # nn
        def shard(self, devices: tuple[str, ...], axis: int | None = None) -> Self: ...  # extras
        def __getitem__(self, indices: Any) -> Self: ...  # indexing
        def conv2d(self, weight: Self, *, groups: int = 1) -> Self: ...  # nn
        def conv_transpose2d(self, weight: Self, *, groups: int = 1) -> Self: ...  # nn
        def bool(self) -> Self: ...  # elementwise; last: it shadows the builtin in the annotations below it


_TENSOR_CLASS: list[type[TensorBase]] = []
"""The Tensor class, registered by tensor.py when it is defined."""


def register_tensor_class(tensor: type[TensorBase]) -> None:
    """Makes `tensor` (tensor.py's Tensor) the class `tensor_class` gives."""
    _TENSOR_CLASS[:] = [tensor]


def tensor_class(kind: type[TensorT]) -> type[TensorT]:
    """The Tensor class, typed as the chain class `kind` the caller needs (the Tensor subclasses every one)."""
    if not _TENSOR_CLASS:
        raise RuntimeError("no Tensor class is registered yet: import tinycore.tensor first")
    tensor = _TENSOR_CLASS[0]
    if not issubclass(tensor, kind):
        raise TypeError(f"{tensor.__name__} is not a {kind.__name__}")
    return tensor
