"""Instruction selection: the linear program (codegen's UOps in execution order) to x86-64 over virtual registers.

A first, deliberately small cut: scalar float32 elementwise kernels (loads, stores, + - * / max sqrt neg, compares
and where, int32-to-float casts) over float32 buffers, with loops and integer index arithmetic. Each UOp is matched
by a rule of `x86_selection` (a PatternMatcher), which emits into a `Selection`; a UOp no rule takes is refused with
an error naming it. Nothing registers this as a device renderer yet: the CPU's C and LLVM renderers do the work.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import cast

from tiny_cpu.x86.function import FunctionBuilder
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.isa import Label, Memory, Operand, VirtualRegister
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, RewriteFunction, UPat
from tinycore.uop.uop import UOp

_INDEX_DTYPES = (dtypes.int32, dtypes.int64)


class SelectionError(NotImplementedError):
    """A construct of the linear program the x86 instruction selection has no rule for."""


class ScalarX86Contract(RendererContract):
    """What the selection accepts, told to codegen: a CPU target with no vectors, threads or fused multiply-add."""

    device = "CPU"
    has_local = False
    has_shared = False
    has_threads = False
    global_max = None
    local_max = None
    decompose_transcendentals = True


class Selection:
    """The state of selecting one kernel: the function being built and what each UOp became (a register, an
    immediate, or a memory reference)."""

    def __init__(self, uops: list[UOp]) -> None:
        self.uops = uops
        buffers = sorted(u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL)
        variables = sorted(str(u.arg[0]) for u in uops if u.op is Ops.DEFINE_VAR)
        self.argument_order = {("buffer", arg): i for i, arg in enumerate(buffers)}
        self.argument_order.update({("variable", name): len(buffers) + i for i, name in enumerate(variables)})
        self.builder = FunctionBuilder(integer_arguments=len(self.argument_order))
        self.values: dict[UOp, Operand] = {}
        self.loops: list[tuple[VirtualRegister, Label, Label]] = []

    def refuse(self, uop: UOp, why: str = "") -> None:
        """Raise the error for a UOp the selection cannot take."""
        raise SelectionError(
            f"the x86 renderer cannot select {uop.op} (dtype {uop.dtype}, arg {uop.arg!r})"
            f"{': ' + why if why else ''}; render this kernel with DEV=CPU or DEV=CPU:LLVM"
        )

    def register(self, uop: UOp) -> VirtualRegister:
        """The register holding `uop`'s value (an integer immediate is moved into a fresh register)."""
        value = self.values.get(uop)
        if isinstance(value, VirtualRegister):
            return value
        if isinstance(value, int):
            fresh = self.builder.value("gpr", 64)
            self.builder.emit("mov", fresh, value)
            return fresh
        self.refuse(uop, "its value is not in a register")
        raise AssertionError  # unreachable: refuse raises

    def integer(self, uop: UOp) -> VirtualRegister | int:
        """An index value: an immediate when it is a constant, else its register."""
        value = self.values.get(uop)
        if isinstance(value, int):
            return value
        return self.register(uop)

    def select(self) -> bytes:
        """The machine code of the kernel: a System V function taking the buffers (by DEFINE_GLOBAL number), then
        the variables (by name)."""
        for uop in self.uops:
            if x86_selection.rewrite(uop, self) is None:
                self.refuse(uop, "no selection rule matches it")
        self.builder.ret()
        return self.builder.assemble()


def _float_constant(ctx: Selection, uop: UOp) -> str:
    bits = struct.unpack("<I", struct.pack("<f", float(uop.arg)))[0]
    carrier, value = ctx.builder.value("gpr", 32), ctx.builder.value("vec", 128)
    ctx.builder.emit("mov", carrier, bits)
    ctx.builder.emit("vmovd", value, carrier)
    ctx.values[uop] = value
    return ""


def _integer_constant(ctx: Selection, uop: UOp) -> str:
    ctx.values[uop] = int(uop.arg)
    return ""


def _argument(ctx: Selection, uop: UOp) -> str:
    key = ("buffer", uop.arg) if uop.op is Ops.DEFINE_GLOBAL else ("variable", str(uop.arg[0]))
    ctx.values[uop] = ctx.builder.arguments[ctx.argument_order[key]]
    return ""


def _range(ctx: Selection, uop: UOp) -> str:
    counter, top, done = ctx.builder.value("gpr", 64), ctx.builder.label(), ctx.builder.label()
    ctx.builder.emit("mov", counter, 0)
    ctx.builder.bind(top)
    ctx.builder.emit("cmp", counter, ctx.integer(uop.src[0]))
    ctx.builder.emit("jge", done)
    ctx.loops.append((counter, top, done))
    ctx.values[uop] = counter
    return ""


def _end(ctx: Selection, uop: UOp) -> str:
    for _ in range(sum(1 for source in uop.src if source.op is Ops.RANGE) or 1):
        counter, top, done = ctx.loops.pop()
        ctx.builder.emit("add", counter, 1)
        ctx.builder.emit("jmp", top)
        ctx.builder.bind(done)
    return ""


def _index(ctx: Selection, uop: UOp) -> str:
    if len(uop.src) > 2:
        ctx.refuse(uop, "gated loads and stores are not selected yet")
    pointer = uop.src[0].dtype
    element: DType = pointer.base if isinstance(pointer, PtrDType) else pointer
    if element != dtypes.float32:
        ctx.refuse(uop, "only float32 buffers are selected yet")
    base, index = ctx.register(uop.src[0]), ctx.integer(uop.src[1])
    if isinstance(index, int):
        ctx.values[uop] = Memory(base, None, 1, index * element.itemsize, element.itemsize * 8)
    else:
        ctx.values[uop] = Memory(base, index, element.itemsize, 0, element.itemsize * 8)
    return ""


def _load(ctx: Selection, uop: UOp) -> str:
    if len(uop.src) > 1:
        ctx.refuse(uop, "loads with an alternative value are not selected yet")
    address = ctx.values[uop.src[0]]
    value = ctx.builder.value("vec", 128)
    ctx.builder.emit("vmovss", value, address)
    ctx.values[uop] = value
    return ""


def _store(ctx: Selection, uop: UOp) -> str:
    if uop.arg is not None:
        ctx.refuse(uop, "combining (atomic) stores are not selected yet")
    ctx.builder.emit("vmovss", ctx.values[uop.src[0]], ctx.register(uop.src[1]))
    return ""


_FLOAT_BINARY = {Ops.ADD: "vaddss", Ops.SUB: "vsubss", Ops.MUL: "vmulss", Ops.FDIV: "vdivss", Ops.MAX: "vmaxss"}
_PREDICATES = {Ops.CMPLT: 1, Ops.CMPEQ: 0, Ops.CMPNE: 4}  # lt, eq, neq (true when unordered, as != is)


def _float_binary(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("vec", 128)
    ctx.builder.emit(_FLOAT_BINARY[uop.op], result, ctx.register(uop.src[0]), ctx.register(uop.src[1]))
    ctx.values[uop] = result
    return ""


def _float_unary(ctx: Selection, uop: UOp) -> str:
    result, source = ctx.builder.value("vec", 128), ctx.register(uop.src[0])
    if uop.op is Ops.SQRT:
        ctx.builder.emit("vsqrtss", result, source, source)
    else:  # NEG: flip the sign bit
        carrier, sign = ctx.builder.value("gpr", 32), ctx.builder.value("vec", 128)
        ctx.builder.emit("mov", carrier, 0x80000000)
        ctx.builder.emit("vmovd", sign, carrier)
        ctx.builder.emit("vxorps", result, source, sign)
    ctx.values[uop] = result
    return ""


def _multiply_add(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("vec", 128)
    ctx.builder.emit("vmovaps", result, ctx.register(uop.src[2]))
    ctx.builder.emit("vfmadd231ss", result, ctx.register(uop.src[0]), ctx.register(uop.src[1]))
    ctx.values[uop] = result
    return ""


def _float_compare(ctx: Selection, uop: UOp) -> str:
    mask = ctx.builder.value("vec", 128)  # all ones where true: what vblendvps reads
    ctx.builder.emit("vcmpss", mask, ctx.register(uop.src[0]), ctx.register(uop.src[1]), _PREDICATES[uop.op])
    ctx.values[uop] = mask
    return ""


def _where(ctx: Selection, uop: UOp) -> str:
    condition, if_true, if_false = (ctx.register(source) for source in uop.src)
    if condition.kind != "vec":
        ctx.refuse(uop, "only conditions from float compares are selected yet")
    result = ctx.builder.value("vec", 128)
    ctx.builder.emit("vblendvps", result, if_false, if_true, condition)
    ctx.values[uop] = result
    return ""


def _integer_alu(ctx: Selection, uop: UOp) -> str:
    left, right = ctx.integer(uop.src[0]), ctx.integer(uop.src[1])
    if isinstance(left, int) and isinstance(right, int):
        ctx.refuse(uop, "constant operands should have been folded")
    result = ctx.builder.value("gpr", 64)
    if uop.op is Ops.MUL and isinstance(right, int):
        ctx.builder.emit("imul", result, ctx.register(uop.src[0]), right)
    elif uop.op is Ops.MUL and isinstance(left, int):
        ctx.builder.emit("imul", result, right, left)
    else:
        ctx.builder.emit("mov", result, left)
        ctx.builder.emit({Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "imul"}[uop.op], result, right)
    ctx.values[uop] = result
    return ""


def _integer_to_float(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("vec", 128)
    ctx.builder.emit("vxorps", result, result, result)  # no false dependency on an old value of the register
    ctx.builder.emit("vcvtsi2ss", result, result, ctx.register(uop.src[0]))
    ctx.values[uop] = result
    return ""


def _nothing(ctx: Selection, uop: UOp) -> str:
    return ""


# the rules answer "" (handled), not a UOp: PatternMatcher passes any answer that is not None through
x86_selection = PatternMatcher(
    cast(
        Sequence[tuple[UPat, RewriteFunction]],
        [
            (UPat(Ops.CONST, dtype=dtypes.float32, name="uop"), _float_constant),
            (UPat(Ops.CONST, dtype=_INDEX_DTYPES, name="uop"), _integer_constant),
            (UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR), name="uop"), _argument),
            (UPat(Ops.RANGE, name="uop"), _range),
            (UPat(Ops.END, name="uop"), _end),
            (UPat(Ops.INDEX, name="uop"), _index),
            (UPat(Ops.LOAD, dtype=dtypes.float32, name="uop"), _load),
            (UPat(Ops.STORE, name="uop"), _store),
            (UPat(tuple(_FLOAT_BINARY), dtype=dtypes.float32, name="uop"), _float_binary),
            (UPat((Ops.SQRT, Ops.NEG), dtype=dtypes.float32, name="uop"), _float_unary),
            (UPat(Ops.MULACC, dtype=dtypes.float32, name="uop"), _multiply_add),
            (
                UPat(
                    tuple(_PREDICATES),
                    dtype=dtypes.bool,
                    src=(UPat(dtype=dtypes.float32), UPat(dtype=dtypes.float32)),
                    name="uop",
                ),
                _float_compare,
            ),
            (UPat(Ops.WHERE, dtype=dtypes.float32, name="uop"), _where),
            (UPat((Ops.ADD, Ops.SUB, Ops.MUL), dtype=_INDEX_DTYPES, name="uop"), _integer_alu),
            (UPat(Ops.CAST, dtype=dtypes.float32, src=(UPat(dtype=dtypes.int32),), name="uop"), _integer_to_float),
            (UPat((Ops.SINK, Ops.NOOP, Ops.GROUP, Ops.BARRIER), name="uop"), _nothing),
        ],
    )
)
"""The selection rules: each takes one UOp of the linear program and emits its x86 instructions into the Selection
(the rule's answer "" only says the UOp was handled)."""


def select_kernel(uops: list[UOp]) -> bytes:
    """The x86-64 machine code of a linear program, or a SelectionError naming the first UOp it cannot take."""
    return Selection(uops).select()
