"""BUFFER nodes: the tensor-level names of device memory.

A BUFFER node is `UOp(Ops.BUFFER, dtype, (DEVICE,), (unique id, element count))`. Building one allocates nothing;
the device Buffer behind it is made on first use by the engine (`tinycore.engine.memory.buffer_of`) and lives as
long as the node.
"""
from __future__ import annotations

import itertools

from tinycore.dtype import DType
from tinycore.uop.opcodes import Ops
from tinycore.uop.uop import UOp

_unique_ids = itertools.count()
_device_nodes: dict[str, UOp] = {}


def device_node(device: str) -> UOp:
    """The DEVICE node of a canonical device name (kept alive, so building graphs does not recreate it)."""
    node = _device_nodes.get(device)
    if node is None:
        node = _device_nodes[device] = UOp(Ops.DEVICE, arg=device)
    return node


_buffer_sources: dict[str, tuple[UOp]] = {}
"""Each one-device BUFFER node's sources, `(DEVICE node,)`, by device name: kept, so that a new node (every new
tensor, every eager result) builds no tuple and makes no device_node call."""


def new_buffer_uop(device: str, dtype: DType, size: int) -> UOp:
    """A new BUFFER node of `size` elements of `dtype` on `device`; its Buffer is allocated on first use."""
    if device.__class__ is str and size.__class__ is int and size >= 0:
        # one device (every new tensor's case): the node's cache key is known without UOp's general construction,
        # and its device and shape are stored as inference would find them (the node is new: its id is unique), so
        # that the first op on a new tensor does not run the inference
        sources = _buffer_sources.get(device)
        if sources is None:
            sources = _buffer_sources[device] = (device_node(device),)
        arg = (next(_unique_ids), size)
        node = UOp.keyed(Ops.BUFFER, dtype, sources, arg, ("ints", arg))
        attributes = node.__dict__
        attributes["device"], attributes["_shape"] = device, (size,)
        return node
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"a buffer needs a non-negative int element count, got {size!r}")
    arg = (next(_unique_ids), size)
    if device.__class__ is str:  # one device: the node's cache key is known without UOp's general construction
        node = UOp.keyed(Ops.BUFFER, dtype, (device_node(device),), arg, ("ints", arg))
        # its device and shape as inference would find them (the node is new: its id is unique), stored now so
        # that the first op on a new tensor does not run the inference
        node.__dict__["device"], node.__dict__["_shape"] = device, (size,)
        return node
    return UOp(Ops.BUFFER, dtype, (device_node(device),), arg)
