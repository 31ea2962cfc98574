"""Memory: BUFFER nodes and the device Buffers behind them.

A BUFFER node (`UOp(Ops.BUFFER, dtype, (DEVICE,), (unique id, element count))`) names device memory in tensor
graphs. The Buffer object behind it is created on first use and lives exactly as long as the node: the registry is
weak (the Buffer is attached to the node itself, like a cached property), so when no graph refers to a BUFFER node
any more its memory goes back to the device's allocator.
"""
from __future__ import annotations

import itertools
from typing import Any

from tinycore.device.buffer import Buffer
from tinycore.dtype import DType
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

_unique_ids = itertools.count()
_ATTRIBUTE = "_device_buffer"  # where a BUFFER node keeps its Buffer (it dies with the node)
_device_nodes: dict[Any, UOp] = {}
_allocators: dict[Any, Any] = {}


def _allocator_of(device: Any) -> Any:
    """The allocator of `device` (the device is opened on first use)."""
    found = _allocators.get(device)
    if found is None:
        from tinycore.device.registry import Device
        found = _allocators[device] = Device[device].allocator
    return found


def supports_views(device: Any) -> bool:
    """True when `device`'s allocator can make buffers that are views (sub-ranges) of other buffers."""
    if not isinstance(device, str):
        return False
    from tinycore.device.allocator import Allocator
    try:
        allocator = _allocator_of(device)
    except Exception:  # noqa: BLE001 - a device that cannot open supports nothing; the copy reports the error
        return False
    return type(allocator)._offset is not Allocator._offset


def device_node(device: Any) -> UOp:
    """The DEVICE node of a canonical device name (kept alive, so building graphs does not recreate it)."""
    node = _device_nodes.get(device)
    if node is None:
        node = _device_nodes[device] = UOp(Ops.DEVICE, arg=device)
    return node


def new_buffer_uop(device: Any, dtype: DType, size: int) -> UOp:
    """A new BUFFER node of `size` elements of `dtype` on `device`; its Buffer is allocated on first use."""
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"a buffer needs a non-negative int element count, got {size!r}")
    return UOp(Ops.BUFFER, dtype, (device_node(device),), (next(_unique_ids), size))


def buffer_of(uop: UOp) -> Buffer:
    """The device Buffer behind the BUFFER (or BUFFER_VIEW) node `uop`, created (not yet allocated) on first use."""
    found = uop.__dict__.get(_ATTRIBUTE)
    if found is not None:
        return found
    if uop.op is Ops.BUFFER:
        device = uop.src[0].arg
        found = Buffer(device, uop.arg[1], uop.dtype, allocator=_allocator_of(device))
    elif uop.op is Ops.BUFFER_VIEW:
        count, offset = uop.arg
        found = buffer_of(uop.src[0]).view(count, uop.dtype, offset)
    else:
        raise ValueError(f"buffer_of needs a BUFFER or BUFFER_VIEW node, got {uop.op}; realize the tensor first")
    uop.__dict__[_ATTRIBUTE] = found
    return found


def uop_from_bytes(data: bytes | bytearray | memoryview, dtype: DType, device: Any) -> UOp:
    """A new BUFFER node on `device` filled now with the host bytes `data` (a whole number of `dtype` items)."""
    view = memoryview(data)
    if view.nbytes % dtype.itemsize:
        raise ValueError(f"{view.nbytes} bytes are not a whole number of {dtype} items ({dtype.itemsize} bytes each)")
    node = new_buffer_uop(device, dtype, view.nbytes // dtype.itemsize)
    buffer_of(node).copyin(view)
    return node
