"""Instruction selection: the linear program (codegen's UOps in execution order) to x86-64 over virtual registers.

A first, deliberately small cut: float32 elementwise kernels over float32 buffers, scalar or in vectors of 4, 8 or 16
lanes (xmm, ymm, zmm): loads, stores, + - * / max sqrt neg, multiply-add, compares and where, broadcasts of one
scalar, int32-to-float casts of scalars, with loops, integer index arithmetic, and loads and stores gated by
integer compares (padding), and reductions into float32 accumulators (DEFINE_REG, kept in registers).
Each UOp is matched by a rule of `x86_selection` (a PatternMatcher), which emits into a `Selection`; a UOp no rule
takes is refused with an error naming it. Nothing registers this as a device renderer yet: the CPU's C and LLVM
renderers do the work.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from tiny_cpu.x86.encoding import fits_int32
from tiny_cpu.x86.function import FunctionBuilder
from tiny_cpu.x86.registers import rax, rdx, view
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.isa import Label, Memory, Operand, VirtualRegister
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, RewriteFunction, UPat
from tinycore.uop.uop import UOp

_INTEGER_DTYPES = (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64)
_UNSIGNED = (dtypes.uint32, dtypes.uint64)
SELECTED_DTYPES = frozenset({dtypes.float32, dtypes.bool, *_INTEGER_DTYPES})
"""The scalar dtypes the selection has rules for."""


def _integer_bits(dtype: DType) -> int:
    """The general-register width of an integer or bool value: 32-bit ints wrap at 32 bits, in 32-bit registers."""
    return 8 if dtype == dtypes.bool else 64 if dtype.itemsize == 8 else 32


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


class VectorX86Contract(ScalarX86Contract):
    """The same target with float32 vectors of 8 lanes (AVX2 ymm) and lane-mask compares and selects."""

    vector_widths = {dtypes.float32: (8,)}
    vector_alu_ops = frozenset(
        {
            Ops.ADD,
            Ops.SUB,
            Ops.MUL,
            Ops.FDIV,
            Ops.MAX,
            Ops.NEG,
            Ops.SQRT,
            Ops.MULACC,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.CMPEQ,
            Ops.WHERE,
        }
    )
    vector_masks = True


SelectionRule = Callable[["Selection", UOp], str]


def _shape(uop: UOp) -> tuple[int, str]:
    """The register width and the instruction suffix of a float32 value: a scalar is the low lane of an xmm."""
    count = uop.dtype.count
    if count == 1:
        return 128, "ss"
    if count not in (4, 8, 16):
        raise SelectionError(f"the x86 renderer has no {count}-lane float32 vectors (only 4, 8 and 16): {uop.op}")
    return 32 * count, "ps"


class Selection:
    """The state of selecting one kernel: the function being built and what each UOp became (a register, an
    immediate, or a memory reference)."""

    def __init__(self, uops: list[UOp], entry: bool = False) -> None:
        self.uops, self.entry = uops, entry
        buffers = sorted(u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL)
        variables = sorted(str(u.arg[0]) for u in uops if u.op is Ops.DEFINE_VAR)
        self.argument_order = {("buffer", arg): i for i, arg in enumerate(buffers)}
        self.argument_order.update({("variable", name): len(buffers) + i for i, name in enumerate(variables)})
        # the CPU queue's entry convention: (const int64 *arguments, int core_id), one word per argument
        variable_bits = [
            _integer_bits(u.dtype)
            for u in sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: str(u.arg[0]))
        ]
        widths = [64, 32] if entry else [64] * len(buffers) + variable_bits
        self.builder = FunctionBuilder(integer_arguments=len(widths), integer_argument_bits=widths)
        self.values: dict[UOp, Operand] = {}
        self.loops: list[tuple[VirtualRegister, Label, Label]] = []
        self.gates: dict[UOp, VirtualRegister] = {}  # an INDEX's gate: a byte register, 1 where the access happens
        self.accumulators: dict[UOp, list[VirtualRegister]] = {}  # a DEFINE_REG's elements, each kept in a register

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
            fresh = self.builder.value("gpr", _integer_bits(uop.dtype))
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
    position = ctx.argument_order[key]
    if not ctx.entry:
        ctx.values[uop] = ctx.builder.arguments[position]
        return ""
    word = Memory(ctx.builder.arguments[0], None, 1, 8 * position, 64)
    value = ctx.builder.value("gpr", 64)
    if uop.op is Ops.DEFINE_GLOBAL:
        ctx.builder.emit("mov", value, word)
    else:  # a variable is the low bits of its word
        value = ctx.builder.value("gpr", _integer_bits(uop.dtype))
        ctx.builder.emit("mov", value, replace(word, bits=value.bits))
    ctx.values[uop] = value
    return ""


def _special(ctx: Selection, uop: UOp) -> str:
    if uop.arg != "core_id" or not ctx.entry:
        ctx.refuse(uop, "only the CPU worker's core_id is known, and only to an entry-convention kernel")
    ctx.values[uop] = ctx.builder.arguments[1]
    return ""


def _range(ctx: Selection, uop: UOp) -> str:
    counter, top, done = ctx.builder.value("gpr", _integer_bits(uop.dtype)), ctx.builder.label(), ctx.builder.label()
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


def _define_register(ctx: Selection, uop: UOp) -> str:
    pointer = uop.dtype
    if not isinstance(pointer, PtrDType) or pointer.base.scalar != dtypes.float32:
        ctx.refuse(uop, "only float32 accumulators are selected yet")
    assert isinstance(pointer, PtrDType)
    bits = 128 if pointer.base.count == 1 else 32 * pointer.base.count
    ctx.accumulators[uop] = [ctx.builder.value("vec", bits) for _ in range(pointer.size)]
    return ""


def _index(ctx: Selection, uop: UOp) -> str:
    if uop.src[0] in ctx.accumulators:  # an element of an accumulator array lives in a register, not memory
        position = ctx.values.get(uop.src[1])
        if not isinstance(position, int) or len(uop.src) > 2:
            ctx.refuse(uop, "accumulator elements are selected only at constant, ungated positions")
        assert isinstance(position, int)
        ctx.values[uop] = ctx.accumulators[uop.src[0]][position]
        return ""
    if len(uop.src) > 2:
        gate = ctx.register(uop.src[2])
        if gate.kind != "gpr":
            ctx.refuse(uop, "a gate must come from an integer compare")
        ctx.gates[uop] = gate
    pointer = uop.src[0].dtype
    element: DType = pointer.base if isinstance(pointer, PtrDType) else pointer
    if element not in (dtypes.float32, *_INTEGER_DTYPES):
        ctx.refuse(uop, "only float32 and 32/64-bit integer buffers are selected yet")
    base, index = ctx.register(uop.src[0]), ctx.integer(uop.src[1])
    if isinstance(index, VirtualRegister) and index.bits != 64:  # addresses are formed from 64-bit registers
        wide = ctx.builder.value("gpr", 64)
        ctx.builder.emit("movsxd", wide, index)
        index = wide
    if isinstance(index, int):
        ctx.values[uop] = Memory(base, None, 1, index * element.itemsize, element.itemsize * 8)
    else:
        ctx.values[uop] = Memory(base, index, element.itemsize, 0, element.itemsize * 8)
    return ""


def _skip_unless(ctx: Selection, gate: VirtualRegister) -> Label:
    """Jump past what follows (to the returned label, bound by the caller) when the byte `gate` is 0."""
    skip = ctx.builder.label()
    ctx.builder.emit("test", gate, gate)
    ctx.builder.emit("je", skip)
    return skip


def _integer_load(ctx: Selection, uop: UOp) -> str:
    address = ctx.values[uop.src[0]]
    if not isinstance(address, Memory) or uop.dtype.count != 1:
        ctx.refuse(uop, "integers are loaded only as scalars from buffers")
    assert isinstance(address, Memory)
    value = ctx.builder.value("gpr", _integer_bits(uop.dtype))
    gate = ctx.gates.get(uop.src[0])
    alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
    skip = None
    if gate is not None:
        ctx.builder.emit("mov", value, ctx.integer(alternatives[0]) if alternatives else 0)
        skip = _skip_unless(ctx, gate)
    elif alternatives:
        ctx.refuse(uop, "an alternative value needs a gated INDEX")
    ctx.builder.emit("mov", value, replace(address, bits=value.bits))
    if skip is not None:
        ctx.builder.bind(skip)
    ctx.values[uop] = value
    return ""


def _load(ctx: Selection, uop: UOp) -> str:
    bits, suffix = _shape(uop)
    address = ctx.values[uop.src[0]]
    if isinstance(address, VirtualRegister):  # an accumulator: copy it, as a later store replaces it
        copy = ctx.builder.value("vec", bits)
        ctx.builder.emit("vmovaps", copy, address)
        ctx.values[uop] = copy
        return ""
    assert isinstance(address, Memory)
    value = ctx.builder.value("vec", bits)
    gate = ctx.gates.get(uop.src[0])
    alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
    skip = None
    if gate is not None:  # the value is the alternative (or 0) unless the gate lets the load happen
        if alternatives:
            ctx.builder.emit("vmovaps", value, ctx.register(alternatives[0]))
        else:
            ctx.builder.emit("vxorps", value, value, value)
        skip = _skip_unless(ctx, gate)
    elif alternatives:
        ctx.refuse(uop, "an alternative value needs a gated INDEX")
    ctx.builder.emit("vmovss" if suffix == "ss" else "vmovups", value, replace(address, bits=uop.dtype.count * 32))
    if skip is not None:
        ctx.builder.bind(skip)
    ctx.values[uop] = value
    return ""


def _store(ctx: Selection, uop: UOp) -> str:
    if uop.arg is not None:
        ctx.refuse(uop, "combining (atomic) stores are not selected yet")
    value = uop.src[1]
    integer = value.dtype in _INTEGER_DTYPES
    if value.dtype.scalar != dtypes.float32 and not integer:
        ctx.refuse(uop, "only float32 values and scalar integers are stored yet")
    address = ctx.values[uop.src[0]]
    register = ctx.register(value)
    if integer:
        if not isinstance(address, Memory):
            ctx.refuse(uop, "integers are stored only to buffers")
        assert isinstance(address, Memory)
        gate = ctx.gates.get(uop.src[0])
        skip = _skip_unless(ctx, gate) if gate is not None else None
        ctx.builder.emit("mov", replace(address, bits=register.bits), register)
        if skip is not None:
            ctx.builder.bind(skip)
        return ""
    if isinstance(address, VirtualRegister):  # an accumulator
        ctx.builder.emit("vmovaps", address, register)
        return ""
    assert isinstance(address, Memory)
    gate = ctx.gates.get(uop.src[0])
    skip = _skip_unless(ctx, gate) if gate is not None else None
    moved = replace(address, bits=value.dtype.count * 32)
    ctx.builder.emit("vmovss" if value.dtype.count == 1 else "vmovups", moved, register)
    if skip is not None:
        ctx.builder.bind(skip)
    return ""


_FLOAT_BINARY = {Ops.ADD: "vadd", Ops.SUB: "vsub", Ops.MUL: "vmul", Ops.FDIV: "vdiv", Ops.MAX: "vmax"}
_PREDICATES = {Ops.CMPLT: 1, Ops.CMPEQ: 0, Ops.CMPNE: 4}  # lt, eq, neq (true when unordered, as != is)


def _float_binary(ctx: Selection, uop: UOp) -> str:
    bits, suffix = _shape(uop)
    result = ctx.builder.value("vec", bits)
    ctx.builder.emit(_FLOAT_BINARY[uop.op] + suffix, result, ctx.register(uop.src[0]), ctx.register(uop.src[1]))
    ctx.values[uop] = result
    return ""


def _float_unary(ctx: Selection, uop: UOp) -> str:
    bits, suffix = _shape(uop)
    result, source = ctx.builder.value("vec", bits), ctx.register(uop.src[0])
    if uop.op is Ops.SQRT:
        ctx.builder.emit("vsqrt" + suffix, result, *((source, source) if suffix == "ss" else (source,)))
    else:  # NEG: flip the sign bits
        sign = _splat_bits(ctx, 0x80000000, bits)
        ctx.builder.emit("vxorps", result, source, sign)
    ctx.values[uop] = result
    return ""


def _splat_bits(ctx: Selection, bits_of_float: int, width: int) -> VirtualRegister:
    """A register of `width` bits with every float32 lane holding `bits_of_float`."""
    carrier, scalar = ctx.builder.value("gpr", 32), ctx.builder.value("vec", 128)
    ctx.builder.emit("mov", carrier, bits_of_float)
    ctx.builder.emit("vmovd", scalar, carrier)
    if width == 128:
        return scalar
    wide = ctx.builder.value("vec", width)
    ctx.builder.emit("vbroadcastss", wide, scalar)
    return wide


def _multiply_add(ctx: Selection, uop: UOp) -> str:
    bits, suffix = _shape(uop)
    result = ctx.builder.value("vec", bits)
    ctx.builder.emit("vmovaps", result, ctx.register(uop.src[2]))
    ctx.builder.emit("vfmadd231" + suffix, result, ctx.register(uop.src[0]), ctx.register(uop.src[1]))
    ctx.values[uop] = result
    return ""


_CONDITIONS = {Ops.CMPLT: ("l", "g"), Ops.CMPEQ: ("e", "e"), Ops.CMPNE: ("ne", "ne")}  # (a op b, b op' a)


def _compare(ctx: Selection, uop: UOp) -> str:
    source = uop.src[0].dtype
    if source in _INTEGER_DTYPES:
        return _integer_compare(ctx, uop)
    if source.scalar != dtypes.float32:
        ctx.refuse(uop, "only float32 and index compares are selected yet")
    bits, suffix = _shape(uop.src[0])
    mask = ctx.builder.value("vec", bits)  # all ones in the lanes where true: what vblendvps reads
    ctx.builder.emit("vcmp" + suffix, mask, ctx.register(uop.src[0]), ctx.register(uop.src[1]), _PREDICATES[uop.op])
    ctx.values[uop] = mask
    return ""


def _integer_compare(ctx: Selection, uop: UOp) -> str:
    left, right = ctx.integer(uop.src[0]), ctx.integer(uop.src[1])
    condition, swapped = _CONDITIONS[uop.op]
    if uop.src[0].dtype in _UNSIGNED and uop.op is Ops.CMPLT:
        condition, swapped = "b", "a"
    if isinstance(left, int):  # cmp takes its immediate second: compare the other way round
        left, right, condition = right, left, swapped
    if isinstance(left, int):
        ctx.refuse(uop, "constant operands should have been folded")
    flag = ctx.builder.value("gpr", 8)
    ctx.builder.emit("cmp", left, right)
    ctx.builder.emit("set" + condition, flag)
    ctx.values[uop] = flag
    return ""


def _bool_logic(ctx: Selection, uop: UOp) -> str:
    if uop.dtype in _INTEGER_DTYPES:
        return _integer_alu(ctx, uop)
    left, right = ctx.register(uop.src[0]), ctx.register(uop.src[1])
    if uop.dtype != dtypes.bool or left.kind != "gpr" or right.kind != "gpr":
        ctx.refuse(uop, "only logic of scalar bools from integer compares, and of integers, is selected yet")
    result = ctx.builder.value("gpr", 8)
    ctx.builder.emit("mov", result, left)
    ctx.builder.emit({Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}[uop.op], result, right)
    ctx.values[uop] = result
    return ""


def _where(ctx: Selection, uop: UOp) -> str:
    condition, if_true, if_false = (ctx.register(source) for source in uop.src)
    integer = uop.dtype in _INTEGER_DTYPES
    if integer and condition.kind != "gpr":  # a scalar float compare's lane mask: its low 32 bits are all ones or 0
        if uop.src[0].dtype.count != 1:
            ctx.refuse(uop, "integer vector selects are not selected yet")
        flag = ctx.builder.value("gpr", 32)
        ctx.builder.emit("vmovd", flag, condition)
        condition = flag
    bits = _integer_bits(uop.dtype) if integer else _shape(uop)[0]
    result = ctx.builder.value("gpr" if integer else "vec", bits)
    move = "mov" if integer else "vmovaps"
    if condition.kind == "gpr":  # a scalar bool byte: branch around the copy of the true value
        ctx.builder.emit(move, result, if_false)
        skip = _skip_unless(ctx, condition)
        ctx.builder.emit(move, result, if_true)
        ctx.builder.bind(skip)
    else:
        ctx.builder.emit("vblendvps", result, if_false, if_true, condition)
    ctx.values[uop] = result
    return ""


def _broadcast(ctx: Selection, uop: UOp) -> str:
    if any(source is not uop.src[0] for source in uop.src) or uop.src[0].dtype != dtypes.float32:
        ctx.refuse(uop, "only vectors of one repeated float32 scalar are selected yet")
    bits, _ = _shape(uop)
    result = ctx.builder.value("vec", bits)
    ctx.builder.emit("vbroadcastss", result, ctx.register(uop.src[0]))
    ctx.values[uop] = result
    return ""


def _float_or_integer(float_rule: SelectionRule, integer_rule: SelectionRule | None) -> SelectionRule:
    """One rule for an op taken by float32 values (any lane count) and, if given, by index integers."""

    def rule(ctx: Selection, uop: UOp) -> str:
        if uop.dtype.scalar == dtypes.float32:
            return float_rule(ctx, uop)
        if integer_rule is not None and uop.dtype in _INTEGER_DTYPES:
            return integer_rule(ctx, uop)
        ctx.refuse(uop, "only float32 and integer arithmetic is selected yet")
        return ""

    return rule


_INTEGER_OPS = {
    Ops.ADD: "add",
    Ops.SUB: "sub",
    Ops.MUL: "imul",
    Ops.AND: "and",
    Ops.OR: "or",
    Ops.XOR: "xor",
    Ops.SHL: "shl",
}


def _integer_only(rule: SelectionRule) -> SelectionRule:
    """A rule for an op that only integers take."""

    def only(ctx: Selection, uop: UOp) -> str:
        if uop.dtype not in _INTEGER_DTYPES:
            ctx.refuse(uop, "only integer operands are selected for it")
        return rule(ctx, uop)

    return only


def _integer_alu(ctx: Selection, uop: UOp) -> str:
    left, right = ctx.integer(uop.src[0]), ctx.integer(uop.src[1])
    if isinstance(left, int) and isinstance(right, int):
        ctx.refuse(uop, "constant operands should have been folded")
    bits = _integer_bits(uop.dtype)
    result = ctx.builder.value("gpr", bits)
    if uop.op in (Ops.SHL, Ops.SHR):
        operation = "shl" if uop.op is Ops.SHL else "shr" if uop.dtype in _UNSIGNED else "sar"
        if isinstance(right, int):
            ctx.builder.emit("mov", result, left)
            ctx.builder.emit(operation, result, right & (bits - 1))
        else:  # BMI2 takes the count in any register (the legacy form wants cl); it masks the count as C's shift does
            ctx.builder.emit(operation + "x", result, ctx.register(uop.src[0]), right)
    elif uop.op is Ops.MUL and (isinstance(right, int) or isinstance(left, int)):
        constant, other = (right, uop.src[0]) if isinstance(right, int) else (left, uop.src[1])
        ctx.builder.emit("imul", result, ctx.register(other), constant)
    else:
        if isinstance(right, int) and bits == 64 and not fits_int32(right):
            right = ctx.register(uop.src[1])  # a 64-bit operation takes a sign-extended 32-bit immediate only
        ctx.builder.emit("mov", result, left)
        ctx.builder.emit(_INTEGER_OPS[uop.op], result, right)
    ctx.values[uop] = result
    return ""


def _integer_divide(ctx: Selection, uop: UOp) -> str:
    """Quotient (IDIV) or remainder (MOD), truncated toward zero as C's / and %: the dividend in rax, rdx extended
    from it, and rdx clobbered, so values live across the division keep out of it."""
    bits, unsigned = _integer_bits(uop.dtype), uop.dtype in _UNSIGNED
    dividend, extension = view(rax, bits), view(rdx, bits)
    divisor = ctx.register(uop.src[1])
    ctx.builder.emit("mov", dividend, ctx.integer(uop.src[0]))
    if unsigned:
        ctx.builder.emit("xor", view(rdx, 32), view(rdx, 32), clobbers=(rdx,))
    else:
        ctx.builder.emit("cdq" if bits == 32 else "cqo", clobbers=(rdx,))
    ctx.builder.emit("div" if unsigned else "idiv", divisor, clobbers=(rdx,))
    result = ctx.builder.value("gpr", bits)
    ctx.builder.emit("mov", result, dividend if uop.op is Ops.IDIV else extension)
    ctx.values[uop] = result
    return ""


def _integer_maximum(ctx: Selection, uop: UOp) -> str:
    result, other = ctx.builder.value("gpr", _integer_bits(uop.dtype)), ctx.register(uop.src[1])
    ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))
    ctx.builder.emit("cmp", result, other)
    ctx.builder.emit("cmovb" if uop.dtype in _UNSIGNED else "cmovl", result, other)
    ctx.values[uop] = result
    return ""


def _integer_negate(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("gpr", _integer_bits(uop.dtype))
    ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))
    ctx.builder.emit("neg", result)
    ctx.values[uop] = result
    return ""


def _bitcast(ctx: Selection, uop: UOp) -> str:
    source, target = uop.src[0].dtype, uop.dtype
    if {source, target} <= {dtypes.float32, dtypes.int32, dtypes.uint32} and source != target:
        if target == dtypes.float32:
            result = ctx.builder.value("vec", 128)
        else:
            result = ctx.builder.value("gpr", 32)
        if (source == dtypes.float32) == (target == dtypes.float32):
            ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))  # int32 <-> uint32: the same bits
        else:
            ctx.builder.emit("vmovd", result, ctx.register(uop.src[0]))
        ctx.values[uop] = result
        return ""
    ctx.refuse(uop, "only bitcasts among float32, int32 and uint32 scalars are selected yet")
    return ""


def _cast(ctx: Selection, uop: UOp) -> str:
    source, target = uop.src[0].dtype, uop.dtype
    if target == dtypes.float32 and source == dtypes.int32:
        return _integer_to_float(ctx, uop)
    if source == dtypes.float32 and target == dtypes.int32:
        result = ctx.builder.value("gpr", 32)
        ctx.builder.emit("vcvttss2si", result, ctx.register(uop.src[0]))  # truncates toward zero, as C does
        ctx.values[uop] = result
        return ""
    if {source, target} <= {dtypes.int32, dtypes.uint32}:
        return _bitcast(ctx, uop)
    ctx.refuse(uop, "only casts between float32 and int32 (and int32 <-> uint32) are selected yet")
    return ""


def _reciprocal(ctx: Selection, uop: UOp) -> str:
    bits, suffix = _shape(uop)
    one, result = _splat_bits(ctx, 0x3F800000, bits), ctx.builder.value("vec", bits)
    ctx.builder.emit("vdiv" + suffix, result, one, ctx.register(uop.src[0]))
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
            (UPat(Ops.CONST, dtype=(*_INTEGER_DTYPES, dtypes.bool), name="uop"), _integer_constant),
            (UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR), name="uop"), _argument),
            (UPat(Ops.SPECIAL, name="uop"), _special),
            (UPat(Ops.RANGE, name="uop"), _range),
            (UPat(Ops.DEFINE_REG, name="uop"), _define_register),
            (UPat(Ops.END, name="uop"), _end),
            (UPat(Ops.INDEX, name="uop"), _index),
            (UPat(Ops.LOAD, name="uop"), _float_or_integer(_load, _integer_load)),
            (UPat(Ops.STORE, name="uop"), _store),
            (UPat((Ops.ADD, Ops.SUB, Ops.MUL), name="uop"), _float_or_integer(_float_binary, _integer_alu)),
            (UPat(Ops.FDIV, name="uop"), _float_or_integer(_float_binary, None)),
            (UPat(Ops.MAX, name="uop"), _float_or_integer(_float_binary, _integer_maximum)),
            (UPat(Ops.SQRT, name="uop"), _float_or_integer(_float_unary, None)),
            (UPat(Ops.NEG, name="uop"), _float_or_integer(_float_unary, _integer_negate)),
            (UPat(Ops.RECIPROCAL, name="uop"), _float_or_integer(_reciprocal, None)),
            (UPat((Ops.SHL, Ops.SHR), name="uop"), _integer_only(_integer_alu)),
            (UPat((Ops.IDIV, Ops.MOD), name="uop"), _integer_only(_integer_divide)),
            (UPat(Ops.MULACC, name="uop"), _float_or_integer(_multiply_add, None)),
            (UPat(Ops.VECTORIZE, name="uop"), _float_or_integer(_broadcast, None)),
            (UPat(tuple(_PREDICATES), name="uop"), _compare),
            (UPat((Ops.AND, Ops.OR, Ops.XOR), name="uop"), _bool_logic),
            (UPat(Ops.WHERE, name="uop"), _float_or_integer(_where, _where)),
            (UPat(Ops.CAST, name="uop"), _cast),
            (UPat(Ops.BITCAST, name="uop"), _bitcast),
            (UPat((Ops.SINK, Ops.NOOP, Ops.GROUP, Ops.BARRIER), name="uop"), _nothing),
        ],
    )
)
"""The selection rules: each takes one UOp of the linear program and emits its x86 instructions into the Selection
(the rule's answer "" only says the UOp was handled)."""


def select_kernel(uops: list[UOp], entry: bool = False) -> bytes:
    """The x86-64 machine code of a linear program, or a SelectionError naming the first UOp it cannot take.

    The function takes the buffers then the variables as System V arguments, or with `entry` the CPU queue's
    convention: a pointer to one 64-bit word per argument (same order) and the worker's core_id.
    """
    return Selection(uops, entry).select()
