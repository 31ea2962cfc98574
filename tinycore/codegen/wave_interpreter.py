"""The interpreter for kernels with wave-collective matrix instructions (tensor cores, WMMA, MFMA), used by MOCK
GPUs: the core's interpreter, with the work-items of a wave meeting at each collective op, since every lane's result
depends on every lane's operands.

A collective op is a CUSTOM UOp whose arg starts with a registered name; its sources are the lane's operand values.
Each work-item runs as a generator, as in the core's interpreter; at a collective op it yields its operand values and
waits. Once every lane of the work-group is there, the op's `combine` function gets each wave's operands (lane
order) and returns that wave's results, which each lane receives as the op's value. A work-group is one or more whole
waves along lidx0 (lanes 0 to wave size - 1 are the first wave); its waves meet at the same collective together,
which real hardware does not need but the kernels using this meet anyway (a barrier precedes their collectives). A
collective reached by only part of the work-group (divergent control flow) is an error.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from tinycore.codegen.interpreter import InterpreterError, Program
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

Combine = Callable[[list[list[float]]], list[tuple[float, ...]]]
"""Every lane's operand values (lane order) -> every lane's result values."""


def collective_name(uop: UOp, collectives: Mapping[str, Combine]) -> str | None:
    """The registered collective that the CUSTOM `uop` calls, else None."""
    if uop.op is not Ops.CUSTOM:
        return None
    return next((name for name in collectives if str(uop.arg).startswith(name)), None)


class WaveProgram(Program):
    """A linear program whose work-groups (one wave of `wave_size` lanes) may execute collective ops."""

    def __init__(self, uops: Sequence[UOp], collectives: Mapping[str, Combine], wave_size: int):
        super().__init__(uops)
        self.collectives, self.wave_size = dict(collectives), wave_size
        self.calls = {uop: name for uop in self.uops if (name := collective_name(uop, self.collectives)) is not None}

    def _check_work_group(self, block: list[int]) -> None:
        """Collective ops need whole waves along lidx0 in each work-group."""
        if self.calls and (len(block) != 1 or block[0] % self.wave_size or not block[0]):
            raise InterpreterError(f"a kernel with wave-collective ops must run whole waves (lidx0 a multiple of "
                                   f"{self.wave_size}) per work-group")

    def _run_group(self, lanes: list[Generator[Any, Any, None]]) -> None:
        """Run the lanes of one work-group in turns; at a collective op, every lane's operands go to its combine."""
        if not self.calls:
            super()._run_group(lanes)
            return
        replies: list[Any] = [None] * len(lanes)
        size = len(lanes)
        while lanes:
            requests = []
            for lane, reply in zip(lanes, replies, strict=True):
                try:
                    requests.append(lane.send(reply))
                except StopIteration:
                    requests.append(None)
            live = [request for request in requests if request is not None]
            if not live:
                return
            calls = [request for request in live if isinstance(request, tuple)]
            if calls:
                names = {name for name, _operands in calls}
                if len(calls) != size or len(live) != size or len(names) != 1:
                    raise InterpreterError("a wave-collective op was reached by only part of the work-group "
                                           "(divergent control flow)")
                combine, operands = self.collectives[names.pop()], [operands for _name, operands in calls]
                replies = [reply for first in range(0, size, self.wave_size)
                           for reply in combine(operands[first:first + self.wave_size])]
            else:
                replies = [None] * len(live)
            lanes = [lane for lane, request in zip(lanes, requests, strict=True) if request is not None]
