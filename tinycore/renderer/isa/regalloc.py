"""Linear-scan register allocation (Poletto and Sarkar) over register classes, with whole-interval spills.

The program is a list of `Instruction`s over `VirtualRegister`s; positions are list indices. A label is an
instruction whose op is `label_op`; a jump is any other instruction with a `Label` operand. Values live where a
backward jump returns to are kept alive to the jump, so loops are safe. Spilled values live in stack slots for
their whole life; `rewrite_program` loads them into scratch registers (kept out of the allocatable pool) around
each instruction that touches them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tinycore.renderer.isa.operands import (
    Instruction,
    Label,
    Memory,
    Operand,
    Register,
    SubRegister,
    VirtualRegister,
)


@dataclass
class Interval:
    """Where a virtual register is live: from its first to its last mention, and the registers it must avoid."""

    value: VirtualRegister
    start: int
    end: int
    avoid: frozenset[Register] = frozenset()


@dataclass
class Allocation:
    """The allocator's answer: a register per kept value, a byte offset in the spill area per spilled one."""

    assigned: dict[VirtualRegister, Register] = field(default_factory=dict)
    spill_offset: dict[VirtualRegister, int] = field(default_factory=dict)
    spill_bytes: int = 0

    def used_registers(self) -> set[Register]:
        """Every physical register some value was given."""
        return set(self.assigned.values())


def _mentions(operand: Operand) -> tuple[VirtualRegister, ...]:
    if isinstance(operand, VirtualRegister):
        return (operand,)
    if isinstance(operand, SubRegister):
        return (operand.value,)
    if isinstance(operand, Memory):
        return tuple(r for r in operand.registers() if isinstance(r, VirtualRegister))
    return ()


def live_intervals(program: list[Instruction], label_op: str = "label") -> dict[VirtualRegister, Interval]:
    """The live interval of every virtual register in `program`, stretched over the loops it is live into.

    Intervals also record `avoid`: the registers clobbered by an instruction strictly inside the interval, which the
    value cannot be kept in.
    """
    intervals: dict[VirtualRegister, Interval] = {}
    label_at: dict[Label, int] = {}
    for position, instruction in enumerate(program):
        if instruction.op == label_op:
            for operand in instruction.operands:
                if isinstance(operand, Label):
                    label_at[operand] = position
        for operand in instruction.operands:
            for value in _mentions(operand):
                if value in intervals:
                    intervals[value].end = position
                else:
                    intervals[value] = Interval(value, position, position)
    loops = [
        (label_at[operand], position)
        for position, instruction in enumerate(program)
        if instruction.op != label_op
        for operand in instruction.operands
        if isinstance(operand, Label) and label_at.get(operand, position) < position
    ]
    changed = True
    while changed:  # nested loops can stretch an interval into an enclosing loop, so repeat to a fixed point
        changed = False
        for head, back_jump in loops:
            for interval in intervals.values():
                if interval.start < head <= interval.end < back_jump:
                    interval.end, changed = back_jump, True
    clobbering = [
        (position, instruction.clobbers) for position, instruction in enumerate(program) if instruction.clobbers
    ]
    for interval in intervals.values():
        interval.avoid = frozenset(
            r for position, regs in clobbering if interval.start < position < interval.end for r in regs
        )
    return intervals


def linear_scan(
    intervals: dict[VirtualRegister, Interval],
    registers: dict[str, list[Register]],
    blocked: dict[Register, int] | None = None,
) -> Allocation:
    """Give each interval a register of its kind from `registers` (tried in order), or a spill slot.

    `blocked[r] = p` keeps register `r` from values that start before position `p` (an incoming argument still
    unread). When no register is free, the live value that ends last is spilled (it or the new one).
    """
    blocked = blocked or {}
    allocation = Allocation()
    active: list[Interval] = []
    free: dict[str, list[Register]] = {kind: list(regs) for kind, regs in registers.items()}
    rank = {kind: {r: i for i, r in enumerate(regs)} for kind, regs in registers.items()}  # the order to try them in

    def spill(interval: Interval) -> None:
        size = interval.value.bits // 8
        offset = -(-allocation.spill_bytes // size) * size
        allocation.spill_offset[interval.value] = offset
        allocation.spill_bytes = offset + size

    for interval in sorted(intervals.values(), key=lambda i: (i.start, i.value.index)):
        for done in [a for a in active if a.end < interval.start]:
            active.remove(done)
            free[done.value.kind].append(allocation.assigned[done.value])
        kind = interval.value.kind
        if kind not in free:
            raise ValueError(f"no registers of kind {kind!r} were given to the allocator")
        usable = min(
            (r for r in free[kind] if r not in interval.avoid and blocked.get(r, 0) <= interval.start),
            key=rank[kind].__getitem__,
            default=None,
        )
        if usable is not None:
            allocation.assigned[interval.value] = usable
            free[kind].remove(usable)
            active.append(interval)
            continue
        candidates = [
            a
            for a in active
            if a.value.kind == kind
            and allocation.assigned[a.value] not in interval.avoid
            and blocked.get(allocation.assigned[a.value], 0) <= interval.start
        ]
        victim = max(candidates, key=lambda a: a.end, default=None)
        if victim is not None and victim.end > interval.end:
            allocation.assigned[interval.value] = allocation.assigned.pop(victim.value)
            active.remove(victim)
            spill(victim)
            active.append(interval)
        else:
            spill(interval)
    return allocation


class _SpillRewriter:
    """Rewrites one instruction at a time: allocated values renamed, spilled ones moved through scratch registers."""

    def __init__(
        self,
        allocation: Allocation,
        scratch: dict[str, list[Register]],
        view: Callable[[Register, int], Register],
        load: Callable[[Register, int], Instruction],
        store: Callable[[int, Register], Instruction],
    ) -> None:
        self.allocation, self.scratch, self.view, self.load, self.store = allocation, scratch, view, load, store

    def rewrite(self, instruction: Instruction) -> list[Instruction]:
        taken: dict[VirtualRegister, Register] = {}
        loads: list[Instruction] = []
        stores: list[Instruction] = []

        def place(value: VirtualRegister, mode: str) -> Register:
            if value in self.allocation.assigned:
                return self.view(self.allocation.assigned[value], value.bits)
            offset = self.allocation.spill_offset[value]
            if value not in taken:
                used = {t.number for t in taken.values()}
                spare = [r for r in self.scratch.get(value.kind, []) if r.number not in used]
                if not spare:
                    raise RuntimeError(f"{instruction.op}: more spilled {value.kind} operands than scratch registers")
                taken[value] = self.view(spare[0], value.bits)
                if "r" in mode:
                    loads.append(self.load(taken[value], offset))
            if "w" in mode and not any(s.operands[-1] == taken[value] for s in stores):
                stores.append(self.store(offset, taken[value]))
            return taken[value]

        placed: dict[int, Operand] = {}
        # reads are placed before writes so a value both read and written gets one load and one store
        for i in sorted(range(len(instruction.operands)), key=lambda i: instruction.access[i] == "w"):
            operand, mode = instruction.operands[i], instruction.access[i]
            if isinstance(operand, VirtualRegister):
                placed[i] = place(operand, mode)
            elif isinstance(operand, SubRegister):  # a narrower name of the value's register
                placed[i] = self.view(place(operand.value, mode), operand.bits)
            elif isinstance(operand, Memory):
                base = place(operand.base, "r") if isinstance(operand.base, VirtualRegister) else operand.base
                index = place(operand.index, "r") if isinstance(operand.index, VirtualRegister) else operand.index
                placed[i] = operand.with_registers(base, index)
            else:
                placed[i] = operand
        operands = tuple(placed[i] for i in range(len(instruction.operands)))
        return [*loads, Instruction(instruction.op, operands, instruction.access, instruction.clobbers), *stores]


def rewrite_program(
    program: list[Instruction],
    allocation: Allocation,
    scratch: dict[str, list[Register]],
    view: Callable[[Register, int], Register],
    load: Callable[[Register, int], Instruction],
    store: Callable[[int, Register], Instruction],
) -> list[Instruction]:
    """`program` over physical registers: allocated values renamed, spilled ones loaded into and stored from scratch.

    `view(register, bits)` is the register's name at a width (rax, eax); `load(register, offset)` and
    `store(offset, register)` build the instructions that move a value between a register and its spill slot.
    """
    rewriter = _SpillRewriter(allocation, scratch, view, load, store)
    return [out for instruction in program for out in rewriter.rewrite(instruction)]
