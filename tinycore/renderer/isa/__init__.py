"""The base for machine-code renderers: an instruction and operand model and a linear-scan register allocator.

A device plugin that writes machine code for its own chip (tiny-cpu's x86-64 encoder is one) builds on these:
`operands` names registers, memory references and labels; `regalloc` turns a program over virtual registers into
one over physical registers, with spills to stack slots. Nothing here knows an instruction set.
"""

from tinycore.renderer.isa.operands import Instruction, Label, Memory, Operand, Register, SubRegister, VirtualRegister
from tinycore.renderer.isa.regalloc import Allocation, Interval, linear_scan, live_intervals, rewrite_program

__all__ = [
    "Instruction",
    "Label",
    "Memory",
    "Operand",
    "Register",
    "SubRegister",
    "VirtualRegister",
    "Allocation",
    "Interval",
    "linear_scan",
    "live_intervals",
    "rewrite_program",
]
