"""Operands and instructions of a machine-code program, independent of any instruction set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Register:
    """A physical register: its assembler name, its number in the encoding, its width in bits and its class.

    The class (`kind`) is what the allocator partitions by: "gpr" for general registers, "vec" for vector registers,
    "mask" for predicate registers.
    """

    name: str
    number: int
    bits: int
    kind: str

    def __hash__(self) -> int:
        # encoders key their caches by operands: the name's (cached) string hash, not a tuple of the four fields
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class VirtualRegister:
    """A value before allocation: a register of class `kind` and width `bits`, to be given a physical one."""

    index: int
    kind: str
    bits: int

    def __hash__(self) -> int:
        # the allocator and the renderers key dicts by values tens of thousands of times per kernel: the index alone
        # (unique per function) hashes without the field tuple the generated hash builds; equal values share it
        return self.index

    def __repr__(self) -> str:
        return f"%{self.kind}{self.index}"


@dataclass(frozen=True)
class SubRegister:
    """The low `bits` bits of a virtual register (x86's eax of rax, al of eax): the allocator gives it the register
    its `value` gets, named at this width. A spilled value is loaded whole into a scratch register first."""

    value: VirtualRegister
    bits: int

    def __repr__(self) -> str:
        return f"{self.value!r}:{self.bits}"


RegisterLike = Union[Register, VirtualRegister]


@dataclass(frozen=True)
class Label:
    """A position in the program that jumps and RIP-relative references name; bound by the assembler."""

    name: str

    def __repr__(self) -> str:
        return f".{self.name}"


@dataclass(frozen=True)
class Memory:
    """A memory reference `[base + index*scale + disp]` of `bits` bits.

    `label` makes it relative to the instruction pointer (the displacement is then added to the label's address);
    `broadcast` marks an element loaded once and repeated across the vector (EVEX embedded broadcast).
    """

    base: RegisterLike | None = None
    index: RegisterLike | None = None
    scale: int = 1
    disp: int = 0
    bits: int = 64
    label: Label | None = None
    rip: bool = False
    broadcast: bool = False

    def __post_init__(self) -> None:
        if self.scale not in (1, 2, 4, 8):
            raise ValueError(f"memory scale must be 1, 2, 4 or 8, not {self.scale}")
        if (self.rip or self.label is not None) and (self.base is not None or self.index is not None):
            raise ValueError("a RIP-relative memory reference takes no base or index register")

    def registers(self) -> tuple[RegisterLike, ...]:
        """The registers this reference reads to form its address."""
        return tuple(r for r in (self.base, self.index) if r is not None)

    def with_registers(self, base: RegisterLike | None, index: RegisterLike | None) -> Memory:
        """The same reference with its address registers replaced (used when registers are allocated)."""
        return Memory(base, index, self.scale, self.disp, self.bits, self.label, self.rip, self.broadcast)


Operand = Union[Register, VirtualRegister, SubRegister, Memory, Label, int]


@dataclass
class Instruction:
    """One machine instruction: a mnemonic and its operands, with how each operand is accessed.

    `access` has one entry per operand: "r" read, "w" written, "rw" both. Memory operands and immediates are "r"
    for the purpose of allocation (their address registers are read). `clobbers` lists physical registers the
    instruction overwrites beyond its operands (division's rdx, a call's caller-saved set). `mask` is the physical
    predicate register it runs under (x86's AVX-512 opmask: a blend by a compare's lanes), None for none; it is not
    allocated, and passes through allocation unchanged.
    """

    op: str
    operands: tuple[Operand, ...] = ()
    access: tuple[str, ...] = ()
    clobbers: tuple[Register, ...] = field(default_factory=tuple)
    mask: Register | None = None

    def __post_init__(self) -> None:
        if not self.access:
            self.access = tuple("w" if i == 0 and len(self.operands) > 1 else "r" for i in range(len(self.operands)))
        if len(self.access) != len(self.operands):
            raise ValueError(f"{self.op}: {len(self.operands)} operands but {len(self.access)} access modes")

    def __repr__(self) -> str:
        under = "" if self.mask is None else f"{{{self.mask.name}}}"
        return f"{self.op}{under} {', '.join(map(repr, self.operands))}"
