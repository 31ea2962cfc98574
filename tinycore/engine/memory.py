"""Memory: the device Buffers behind BUFFER nodes (the nodes themselves are built in `tinycore.uop.buffer`).

The Buffer object behind a node is created on first use and lives exactly as long as the node: the side table that
holds it is keyed weakly by the node, so when no graph refers to a BUFFER node any more its memory goes back to the
device's allocator. This module also tells the scheduler the facts of an opened device (`device_facts`).
"""
from __future__ import annotations

from tinycore.device.allocator import Allocator
from tinycore.device.buffer import Buffer
from tinycore.dtype import DType
from tinycore.plugins.contract import RendererContract, makes_views
from tinycore.schedule.device_facts import DeviceFacts
from tinycore.uop.buffer import _unique_ids, device_node, new_buffer_uop
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp, upper

_BUFFER = Ops.BUFFER
_BUFFER_ATTRIBUTE = "_device_buffer"
"""The attribute of a BUFFER / BUFFER_VIEW node holding its Buffer once used (it dies with its node). An attribute
rather than a weak-keyed table: a lookup per buffer per launch is then a plain dict read."""
_allocators: dict[str, Allocator] = {}


def _allocator_of(device: str) -> Allocator:
    """The allocator of `device` (the device is opened on first use)."""
    found = _allocators.get(device)
    if found is None:
        from tinycore.device.registry import Device
        found = _allocators[device] = Device[device].allocator
    return found


def supports_views(device: object) -> bool:
    """True when `device`'s allocator can make buffers that are views (sub-ranges) of other buffers."""
    if not isinstance(device, str):
        return False
    try:
        allocator = _allocator_of(device)
    except Exception:  # noqa: BLE001 - a device that cannot open supports nothing; the copy reports the error
        return False
    return makes_views(allocator)


def device_facts(device: object) -> DeviceFacts:
    """What the scheduler needs to know about `device` (opened on first use): its renderer's buffer limit and
    whether its allocator makes views. A device that cannot open gets no limit and no views (realize reports why
    when it runs anything there). Read each time: the scheduler asks only when a schedule is not cached."""
    if not isinstance(device, str):
        return DeviceFacts()
    from tinycore.device.registry import Device
    try:
        renderer = Device[device].renderer
    except Exception:  # noqa: BLE001 - the failure is reported by realize, which needs the device to run anything
        return DeviceFacts()
    limit = renderer.max_buffers if isinstance(renderer, RendererContract) else None
    loops = isinstance(renderer, RendererContract) and renderer.has_threads
    workers = renderer.global_max[0] if loops and renderer.global_max else 1
    return DeviceFacts(limit, supports_views(device), type(renderer).__name__, loops, int(workers))


def buffer_of(uop: UOp) -> Buffer:
    """The device Buffer behind the BUFFER (or BUFFER_VIEW) node `uop`, created (not yet allocated) on first use."""
    found = uop.__dict__.get(_BUFFER_ATTRIBUTE)
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
    uop.__dict__[_BUFFER_ATTRIBUTE] = found
    return found


_filling: dict[str, tuple[Allocator, tuple[UOp], bool]] = {}
"""Per one-device name seen by uop_from_bytes: its allocator, the sources of its BUFFER nodes (`(DEVICE node,)`) and
whether the allocator's class keeps Allocator.copyin (then the copy is its settle and `_copyin`, called inline)."""
_PLAIN_COPYIN = Allocator.copyin


def uop_from_bytes(data: bytes | bytearray | memoryview, dtype: DType, device: str) -> UOp:
    """A new BUFFER node on `device` filled now with the host bytes `data` (a whole number of `dtype` items)."""
    filling = _filling.get(device) if data.__class__ is bytes else None
    if filling is not None:
        # every Tensor(list) comes here with bytes for a device seen before: the node (new_buffer_uop's one-device
        # work), the allocation and the copy without memoryview checks, the size's division check, _allocator_of or
        # Allocator.copyin's frame
        allocator, sources, plain_copyin = filling
        nbytes, itemsize = len(data), dtype.itemsize
        size = nbytes // itemsize
        if size * itemsize == nbytes:
            arg = (next(_unique_ids), size)
            node = UOp.keyed(_BUFFER, dtype, sources, arg, ("ints", arg))
            buffer = Buffer.allocated(device, size, dtype, allocator)
            attributes = node.__dict__
            attributes["device"], attributes["_shape"], attributes[_BUFFER_ATTRIBUTE] = device, (size,), buffer
            if nbytes:
                if plain_copyin:
                    settle = allocator.before_host_access
                    if settle is not None:
                        settle()
                    allocator._copyin(buffer._buf, memoryview(data))
                else:
                    allocator.copyin(buffer._buf, memoryview(data))
            return node
    view = memoryview(data)
    nbytes = view.nbytes
    if nbytes % dtype.itemsize:
        raise ValueError(f"{nbytes} bytes are not a whole number of {dtype} items ({dtype.itemsize} bytes each)")
    node = new_buffer_uop(device, dtype, nbytes // dtype.itemsize)
    # Buffer.copyin's checks hold by construction here (the sizes match, nothing is allocated yet): a new tensor's
    # data goes straight to the allocator
    allocator = _allocator_of(device)  # kept: Buffer.allocator is a property (a Python call)
    buffer = Buffer.allocated(device, nbytes // dtype.itemsize, dtype, allocator)
    node.__dict__[_BUFFER_ATTRIBUTE] = buffer
    if nbytes:
        allocator.copyin(buffer._buf, view if view.ndim == 1 and view.format == "B" else view.cast("B"))
    if device.__class__ is str and device not in _filling:
        _filling[device] = (allocator, (device_node(device),), allocator.__class__.copyin is _PLAIN_COPYIN)
    return node


# UOp.buffer (tinygrad's name) reaches the Buffers through this table: the IR sits below the engine
upper.buffer_of = buffer_of
