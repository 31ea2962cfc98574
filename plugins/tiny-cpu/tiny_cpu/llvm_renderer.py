"""The LLVM renderer of the CPU device: LLVM IR (opaque pointers) from the linear program, one function per kernel.

`void @NAME(ptr noalias buffers..., i32 vars..., i32 %core_id)` is the kernel, and `void @NAME_entry(ptr %arguments,
i32 %core_id)` unpacks its arguments from 64-bit words (tiny_cpu.renderer's convention). bool is `i1` (a byte in
memory), bfloat16 its bits in an i16, vectors LLVM vectors (a bool vector a lane mask). llvm_compiler compiles it.
"""
from __future__ import annotations

import functools
import math
import os
import struct

from tiny_cpu.llvm_lowering import llvm_lowering
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import NUM_CPU_THREADS
from tinycore.renderer.ssa import Pointer, SSAContext, SSARenderer, fill_types, float_bits, identifier, ssa_rules
from tinycore.uop.ops import FUSED, Ops
from tinycore.uop.uop import UOp

_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
    dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
    dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double"}
_EMULATED = frozenset({dtypes.bfloat16})  # bits in an i16, computed in float32 (codegen's pass "narrow floats")
_INTRINSICS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.POW: "pow"}
# ALU op -> its instructions ("; " between), each an SSA value; fields: a b c the operands, T their type, F the lane
# mask type, zero / one / true constants, lt the less-than compare, shr / div the signed or unsigned spelling, {0}
# {1}... the earlier values
_COMMON_OPS = {Ops.WHERE: "select {F} {a}, {T} {b}, {T} {c}", Ops.FDIV: "fdiv {T} {a}, {b}",
               Ops.RECIPROCAL: "fdiv {T} {one}, {a}", Ops.AND: "and {T} {a}, {b}", Ops.OR: "or {T} {a}, {b}",
               Ops.XOR: "xor {T} {a}, {b}", Ops.SHL: "shl {T} {a}, {b}", Ops.SHR: "{shr} {T} {a}, {b}",
               Ops.CMPLT: "{lt} {T} {a}, {b}"}
_FLOAT_OPS = {Ops.ADD: "fadd {T} {a}, {b}", Ops.SUB: "fsub {T} {a}, {b}", Ops.MUL: "fmul {T} {a}, {b}",
              Ops.MULACC: "fmul {T} {a}, {b}; fadd {T} {0}, {c}", Ops.NEG: "fneg {T} {a}",
              Ops.CMPNE: "fcmp une {T} {a}, {b}", Ops.CMPEQ: "fcmp oeq {T} {a}, {b}"}
_INTEGER_OPS = {Ops.ADD: "add {T} {a}, {b}", Ops.SUB: "sub {T} {a}, {b}", Ops.MUL: "mul {T} {a}, {b}",
                Ops.MULACC: "mul {T} {a}, {b}; add {T} {0}, {c}", Ops.NEG: "sub {T} {zero}, {a}",
                Ops.CMPNE: "icmp ne {T} {a}, {b}", Ops.CMPEQ: "icmp eq {T} {a}, {b}",
                Ops.IDIV: "{div}div {T} {a}, {b}", Ops.MOD: "{div}rem {T} {a}, {b}"}  # a zero divisor: codegen
_BOOL_OPS = {Ops.NEG: "xor {T} {a}, {true}"}  # codegen's "SSA lowering" makes the rest of bool arithmetic logic
_TO_FLOAT = "zext {S} {a} to {W}; shl {W} {0}, {c16}; bitcast {W} {1} to {f32}"  # bfloat16 bits: the upper half
_TO_BFLOAT16 = "bitcast {f32} {a} to {W}; fcmp uno {f32} {a}, {a}; lshr {W} {0}, {c16}; and {W} {2}, {c1}; " \
    "add {W} {3}, {c32767}; add {W} {0}, {4}; lshr {W} {5}, {c16}; or {W} {2}, {c64}; select {F} {1}, {W} {7}, " \
    "{W} {6}; trunc {W} {8} to {S}"  # round to nearest even, a NaN stays a quiet NaN
_BOOL_BITS = ("icmp ne i8 {0}, 0", "zext i1 {0} to i8")  # an atomically updated element's bits (B) to its value
_FLOAT_BITS = ("bitcast {B} {0} to {T}", "bitcast {T} {0} to {B}")  # (of type T) and back

def _lanes(scalar: str, count: int) -> str:
    return scalar if count == 1 else f"<{count} x {scalar}>"

def _splat(text: str, scalar: str, count: int) -> str:
    return text if count == 1 else "<" + ", ".join([f"{scalar} {text}"] * count) + ">"

@functools.cache
def _resolved(template: str, scalar: DType, count: int) -> tuple[str, ...]:
    """The instructions of `template` on `count` lanes of `scalar`, the operands left to `LLVMContext.sequence`."""
    element, unsigned = llvm_type(scalar), dtypes.is_unsigned(scalar) or scalar == dtypes.bool
    fields = {"T": _lanes(element, count), "F": _lanes("i1", count), "S": _lanes("i16", count),
              "W": _lanes("i32", count), "f32": _lanes("float", count), "true": _splat("true", "i1", count),
              "zero": constant(0, scalar) if count == 1 else "zeroinitializer",
              "one": _splat(constant(1, scalar), element, count),
              "lt": "fcmp olt" if _is_float(scalar) else "icmp ult" if unsigned else "icmp slt",
              "shr": "lshr" if unsigned else "ashr", "div": "u" if unsigned else "s",
              **{f"c{number}": _splat(str(number), "i32", count) for number in (1, 16, 64, 32767)}}
    return fill_types(template.split("; "), fields, "abc")

@functools.cache
def _table_plan(op: Ops, scalar: DType, count: int) -> tuple[str, ...] | None:
    """The instructions of `op` on `count` lanes of `scalar` from the tables (None where they have none)."""
    template = (_BOOL_OPS.get(op) if scalar == dtypes.bool else None) or \
        (_FLOAT_OPS if _is_float(scalar) else _INTEGER_OPS).get(op) or _COMMON_OPS.get(op)
    return None if template is None else _resolved(template, scalar, count)

def llvm_type(dtype: DType, memory: bool = False, count: int | None = None) -> str:
    """The LLVM type of `dtype` on `count` lanes (by default its own; `memory`: as stored, so bool is a byte)."""
    if (found := _SCALAR_TYPES.get(dtype.scalar)) is None:
        raise ValueError(f"the LLVM renderer has no type for {dtype.scalar}: use one of "
                         f"{', '.join(sorted(str(known) for known in _SCALAR_TYPES))}")
    return _lanes("i8" if memory and found == "i1" else found, dtype.count if count is None else count)

def _is_float(dtype: DType) -> bool:
    return dtypes.is_float(dtype) and dtype.scalar not in _EMULATED

def constant(value: object, dtype: DType) -> str:
    """The text of a scalar constant of `dtype`: a half as 0xH bits, bfloat16 (an i16) as the integer of its bits,
    floats and doubles as the double's bits (exact for floats), integers as signed."""
    if (scalar := dtype.scalar) == dtypes.bool:
        return "true" if value else "false"
    if not dtypes.is_float(scalar):
        half = 1 << (8 * scalar.itemsize - 1)  # the bits of the integer read as signed
        return str(((int(value) + half) & (2 * half - 1)) - half)  # type: ignore[call-overload]
    number = float(value)  # type: ignore[arg-type]
    if scalar.itemsize == 2:
        return ("0xH{:04X}" if scalar == dtypes.float16 else "{}").format(float_bits(number, scalar))
    if scalar == dtypes.float32:  # rounded to float, written as the double of the same value
        number = struct.unpack("<f", struct.pack("<I", float_bits(number, scalar)))[0]
    return f"0x{0x7FF8000000000000 if math.isnan(number) else float_bits(number, dtypes.float64):016X}"

def vector_constant(values: list[object], dtype: DType) -> str:
    """The text of a vector constant of `dtype` (one value per lane; zeroinitializer where every lane is +0)."""
    if all(value == 0 and math.copysign(1.0, value) > 0 for value in values):  # type: ignore[arg-type]
        return "zeroinitializer"
    return "<" + ", ".join(f"{llvm_type(dtype.scalar)} {constant(value, dtype.scalar)}" for value in values) + ">"

class LLVMContext(SSAContext):
    """The state of rendering one linear program to LLVM IR: registers of values, blocks, open loops and branches."""

    language, indent, emulated_floats = "LLVM", "  ", _EMULATED
    constant = staticmethod(constant)  # a constant is its literal

    def __init__(self, uops: list[UOp], renderer: SSARenderer | None = None):
        super().__init__(uops, renderer)
        self.counter, self.block, self.intrinsics = 0, "start", set[str]()
        self.loops: list[tuple[str, str, str, str, str]] = []  # (latch, exit, header, counter, type)

    def fresh(self, prefix: str = "v") -> str:
        """A new register name."""
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def label(self, name: str) -> None:
        """Start the basic block `name`."""
        self.lines.append(f"{name}:")
        self.block = name

    def assign(self, code: str) -> str:
        """Emit `%new = code` and return the register."""
        self.emit(f"{(register := self.fresh())} = {code}")
        return register

    def sequence(self, templates: tuple[str, ...], *operands: str) -> str:
        """One instruction per template (operands a, b, c, the earlier registers {0}, {1}...); the last register."""
        registers: list[str] = []
        fields = dict(zip("abc", operands, strict=False))
        for template in templates:
            registers.append(self.assign(template.format(*registers, **fields)))
        return registers[-1]

    def branch(self, condition: str, kind: str) -> str:
        """Open the block `kind`_then that runs when `condition` holds; the label of the block after it (`join`)."""
        self.counter += 1
        then, after = f"{kind}_then{self.counter}", f"{kind}_end{self.counter}"
        self.emit(f"br i1 {condition}, label %{then}, label %{after}")
        self.label(then)
        return after

    def join(self, after: str | None) -> None:
        """Close the open block and continue at `after` (None: no block was opened)."""
        if after is not None:
            self.emit(f"br label %{after}")
            self.label(after)

    def address(self, pointer: Pointer) -> str:
        """The address an INDEX's pointer (buffer, gate, its getelementptr or "") points at."""
        return self.assign(pointer[2]) if pointer[2] else pointer[0]

    def lanes(self, uop: UOp) -> int:
        """The lanes of the ALU UOp `uop`: the widest of it and its sources."""
        return max([uop.dtype.count, *(source.dtype.count for source in uop.src)])

    def operand(self, uop: UOp, count: int) -> str:
        """`uop` with `count` lanes (scalars broadcast, constants as constant vectors)."""
        if count == 1 or uop.dtype.count == count:
            return self.value(uop)
        if uop.op is Ops.CONST:
            return vector_constant([uop.arg] * count, uop.dtype.scalar)
        vector, scalar = llvm_type(uop.dtype, count=count), llvm_type(uop.dtype.scalar)
        inserted = self.assign(f"insertelement {vector} undef, {scalar} {self.value(uop)}, i32 0")
        return self.assign(f"shufflevector {vector} {inserted}, {vector} undef, <{count} x i32> zeroinitializer")

    def intrinsic(self, name: str, arguments: list[str], dtype: DType, count: int) -> str:
        """A call of `llvm.NAME` on `count` lanes of `dtype`, declared once."""
        type_text, suffix = llvm_type(dtype, count=count), f"f{8 * dtype.itemsize}"  # f16, f32 or f64
        function = f"@llvm.{name}.{suffix if count == 1 else f'v{count}{suffix}'}"
        self.intrinsics.add(f"declare {type_text} {function}({', '.join([type_text] * len(arguments))})")
        return self.assign(f"call {type_text} {function}({', '.join(f'{type_text} {a}' for a in arguments)})")

    def run(self, name: str) -> str:
        """The LLVM IR module: the kernel's function (its UOps rendered by the rules), its entry point, attributes."""
        self.render_uops(self.renderer.string_rewrite if self.renderer is not None else llvm_rendering)
        buffers = [f"ptr noalias %data{n}" for n in sorted({u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL})]
        variables = dict(sorted((str(u.arg[0]), f"{llvm_type(u.dtype)} %{identifier(u.arg[0])}")
                                for u in self.uops if u.op is Ops.DEFINE_VAR)).values()
        body = [f"define void @{name}({', '.join([*buffers, *variables, 'i32 %core_id'])}) #0 {{", "entry:",
                *self.declarations, "  br label %start", "start:", *self.lines, "  ret void", "}"]
        entry = _entry_point(name, len(buffers), [text.split(" ")[0] for text in variables])
        # without min-legal-vector-width, LLVM splits 512-bit vectors in two on CPUs tuned to prefer 256 bits
        # (Skylake-X to Sapphire Rapids); where 512 bits are not legal at all it changes nothing
        attributes = 'attributes #0 = { nounwind "frame-pointer"="none" "min-legal-vector-width"="512" }'
        return "\n".join([*sorted(self.intrinsics), *body, *entry, attributes]) + "\n"

    def convert(self, text: str, source: DType, target: DType, count: int = 1) -> str:
        """`text` (count lanes of scalar dtype `source`) converted to `target` by value, as C converts (never to or from
        bool: codegen's "SSA lowering" compares and selects; bfloat16's bits to and from float32 only)."""
        if source == target:
            return text
        if dtypes.bfloat16 in (source, target):
            return self.sequence(_resolved(_TO_FLOAT if source == dtypes.bfloat16 else _TO_BFLOAT16, dtypes.float32,
                                           count), text)
        if _is_float(source):  # to a narrow or unsigned 32-bit integer through a wider one (llvm_lowering)
            operation = ("fpext" if target.itemsize > source.itemsize else "fptrunc") if _is_float(target) else \
                ("fptoui" if dtypes.is_unsigned(target) else "fptosi")
        elif _is_float(target):
            operation = "uitofp" if dtypes.is_unsigned(source) else "sitofp"
        elif target.itemsize == source.itemsize:
            return text
        else:
            operation = "trunc" if target.itemsize < source.itemsize else \
                ("zext" if dtypes.is_unsigned(source) else "sext")
        return self.assign(f"{operation} {llvm_type(source, count=count)} {text} to {llvm_type(target, count=count)}")

    def compute(self, uop: UOp, operands: list[str], dtype: DType, count: int) -> str:
        """The ALU UOp `uop` over `operands` of `dtype`; a fused MULACC of floats or doubles is `llvm.fmuladd` (one
        rounding where the target has FMA, a multiply and an add where it has not)."""
        if uop.op is Ops.MULACC and uop.arg == FUSED and uop.src[0].dtype.scalar in (dtypes.float32, dtypes.float64):
            return self.intrinsic("fmuladd", operands, dtype, count)
        return self.arithmetic(uop.op, operands, dtype, count)

    def arithmetic(self, op: Ops, operands: list[str], dtype: DType, count: int = 1) -> str:
        """`op` over registers of `count` lanes of `dtype` (the values' type): from the tables, else an intrinsic."""
        if dtype in _EMULATED and op is not Ops.WHERE:
            raise ValueError(f"the LLVM renderer computes {dtype} in float32 only: codegen's \"narrow floats\" casts")
        if (plan := _table_plan(op, dtype, count)) is not None:
            return self.sequence(plan, *operands)
        if (name := _INTRINSICS.get(op)) is None or not _is_float(dtype):
            raise ValueError(f"the LLVM renderer cannot render {op} on {dtype}")
        return self.intrinsic(name, operands, dtype, count)

    def atomic_update(self, pointer: Pointer, value: str, dtype: DType, reduce: str) -> None:
        """Combine `value` into the element at `pointer` with no update lost to another worker: `atomicrmw add` for
        integer sums, else a compare-exchange loop over the element's bits (floats, halves, bfloat16, bools)."""
        if dtype.count != 1:
            raise ValueError(f"the LLVM renderer updates scalars atomically, got a {reduce} of {dtype}: codegen splits")
        after = self.branch(pointer[1], "atomic") if pointer[1] is not None else None
        address, bits, size = self.address(pointer), f"i{8 * dtype.itemsize}", dtype.itemsize
        if reduce == "add" and dtypes.is_int(dtype):
            self.emit(f"atomicrmw add ptr {address}, {llvm_type(dtype, memory=True)} {value} monotonic, align {size}")
        else:
            first = self.assign(f"load atomic {bits}, ptr {address} monotonic, align {size}")
            number = self.counter = self.counter + 1
            before, retry, done = self.block, f"atomic_retry{number}", f"atomic_done{number}"
            self.emit(f"br label %{retry}")
            self.label(retry)
            old_bits, seen = self.fresh("old"), self.fresh("seen")
            self.emit(f"{old_bits} = phi {bits} [ {first}, %{before} ], [ {seen}, %{retry} ]")
            to_value, to_bits = _BOOL_BITS if dtype == dtypes.bool else (_FLOAT_BITS if _is_float(dtype) else ("", ""))
            old = self.assign(to_value.format(old_bits, B=bits, T=llvm_type(dtype))) if to_value else old_bits
            combined = self.combine(reduce, old, value, dtype)
            combined = self.assign(to_bits.format(combined, B=bits, T=llvm_type(dtype))) if to_bits else combined
            pair = self.assign(f"cmpxchg ptr {address}, {bits} {old_bits}, {bits} {combined} monotonic monotonic, "
                               f"align {size}")
            self.emit(f"{seen} = extractvalue {{ {bits}, i1 }} {pair}, 0")
            stored = self.assign(f"extractvalue {{ {bits}, i1 }} {pair}, 1")
            self.emit(f"br i1 {stored}, label %{done}, label %{retry}")
            self.label(done)
        self.join(after)

    def _alloca(self, uop: UOp) -> str:  # DEFINE_REG / DEFINE_LOCAL: an array on the stack, in the entry block
        assert isinstance(pointer := uop.dtype, PtrDType), f"{uop.op} needs a pointer dtype, got {pointer}"
        self.declarations.append(f"  {(register := self.fresh('acc'))} = alloca [{max(pointer.size, 1)} x "
                                 f"{llvm_type(pointer.base, True)}], align 64")
        return register

    def _special(self, uop: UOp) -> str:
        if uop.arg != "core_id":  # the trailing core_id is always declared: the entry point passes it
            raise ValueError(f"the LLVM renderer runs on CPU workers only; it cannot render SPECIAL {uop.arg}")
        return "%core_id"

    def _range(self, uop: UOp) -> str:
        number = self.counter = self.counter + 1
        counter_type = llvm_type(uop.dtype if uop.dtype != dtypes.void else dtypes.int32)
        header, body, latch, exit_ = (f"loop{kind}{number}" for kind in ("_header", "_body", "_latch", "_exit"))
        register, predecessor = f"%ridx{number}", self.block
        self.emit(f"br label %{header}")
        self.label(header)
        self.emit(f"{register} = phi {counter_type} [ 0, %{predecessor} ], [ {register}_next, %{latch} ]")
        condition = self.assign(f"icmp slt {counter_type} {register}, {self.value(uop.src[0])}")
        self.emit(f"br i1 {condition}, label %{body}, label %{exit_}")
        self.label(body)
        self.loops.append((latch, exit_, header, register, counter_type))
        return register

    def _end(self, uop: UOp) -> None:
        for _ in range(sum(1 for source in uop.src if source.op is Ops.RANGE) or 1):
            latch, exit_, header, register, counter_type = self.loops.pop()
            self.join(latch)
            self.emit(f"{register}_next = add {counter_type} {register}, 1", f"br label %{header}")
            self.label(exit_)

    def _index(self, uop: UOp) -> str:  # the element's address is computed where a LOAD or STORE uses it
        buffer, pointer = self.value(uop.src[0]), uop.src[0].dtype
        element = llvm_type(pointer.base if isinstance(pointer, PtrDType) else pointer, memory=True)
        index = f"getelementptr {element}, ptr {buffer}, {llvm_type(uop.src[1].dtype)} {self.value(uop.src[1])}" \
            if len(uop.src) > 1 else ""
        self.pointers[uop] = (buffer, self.value(uop.src[2]) if len(uop.src) > 2 else None, index)
        return buffer

    def _cast(self, uop: UOp) -> str:
        if not isinstance(uop.dtype, PtrDType):
            return self.cast(uop)
        self.pointers[uop] = self.pointer(uop)  # a vector access through an INDEX
        return self.pointers[uop][0]

    def _bitcast(self, uop: UOp) -> str:
        source = uop.src[0]
        if source.dtype.itemsize * source.dtype.count != uop.dtype.itemsize * uop.dtype.count:
            raise ValueError(f"BITCAST from {source.dtype} to {uop.dtype}: the sizes differ")
        return self.assign(f"bitcast {llvm_type(source.dtype)} {self.value(source)} to {llvm_type(uop.dtype)}")

    def _vectorize(self, uop: UOp) -> str:
        vector, scalar, current = llvm_type(uop.dtype), llvm_type(uop.dtype.scalar), "undef"
        for lane, source in enumerate(uop.src):
            current = self.assign(f"insertelement {vector} {current}, {scalar} {self.value(source)}, i32 {lane}")
        return current

    def _gep(self, uop: UOp) -> str:
        vector, lanes, source = llvm_type(uop.src[0].dtype), list(uop.arg), self.value(uop.src[0])
        if len(lanes) == 1:
            return self.assign(f"extractelement {vector} {source}, i32 {lanes[0]}")
        mask = f"<{len(lanes)} x i32> <" + ", ".join(f"i32 {lane}" for lane in lanes) + ">"
        return self.assign(f"shufflevector {vector} {source}, {vector} undef, {mask}")

    def _load(self, uop: UOp) -> str:
        pointer, dtype, count = self.pointer(uop), uop.dtype, uop.dtype.count  # (bools are bytes: "SSA lowering")
        if (gate := pointer[1]) is not None:  # a buffer of unknown size (llvm_lowering selects in the others): a
            # branch; sources of dtype void only order the load, the first other is the alternative
            alternative = next((self.operand(source, count) for source in uop.src[1:] if source.dtype != dtypes.void),
                               vector_constant([0] * count, dtype) if count > 1 else constant(0, dtype))
            before, after = self.block, self.branch(gate, "load")
        value = self.assign(f"load {llvm_type(dtype, memory=True)}, ptr {self.address(pointer)}, align "
                            f"{dtype.scalar.itemsize}")
        if gate is None:
            return value
        loaded_block = self.block
        self.join(after)
        return self.assign(f"phi {llvm_type(dtype)} [ {value}, %{loaded_block} ], [ {alternative}, %{before} ]")

    def _store(self, uop: UOp) -> None:
        pointer, dtype, text = self.pointer(uop), uop.src[1].dtype, self.value(uop.src[1])
        if uop.arg is not None:
            return self.atomic_update(pointer, text, dtype, str(uop.arg))
        after = self.branch(pointer[1], "store") if pointer[1] is not None else None
        self.emit(f"store {llvm_type(dtype, memory=True)} {text}, ptr {self.address(pointer)}, "
                  f"align {dtype.scalar.itemsize}")
        self.join(after)

llvm_rendering = ssa_rules({
    Ops.DEFINE_GLOBAL: lambda ctx, uop: f"%data{uop.arg}",
    Ops.DEFINE_VAR: lambda ctx, uop: f"%{identifier(uop.arg[0])}",
    Ops.SPECIAL: LLVMContext._special, Ops.RANGE: LLVMContext._range, Ops.END: LLVMContext._end,
    Ops.CONST: lambda ctx, uop: constant(uop.arg, uop.dtype),
    Ops.VCONST: lambda ctx, uop: vector_constant(list(uop.arg), uop.dtype),
    (Ops.DEFINE_REG, Ops.DEFINE_LOCAL): LLVMContext._alloca, Ops.INDEX: LLVMContext._index, Ops.CAST: LLVMContext._cast,
    Ops.IF: lambda ctx, uop: ctx.conditionals.append(ctx.branch(ctx.value(uop.src[0]), "if")),
    Ops.ENDIF: lambda ctx, uop: ctx.join(ctx.conditionals.pop()), Ops.BITCAST: LLVMContext._bitcast,
    Ops.VECTORIZE: LLVMContext._vectorize, Ops.GEP: LLVMContext._gep, Ops.LOAD: LLVMContext._load,
    Ops.STORE: LLVMContext._store, Ops.BARRIER: lambda ctx, uop: None})
"""LLVM IR's rules: each UOp rendered into the LLVMContext (registers, blocks, loops)."""

def _entry_point(name: str, buffers: int, variable_types: list[str]) -> list[str]:
    """`void @NAME_entry(ptr %arguments, i32 %core_id)`: the kernel's arguments unpacked from 64-bit words."""
    lines, arguments = [f"define void @{name}_entry(ptr %arguments, i32 %core_id) #0 {{"], []
    for position, kind in enumerate(["ptr"] * buffers + variable_types):
        word = f"%word{position}"
        converted = f"inttoptr i64 {word} to ptr" if kind == "ptr" else \
            f"trunc i64 {word} to {kind}" if kind != "i64" else f"add i64 {word}, 0"
        lines += [f"  %slot{position} = getelementptr i64, ptr %arguments, i64 {position}",
                  f"  {word} = load i64, ptr %slot{position}, align 8", f"  %argument{position} = {converted}"]
        arguments.append(f"{kind} %argument{position}")
    return lines + [f"  call void @{name}({', '.join([*arguments, 'i32 %core_id'])})", "  ret void", "}"]

class LLVMRenderer(SSARenderer):
    """LLVM IR for the host CPU, compiled in-process by llvmlite (tiny_cpu.llvm_compiler)."""

    device, suffix, emulated_floats, string_rewrite, context = "CPU", "ll", _EMULATED, llvm_rendering, LLVMContext
    has_local, has_shared, has_threads, local_max, shared_max = False, False, True, None, 0  # global_max: __init__
    vector_alu_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR,
                                Ops.SHL, Ops.SHR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.CAST,
                                Ops.BITCAST})
    atomic_dtypes, type_map = frozenset(_SCALAR_TYPES), _SCALAR_TYPES  # every dtype with an LLVM type (fp8 has none)
    vector_masks = True  # a bool vector is an <N x i1> mask: compares and selects of whole vectors
    decompose_transcendentals = True  # float32 exp2/log2 as arithmetic, so they vectorize with the kernel
    matmul_panel_bytes = 64  # the columns of the matmul register tile (set per target by the factory)
    fused_multiply_add = True  # llvm.fmuladd: fused where the target has FMA
    vector_widths: dict[DType, tuple[int, ...]] = {dtype: (2, 4, 8) if dtype.itemsize == 8 else (2, 4, 8, 16)
                                                   for dtype in _SCALAR_TYPES if dtype != dtypes.bfloat16}
    post_matcher = llvm_lowering  # gated reads without a branch, half math in float32 (tiny_cpu.llvm_lowering)

    def __init__(self, device: str = "CPU", arch: str | None = None):
        self.device, self.arch, self.global_max = device, arch, (NUM_CPU_THREADS.value or os.cpu_count() or 1, 1, 1)
