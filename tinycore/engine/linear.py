"""A schedule as tinygrad's linear program: `Tensor.schedule_linear()` and `Tensor.linear_with_vars()`.

tinygrad hands back its schedule as a LINEAR UOp whose sources are CALLs: `call.src[0]` is the kernel's AST (a
SINK) or a COPY, `call.src[1:]` the buffers it writes and reads, each with `.buffer` (the device Buffer). Here the
schedule is a list of ScheduleItems; `LinearSchedule` and `ScheduleCall` present it with those names, so a tinygrad
program that inspects its kernels and copies (how many, on which devices, of which dtypes) reads the same fields.
Building one schedules the tensors without running anything and points them at the buffers the schedule fills;
`tinycore.engine.realize.run_linear` runs it.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tinycore.engine.memory import buffer_of, device_facts
from tinycore.schedule.cache import schedule_cached
from tinycore.schedule.scheduler import ScheduleItem
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tinycore.device.buffer import Buffer
    from tinycore.dtype import DType


class HoldsGraph(Protocol):
    """What linear_with_vars needs of a Tensor: its graph, which it repoints at the scheduled buffers (a protocol,
    so the engine does not import the tensor layer above it)."""

    uop: UOp


@dataclass(frozen=True, eq=False)
class MultiBuffer:
    """The Buffers of one argument of a kernel run on several devices, one per device in the call's order: tinygrad's
    MultiBuffer fields (`bufs`, `size`, `dtype`, `is_allocated()`), and `device`, the tuple of their devices."""

    bufs: tuple[Buffer, ...]

    @property
    def size(self) -> int:
        """Elements in each device's Buffer."""
        return self.bufs[0].size

    @property
    def dtype(self) -> DType:
        """The element dtype of the Buffers."""
        return self.bufs[0].dtype

    @property
    def device(self) -> tuple[str, ...]:
        """The device of each Buffer."""
        return tuple(str(buffer.device) for buffer in self.bufs)

    def is_allocated(self) -> bool:
        """Whether every device's Buffer has its memory."""
        return all(buffer.is_allocated() for buffer in self.bufs)


@dataclass(frozen=True, eq=False)
class BufferArgument:
    """One buffer a call writes or reads: `node` (a BUFFER or BUFFER_VIEW UOp) and its device Buffer. For a kernel
    that runs on several devices, `nodes` holds that buffer's node on each device, in the call's device order."""

    nodes: tuple[UOp, ...]

    @property
    def node(self) -> UOp:
        """The buffer's node (on the first device, for a call over several devices)."""
        return self.nodes[0]

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """The device Buffer behind each node (created on first use, allocated when the call runs)."""
        return tuple(buffer_of(node) for node in self.nodes)

    @property
    def buffer(self) -> Buffer | MultiBuffer:
        """The device Buffer behind the node (created on first use, allocated when the call runs); for a call over
        several devices a MultiBuffer of one Buffer per device, as tinygrad's."""
        if len(self.nodes) > 1:
            return MultiBuffer(self.buffers)
        return buffer_of(self.nodes[0])

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device the buffer lives on (a tuple of devices for a call over several devices)."""
        devices = tuple(str(node.device) for node in self.nodes)
        return devices[0] if len(devices) == 1 else devices

    @property
    def dtype(self) -> DType:
        """The element dtype of the buffer."""
        return self.nodes[0].dtype


@dataclass(frozen=True, eq=False)
class ScheduleCall:
    """One kernel launch or copy: `src[0]` the AST (SINK for a kernel, COPY for a copy), `src[1:]` its buffers
    (outputs first; for a copy, destination then source), `var_vals` the values of its Variables.

    As in tinygrad, the same kernel run on each device of a sharded tensor is one call: `items` holds its
    schedule item on each device, and `device` is then the tuple of those devices."""

    items: tuple[ScheduleItem, ...]
    src: tuple[UOp | BufferArgument, ...] = field(init=False)

    def __post_init__(self) -> None:
        first = self.items[0]
        arguments = tuple(BufferArgument(tuple(item.buffers[position] for item in self.items))
                          for position in range(len(first.buffers)))
        object.__setattr__(self, "src", (first.ast, *arguments))

    @property
    def item(self) -> ScheduleItem:
        """The schedule item (on the first device, for a call over several devices)."""
        return self.items[0]

    @property
    def op(self) -> Ops:
        """Ops.COPY for a copy, Ops.SINK for a kernel (what tinygrad's CALL holds at src[0])."""
        return self.items[0].ast.op

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device that runs this call (a copy's destination), or the tuple of devices of a kernel run on
        several."""
        devices = tuple(_device_of(item) for item in self.items)
        return devices[0] if len(devices) == 1 else devices

    @property
    def var_vals(self) -> dict[UOp, int]:
        """The values of the Variables the call reads."""
        merged: dict[UOp, int] = {}
        for item in self.items:
            merged.update(item.var_vals)
        return merged


@dataclass(frozen=True, eq=False)
class LinearSchedule:
    """The calls that realize some tensors, in the order they run, and the buffers only they use (freed once the
    last reader has run)."""

    src: tuple[ScheduleCall, ...]
    temporaries: tuple[UOp, ...] = ()

    @property
    def items(self) -> list[ScheduleItem]:
        """The schedule items, in the order they run (a call over several devices gives one per device)."""
        return [item for call in self.src for item in call.items]


def _device_of(item: ScheduleItem) -> str:
    return str(item.buffers[0].device)


def _device_order(item: ScheduleItem) -> tuple[str, int]:
    """Sorts "CPU" before "CPU:1" before "CPU:10", the order of a sharded tensor's devices."""
    name, _, number = _device_of(item).partition(":")
    return name, int(number) if number.isdigit() else 0


def _base(node: UOp) -> UOp:
    return node.src[0] if node.op is Ops.BUFFER_VIEW else node


def _written_and_read(item: ScheduleItem) -> tuple[set[UOp], set[UOp]]:
    """The base buffers `item` writes and those it reads. A kernel's outputs come first in its buffers, one per
    STORE of its SINK; when the SINK holds anything else every buffer counts as written (a safe overestimate)."""
    if item.ast.op is Ops.COPY:
        outputs = 1
    elif all(source.op is Ops.STORE for source in item.ast.src):
        outputs = len(item.ast.src)
    else:
        outputs = len(item.buffers)
    written = {_base(node) for node in item.buffers[:outputs]}
    return written, {_base(node) for node in item.buffers[outputs:]} | written


def _group_members(items: Sequence[ScheduleItem]) -> list[list[int]]:
    """Positions of the items that form one call: a kernel with the same AST as an earlier one on another device
    joins the first group of that AST without a kernel on its device; copies stay alone."""
    groups: list[list[int]] = []
    open_groups: dict[UOp, list[tuple[list[int], set[str]]]] = {}
    for position, item in enumerate(items):
        if item.ast.op is Ops.COPY:
            groups.append([position])
            continue
        device = _device_of(item)
        candidates = open_groups.setdefault(item.ast, [])
        for members, devices in candidates:
            if device not in devices and len(item.buffers) == len(items[members[0]].buffers):
                members.append(position)
                devices.add(device)
                break
        else:
            groups.append([position])
            candidates.append((groups[-1], {device}))
    return groups


def _group_calls(items: Sequence[ScheduleItem]) -> tuple[ScheduleCall, ...]:
    """The items as calls, a kernel run on several devices as one call, in an order that keeps every dependency
    of the original order (a write before its readers, a read before the next write). Should grouping make two
    calls wait on each other, every item stays its own call, in the original order."""
    groups = _group_members(items)
    if all(len(members) == 1 for members in groups):
        return tuple(ScheduleCall((items[members[0]],)) for members in groups)
    group_of = {position: index for index, members in enumerate(groups) for position in members}
    access = [_written_and_read(item) for item in items]
    last_writer: dict[UOp, int] = {}
    readers_since_write: dict[UOp, list[int]] = {}
    waits_on: list[set[int]] = [set() for _ in groups]
    for position, (written, read) in enumerate(access):
        group = group_of[position]
        for node in read:
            if node in last_writer:
                waits_on[group].add(group_of[last_writer[node]])
        for node in written:
            waits_on[group].update(group_of[reader] for reader in readers_since_write.get(node, ()))
            last_writer[node] = position
            readers_since_write[node] = []
        for node in read - written:
            readers_since_write.setdefault(node, []).append(position)
        waits_on[group].discard(group)
    order = _ordered(waits_on)
    if order is None:
        return tuple(ScheduleCall((item,)) for item in items)
    return tuple(ScheduleCall(tuple(sorted((items[position] for position in groups[index]), key=_device_order)))
                 for index in order)


def _ordered(waits_on: list[set[int]]) -> list[int] | None:
    """The groups in dependency order, each as early as its dependencies allow and ties by first position, or
    None when the dependencies form a cycle."""
    remaining = [len(dependencies) for dependencies in waits_on]
    unblocks: list[list[int]] = [[] for _ in waits_on]
    for group, dependencies in enumerate(waits_on):
        for dependency in dependencies:
            unblocks[dependency].append(group)
    ready = [group for group, count in enumerate(remaining) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        group = heapq.heappop(ready)
        order.append(group)
        for waiting in unblocks[group]:
            remaining[waiting] -= 1
            if remaining[waiting] == 0:
                heapq.heappush(ready, waiting)
    return order if len(order) == len(waits_on) else None


def linear_with_vars(tensors: Sequence[HoldsGraph]) -> tuple[LinearSchedule, dict[UOp, int]]:
    """Schedule `tensors` together without running anything: the calls in order and the values of every Variable
    they read. The tensors then name the buffers the calls fill, so run the schedule (run_linear) before reading
    them."""
    flat: list[UOp] = []
    for tensor in tensors:
        flat.extend(tensor.uop.src if tensor.uop.op is Ops.MULTI else (tensor.uop,))
    schedule = schedule_cached(flat, device_facts)
    results = iter(schedule.outputs)
    for tensor in tensors:
        uop = tensor.uop
        if uop.op is Ops.MULTI:
            tensor.uop = UOp(Ops.MULTI, uop.dtype, tuple(next(results) for _ in uop.src), uop.arg)
        else:
            tensor.uop = next(results)
    var_vals: dict[UOp, int] = {}
    for item in schedule.items:
        var_vals.update(item.var_vals)
    return LinearSchedule(_group_calls(schedule.items), schedule.temporaries), var_vals
