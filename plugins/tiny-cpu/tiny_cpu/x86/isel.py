"""Instruction selection: the linear program (codegen's UOps in execution order) to x86-64 over virtual registers.

Scalars of every dtype but fp8 (tiny_cpu.x86.scalars says where each lives; tiny_cpu.x86.casts converts them), and
float32 vectors of 4, 8 or 16 lanes (xmm, ymm, zmm): loads, stores, arithmetic, compares and selects, casts and
bitcasts, loops, loads and stores gated by a bool (padding), and reductions into accumulators (DEFINE_REG, kept in
registers). Each UOp is matched by a rule of `x86_selection` (a PatternMatcher), which emits into a `Selection`; a
UOp no rule takes is refused with an error naming it. tiny_cpu.x86.renderer offers it as DEV=CPU:X86.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from tiny_cpu.x86.addresses import address_only_sums, broadcast_source, element_address, loop_paths
from tiny_cpu.x86.casts import bitcast, mask_to_bool
from tiny_cpu.x86.casts import cast as convert_scalar
from tiny_cpu.x86.encoding import EncodingError, fits_int32
from tiny_cpu.x86.function import FunctionBuilder
from tiny_cpu.x86.lanes import build_vector, vector_lanes
from tiny_cpu.x86.registers import INTEGER_ARGUMENTS, MASK, rax, rdi, rdx, view
from tiny_cpu.x86.rotates import rotates
from tiny_cpu.x86.scalars import (
    HALVES,
    SCALARS,
    UNSIGNED,
    branch_over,
    float_bits,
    integer_bits,
    integer_constant,
    is_float,
    load_scalar,
    normalize,
    round_half,
    store_scalar,
    suffix,
)
from tiny_cpu.x86.streaming import streamed_buffers
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.isa import Instruction, Label, Memory, Operand, SubRegister, VirtualRegister
from tinycore.uop.ops import FUSED, Ops
from tinycore.uop.patterns import PatternMatcher, RewriteFunction, UPat
from tinycore.uop.uop import UOp

SELECTED_DTYPES = SCALARS
"""The scalar dtypes the selection has rules for."""
_integer_bits = integer_bits


class SelectionError(NotImplementedError):
    """A construct of the linear program the x86 instruction selection has no rule for."""


class ScalarX86Contract(RendererContract):
    """What the selection accepts, told to codegen: a CPU target with no vectors, threads or fused multiply-add."""

    device = "CPU"
    has_local = False
    has_shared = False
    has_threads = False
    global_max: tuple[int, ...] | None = None
    local_max = None
    decompose_transcendentals = True


class VectorX86Contract(ScalarX86Contract):
    """The same target with float32 vectors of 8 lanes (AVX2 ymm) and lane-mask compares and selects (the x86
    renderer adds 16 lanes, zmm, where the CPU has AVX-512)."""

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

    def __init__(self, uops: list[UOp], entry: bool = False, vector_registers: int = 16) -> None:
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
        self.builder = FunctionBuilder(integer_arguments=len(widths), integer_argument_bits=widths,
                                       vector_registers=vector_registers)
        self.values: dict[UOp, Operand] = {}
        # each open loop: its counter, its top, and either its exit (tested at the top) or its constant trip count
        self.loops: list[tuple[VirtualRegister, Label, Label | None, VirtualRegister | int | None]] = []
        self.open_ranges: list[UOp] = []  # the RANGE of each open loop, outermost first
        self.preheaders: list[int] = []  # where each open loop's code starts in the program: its invariants go there
        self.paths = loop_paths(uops)
        self.address_only = address_only_sums(uops)  # ADDs folded into addresses, selected with their INDEX
        # the address sums and 64-bit terms computed so far, by the loop depth they were placed at (valid until that
        # depth's loop ends)
        self.address_sums: list[dict[tuple[object, ...], VirtualRegister]] = [{}]
        self.constants: dict[tuple[int, int, int, bool], VirtualRegister] = {}  # splat_constant's (before the loops)
        # VECTORIZEs of lanes computed as one vector (tiny_cpu.x86.lanes), the scalar lanes left out, and the vectors
        # built so far in this loop body by their lanes
        self.lanes_built, self.lanes_skipped = vector_lanes(uops)
        self.lane_vectors: dict[tuple[UOp, ...], VirtualRegister] = {}
        self.extracted: dict[tuple[UOp, VirtualRegister, int, int], VirtualRegister] = {}  # _block's, this loop body
        self.gates: dict[UOp, VirtualRegister] = {}  # an INDEX's gate: a byte register, 1 where the access happens
        self.accumulators: dict[UOp, list[VirtualRegister]] = {}  # a DEFINE_REG's elements, each kept in a register
        self.consumers: dict[UOp, list[UOp]] = {}
        for uop in uops:
            for source in uop.src:
                self.consumers.setdefault(source, []).append(uop)
        self.position = {uop: number for number, uop in enumerate(uops)}
        self.in_place: set[UOp] = set()  # accumulator loads, and updates of them, computed in the accumulator
        self.owner: dict[VirtualRegister, UOp] = {}  # the UOp a float result's fresh register was made for
        self.minimum_maximum, folded_compares = _minimum_maximum(uops, self.consumers)
        self.lanes_skipped |= folded_compares
        self.rotates, unread_shifts = rotates(uops, self.consumers, self.lanes_skipped)  # tiny_cpu.x86.rotates
        self.lanes_skipped |= unread_shifts
        # a float NEG read only by one ADD of its loop body is that ADD's subtrahend: `x + -y` is `vsubps x, y`
        # (IEEE's x - y is x + (-y), bit for bit), one instruction and the sign mask's register fewer (exp2's x - r)
        self.subtrahends: set[UOp] = set()
        for uop in uops:  # of `-x + -y` only the first: the other is the minuend, in a register
            if _subtrahend(self, uop) and not any(source in self.subtrahends for source in self.consumers[uop][0].src):
                self.subtrahends.add(uop)
        self.lanes_skipped |= self.subtrahends
        # large outputs stored only as aligned vectors go around the cache; a buffer is streamed only where its pointer
        # can be tested before the prologue (an argument in a register, or any word of the entry convention's array)
        self.streamed = {buffer for buffer in streamed_buffers(uops)
                         if entry or self.argument_order[("buffer", buffer.arg)] < len(INTEGER_ARGUMENTS)}

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

    def emit_at(self, depth: int, op: str, *operands: Operand) -> None:
        """Emit an instruction inside `depth` loops: here when as many are open, else just before the code of the
        loop at that depth (a loop-invariant value hoisted out of it and the loops inside it)."""
        if depth >= len(self.preheaders):
            self.builder.emit(op, *operands)
            return
        program = self.builder.program
        before = len(program)
        self.builder.emit(op, *operands)
        instruction: Instruction = program.pop()
        assert len(program) == before
        program.insert(self.preheaders[depth], instruction)
        for deeper in range(depth, len(self.preheaders)):
            self.preheaders[deeper] += 1

    def splat_constant(self, bits: int, width: int, element: int = 32, broadcast: bool = True) -> VirtualRegister:
        """A constant in every `element`-bit lane of a `width`-bit register (only the low lane without
        `broadcast`), made once per kernel before its loops: a NEG's sign mask was three instructions per use."""
        key = (bits, width, element, broadcast)
        found = self.constants.get(key)
        if found is not None:
            return found
        carrier, scalar = self.builder.value("gpr", element), self.builder.value("vec", 128)
        self.emit_at(0, "mov", carrier, bits - (1 << 64) if element == 64 and bits >> 63 else bits)
        self.emit_at(0, "vmovd" if element == 32 else "vmovq", scalar, carrier)
        result = scalar
        if broadcast:
            result = self.builder.value("vec", width)
            self.emit_at(0, "vpbroadcastd" if element == 32 else "vpbroadcastq", result, scalar)
        self.constants[key] = result
        return result

    def integer(self, uop: UOp) -> VirtualRegister | int:
        """An index value: an immediate when it is a constant, else its register."""
        value = self.values.get(uop)
        if isinstance(value, int) and fits_int32(value):
            return value
        return self.register(uop)

    def select(self) -> bytes:
        """The machine code of the kernel: a System V function taking the buffers (by DEFINE_GLOBAL number), then
        the variables (by name)."""
        for uop in self.uops:
            # a lane computed as a vector, a compare folded into a min or max, a shift into a rotate
            if uop in self.lanes_skipped:
                continue
            try:
                handled = x86_selection.rewrite(uop, self)
            except EncodingError as error:  # an operand form the encoder has no instruction for
                self.refuse(uop, str(error))
            if handled is None:
                self.refuse(uop, "no selection rule matches it")
        self.builder.ret()
        for buffer in sorted(self.streamed, key=lambda buffer: buffer.arg):
            order = self.argument_order[("buffer", buffer.arg)]
            self.builder.stream_bases.append(Memory(rdi, None, 1, 8 * order, 64) if self.entry
                                             else INTEGER_ARGUMENTS[order])
        try:
            return self.builder.assemble()
        except (EncodingError, RuntimeError) as error:  # an instruction the allocator made unencodable
            raise SelectionError(f"the x86 renderer cannot encode this kernel: {error}; render it with DEV=CPU or "
                                 "DEV=CPU:LLVM") from error


def _is_vector(uop: UOp) -> bool:
    return uop.dtype.count > 1


def _float_constant(ctx: Selection, uop: UOp) -> str:
    bits, width = float_bits(float(uop.arg), uop.dtype)
    carrier, value = ctx.builder.value("gpr", width), ctx.builder.value("vec", 128)
    ctx.builder.emit("mov", carrier, bits - (1 << 64) if width == 64 and bits >> 63 else bits)
    ctx.builder.emit("vmovd" if width == 32 else "vmovq", value, carrier)
    ctx.values[uop] = value
    return ""


def _integer_constant(ctx: Selection, uop: UOp) -> str:
    ctx.values[uop] = integer_constant(int(uop.arg), uop.dtype)
    return ""


def _constant(ctx: Selection, uop: UOp) -> str:
    if uop.dtype.scalar not in SCALARS or _is_vector(uop):
        ctx.refuse(uop, "only scalar constants of the selected dtypes are selected")
    return _float_constant(ctx, uop) if is_float(uop.dtype) else _integer_constant(ctx, uop)


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
    value = ctx.builder.arguments[1]
    if _integer_bits(uop.dtype) == 64:  # an index held in 64 bits: the worker number is never negative
        wide = ctx.builder.value("gpr", 64)
        ctx.builder.emit("movsxd", wide, value)
        value = wide
    ctx.values[uop] = value
    return ""


LOOP_ALIGNMENT = 16
"""Bytes a loop's top is aligned to (padded with no-ops before it), as gcc's -O2 places loops."""


def _range(ctx: Selection, uop: UOp) -> str:
    counter, top, done = ctx.builder.value("gpr", _integer_bits(uop.dtype)), ctx.builder.label(), ctx.builder.label()
    ctx.preheaders.append(len(ctx.builder.program))
    ctx.open_ranges.append(uop)
    ctx.address_sums.append({})
    ctx.lane_vectors, ctx.extracted = {}, {}
    ctx.builder.emit("mov", counter, 0)
    ctx.builder.emit("align", LOOP_ALIGNMENT)
    ctx.builder.bind(top)
    bound = ctx.integer(uop.src[0])
    if isinstance(bound, int) and bound > 0:  # runs at least once: tested at the bottom, one jump per trip (as gcc)
        ctx.loops.append((counter, top, None, bound))
    else:
        ctx.builder.emit("cmp", counter, bound)
        ctx.builder.emit("jge", done)
        ctx.loops.append((counter, top, done, None))
    ctx.values[uop] = counter
    return ""


def _end(ctx: Selection, uop: UOp) -> str:
    for _ in range(sum(1 for source in uop.src if source.op is Ops.RANGE) or 1):
        counter, top, done, bound = ctx.loops.pop()
        ctx.preheaders.pop()
        ctx.open_ranges.pop()
        ctx.address_sums.pop()
        ctx.lane_vectors, ctx.extracted = {}, {}
        ctx.builder.emit("add", counter, 1)
        if done is None:
            assert bound is not None  # a loop tested at its bottom has a constant count
            ctx.builder.emit("cmp", counter, bound)
            ctx.builder.emit("jl", top)
        else:
            ctx.builder.emit("jmp", top)
            ctx.builder.bind(done)
    return ""


def _register_of(ctx: Selection, dtype: DType) -> VirtualRegister:
    """A fresh register for a value of `dtype`: a float32 vector's width, an xmm for a float, else a general one."""
    if dtype.count > 1:
        return ctx.builder.value("vec", 32 * dtype.count)
    if is_float(dtype):
        return ctx.builder.value("vec", 128)
    return ctx.builder.value("gpr", _integer_bits(dtype))


def _copy(ctx: Selection, destination: VirtualRegister, source: Operand) -> None:
    """Copy a register, or move an immediate, into `destination`."""
    if destination.kind == "gpr":
        ctx.builder.emit("mov", destination, source)
    else:
        ctx.builder.emit("vmovaps", destination, source)


def _define_register(ctx: Selection, uop: UOp) -> str:
    pointer = uop.dtype
    if not isinstance(pointer, PtrDType) or pointer.base.scalar not in SCALARS:
        ctx.refuse(uop, "accumulators of this dtype are not selected")
    assert isinstance(pointer, PtrDType)
    if pointer.base.count > 1 and pointer.base.scalar != dtypes.float32:
        ctx.refuse(uop, "only float32 vector accumulators are selected")
    ctx.accumulators[uop] = [_register_of(ctx, pointer.base) for _ in range(pointer.size)]
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
            ctx.refuse(uop, "a gate must be a scalar bool")
        ctx.gates[uop] = gate
    pointer = uop.src[0].dtype
    element: DType = pointer.base if isinstance(pointer, PtrDType) else pointer
    if element.scalar not in SCALARS or uop.src[0].op is not Ops.DEFINE_GLOBAL:
        ctx.refuse(uop, "only global buffers of the selected dtypes are indexed")
    base, size = ctx.register(uop.src[0]), element.scalar.itemsize
    folded = element_address(ctx, base, uop.src[1], size)
    if folded is not None:
        ctx.values[uop] = folded
        return ""
    index = ctx.integer(uop.src[1])
    if isinstance(index, VirtualRegister) and index.bits != 64:  # addresses are formed from 64-bit registers
        wide = ctx.builder.value("gpr", 64)
        ctx.builder.emit("movsxd", wide, index)
        index = wide
    if isinstance(index, int) and fits_int32(index * size):
        ctx.values[uop] = Memory(base, None, 1, index * size, size * 8)
    else:
        index_register = ctx.register(uop.src[1]) if isinstance(index, int) else index
        if size > 8:
            ctx.refuse(uop, "elements wider than 8 bytes are not addressed")
        ctx.values[uop] = Memory(base, index_register, size, 0, size * 8)
    return ""


def _alternative(ctx: Selection, uop: UOp) -> UOp | None:
    alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
    return alternatives[0] if alternatives else None


_IN_PLACE_OPS = (Ops.MULACC, Ops.ADD, Ops.MUL, Ops.MAX)


def _in_place_step(ctx: Selection, value: UOp) -> UOp | None:
    """The one UOp that updates `value` into an accumulator's register, `acc + x` (or * max, or a fused
    multiply-add into it), or None."""
    users = ctx.consumers.get(value, [])
    if len(users) != 1 or users[0].op not in _IN_PLACE_OPS or not is_float(users[0].dtype):
        return None
    user = users[0]
    if user.dtype.scalar in HALVES:  # rounded into a fresh register anyway
        return None
    if user.op is Ops.MULACC:
        if user.arg is not FUSED or user.src[2] is not value or value in user.src[:2]:
            return None
    elif user.src[0] is not value or user.src[1] is value:
        return None
    return user


def _updates_in_place(ctx: Selection, load: UOp) -> list[UOp]:
    """The chain of updates through which an accumulator's load can be the accumulator's register itself, each
    step updating it there: `acc = acc + x` (or * max, or fused multiply-adds into it, one after another, as a
    convolution's unrolled window makes them) whose last result is only stored back to the same element, with no
    loop starting or ending and no other access to the element in between (a later iteration, or that access,
    would read the updated register). Empty when there is none."""
    chain = [load]
    step = _in_place_step(ctx, load)
    while step is not None:
        chain.append(step)
        stores = ctx.consumers.get(step, [])
        if len(stores) == 1 and stores[0].op is Ops.STORE and stores[0].src[1] is step:
            break
        step = _in_place_step(ctx, step)
    else:
        return []
    store = ctx.consumers[chain[-1]][0]
    element, stored = load.src[0], store.src[0]
    if element is not stored and (element.op is not Ops.INDEX or stored.op is not Ops.INDEX
                                  or element.src[:2] != stored.src[:2]):
        return []
    start, end = ctx.position[load], ctx.position[store]
    between = ctx.uops[start + 1:end]
    if any(uop.op in (Ops.RANGE, Ops.END) or element in uop.src or stored in uop.src for uop in between):
        return []
    return chain[:-1]  # the last update's result is stored: its register is the accumulator's too


def _load(ctx: Selection, uop: UOp) -> str:
    address = ctx.values[uop.src[0]]
    if isinstance(address, VirtualRegister) and uop not in ctx.in_place:
        chain = _updates_in_place(ctx, uop)
        ctx.in_place.update(chain)
    if uop in ctx.in_place:
        ctx.values[uop] = address
        return ""
    result = _register_of(ctx, uop.dtype)
    if isinstance(address, VirtualRegister):  # an accumulator: copy it, as a later store replaces it
        _copy(ctx, result, address)
        ctx.values[uop] = result
        return ""
    assert isinstance(address, Memory)
    gate, alternative, skip = ctx.gates.get(uop.src[0]), _alternative(ctx, uop), None
    if gate is not None:  # the value is the alternative (or 0) unless the gate lets the load happen
        if alternative is not None:
            _copy(ctx, result, ctx.integer(alternative) if result.kind == "gpr" else ctx.register(alternative))
        elif result.kind == "gpr":
            ctx.builder.emit("mov", result, 0)
        else:
            ctx.builder.emit("vxorps", result, result, result)
        skip = branch_over(ctx.builder, gate)
    elif alternative is not None:
        ctx.refuse(uop, "an alternative value needs a gated INDEX")
    elif broadcast_source(ctx, uop):  # read by the broadcast itself
        ctx.values[uop] = replace(address, bits=32)
        return ""
    if _is_vector(uop):
        if uop.dtype.scalar != dtypes.float32:
            ctx.refuse(uop, "only float32 vectors are loaded")
        ctx.builder.emit("vmovups", result, replace(address, bits=uop.dtype.count * 32))
    else:
        load_scalar(ctx.builder, result, address, uop.dtype)
    if skip is not None:
        ctx.builder.bind(skip)
    ctx.values[uop] = result
    return ""


def _store(ctx: Selection, uop: UOp) -> str:
    if uop.arg is not None:
        ctx.refuse(uop, "combining (atomic) stores are not selected yet")
    value = uop.src[1]
    if value.dtype.scalar not in SCALARS or (_is_vector(value) and value.dtype.scalar != dtypes.float32):
        ctx.refuse(uop, "only scalars of the selected dtypes and float32 vectors are stored")
    address = ctx.values[uop.src[0]]
    register = ctx.register(value)
    if isinstance(address, VirtualRegister):  # an accumulator
        _copy(ctx, address, register)
        return ""
    assert isinstance(address, Memory)
    gate = ctx.gates.get(uop.src[0])
    skip = branch_over(ctx.builder, gate) if gate is not None else None
    if _is_vector(value):
        streamed = uop.src[0].src[0] in ctx.streamed  # around the cache (tiny_cpu.x86.streaming)
        ctx.builder.emit("vmovntps" if streamed else "vmovups", replace(address, bits=value.dtype.count * 32), register)
    else:
        store_scalar(ctx.builder, address, register, value.dtype)
    if skip is not None:
        ctx.builder.bind(skip)
    return ""


_FLOAT_BINARY = {Ops.ADD: "vadd", Ops.SUB: "vsub", Ops.MUL: "vmul", Ops.FDIV: "vdiv", Ops.MAX: "vmax"}
_PREDICATES = {Ops.CMPLT: 1, Ops.CMPEQ: 0, Ops.CMPNE: 4}  # lt, eq, neq (true when unordered, as != is)


def _float_shape(uop: UOp) -> tuple[int, str]:
    """The register width and instruction suffix of a float value of any dtype (vectors only of float32)."""
    if _is_vector(uop):
        if uop.dtype.scalar != dtypes.float32:
            raise SelectionError(f"the x86 renderer has float32 vectors only, not {uop.dtype}: {uop.op}")
        return _shape(uop)
    return 128, suffix(uop.dtype)


def _rounded(ctx: Selection, uop: UOp, value: VirtualRegister) -> str:
    """Record `value` as `uop`'s, rounded to its dtype's precision first when that is a half."""
    ctx.values[uop] = round_half(ctx.builder, value, uop.dtype) if uop.dtype.scalar in HALVES else value
    return ""


def _subtrahend(ctx: Selection, uop: UOp) -> bool:
    """Whether `uop` is a float32 or float64 NEG whose one reader is a float ADD of the same loop body, selected by
    `_float_binary` (not a lane of a vector, not its own other operand): that ADD subtracts its source instead."""
    if uop.op is not Ops.NEG or uop.dtype.scalar not in (dtypes.float32, dtypes.float64) or uop in ctx.lanes_skipped:
        return False
    users = ctx.consumers.get(uop, [])
    if len(users) != 1 or users[0].op is not Ops.ADD or users[0].src.count(uop) != 1 or users[0] in ctx.lanes_skipped:
        return False
    return ctx.paths.get(uop) == ctx.paths.get(users[0]) and users[0].dtype == uop.dtype


def _float_binary(ctx: Selection, uop: UOp) -> str:
    bits, flavour = _float_shape(uop)
    if uop.src[0] in ctx.in_place:
        result = ctx.register(uop.src[0])
    else:
        result = ctx.builder.value("vec", bits)
        ctx.owner[result] = uop
    first, second = uop.src
    negated = next((source for source in uop.src if source in ctx.subtrahends), None)
    if negated is not None:  # x + -y (or -y + x): x - y
        minuend = second if negated is first else first
        if not isinstance(ctx.values.get(minuend), Memory):
            subtracted = ctx.values.get(negated.src[0])
            right: Operand = subtracted if isinstance(subtracted, Memory) else ctx.register(negated.src[0])
            ctx.builder.emit("vsub" + flavour, result, ctx.register(minuend), right)
            return _rounded(ctx, uop, result)
        _float_unary(ctx, negated)  # a broadcast from memory must be the last operand: negate after all
    if isinstance(ctx.values.get(first), Memory):  # a broadcast from memory (_embedded_broadcast: + or *) goes last
        first, second = second, first
    memory = ctx.values.get(second)
    operand: Operand = memory if isinstance(memory, Memory) else ctx.register(second)
    ctx.builder.emit(_FLOAT_BINARY[uop.op] + flavour, result, ctx.register(first), operand)
    return _rounded(ctx, uop, result)


def _float_unary(ctx: Selection, uop: UOp) -> str:
    bits, flavour = _float_shape(uop)
    result, source = ctx.builder.value("vec", bits), ctx.register(uop.src[0])
    if uop.op is Ops.SQRT:
        ctx.builder.emit("vsqrt" + flavour, result, *((source,) if _is_vector(uop) else (source, source)))
        return _rounded(ctx, uop, result)
    if uop.op is Ops.TRUNC:
        if _is_vector(uop):  # 3: toward zero (vrndscaleps: no scaling, the same rounding control)
            ctx.builder.emit("vrndscaleps" if bits == 512 else "vroundps", result, source, 3)
        else:
            ctx.builder.emit("vround" + flavour, result, source, source, 3)  # 3: toward zero
        ctx.values[uop] = result
        return ""
    # NEG: flip the sign bits
    double = uop.dtype.scalar == dtypes.float64
    sign = _splat_bits(ctx, 1 << 63 if double else 0x80000000, bits, 64 if double else 32)
    ctx.builder.emit("vxorpd" if double else "vxorps", result, source, sign)
    ctx.values[uop] = result
    return ""


def _splat_bits(ctx: Selection, bits_of_float: int, width: int, element: int = 32) -> VirtualRegister:
    """A register of `width` bits with every float lane (of `element` bits) holding `bits_of_float` (at 128 bits
    only the low lane: the scalar instructions read no other)."""
    return ctx.splat_constant(bits_of_float, width, element, broadcast=width > 128)


def _dies_here(ctx: Selection, value: UOp, user: UOp) -> bool:
    """Whether `user` is the last reader of `value`'s register, so it may write its result there: the register was
    made for `value` (not an accumulator, nor shared with another UOp), `user` is its one consumer and reads it
    once, and both are in the same loop body (a register made outside the loop is read again next iteration)."""
    register = ctx.values.get(value)
    return isinstance(register, VirtualRegister) and ctx.owner.get(register) is value and \
        ctx.consumers.get(value) == [user] and user.src.count(value) == 1 and value.dtype == user.dtype and \
        ctx.paths.get(value) == ctx.paths.get(user) and value.dtype.scalar not in HALVES


def _embedded_broadcast(ctx: Selection, vectorize: UOp) -> bool:
    """Whether a 16-lane broadcast of a float in memory is read by one multiply-add, multiply or add only, as one of
    its factors (terms) with a register for the other: that instruction then reads the float itself (EVEX
    {1to16}), one instruction fewer (a convolution's tile: each weight broadcast once, for one FMA). Not a broadcast
    made outside its user's loop (each iteration would read the float again), nor one with a store to memory before
    its user (addresses.broadcast_source checked the stretch up to the broadcast only)."""
    users = ctx.consumers.get(vectorize, [])
    if vectorize.dtype.count != 16 or len(users) != 1 or users[0].op not in (Ops.MULACC, Ops.MUL, Ops.ADD) or \
            ctx.paths.get(vectorize) != ctx.paths.get(users[0]):
        return False
    between = ctx.uops[ctx.position[vectorize]:ctx.position[users[0]]]
    if any(uop.op is Ops.STORE and not (uop.src[0].op is Ops.INDEX and uop.src[0].src[0].op is Ops.DEFINE_REG)
           for uop in between):
        return False
    factors = users[0].src[:2]
    return factors.count(vectorize) == 1 and users[0].src[2:] != (vectorize,) and \
        all(factor is vectorize or factor.op is not Ops.VECTORIZE for factor in factors)


def _multiply_add(ctx: Selection, uop: UOp) -> str:
    """a * b + c: one FMA (one rounding) where codegen marked it FUSED, else a multiply and an add, as written.
    A factor broadcast from memory (_embedded_broadcast) is the instruction's memory operand."""
    bits, flavour = _float_shape(uop)
    result = ctx.builder.value("vec", bits)
    first, second = uop.src[:2]
    if isinstance(ctx.values.get(first), Memory):
        first, second = second, first
    memory = ctx.values.get(second)
    right: Operand = memory if isinstance(memory, Memory) else ctx.register(second)
    if uop.arg is FUSED:
        factor = None if isinstance(memory, Memory) else \
            next((source for source in (first, second) if _dies_here(ctx, source, uop)), None)
        if uop.src[2] in ctx.in_place:  # into the accumulator's own register
            result = ctx.register(uop.src[2])
        elif factor is not None:  # into a factor's register, which nothing reads again: no copy of the addend
            result = ctx.register(factor)
            other = second if factor is first else first
            ctx.builder.emit("vfmadd213" + flavour, result, ctx.register(other), ctx.register(uop.src[2]))
            ctx.owner[result] = uop
            return _rounded(ctx, uop, result)
        else:
            ctx.builder.emit("vmovaps", result, ctx.register(uop.src[2]))
            ctx.owner[result] = uop
        ctx.builder.emit("vfmadd231" + flavour, result, ctx.register(first), right)
    else:
        product = ctx.builder.value("vec", bits)
        ctx.builder.emit("vmul" + flavour, product, ctx.register(first), right)
        ctx.builder.emit("vadd" + flavour, result, product, ctx.register(uop.src[2]))
    return _rounded(ctx, uop, result)


_CONDITIONS = {Ops.CMPLT: ("l", "g"), Ops.CMPEQ: ("e", "e"), Ops.CMPNE: ("ne", "ne")}  # (a op b, b op' a)


def _compare(ctx: Selection, uop: UOp) -> str:
    source = uop.src[0].dtype
    if source.scalar not in SCALARS:
        ctx.refuse(uop, "compares of this dtype are not selected")
    if not is_float(source):
        if _is_vector(uop):
            ctx.refuse(uop, "integer vector compares are not selected")
        return _integer_compare(ctx, uop)
    bits, flavour = _float_shape(uop.src[0])
    mask = ctx.builder.value("vec", bits)  # all ones in the lanes where true: what vblendvps reads
    if bits == 512:  # AVX-512 compares write a mask register, k1: the only one used, never allocated
        ctx.builder.emit("vcmpps", MASK[1], ctx.register(uop.src[0]), ctx.register(uop.src[1]), _PREDICATES[uop.op])
        if _selects_under_k1(ctx, uop):
            ctx.values[uop] = MASK[1]
            return ""
        ctx.builder.emit("vpmovm2d", mask, MASK[1])
    else:
        ctx.builder.emit("vcmp" + flavour, mask, ctx.register(uop.src[0]), ctx.register(uop.src[1]),
                         _PREDICATES[uop.op])
    ctx.values[uop] = mask if _is_vector(uop) else mask_to_bool(ctx.builder, mask)
    return ""


def _selects_under_k1(ctx: Selection, compare: UOp) -> bool:
    """Whether every reader of a 16-lane compare is a 16-lane select that runs while k1 still holds the compare's
    lanes: no other 16-lane compare selected (each writes k1) and no loop start or end (a later iteration's compares)
    between the compare and its last reader. The selects then blend under k1 (vblendmps) and the lanes are never
    made a vector (softmax's exp2 clamps: a compare, vpmovm2d, a copy and vpternlogd became a compare and a blend)."""
    users = ctx.consumers.get(compare, [])
    if not users or any(user.op is not Ops.WHERE or user.src[0] is not compare or user.src[1:].count(compare)
                        or user.dtype.count != 16 for user in users):
        return False
    end = max(ctx.position[user] for user in users)
    for uop in ctx.uops[ctx.position[compare] + 1:end]:
        if uop.op in (Ops.RANGE, Ops.END) or (uop.op in _PREDICATES and uop.src[0].dtype.count == 16
                                               and uop not in ctx.lanes_skipped):  # a compare folded into vminps
            return False
    return True


def _integer_compare(ctx: Selection, uop: UOp) -> str:
    left, right = ctx.integer(uop.src[0]), ctx.integer(uop.src[1])
    condition, swapped = _CONDITIONS[uop.op]
    if uop.src[0].dtype.scalar in UNSIGNED and uop.op is Ops.CMPLT:
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


def _minimum_maximum(uops: list[UOp], consumers: dict[UOp, list[UOp]]) -> tuple[dict[UOp, tuple[str, UOp, UOp]],
                                                                              set[UOp]]:
    """The float selects that are x86's min or max: `a < b ? a : b` is vminps a, b and `a < b ? b : a` is vmaxps b, a
    (both answer their second operand when a lane is NaN or the two are equal, as the select does); and the compares
    that only such selects read (their lane masks are not needed)."""
    chosen: dict[UOp, tuple[str, UOp, UOp]] = {}
    for uop in uops:
        if uop.op is not Ops.WHERE or uop.src[0].op is not Ops.CMPLT or uop.dtype.scalar not in (dtypes.float32,
                                                                                                  dtypes.float64):
            continue
        (first, second), (if_true, if_false) = uop.src[0].src, uop.src[1:]
        if first.dtype != uop.dtype or uop.dtype.count not in (1, 4, 8, 16):
            continue
        if (if_true, if_false) == (first, second):
            chosen[uop] = ("vmin", first, second)
        elif (if_true, if_false) == (second, first):
            chosen[uop] = ("vmax", second, first)
    folded = {uop.src[0] for uop in chosen if all(user in chosen for user in consumers.get(uop.src[0], []))}
    return chosen, folded


def _where(ctx: Selection, uop: UOp) -> str:
    if uop in ctx.minimum_maximum:
        name, first, second = ctx.minimum_maximum[uop]
        width, flavour = _float_shape(uop)
        chosen = ctx.builder.value("vec", width)
        ctx.builder.emit(name + flavour, chosen, ctx.register(first), ctx.register(second))
        ctx.values[uop] = chosen
        return ""
    if ctx.values.get(uop.src[0]) == MASK[1]:  # the compare's lanes in k1 (_selects_under_k1): true lanes from src2
        result = ctx.builder.value("vec", 512)
        ctx.builder.emit("vblendmps", result, ctx.register(uop.src[2]), ctx.register(uop.src[1]), mask=MASK[1])
        ctx.owner[result] = uop
        ctx.values[uop] = result
        return ""
    condition = ctx.register(uop.src[0])
    result = _register_of(ctx, uop.dtype)
    if condition.kind == "gpr":  # a scalar bool byte; no branch, which data-dependent selects (relu) mispredict
        if result.kind == "vec":  # the byte widened to a lane mask of all ones or zeros, then a blend
            bits, mask = ctx.builder.value("gpr", 64), ctx.builder.value("vec", 128)  # 64 bits: a double's lanes
            ctx.builder.emit("movzx", bits, condition)
            ctx.builder.emit("neg", bits)
            ctx.builder.emit("vmovq", mask, bits)
            ctx.builder.emit("vblendvps", result, ctx.register(uop.src[2]), ctx.register(uop.src[1]), mask)
        elif result.bits == 8:  # bools: (c and t) or (not c and f)
            other = ctx.builder.value("gpr", 8)
            ctx.builder.emit("mov", result, condition)
            ctx.builder.emit("and", result, ctx.integer(uop.src[1]))
            ctx.builder.emit("mov", other, condition)
            ctx.builder.emit("xor", other, 1)
            ctx.builder.emit("and", other, ctx.integer(uop.src[2]))
            ctx.builder.emit("or", result, other)
        else:
            ctx.builder.emit("mov", result, ctx.integer(uop.src[2]))
            ctx.builder.emit("test", condition, condition)
            ctx.builder.emit("cmovne", result, ctx.register(uop.src[1]))
    else:
        if uop.dtype.scalar != dtypes.float32:
            ctx.refuse(uop, "only float32 vector selects are selected")
        if_true, if_false = ctx.register(uop.src[1]), ctx.register(uop.src[2])
        if result.bits == 512:  # no vblendvps on zmm: a bitwise select by the lane mask (all ones or zeros) that
            # writes one of its three operands, an alternative that nothing reads again (exp2's clamps) if there is one
            if _dies_here(ctx, uop.src[2], uop):  # table 0xB8: mask ? true : false, the false operand written
                result = if_false
                ctx.builder.emit("vpternlogd", result, condition, if_true, 0xB8)
            elif _dies_here(ctx, uop.src[1], uop):  # 0xE2: the true operand written
                result = if_true
                ctx.builder.emit("vpternlogd", result, condition, if_false, 0xE2)
            else:  # 0xCA: a copy of the mask written
                ctx.builder.emit("vmovaps", result, condition)
                ctx.builder.emit("vpternlogd", result, if_true, if_false, 0xCA)
            ctx.owner[result] = uop
        else:
            ctx.builder.emit("vblendvps", result, if_false, if_true, condition)
    ctx.values[uop] = result
    return ""


def _vectorize(ctx: Selection, uop: UOp) -> str:
    """A float32 vector, or a lane mask (a bool vector, each lane all ones or zeros), from scalars: one repeated
    scalar is broadcast, distinct ones assembled."""
    count, scalar = uop.dtype.count, uop.dtype.scalar
    if scalar not in (dtypes.float32, dtypes.bool) or count not in (4, 8, 16):
        ctx.refuse(uop, "only float32 vectors and lane masks of 4, 8 or 16 lanes are built")
    if uop in ctx.lanes_built:
        ctx.values[uop] = build_vector(ctx, tuple(uop.src))
        return ""
    memory = ctx.values.get(uop.src[0])
    if isinstance(memory, Memory):  # a float32 load left to the broadcast (addresses.broadcast_source)
        if _embedded_broadcast(ctx, uop):  # read by its one multiply-add, {1to16}
            ctx.values[uop] = replace(memory, broadcast=True)
            return ""
        result = ctx.builder.value("vec", 32 * count)
        ctx.builder.emit("vbroadcastss", result, memory)
        ctx.values[uop] = result
        return ""
    lanes: dict[UOp, VirtualRegister] = {}
    for source in uop.src:
        if source not in lanes:
            lanes[source] = ctx.register(source) if scalar == dtypes.float32 else _lane_mask(ctx, source)
    if len(lanes) == 1:
        result = ctx.builder.value("vec", 32 * count)
        ctx.builder.emit("vbroadcastss", result, lanes[uop.src[0]])
        ctx.values[uop] = result
        return ""
    ctx.values[uop] = _assemble(ctx, [lanes[source] for source in uop.src])
    return ""


def _block(ctx: Selection, source: UOp, vector: VirtualRegister, lanes: int, block: int) -> VirtualRegister:
    """Block `block` of `lanes` lanes (4 or 8) of a 256- or 512-bit vector, in a fresh register (the lowest is a copy),
    extracted once per value and loop body: a reduce's lanes each read it."""
    key = (source, vector, lanes, block)
    found = ctx.extracted.get(key)
    if found is None:
        found = ctx.builder.value("vec", 32 * lanes)
        if block == 0:
            ctx.builder.emit("vmovaps", found, SubRegister(vector, 32 * lanes))
        elif lanes == 8:
            ctx.builder.emit("vextractf32x8", found, vector, block)
        else:
            ctx.builder.emit("vextractf32x4" if vector.bits == 512 else "vextractf128", found, vector, block)
        if source not in ctx.in_place:  # an accumulator updated in place changes under the same register
            ctx.extracted[key] = found
    return found


def _lane(ctx: Selection, vector: VirtualRegister, lane: int, source: UOp) -> VirtualRegister:
    """Lane `lane` of a float32 vector (or lane mask) `source` moved to the low lane of a fresh xmm register."""
    if vector.bits < 32 * (lane + 1):
        raise SelectionError(f"no lane {lane} in a {vector.bits}-bit vector")
    low: Operand = SubRegister(vector, 128) if vector.bits > 128 else vector
    if lane >= 4:
        low, lane = _block(ctx, source, vector, 4, lane // 4), lane % 4
    result = ctx.builder.value("vec", 128)
    if lane:
        ctx.builder.emit("vpermilps", result, low, lane)
    else:
        ctx.builder.emit("vmovaps", result, low)
    return result


def _element(ctx: Selection, uop: UOp) -> str:
    """GEP: lanes of a float32 vector or lane mask, as a scalar (a float, or a bool byte) or a shorter vector."""
    source = uop.src[0]
    if source.dtype.scalar not in (dtypes.float32, dtypes.bool) or not isinstance(uop.arg, tuple):
        ctx.refuse(uop, "only lanes of float32 vectors and lane masks are taken")
    vector = ctx.register(source)
    if vector.kind != "vec":
        ctx.refuse(uop, "its vector is not in a vector register")
    count = len(uop.arg)
    if count in (4, 8) and vector.bits > 32 * count and uop.arg[0] % count == 0 and \
            uop.arg == tuple(range(uop.arg[0], uop.arg[0] + count)):  # an aligned block: a reduce's halves
        ctx.values[uop] = _block(ctx, source, vector, count, uop.arg[0] // count)
        return ""
    lanes = [_lane(ctx, vector, lane, source) for lane in uop.arg]
    if len(lanes) == 1:
        ctx.values[uop] = lanes[0] if source.dtype.scalar == dtypes.float32 else mask_to_bool(ctx.builder, lanes[0])
        return ""
    if len(lanes) not in (4, 8, 16):
        ctx.refuse(uop, "only 1, 4, 8 or 16 lanes are taken at once")
    ctx.values[uop] = _assemble(ctx, lanes)
    return ""


def _assemble(ctx: Selection, lanes: list[VirtualRegister]) -> VirtualRegister:
    """A vector of 4, 8 or 16 float32 lanes from xmm registers holding each in their low lane: interleaved in fours
    (vunpcklps, vunpcklpd), two fours joined (vinsertf128), two eights (vinsertf32x8)."""
    if len(lanes) == 16:
        low, high, joined = _assemble(ctx, lanes[:8]), _assemble(ctx, lanes[8:]), ctx.builder.value("vec", 512)
        ctx.builder.emit("vinsertf32x8", joined, SubRegister(low, 512), high, 1)
        return joined
    quarters = []
    for start in range(0, len(lanes), 4):
        first, second, quarter = (ctx.builder.value("vec", 128) for _ in range(3))
        ctx.builder.emit("vunpcklps", first, lanes[start], lanes[start + 1])
        ctx.builder.emit("vunpcklps", second, lanes[start + 2], lanes[start + 3])
        ctx.builder.emit("vunpcklpd", quarter, first, second)
        quarters.append(quarter)
    if len(quarters) == 1:
        return quarters[0]
    result = ctx.builder.value("vec", 256)
    ctx.builder.emit("vinsertf128", result, SubRegister(quarters[0], 256), quarters[1], 1)
    return result


def _lane_mask(ctx: Selection, source: UOp) -> VirtualRegister:
    """A scalar bool as a 32-bit lane of all ones (true) or zeros, in the low lane of an xmm register."""
    bits, mask = ctx.builder.value("gpr", 32), ctx.builder.value("vec", 128)
    ctx.builder.emit("movzx", bits, ctx.register(source))
    ctx.builder.emit("neg", bits)
    ctx.builder.emit("vmovd", mask, bits)
    return mask


def _float_or_integer(float_rule: SelectionRule, integer_rule: SelectionRule | None) -> SelectionRule:
    """One rule for an op taken by floats and, if given, by integers and bools."""

    def rule(ctx: Selection, uop: UOp) -> str:
        if uop.dtype.scalar not in SCALARS:
            ctx.refuse(uop, f"{uop.dtype.scalar} values are not selected")
        if is_float(uop.dtype):
            return float_rule(ctx, uop)
        if integer_rule is not None and not _is_vector(uop):
            return integer_rule(ctx, uop)
        ctx.refuse(uop, "only float and scalar integer arithmetic is selected for it")
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
    """A rule for an op that only scalar integers (and bools) take."""

    def only(ctx: Selection, uop: UOp) -> str:
        if uop.dtype.scalar not in SCALARS or is_float(uop.dtype) or _is_vector(uop):
            ctx.refuse(uop, "only scalar integer operands are selected for it")
        return rule(ctx, uop)

    return only


def _integer_alu(ctx: Selection, uop: UOp) -> str:
    if uop in ctx.address_only:  # summed by its INDEX (tiny_cpu.x86.addresses)
        return ""
    rotate = ctx.rotates.get(uop)
    if rotate is not None:
        value, count = rotate
        result = ctx.builder.value("gpr", _integer_bits(uop.dtype))
        ctx.builder.emit("mov", result, ctx.integer(value))
        ctx.builder.emit("rol", result, count)
        ctx.values[uop] = result
        return ""
    left, right = ctx.integer(uop.src[0]), ctx.integer(uop.src[1])
    if isinstance(left, int) and isinstance(right, int):
        ctx.refuse(uop, "constant operands should have been folded")
    bits = _integer_bits(uop.dtype)
    result = ctx.builder.value("gpr", bits)
    operation = uop.op
    if uop.dtype == dtypes.bool:  # bools are 0 or 1: * is and, + is or, - and != are xor
        operation = {Ops.MUL: Ops.AND, Ops.ADD: Ops.OR, Ops.SUB: Ops.XOR}.get(operation, operation)
        if operation not in (Ops.AND, Ops.OR, Ops.XOR):
            ctx.refuse(uop, "this op of bools is not selected")
    if operation in (Ops.SHL, Ops.SHR):
        name = "shl" if operation is Ops.SHL else "shr" if uop.dtype.scalar in UNSIGNED else "sar"
        if isinstance(right, int):
            ctx.builder.emit("mov", result, left)
            ctx.builder.emit(name, result, right & (bits - 1))
        else:  # BMI2 takes the count in any register (the legacy form wants cl); it masks the count as C's shift does
            shift_count = right if right.bits == bits else _resized(ctx, right, bits)
            ctx.builder.emit(name + "x", result, ctx.register(uop.src[0]), shift_count)
    elif operation is Ops.MUL and (isinstance(right, int) or isinstance(left, int)):
        constant, other = (right, uop.src[0]) if isinstance(right, int) else (left, uop.src[1])
        ctx.builder.emit("imul", result, ctx.register(other), constant)
    else:
        ctx.builder.emit("mov", result, left)
        ctx.builder.emit(_INTEGER_OPS[operation], result, right)
    normalize(ctx.builder, result, uop.dtype)
    ctx.values[uop] = result
    return ""


def _resized(ctx: Selection, value: VirtualRegister, bits: int) -> VirtualRegister:
    """A shift count in a register of another width (only its low bits count)."""
    resized = ctx.builder.value("gpr", bits)
    if value.bits == 8:
        ctx.builder.emit("movzx", resized, value)
    elif bits < value.bits:
        ctx.builder.emit("mov", resized, SubRegister(value, bits))
    else:
        ctx.builder.emit("mov", SubRegister(resized, value.bits), value)
    return resized


def _integer_divide(ctx: Selection, uop: UOp) -> str:
    """Quotient (IDIV) or remainder (MOD), truncated toward zero as C's / and %: the dividend in rax, rdx extended
    from it, and rdx clobbered, so values live across the division keep out of it."""
    bits, unsigned = _integer_bits(uop.dtype), uop.dtype.scalar in UNSIGNED
    if bits == 8:
        ctx.refuse(uop, "bools are not divided")
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
    normalize(ctx.builder, result, uop.dtype)
    ctx.values[uop] = result
    return ""


def _integer_maximum(ctx: Selection, uop: UOp) -> str:
    if uop.dtype == dtypes.bool:
        return _bool_or(ctx, uop)
    result, other = ctx.builder.value("gpr", _integer_bits(uop.dtype)), ctx.register(uop.src[1])
    ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))
    ctx.builder.emit("cmp", result, other)
    ctx.builder.emit("cmovb" if uop.dtype.scalar in UNSIGNED else "cmovl", result, other)
    ctx.values[uop] = result
    return ""


def _bool_or(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("gpr", 8)
    ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))
    ctx.builder.emit("or", result, ctx.integer(uop.src[1]))
    ctx.values[uop] = result
    return ""


def _integer_negate(ctx: Selection, uop: UOp) -> str:
    result = ctx.builder.value("gpr", _integer_bits(uop.dtype))
    ctx.builder.emit("mov", result, ctx.integer(uop.src[0]))
    ctx.builder.emit("neg", result)
    normalize(ctx.builder, result, uop.dtype)
    ctx.values[uop] = result
    return ""


def _scalar_conversion(ctx: Selection, uop: UOp) -> str:
    source, target = uop.src[0].dtype, uop.dtype
    if _is_vector(uop) or source.scalar not in SCALARS or target.scalar not in SCALARS:
        ctx.refuse(uop, "only scalar casts among the selected dtypes are selected")
    if uop.op is Ops.BITCAST and source.scalar.itemsize != target.scalar.itemsize:
        ctx.refuse(uop, "a bitcast between dtypes of different sizes")
    convert = convert_scalar if uop.op is Ops.CAST else bitcast
    ctx.values[uop] = convert(ctx.builder, ctx.register(uop.src[0]), source, target)
    return ""


def _reciprocal(ctx: Selection, uop: UOp) -> str:
    bits, flavour = _float_shape(uop)
    double = uop.dtype.scalar == dtypes.float64
    one = _splat_bits(ctx, 0x3FF0000000000000 if double else 0x3F800000, bits, 64 if double else 32)
    result = ctx.builder.value("vec", bits)
    ctx.builder.emit("vdiv" + flavour, result, one, ctx.register(uop.src[0]))
    return _rounded(ctx, uop, result)


def _nothing(ctx: Selection, uop: UOp) -> str:
    return ""


# the rules answer "" (handled), not a UOp: PatternMatcher passes any answer that is not None through
x86_selection = PatternMatcher(
    cast(
        Sequence[tuple[UPat, RewriteFunction]],
        [
            (UPat(Ops.CONST, name="uop"), _constant),
            (UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR), name="uop"), _argument),
            (UPat(Ops.SPECIAL, name="uop"), _special),
            (UPat(Ops.RANGE, name="uop"), _range),
            (UPat(Ops.DEFINE_REG, name="uop"), _define_register),
            (UPat(Ops.END, name="uop"), _end),
            (UPat(Ops.INDEX, name="uop"), _index),
            (UPat(Ops.LOAD, name="uop"), _load),
            (UPat(Ops.STORE, name="uop"), _store),
            (UPat((Ops.ADD, Ops.SUB, Ops.MUL), name="uop"), _float_or_integer(_float_binary, _integer_alu)),
            (UPat(Ops.FDIV, name="uop"), _float_or_integer(_float_binary, None)),
            (UPat(Ops.MAX, name="uop"), _float_or_integer(_float_binary, _integer_maximum)),
            (UPat((Ops.SQRT, Ops.TRUNC), name="uop"), _float_or_integer(_float_unary, None)),
            (UPat(Ops.NEG, name="uop"), _float_or_integer(_float_unary, _integer_negate)),
            (UPat(Ops.RECIPROCAL, name="uop"), _float_or_integer(_reciprocal, None)),
            (UPat((Ops.SHL, Ops.SHR, Ops.AND, Ops.OR, Ops.XOR), name="uop"), _integer_only(_integer_alu)),
            (UPat((Ops.IDIV, Ops.MOD), name="uop"), _integer_only(_integer_divide)),
            (UPat(Ops.MULACC, name="uop"), _float_or_integer(_multiply_add, None)),
            (UPat(Ops.VECTORIZE, name="uop"), _vectorize),
            (UPat(Ops.GEP, name="uop"), _element),
            (UPat(tuple(_PREDICATES), name="uop"), _compare),
            (UPat(Ops.WHERE, name="uop"), _float_or_integer(_where, _where)),
            (UPat((Ops.CAST, Ops.BITCAST), name="uop"), _scalar_conversion),
            (UPat((Ops.SINK, Ops.NOOP, Ops.GROUP, Ops.BARRIER), name="uop"), _nothing),
        ],
    )
)
"""The selection rules: each takes one UOp of the linear program and emits its x86 instructions into the Selection
(the rule's answer "" only says the UOp was handled)."""


def select_kernel(uops: list[UOp], entry: bool = False, vector_registers: int = 16) -> bytes:
    """The x86-64 machine code of a linear program, or a SelectionError naming the first UOp it cannot take.

    The function takes the buffers then the variables as System V arguments, or with `entry` the CPU queue's
    convention: a pointer to one 64-bit word per argument (same order) and the worker's core_id. With
    `vector_registers=32` (AVX-512F, VL and DQ) values that meet only instructions with EVEX forms may also live in
    xmm16-31.
    """
    return Selection(uops, entry, vector_registers).select()
