"""A schedule as tinygrad's linear program: `Tensor.schedule_linear()` and `Tensor.linear_with_vars()`.

tinygrad hands back its schedule as a LINEAR UOp whose sources are CALLs: `call.src[0]` is the kernel's AST (a
SINK) or a COPY, `call.src[1:]` the buffers it writes and reads, each with `.buffer` (the device Buffer). Here the
schedule is a list of ScheduleItems; `LinearSchedule` and `ScheduleCall` present it with those names, so a tinygrad
program that inspects its kernels and copies (how many, on which devices, of which dtypes) reads the same fields.
Building one schedules the tensors without running anything and points them at the buffers the schedule fills;
`tinycore.engine.realize.run_linear` runs it.
"""
from __future__ import annotations

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
class BufferArgument:
    """One buffer a call writes or reads: `node` (a BUFFER or BUFFER_VIEW UOp) and its device Buffer."""

    node: UOp

    @property
    def buffer(self) -> Buffer:
        """The device Buffer behind the node (created on first use, allocated when the call runs)."""
        return buffer_of(self.node)

    @property
    def device(self) -> str:
        """The device the buffer lives on."""
        return str(self.node.device)

    @property
    def dtype(self) -> DType:
        """The element dtype of the buffer."""
        return self.node.dtype


@dataclass(frozen=True, eq=False)
class ScheduleCall:
    """One kernel launch or copy: `src[0]` the AST (SINK for a kernel, COPY for a copy), `src[1:]` its buffers
    (outputs first; for a copy, destination then source), `var_vals` the values of its Variables."""

    item: ScheduleItem
    src: tuple[UOp | BufferArgument, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "src", (self.item.ast,) + tuple(BufferArgument(node) for node in self.item.buffers))

    @property
    def op(self) -> Ops:
        """Ops.COPY for a copy, Ops.SINK for a kernel (what tinygrad's CALL holds at src[0])."""
        return self.item.ast.op

    @property
    def device(self) -> str:
        """The device that runs this call (a copy's destination)."""
        return str(self.item.buffers[0].device)

    @property
    def var_vals(self) -> dict[UOp, int]:
        """The values of the Variables the call reads."""
        return dict(self.item.var_vals)


@dataclass(frozen=True, eq=False)
class LinearSchedule:
    """The calls that realize some tensors, in the order they run, and the buffers only they use (freed once the
    last reader has run)."""

    src: tuple[ScheduleCall, ...]
    temporaries: tuple[UOp, ...] = ()

    @property
    def items(self) -> list[ScheduleItem]:
        """The schedule items, in order."""
        return [call.item for call in self.src]


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
    return LinearSchedule(tuple(ScheduleCall(item) for item in schedule.items), schedule.temporaries), var_vals
