"""Linear-scan register allocation (Poletto and Sarkar) over register classes, with whole-interval spills.

The program is a list of `Instruction`s over `VirtualRegister`s; positions are list indices. A label is an
instruction whose op is `label_op`; a jump is any other instruction with a `Label` operand. Values live where a
backward jump returns to are kept alive to the jump, so loops are safe. Spilled values live in stack slots for
their whole life; `rewrite_program` loads them into scratch registers (kept out of the allocatable pool) around
each instruction that touches them. Under pressure the value spilled is the cheapest to spill for the register it
frees: the fewest reloads per position held, a use weighing LOOP_WEIGHT times more for each loop around it (then the
one needed again last), so a buffer pointer read in an inner loop keeps its register, a store's address needed only
after the loop goes to the stack, and a short temporary is not spilled for a long-lived constant.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from tinycore.renderer.isa.operands import (
    Instruction,
    Label,
    Memory,
    Operand,
    Register,
    RegisterLike,
    SubRegister,
    VirtualRegister,
)

LOOP_WEIGHT = 8
"""How many times a use inside a loop counts against one outside it when choosing what to spill (a loop runs many
times; the exact factor matters little, that a use in an inner loop outweighs a few outside it does)."""


@dataclass
class Interval:
    """Where a virtual register is live: from its first to its last mention, and the registers it must avoid.

    `uses` are the positions that mention it, sorted, plus the back jump of each loop it lives across and is
    mentioned in (the next iteration's use); empty when unknown, and the end then stands for every use. `weight` is
    what spilling it costs per position it holds a register: its mentions, each LOOP_WEIGHT ** (the loops around
    it), over its length."""

    value: VirtualRegister
    start: int
    end: int
    avoid: frozenset[Register] = frozenset()
    uses: tuple[int, ...] = ()
    weight: float = 0.0

    def next_use(self, position: int) -> int:
        """The first use at or after `position` (the end when `uses` says nothing about it)."""
        found = bisect.bisect_left(self.uses, position)
        return self.uses[found] if found < len(self.uses) else self.end


@dataclass
class Allocation:
    """The allocator's answer: a register per kept value, a byte offset in the spill area per spilled one."""

    assigned: dict[VirtualRegister, Register] = field(default_factory=dict)
    spill_offset: dict[VirtualRegister, int] = field(default_factory=dict)
    spill_bytes: int = 0

    def used_registers(self) -> set[Register]:
        """Every physical register some value was given."""
        return set(self.assigned.values())


def live_intervals(program: list[Instruction], label_op: str = "label") -> dict[VirtualRegister, Interval]:
    """The live interval of every virtual register in `program`, stretched over the loops it is live into.

    Intervals also record `avoid`: the registers clobbered by an instruction strictly inside the interval, which the
    value cannot be kept in.
    """
    # one pass over the operands by exact type (the operand classes are final dataclasses): the renderers call this
    # once per kernel over thousands of instructions, where a helper call and an isinstance chain per operand showed
    intervals: dict[VirtualRegister, Interval] = {}
    mentioned_at: dict[VirtualRegister, list[int]] = {}
    label_at: dict[Label, int] = {}
    jumps: list[tuple[int, Label]] = []

    def mention(value: VirtualRegister, position: int) -> None:
        interval = intervals.get(value)
        if interval is None:
            intervals[value] = Interval(value, position, position)
            mentioned_at[value] = [position]
        else:
            interval.end = position
            uses = mentioned_at[value]
            if uses[-1] != position:
                uses.append(position)

    for position, instruction in enumerate(program):
        for operand in instruction.operands:
            kind = type(operand)
            if kind is VirtualRegister:
                mention(operand, position)  # type: ignore[arg-type]
            elif kind is SubRegister:
                mention(operand.value, position)  # type: ignore[union-attr]
            elif kind is Memory:
                for part in (operand.base, operand.index):  # type: ignore[union-attr]
                    if type(part) is VirtualRegister:
                        mention(part, position)
            elif kind is Label:
                if instruction.op == label_op:
                    label_at[operand] = position  # type: ignore[index]
                else:
                    jumps.append((position, operand))  # type: ignore[arg-type]
    loops = [(label_at[label], position) for position, label in jumps if label_at.get(label, position) < position]
    changed = True
    while changed and loops:  # nested loops can stretch an interval into an enclosing loop, so repeat to a fixed point
        changed = False
        for head, back_jump in loops:
            for interval in intervals.values():
                if interval.start < head <= interval.end < back_jump:
                    interval.end, changed = back_jump, True
    clobbering = [
        (position, instruction.clobbers) for position, instruction in enumerate(program) if instruction.clobbers
    ]
    weight_at = [LOOP_WEIGHT ** depth for depth in _loop_depths(len(program), loops)]
    for interval in intervals.values():
        if clobbering:
            interval.avoid = frozenset(
                r for position, regs in clobbering if interval.start < position < interval.end for r in regs
            )
        uses = mentioned_at[interval.value]
        again = [back_jump for head, back_jump in loops if interval.start < head and back_jump <= interval.end
                 and bisect.bisect_left(uses, head) < bisect.bisect_right(uses, back_jump)] if loops else None
        interval.uses = tuple(sorted({*uses, *again})) if again else tuple(uses)
        interval.weight = sum(map(weight_at.__getitem__, uses)) / (interval.end - interval.start + 1)
    return intervals


def _loop_depths(length: int, loops: list[tuple[int, int]]) -> list[int]:
    """The number of loops around each of `length` positions, from the loops' (head, back jump) positions."""
    change = [0] * (length + 1)
    for head, back_jump in loops:
        change[head] += 1
        change[back_jump + 1] -= 1
    depths, depth = [], 0
    for step in change[:length]:
        depth += step
        depths.append(depth)
    return depths


def linear_scan(
    intervals: dict[VirtualRegister, Interval],
    registers: dict[str, list[Register]],
    blocked: dict[Register, int] | None = None,
) -> Allocation:
    """Give each interval a register of its kind from `registers` (tried in order), or a spill slot.

    `blocked[r] = p` keeps register `r` from values that start before position `p` (an incoming argument still
    unread). When no register is free, a live value or the new one is spilled: the one of least `weight` (the fewest
    reloads weighted by loop depth, per position), of those the one needed again last (`Interval.next_use`; the new
    one's next use is its first after its start), then the one ending last, then the one given its register first.
    Without weights and uses this is the live value that ends last.
    """
    # registers are bits of a mask per kind, bit i the pool's i-th register, so the free register tried first is the
    # lowest usable bit; live values sit in a heap by end: a kernel of ~1000 values allocated in tens of ms with
    # per-register sets and a scan of every live value per interval
    blocked = blocked or {}
    allocation = Allocation()
    bit = {kind: {r: 1 << i for i, r in enumerate(regs)} for kind, regs in registers.items()}
    free = {kind: (1 << len(regs)) - 1 for kind, regs in registers.items()}
    blocked_until = [(bit[r.kind][r], position) for r, position in blocked.items() if r in bit.get(r.kind, {})]
    ending: list[tuple[int, int, Interval]] = []  # (end, order given, interval) of the live values, a heap
    live: dict[int, Interval] = {}  # order given -> interval, for the live values not yet expired or spilled
    order = 0

    def spill(interval: Interval) -> None:
        size = interval.value.bits // 8
        offset = -(-allocation.spill_bytes // size) * size
        allocation.spill_offset[interval.value] = offset
        allocation.spill_bytes = offset + size

    def mask(kind: str, avoid: frozenset[Register]) -> int:
        return sum(bit[kind].get(r, 0) for r in avoid) if avoid else 0

    for interval in sorted(intervals.values(), key=lambda i: (i.start, i.value.index)):
        # a value read last where this one is written gives it its register: an instruction reads its operands
        # before it writes, so `mov b, a` with `a` dead after it needs no copy (a two-operand op's `mov` disappears)
        while ending and ending[0][0] <= interval.start:
            _, given, done = heapq.heappop(ending)
            if live.pop(given, None) is not None:
                register = allocation.assigned[done.value]
                free[register.kind] |= bit[register.kind][register]
        kind = interval.value.kind
        if kind not in free:
            raise ValueError(f"no registers of kind {kind!r} were given to the allocator")
        refused = mask(kind, interval.avoid)
        for register_bit, position in blocked_until:
            if position > interval.start:
                refused |= register_bit
        usable = free[kind] & ~refused
        if usable:
            chosen = registers[kind][(usable & -usable).bit_length() - 1]
            allocation.assigned[interval.value] = chosen
            free[kind] &= ~bit[kind][chosen]
            heapq.heappush(ending, (interval.end, order, interval))
            live[order] = interval
            order += 1
            continue
        victim_order, victim, victim_key = -1, None, (0.0, -1, -1)
        for given, candidate in live.items():  # in the order given: the first of the equally cheap wins ties
            if candidate.value.kind != kind or bit[kind][allocation.assigned[candidate.value]] & refused:
                continue
            key = (-candidate.weight, candidate.next_use(interval.start), candidate.end)
            if victim is None or key > victim_key:
                victim_order, victim, victim_key = given, candidate, key
        if victim is not None and victim_key > (-interval.weight, interval.next_use(interval.start + 1), interval.end):
            allocation.assigned[interval.value] = allocation.assigned.pop(victim.value)
            del live[victim_order]
            spill(victim)
            heapq.heappush(ending, (interval.end, order, interval))
            live[order] = interval
            order += 1
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
        in_memory: Callable[[Instruction, int, int], Memory | None] | None = None,
    ) -> None:
        self.allocation, self.scratch, self.view, self.load, self.store = allocation, scratch, view, load, store
        self.in_memory = in_memory
        self._named: dict[VirtualRegister, Register] = {}  # each allocated value's register at its own width

    def rewrite(self, instruction: Instruction) -> list[Instruction]:
        renamed = self._renamed(instruction)
        if renamed is not None:
            return [renamed]
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
                if not spare and mode == "w":  # written after every read: a read operand's scratch may take it
                    spare = [r for r in self.scratch.get(value.kind, []) if r.number in used]
                if not spare:
                    raise RuntimeError(f"{instruction.op}: more spilled {value.kind} operands than scratch registers")
                taken[value] = self.view(spare[0], value.bits)
                if "r" in mode:
                    loads.append(self.load(taken[value], offset))
            if "w" in mode and not any(s.operands[-1] == taken[value] for s in stores):
                stores.append(self.store(offset, taken[value]))
            return taken[value]

        placed: dict[int, Operand] = {}
        # a spilled value only read where the instruction takes memory is read from its slot (one memory operand)
        direct = None
        if self.in_memory is not None and not any(isinstance(o, Memory) for o in instruction.operands):
            for i, operand in enumerate(instruction.operands):
                if isinstance(operand, VirtualRegister) and instruction.access[i] == "r" and \
                        operand in self.allocation.spill_offset and instruction.operands.count(operand) == 1:
                    slot = self.in_memory(instruction, i, self.allocation.spill_offset[operand])
                    if slot is not None:
                        direct, placed[i] = i, slot
                        break
        # reads are placed before writes so a value both read and written gets one load and one store
        for i in sorted(range(len(instruction.operands)), key=lambda i: instruction.access[i] == "w"):
            operand, mode = instruction.operands[i], instruction.access[i]
            if i == direct:
                continue
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
        return [*loads, Instruction(instruction.op, operands, instruction.access, instruction.clobbers,
                                    instruction.mask), *stores]

    def _renamed(self, instruction: Instruction) -> Instruction | None:
        """`instruction` with its values renamed to their registers, or None when it touches a spilled value (most
        instructions touch none: this path skips the scratch bookkeeping)."""
        assigned, view, named = self.allocation.assigned, self.view, self._named
        operands: list[Operand] = []
        for operand in instruction.operands:
            if isinstance(operand, VirtualRegister):
                register = named.get(operand)
                if register is None:
                    register = assigned.get(operand)
                    if register is None:
                        return None
                    register = named[operand] = view(register, operand.bits)
                operands.append(register)
            elif isinstance(operand, SubRegister):
                register = assigned.get(operand.value)
                if register is None:
                    return None
                operands.append(view(register, operand.bits))
            elif isinstance(operand, Memory):
                address: list[RegisterLike | None] = []
                for part in (operand.base, operand.index):
                    if isinstance(part, VirtualRegister):
                        register = assigned.get(part)
                        if register is None:
                            return None
                        address.append(view(register, part.bits))
                    else:
                        address.append(part)
                operands.append(operand.with_registers(address[0], address[1]))
            else:
                operands.append(operand)
        return Instruction(instruction.op, tuple(operands), instruction.access, instruction.clobbers, instruction.mask)


def rewrite_program(
    program: list[Instruction],
    allocation: Allocation,
    scratch: dict[str, list[Register]],
    view: Callable[[Register, int], Register],
    load: Callable[[Register, int], Instruction],
    store: Callable[[int, Register], Instruction],
    in_memory: Callable[[Instruction, int, int], Memory | None] | None = None,
) -> list[Instruction]:
    """`program` over physical registers: allocated values renamed, spilled ones loaded into and stored from scratch.

    `view(register, bits)` is the register's name at a width (rax, eax); `load(register, offset)` and
    `store(offset, register)` build the instructions that move a value between a register and its spill slot;
    `in_memory(instruction, operand index, offset)`, where given, is the spill slot as that operand when the
    instruction can read it from memory there (None when not), which saves the load into a scratch register.
    """
    rewriter = _SpillRewriter(allocation, scratch, view, load, store, in_memory)
    return [out for instruction in program for out in rewriter.rewrite(instruction)]
