"""What the renderers into SSA-register languages (PTX, LLVM IR) share: the context of registers and lines, the rules
every such language has, instruction templates filled per type, constants' bits (see docs/architecture.md)."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from tinycore.dtype import DType, dtypes
from tinycore.renderer.cstyle import bfloat16_bits
from tinycore.renderer.renderer import Renderer, kernel_name, text_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

REDUCE_OPS = {"add": Ops.ADD, "mul": Ops.MUL}
"""A scatter reduce's name -> the ALU op that combines (max and min are a compare and a select)."""
_FLOAT_FORMATS = {dtypes.float16: ("<e", "<H"), dtypes.float32: ("<f", "<I"), dtypes.float64: ("<d", "<Q")}
Pointer = tuple[str, "str | None", str]
"""An INDEX as the context keeps it for the LOAD or STORE through it: (address, gate, what the language adds)."""

class SSAContext:
    """The state of rendering one linear program into an SSA-register language: each UOp's register, the lines."""

    language, indent = "SSA", "\t"
    emulated_floats: frozenset[DType] = frozenset()
    """The renderer's `emulated_floats`: a scatter reduce combines them in float32, as codegen computes them."""
    # each language's own: the register or literal of a constant, an ALU op over registers of a dtype (the values'
    # type, not a condition's) with a count of lanes (and an ALU UOp so, where its arg says more: `compute`), a
    # conversion by value between types as C converts, the module
    constant: Callable[[object, DType], str]
    arithmetic: Callable[[Ops, list[str], DType, int], str]
    compute: Callable[[UOp, list[str], DType, int], str]
    convert: Callable[[str, DType, DType, int], str]
    run: Callable[[str], str]

    def __init__(self, uops: list[UOp], renderer: Renderer | None = None):
        self.uops, self.renderer = uops, renderer
        self.values: dict[UOp, str] = {}  # each rendered UOp's register (or literal)
        self.pointers: dict[UOp, Pointer] = {}
        self.lines: list[str] = []
        self.declarations: list[str] = []  # what goes before the instructions
        self.conditionals: list[str] = []  # the labels that end the open IF blocks, innermost last

    def emit(self, *lines: str) -> None:
        """Append instructions."""
        for line in lines:  # the hot path of every renderer here: no list or map built per call
            self.lines.append(self.indent + line)

    def value(self, uop: UOp) -> str:
        """The register holding `uop`'s value (a constant where it is used)."""
        if uop in self.values:
            return self.values[uop]
        if uop.op is Ops.CONST:
            return self.constant(uop.arg, uop.dtype)
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")

    def pointer(self, uop: UOp) -> Pointer:
        """The pointer the LOAD or STORE `uop` goes through: its first source's (an INDEX or a pointer CAST of one)."""
        if (found := self.pointers.get(uop.src[0])) is None:
            raise ValueError(f"{uop.op.name} needs an INDEX (or a pointer CAST of one) first, got {uop.src[0].op}")
        return found

    def render_uops(self, rules: PatternMatcher | None) -> None:
        """Each UOp rendered into this context by the first of `rules` (the renderer's) that matches it."""
        assert rules is not None, f"the {self.language} renderer has no rules"
        for uop in self.uops:
            if rules.rewrite(uop, self) is None:
                raise ValueError(f"the {self.language} renderer cannot render {uop.op} (dtype {uop.dtype}, arg "
                                 f"{uop.arg!r}): it is not part of the linear program contract")

    def lanes(self, uop: UOp) -> int:
        """How many lanes the ALU `uop` computes (a scalar language: one; a vector one overrides `operand` too)."""
        return 1

    def operand(self, uop: UOp, count: int) -> str:
        """`uop`'s register with `count` lanes (a scalar language's: its register)."""
        return self.value(uop)

    def alu(self, uop: UOp) -> str:
        """The register of the ALU UOp `uop`, computed on its operands' dtype (for WHERE, the values')."""
        count = self.lanes(uop)
        operands = [self.operand(source, count) for source in uop.src]
        return self.compute(uop, operands, (uop.src[1] if uop.op is Ops.WHERE else uop.src[0]).dtype.scalar, count)

    def cast(self, uop: UOp) -> str:
        """The register of the CAST `uop` (of a scalar or of a vector of its lanes), converted as C converts."""
        source, count = uop.src[0], uop.dtype.count
        text = self.operand(source, count)
        return text if source.dtype.scalar == uop.dtype.scalar else \
            self.convert(text, source.dtype.scalar, uop.dtype.scalar, count)

    def combine(self, reduce: str, old: str, new: str, dtype: DType) -> str:
        """The stored `old` combined with `new` by a scatter reduce: max as C's (old<new)?new:old and min as
        (new<old)?new:old, the compare and select codegen's "SSA lowering" makes of MAX (the languages spell no MAX)."""
        if dtype in self.emulated_floats:
            old, new = (self.convert(text, dtype, dtypes.float32, 1) for text in (old, new))
            return self.convert(self.combine(reduce, old, new, dtypes.float32), dtypes.float32, dtype, 1)
        if reduce in ("max", "min"):
            less = self.arithmetic(Ops.CMPLT, [old, new] if reduce == "max" else [new, old], dtype, 1)
            return self.arithmetic(Ops.WHERE, [less, new, old], dtype, 1)
        if reduce not in REDUCE_OPS:
            raise ValueError(f"unknown scatter reduce {reduce!r}: expected add, mul, max or min")
        return self.arithmetic(REDUCE_OPS[reduce], [old, new], dtype, 1)

ContextT = TypeVar("ContextT", bound=SSAContext)

def ssa_rules(table: Mapping[Ops | tuple[Ops, ...], Callable[[ContextT, UOp], str | None]]) -> PatternMatcher:
    """Rendering rules from `table` (op or ops -> function(ctx, uop)), then those every SSA language shares: the
    function renders its UOp into the context and returns its register (kept as the UOp's), or None for a statement."""
    shared: dict[Ops | tuple[Ops, ...], Callable[[ContextT, UOp], str | None]] = {
        (Ops.NOOP, Ops.PRECAST, Ops.BIND): lambda ctx, uop: ctx.value(uop.src[0]),
        tuple(GroupOp.ALU): SSAContext.alu, (Ops.SINK, Ops.GROUP): lambda ctx, uop: None}

    def rule(function: Callable[[ContextT, UOp], str | None]) -> Callable[[ContextT, UOp], str]:
        def render(ctx: ContextT, uop: UOp) -> str:
            if (register := function(ctx, uop)) is not None:
                ctx.values[uop] = register
            return ""
        return render
    return text_rules([(UPat(op, name="uop"), rule(function)) for op, function in [*table.items(), *shared.items()]])

class SSARenderer(Renderer):
    """A renderer into an SSA-register language: each program rendered into a fresh `context` by its rules."""

    guard_integer_division = True  # codegen's pass "guarded division": a division by 0 or of int min by -1 traps
    context: type[SSAContext]

    def render(self, uops: list[UOp]) -> str:
        """The module of the linear program `uops` (the kernel named from the SINK's arg)."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The module of the linear program `uops` with the kernel called `name`."""
        return self.context(uops, self).run(name)

def fill_types(templates: Iterable[str], fields: Mapping[str, str], registers: Iterable[str]) -> tuple[str, ...]:
    """`templates` with the fields of their type filled in; the `registers` fields and the positional ones ({0},
    {1}: the earlier instructions' registers) are left for `str.format` once the registers are known."""
    kept, templates = {name: f"{{{name}}}" for name in registers}, tuple(templates)
    return tuple(text.format(*(f"{{{n}}}" for n in range(len(templates))), **kept, **fields) for text in templates)

def float_bits(value: float, dtype: DType) -> int:
    """The bits of `value` rounded to the float `dtype` (bfloat16 too); a value beyond its range is an infinity."""
    if dtype == dtypes.bfloat16:
        return bfloat16_bits(value)
    number, bits = _FLOAT_FORMATS[dtype]
    try:
        return int(struct.unpack(bits, struct.pack(number, value))[0])
    except OverflowError:
        return float_bits(math.copysign(math.inf, value), dtype)

def identifier(name: object) -> str:
    """`name` as a register or parameter name: every character but letters, digits and _ replaced by _."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(name))
