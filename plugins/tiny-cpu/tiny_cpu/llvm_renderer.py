"""The LLVM renderer of the CPU device: LLVM IR text (opaque pointers) from the linear program, one function per kernel.

The kernel is `void @NAME(ptr noalias buffers..., i32 vars..., i32 %core_id)` and its entry point for the command
queue and the worker pool, `void @NAME_entry(ptr %arguments, i32 %core_id)`, unpacks buffer addresses and variable
values from one array of 64-bit words (the same calling convention as the C renderer's, see tiny_cpu.renderer).
Values live in SSA registers: bool is `i1` (a byte in memory), bfloat16 is its 16 bits (`i16`, computed in float),
vectors are LLVM vectors and a bool vector is a lane mask, so comparisons and selects stay whole-vector ops.
This module needs nothing but the core: llvmlite is imported only by the compiler (tiny_cpu.llvm_compiler).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.cstyle import bfloat16_bits
from tinycore.renderer.renderer import Renderer, kernel_name, statement_rule, text_rules
from tinycore.uop.ops import FUSED, GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
    dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
    dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double"}

_INTRINSIC_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}

_FLOAT_COMPARE = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}


def scalar_type(dtype: DType, memory: bool = False) -> str:
    """The LLVM type of a scalar dtype (`memory`: as stored, so bool is a byte)."""
    if memory and dtype.scalar == dtypes.bool:
        return "i8"
    found = _SCALAR_TYPES.get(dtype.scalar)
    if found is None:
        raise ValueError(f"the LLVM renderer has no type for {dtype.scalar}: use one of "
                         f"{', '.join(sorted(str(known) for known in _SCALAR_TYPES))}")
    return found


def llvm_type(dtype: DType, memory: bool = False) -> str:
    """The LLVM type of a (vector) dtype."""
    scalar = scalar_type(dtype, memory)
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def _is_float(dtype: DType) -> bool:
    return dtypes.is_float(dtype) and dtype.scalar != dtypes.bfloat16


def _float_constant(value: float, dtype: DType) -> str:
    """An LLVM float constant: halves as 0xH bits, floats and doubles as the double's bits (exact for floats)."""
    scalar = dtype.scalar
    value = float(value)
    if scalar == dtypes.float16:
        try:
            bits = struct.unpack("<H", struct.pack("<e", value))[0]
        except OverflowError:
            bits = 0x7C00 if value > 0 else 0xFC00
        return f"0xH{bits:04X}"
    if scalar == dtypes.float32 and math.isfinite(value):
        try:
            value = struct.unpack("<f", struct.pack("<f", value))[0]
        except OverflowError:
            value = math.copysign(math.inf, value)
    if math.isnan(value):
        return "0x7FF8000000000000"
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def constant(value: object, dtype: DType) -> str:
    """The text of a scalar constant of `dtype` (bfloat16 as its bits)."""
    scalar = dtype.scalar
    if scalar == dtypes.bool:
        return "true" if value else "false"
    if scalar == dtypes.bfloat16:
        return str(bfloat16_bits(float(value)))  # type: ignore[arg-type]
    if _is_float(scalar):
        return _float_constant(float(value), scalar)  # type: ignore[arg-type]
    bits = 8 * scalar.itemsize
    number = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
    return str(number - (1 << bits) if number >= 1 << (bits - 1) else number)


def vector_constant(values: list[object], dtype: DType) -> str:
    """The text of a vector constant of `dtype` (one value per lane)."""
    scalar = scalar_type(dtype)
    return "<" + ", ".join(f"{scalar} {constant(value, dtype.scalar)}" for value in values) + ">"


@dataclass
class Pointer:
    """An INDEX as the context keeps it: the buffer register, the element index, the gate, and the element type read
    or written (a vector type after a pointer CAST); `elements` is the buffer's size in elements (-1 unknown)."""

    buffer: str
    index: str | None
    index_type: str
    gate: str | None
    element: DType
    elements: int
    step: DType
    """The buffer's own element type, which the index counts in (a pointer CAST changes only `element`)."""


class LLVMRenderer(Renderer):
    """LLVM IR for the host CPU, compiled in-process by llvmlite (tiny_cpu.llvm_compiler)."""

    device = "CPU"
    suffix = "ll"
    has_local = False
    has_shared = False
    has_threads = True
    global_max = None
    local_max = None
    shared_max = 0
    vector_alu_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR,
                                Ops.SHL, Ops.SHR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.CAST,
                                Ops.BITCAST})
    atomic_dtypes = frozenset(_SCALAR_TYPES)
    vector_masks = True  # a bool vector is an <N x i1> mask: compares and selects of whole vectors
    decompose_transcendentals = True  # float32 exp2/log2 as arithmetic, so they vectorize with the kernel
    matmul_panel_bytes = 64  # the columns of the matmul register tile (set per target by the factory)
    fused_multiply_add = True  # llvm.fmuladd: fused where the target has FMA
    vector_widths: dict[DType, tuple[int, ...]] = {
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.float32, dtypes.int32, dtypes.uint32)},
        **{dtype: (2, 4, 8) for dtype in (dtypes.float64, dtypes.int64, dtypes.uint64)},
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.float16, dtypes.int16, dtypes.uint16)},
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.int8, dtypes.uint8, dtypes.bool)}}

    def __init__(self, device: str = "CPU", arch: str | None = None):
        from tiny_cpu.renderer import _cpu_count
        self.device = device
        self.arch = arch
        self.global_max = (_cpu_count(), 1, 1)

    def spelled_dtypes(self) -> set[DType]:
        """Every dtype with an LLVM type here (fp8 has none)."""
        return {dtype for dtype in dtypes.all if dtype in _SCALAR_TYPES}

    def render(self, uops: list[UOp]) -> str:
        """The LLVM IR module of the linear program `uops` (the function named from the SINK's arg)."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The LLVM IR module of `uops` with the kernel called `name` and its entry point `name`_entry."""
        assert self.string_rewrite is not None
        return LLVMContext(uops).run(name, self.string_rewrite)


class LLVMContext:
    """The state of rendering one linear program to LLVM IR: registers of values, open loops and blocks."""

    def __init__(self, uops: list[UOp]):
        self.uops = uops
        self.names: dict[UOp, str] = {}
        self.pointers: dict[UOp, Pointer] = {}
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.declarations: set[str] = set()
        self.counter = 0
        self.block = "start"
        self.loops: list[tuple[str, str, str, str, str]] = []
        self.conditionals: list[str] = []
        self.globals: dict[int, str] = {}
        self.variables: dict[str, str] = {}

    # ---- helpers ----

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        """Start the basic block `name`."""
        self.lines.append(f"{name}:")
        self.block = name

    def assign(self, code: str, prefix: str = "v") -> str:
        """Emit `%new = code` and return the register."""
        register = self.fresh(prefix)
        self.emit(f"{register} = {code}")
        return register

    def value(self, uop: UOp) -> str:
        if uop in self.names:
            return self.names[uop]
        if uop.op is Ops.CONST:
            return constant(uop.arg, uop.dtype)
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")

    def declare(self, text: str) -> None:
        self.declarations.add(text)

    def splat(self, text: str, dtype: DType, count: int) -> str:
        """A scalar of `dtype` broadcast to `count` lanes."""
        scalar = scalar_type(dtype)
        vector = f"<{count} x {scalar}>"
        inserted = self.assign(f"insertelement {vector} undef, {scalar} {text}, i32 0")
        return self.assign(f"shufflevector {vector} {inserted}, {vector} undef, <{count} x i32> zeroinitializer")

    def operand(self, uop: UOp, count: int) -> str:
        """`uop` with `count` lanes (scalars broadcast, constants as constant vectors)."""
        if count == 1 or uop.dtype.count == count:
            return self.value(uop)
        if uop.op is Ops.CONST:
            return vector_constant([uop.arg] * count, uop.dtype.scalar)
        return self.splat(self.value(uop), uop.dtype.scalar, count)

    def intrinsic(self, name: str, type_text: str, arguments: list[str], scalar: str, count: int) -> str:
        """A call of `llvm.NAME` on values of `type_text`, declared once."""
        suffix = _INTRINSIC_SUFFIX[scalar] if count == 1 else f"v{count}{_INTRINSIC_SUFFIX[scalar]}"
        function = f"@llvm.{name}.{suffix}"
        self.declare(f"declare {type_text} {function}({', '.join([type_text] * len(arguments))})")
        return self.assign(f"call {type_text} {function}({', '.join(f'{type_text} {a}' for a in arguments)})")

    # ---- the program ----

    def run(self, name: str, rules: PatternMatcher) -> str:
        """The LLVM IR module: each UOp rendered by the first of `rules` (the renderer's, `llvm_rendering`) that
        matches it."""
        for uop in self.uops:
            if rules.rewrite(uop, self) is None:
                raise ValueError(f"the LLVM renderer cannot render {uop.op} (dtype {uop.dtype}, arg {uop.arg!r}): it "
                                 "is not part of the linear program contract")
        globals_, variables = self.globals, self.variables
        buffer_parameters = [f"ptr noalias {globals_[position]}" for position in sorted(globals_)]
        variable_parameters = [variables[key] for key in sorted(variables)]
        parameters = [*buffer_parameters, *variable_parameters, "i32 %core_id"]
        body = [f"define void @{name}({', '.join(parameters)}) #0 {{", "entry:", *self.allocas, "  br label %start",
                "start:", *self.lines, "  ret void", "}"]
        entry = _entry_point(name, len(buffer_parameters), [text.split(" ")[0] for text in variable_parameters])
        # without min-legal-vector-width, LLVM splits 512-bit vectors in two on CPUs tuned to prefer 256 bits
        # (Skylake-X to Sapphire Rapids); where 512 bits are not legal at all it changes nothing
        attributes = 'attributes #0 = { nounwind "frame-pointer"="none" "min-legal-vector-width"="512" }'
        return "\n".join([*sorted(self.declarations), *body, *entry, attributes]) + "\n"


    def alloca(self, uop: UOp) -> None:
        """DEFINE_REG / DEFINE_LOCAL: an array on the stack, allocated in the entry block."""
        pointer = uop.dtype
        assert isinstance(pointer, PtrDType), f"{uop.op} needs a pointer dtype, got {pointer}"
        register = self.fresh("acc")
        element = llvm_type(pointer.base, memory=True)
        self.allocas.append(f"  {register} = alloca [{max(pointer.size, 1)} x {element}], align 64")
        self.names[uop] = register

    def convert(self, text: str, source: DType, target: DType, count: int) -> str:
        """`text` (count lanes of scalar dtype `source`) converted to `target` by value, as C converts."""
        if source == target:
            return text

        def typed(dtype: DType, memory: bool = False) -> str:
            scalar = scalar_type(dtype, memory)
            return scalar if count == 1 else f"<{count} x {scalar}>"

        if source == dtypes.bfloat16:
            widened = self.bfloat16_to_float(text, count)
            return self.convert(widened, dtypes.float32, target, count)
        if target == dtypes.bfloat16:
            narrowed = self.convert(text, source, dtypes.float32, count)
            return self.float_to_bfloat16(narrowed, count)
        from_type, to_type = typed(source), typed(target)
        if target == dtypes.bool:
            zero = self.zero(source, count)
            if _is_float(source):
                return self.assign(f"fcmp une {from_type} {text}, {zero}")
            return self.assign(f"icmp ne {from_type} {text}, {zero}")
        if source == dtypes.bool:
            return self.assign(f"{'uitofp' if _is_float(target) else 'zext'} {from_type} {text} to {to_type}")
        if _is_float(source) and _is_float(target):
            operation = "fpext" if target.itemsize > source.itemsize else "fptrunc"
            return self.assign(f"{operation} {from_type} {text} to {to_type}")
        if _is_float(source):  # to an integer: truncation toward zero, narrow types through a wider int as C does
            if target.itemsize < 8 and (dtypes.is_unsigned(target) or target.itemsize < 4):
                wide = "i64" if dtypes.is_unsigned(target) and target.itemsize == 4 else "i32"
                wide_type = wide if count == 1 else f"<{count} x {wide}>"
                converted = self.assign(f"fptosi {from_type} {text} to {wide_type}")
                return self.assign(f"trunc {wide_type} {converted} to {to_type}")
            operation = "fptoui" if dtypes.is_unsigned(target) else "fptosi"
            return self.assign(f"{operation} {from_type} {text} to {to_type}")
        if _is_float(target):
            return self.assign(f"{'uitofp' if dtypes.is_unsigned(source) else 'sitofp'} {from_type} {text} to "
                               f"{to_type}")
        if target.itemsize == source.itemsize:
            return text
        if target.itemsize < source.itemsize:
            return self.assign(f"trunc {from_type} {text} to {to_type}")
        return self.assign(f"{'zext' if dtypes.is_unsigned(source) else 'sext'} {from_type} {text} to {to_type}")

    def zero(self, dtype: DType, count: int) -> str:
        if count == 1:
            return constant(0, dtype)
        return "zeroinitializer"

    def bfloat16_to_float(self, bits: str, count: int) -> str:
        """bfloat16 bits (i16) to float: the bits are the float's upper half."""
        short, word, single = (("i16", "i32", "float") if count == 1 else
                               tuple(f"<{count} x {t}>" for t in ("i16", "i32", "float")))
        widened = self.assign(f"zext {short} {bits} to {word}")
        shifted = self.assign(f"shl {word} {widened}, {self.splat_constant('16', 'i32', count)}")
        return self.assign(f"bitcast {word} {shifted} to {single}")

    def float_to_bfloat16(self, value: str, count: int) -> str:
        """float to bfloat16 bits, rounding to nearest even; a NaN stays a (quiet) NaN."""
        short, word, single, flag = (("i16", "i32", "float", "i1") if count == 1 else
                                     tuple(f"<{count} x {t}>" for t in ("i16", "i32", "float", "i1")))

        def word_constant(number: int) -> str:
            return self.splat_constant(str(number), "i32", count)

        bits = self.assign(f"bitcast {single} {value} to {word}")
        is_nan = self.assign(f"fcmp uno {single} {value}, {value}")
        upper = self.assign(f"lshr {word} {bits}, {word_constant(16)}")
        odd = self.assign(f"and {word} {upper}, {word_constant(1)}")
        bias = self.assign(f"add {word} {odd}, {word_constant(0x7FFF)}")
        rounded = self.assign(f"lshr {word} {self.assign(f'add {word} {bits}, {bias}')}, {word_constant(16)}")
        quiet = self.assign(f"or {word} {upper}, {word_constant(64)}")
        chosen = self.assign(f"select {flag} {is_nan}, {word} {quiet}, {word} {rounded}")
        return self.assign(f"trunc {word} {chosen} to {short}")

    @staticmethod
    def splat_constant(text: str, scalar: str, count: int) -> str:
        return text if count == 1 else "<" + ", ".join([f"{scalar} {text}"] * count) + ">"

    # ---- arithmetic ----

    def alu(self, uop: UOp) -> str:
        """The register holding the ALU op `uop` (bfloat16 is computed in float and rounded back)."""
        op = uop.op
        operand_dtype = uop.src[1].dtype if op is Ops.WHERE else uop.src[0].dtype
        count = max([uop.dtype.count, *(source.dtype.count for source in uop.src)])
        operands = [self.operand(source, count) for source in uop.src]
        scalar = operand_dtype.scalar
        if scalar == dtypes.bfloat16:
            positions = range(1, len(operands)) if op is Ops.WHERE else range(len(operands))
            for position in positions:
                operands[position] = self.bfloat16_to_float(operands[position], count)
            result = self.arithmetic(op, operands, dtypes.float32, count)
            return self.float_to_bfloat16(result, count) if uop.dtype.scalar == dtypes.bfloat16 else result
        if op is Ops.MULACC and uop.arg == FUSED and scalar in (dtypes.float32, dtypes.float64):
            # llvm.fmuladd: one rounding where the target has FMA, a multiply and an add where it has not
            element = scalar_type(scalar)
            return self.intrinsic("fmuladd", element if count == 1 else f"<{count} x {element}>", operands, element,
                                  count)
        return self.arithmetic(op, operands, scalar, count)

    def arithmetic(self, op: Ops, operands: list[str], scalar: DType, count: int) -> str:
        """`op` over operand registers of `count` lanes of `scalar` (the type of the values, not of a WHERE's
        condition)."""
        element = scalar_type(scalar)
        type_text = element if count == 1 else f"<{count} x {element}>"
        flag = "i1" if count == 1 else f"<{count} x i1>"
        is_float, unsigned = _is_float(scalar), dtypes.is_unsigned(scalar) or scalar == dtypes.bool
        if op is Ops.WHERE:
            condition, when_true, when_false = operands
            return self.assign(f"select {flag} {condition}, {type_text} {when_true}, {type_text} {when_false}")
        if op is Ops.MULACC:
            product = self.arithmetic(Ops.MUL, operands[:2], scalar, count)
            return self.arithmetic(Ops.ADD, [product, operands[2]], scalar, count)
        if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC) and is_float:
            name = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}[op]
            if scalar == dtypes.float16 and op not in (Ops.SQRT, Ops.TRUNC):  # libm has no half functions
                wide = self.convert(operands[0], scalar, dtypes.float32, count)
                result = self.arithmetic(op, [wide], dtypes.float32, count)
                return self.convert(result, dtypes.float32, scalar, count)
            return self.intrinsic(name, type_text, operands, element, count)
        if op is Ops.POW:
            if is_float and scalar != dtypes.float16:
                return self.intrinsic("pow", type_text, operands, element, count)
            wider = dtypes.float32 if scalar == dtypes.float16 else dtypes.float64
            base, exponent = (self.convert(operand, scalar, wider, count) for operand in operands)
            result = self.intrinsic("pow", llvm_type(wider.vec(count) if count > 1 else wider), [base, exponent],
                                    scalar_type(wider), count)
            return self.convert(result, wider, scalar, count)
        if op is Ops.RECIPROCAL:
            one = self.splat_constant(constant(1.0, scalar), element, count)
            return self.assign(f"fdiv {type_text} {one}, {operands[0]}")
        if op is Ops.NEG:
            if scalar == dtypes.bool:
                return self.assign(f"xor {type_text} {operands[0]}, {self.splat_constant('true', 'i1', count)}")
            if is_float:
                return self.assign(f"fneg {type_text} {operands[0]}")
            return self.assign(f"sub {type_text} {self.zero(scalar, count)}, {operands[0]}")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL):
            if scalar == dtypes.bool:  # C's _Bool arithmetic stored back as a bool
                return self.bool_arithmetic(op, operands, count)
            name = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul"}[op]
            return self.assign(f"{'f' if is_float else ''}{name} {type_text} {operands[0]}, {operands[1]}")
        if op is Ops.FDIV:
            return self.assign(f"fdiv {type_text} {operands[0]}, {operands[1]}")
        if op in (Ops.IDIV, Ops.MOD):
            return self.integer_division(op, operands, type_text, flag, scalar, count)
        if op is Ops.MAX:
            below = self.compare(Ops.CMPLT, operands, type_text, scalar)
            return self.assign(f"select {flag} {below}, {type_text} {operands[1]}, {type_text} {operands[0]}")
        if op in GroupOp.Comparison:
            return self.compare(op, operands, type_text, scalar)
        if op in (Ops.AND, Ops.OR, Ops.XOR):
            return self.assign(f"{op.name.lower()} {type_text} {operands[0]}, {operands[1]}")
        if op is Ops.SHL:
            return self.assign(f"shl {type_text} {operands[0]}, {operands[1]}")
        if op is Ops.SHR:
            return self.assign(f"{'lshr' if unsigned else 'ashr'} {type_text} {operands[0]}, {operands[1]}")
        raise ValueError(f"the LLVM renderer cannot render {op} on {scalar}")

    def bool_arithmetic(self, op: Ops, operands: list[str], count: int) -> str:
        """ADD as OR, MUL as AND, SUB as XOR: what C's int promotion and conversion back to _Bool give."""
        name = {Ops.ADD: "or", Ops.MUL: "and", Ops.SUB: "xor"}[op]
        type_text = "i1" if count == 1 else f"<{count} x i1>"
        return self.assign(f"{name} {type_text} {operands[0]}, {operands[1]}")

    def compare(self, op: Ops, operands: list[str], type_text: str, scalar: DType) -> str:
        if _is_float(scalar):
            return self.assign(f"fcmp {_FLOAT_COMPARE[op]} {type_text} {operands[0]}, {operands[1]}")
        unsigned = dtypes.is_unsigned(scalar) or scalar == dtypes.bool
        predicate = {Ops.CMPLT: "ult" if unsigned else "slt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
        return self.assign(f"icmp {predicate} {type_text} {operands[0]}, {operands[1]}")

    def integer_division(self, op: Ops, operands: list[str], type_text: str, flag: str, scalar: DType,
                         count: int) -> str:
        """Truncating division and remainder; a zero divisor gives 0 (as the interpreter), never a trap."""
        unsigned = dtypes.is_unsigned(scalar) or scalar == dtypes.bool
        name = ("u" if unsigned else "s") + ("div" if op is Ops.IDIV else "rem")
        dividend, divisor = operands
        zero = self.zero(scalar, count)
        is_zero = self.assign(f"icmp eq {type_text} {divisor}, {zero}")
        one = self.splat_constant("1" if scalar != dtypes.bool else "true", scalar_type(scalar), count)
        safe = self.assign(f"select {flag} {is_zero}, {type_text} {one}, {type_text} {divisor}")
        result = self.assign(f"{name} {type_text} {dividend}, {safe}")
        return self.assign(f"select {flag} {is_zero}, {type_text} {zero}, {type_text} {result}")

    # ---- memory ----

    def pointer_of(self, uop: UOp) -> Pointer:
        pointer = self.pointers.get(uop)
        if pointer is None:
            raise ValueError(f"LOAD/STORE needs an INDEX (or a pointer CAST of one) as its first source, got {uop.op}")
        return pointer

    def address(self, pointer: Pointer, index: str | None) -> str:
        if index is None:
            return pointer.buffer
        step = llvm_type(pointer.step, memory=True)
        return self.assign(f"getelementptr {step}, ptr {pointer.buffer}, {pointer.index_type} {index}")

    def from_memory(self, loaded: str, dtype: DType) -> str:
        """A loaded value as computed with (bytes to bools)."""
        if dtype.scalar != dtypes.bool:
            return loaded
        return self.assign(f"icmp ne {llvm_type(dtype, memory=True)} {loaded}, {self.zero(dtypes.int8, dtype.count)}")

    def atomic_update(self, pointer: Pointer, value: str, dtype: DType, reduce: str) -> None:
        """Combine `value` into the element at `pointer` with no update lost to another worker: `atomicrmw add` for
        integer sums, else a compare-exchange loop over the element's bits (floats, halves, bfloat16, bools)."""
        after = None
        if pointer.gate is not None:
            number = self.counter = self.counter + 1
            then, after = f"atomic_then{number}", f"atomic_end{number}"
            self.emit(f"br i1 {pointer.gate}, label %{then}, label %{after}")
            self.label(then)
        address = self.address(pointer, pointer.index)
        memory = llvm_type(dtype, memory=True)
        bits = f"i{8 * dtype.itemsize}"
        if reduce == "add" and dtypes.is_int(dtype):
            self.emit(f"atomicrmw add ptr {address}, {memory} {value} monotonic, align {dtype.itemsize}")
        else:
            first = self.assign(f"load atomic {bits}, ptr {address} monotonic, align {dtype.itemsize}")
            number = self.counter = self.counter + 1
            before, retry, done = self.block, f"atomic_retry{number}", f"atomic_done{number}"
            self.emit(f"br label %{retry}")
            self.label(retry)
            old_bits, seen = self.fresh("old"), self.fresh("seen")
            self.emit(f"{old_bits} = phi {bits} [ {first}, %{before} ], [ {seen}, %{retry} ]")
            old = self.from_bits(old_bits, dtype)
            combined = self.to_bits(self.combine(reduce, old, value, dtype), dtype)
            pair = self.assign(f"cmpxchg ptr {address}, {bits} {old_bits}, {bits} {combined} monotonic monotonic, "
                               f"align {dtype.itemsize}")
            self.emit(f"{seen} = extractvalue {{ {bits}, i1 }} {pair}, 0")
            stored = self.assign(f"extractvalue {{ {bits}, i1 }} {pair}, 1")
            self.emit(f"br i1 {stored}, label %{done}, label %{retry}")
            self.label(done)
        if after is not None:
            self.emit(f"br label %{after}")
            self.label(after)

    def from_bits(self, bits: str, dtype: DType) -> str:
        """An element's bits as the value computed with."""
        if dtype == dtypes.bool:
            return self.assign(f"icmp ne i8 {bits}, 0")
        if _is_float(dtype):
            return self.assign(f"bitcast i{8 * dtype.itemsize} {bits} to {llvm_type(dtype)}")
        return bits

    def to_bits(self, value: str, dtype: DType) -> str:
        """A value as its element's bits."""
        if dtype == dtypes.bool:
            return self.assign(f"zext i1 {value} to i8")
        if _is_float(dtype):
            return self.assign(f"bitcast {llvm_type(dtype)} {value} to i{8 * dtype.itemsize}")
        return value

    def combine(self, reduce: str, old: str, new: str, dtype: DType) -> str:
        """The stored `old` combined with `new` by a scatter reduce (add, mul, max or min), as the C renderer does."""
        if dtype == dtypes.bfloat16:
            wide = self.combine(reduce, self.bfloat16_to_float(old, 1), self.bfloat16_to_float(new, 1),
                                dtypes.float32)
            return self.float_to_bfloat16(wide, 1)
        type_text = llvm_type(dtype)
        if reduce == "min":
            below = self.compare(Ops.CMPLT, [new, old], type_text, dtype)
            return self.assign(f"select i1 {below}, {type_text} {new}, {type_text} {old}")
        op = {"add": Ops.ADD, "mul": Ops.MUL, "max": Ops.MAX}.get(reduce)
        if op is None:
            raise ValueError(f"unknown scatter reduce {reduce!r}: expected add, mul, max or min")
        return self.arithmetic(op, [old, new], dtype, 1)


def _define_global(ctx: LLVMContext, uop: UOp) -> None:
    ctx.names[uop] = ctx.globals[uop.arg] = f"%data{uop.arg}"


def _define_var(ctx: LLVMContext, uop: UOp) -> None:
    register = "%" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(uop.arg[0]))
    ctx.names[uop] = register
    ctx.variables[str(uop.arg[0])] = f"{llvm_type(uop.dtype)} {register}"


def _special(ctx: LLVMContext, uop: UOp) -> None:
    # the trailing core_id is always declared: the entry point passes it
    if uop.arg != "core_id":
        raise ValueError(f"the LLVM renderer runs on CPU workers only; it cannot render SPECIAL {uop.arg}")
    ctx.names[uop] = "%core_id"


def _const(ctx: LLVMContext, uop: UOp) -> None:
    ctx.names[uop] = constant(uop.arg, uop.dtype)


def _vconst(ctx: LLVMContext, uop: UOp) -> None:
    ctx.names[uop] = vector_constant(list(uop.arg), uop.dtype)


def _noop(ctx: LLVMContext, uop: UOp) -> None:
    ctx.names[uop] = ctx.value(uop.src[0])


def _range(ctx: LLVMContext, uop: UOp) -> None:
    number = ctx.counter = ctx.counter + 1
    counter_type = llvm_type(uop.dtype if uop.dtype != dtypes.void else dtypes.int32)
    header, body, latch, exit_ = (f"loop{kind}{number}" for kind in ("_header", "_body", "_latch", "_exit"))
    register, following = f"%ridx{number}", f"%ridx{number}_next"
    ctx.emit(f"br label %{header}")
    predecessor = ctx.block
    ctx.label(header)
    ctx.emit(f"{register} = phi {counter_type} [ 0, %{predecessor} ], [ {following}, %{latch} ]")
    end = ctx.value(uop.src[0])
    condition = ctx.assign(f"icmp slt {counter_type} {register}, {end}")
    ctx.emit(f"br i1 {condition}, label %{body}, label %{exit_}")
    ctx.label(body)
    ctx.names[uop] = register
    ctx.loops.append((latch, exit_, header, register, counter_type))


def _end(ctx: LLVMContext, uop: UOp) -> None:
    closing = sum(1 for source in uop.src if source.op is Ops.RANGE) or 1
    for _ in range(closing):
        latch, exit_, header, register, counter_type = ctx.loops.pop()
        ctx.emit(f"br label %{latch}")
        ctx.label(latch)
        ctx.emit(f"{register}_next = add {counter_type} {register}, 1")
        ctx.emit(f"br label %{header}")
        ctx.label(exit_)


def _if(ctx: LLVMContext, uop: UOp) -> None:
    number = ctx.counter = ctx.counter + 1
    then, after = f"if_then{number}", f"if_end{number}"
    ctx.emit(f"br i1 {ctx.value(uop.src[0])}, label %{then}, label %{after}")
    ctx.label(then)
    ctx.conditionals.append(after)


def _endif(ctx: LLVMContext, uop: UOp) -> None:
    after = ctx.conditionals.pop()
    ctx.emit(f"br label %{after}")
    ctx.label(after)


def _index(ctx: LLVMContext, uop: UOp) -> None:
    buffer = uop.src[0]
    pointer = buffer.dtype
    element = pointer.base if isinstance(pointer, PtrDType) else buffer.dtype
    elements = pointer.size if isinstance(pointer, PtrDType) else -1
    index = ctx.value(uop.src[1]) if len(uop.src) > 1 else None
    index_type = llvm_type(uop.src[1].dtype) if len(uop.src) > 1 else "i32"
    gate = ctx.value(uop.src[2]) if len(uop.src) > 2 else None
    ctx.pointers[uop] = Pointer(ctx.value(buffer), index, index_type, gate, element, elements, element)
    ctx.names[uop] = ctx.value(buffer)


def _cast(ctx: LLVMContext, uop: UOp) -> None:
    source = uop.src[0]
    if isinstance(uop.dtype, PtrDType):  # vector access through an INDEX
        pointer = ctx.pointers.get(source)
        if pointer is None:
            raise ValueError(f"a pointer CAST needs an INDEX source, got {source.op}")
        ctx.pointers[uop] = Pointer(pointer.buffer, pointer.index, pointer.index_type, pointer.gate,
                                     uop.dtype.base, pointer.elements, pointer.step)
        ctx.names[uop] = pointer.buffer
        return
    count = uop.dtype.count
    ctx.names[uop] = ctx.convert(ctx.operand(source, count), source.dtype.scalar, uop.dtype.scalar, count)


def _bitcast(ctx: LLVMContext, uop: UOp) -> None:
    source = uop.src[0]
    if source.dtype.itemsize * source.dtype.count != uop.dtype.itemsize * uop.dtype.count:
        raise ValueError(f"BITCAST from {source.dtype} to {uop.dtype}: the sizes differ")
    ctx.names[uop] = ctx.assign(f"bitcast {llvm_type(source.dtype)} {ctx.value(source)} to "
                                  f"{llvm_type(uop.dtype)}")


def _vectorize(ctx: LLVMContext, uop: UOp) -> None:
    vector = llvm_type(uop.dtype)
    scalar = scalar_type(uop.dtype)
    current = "undef"
    for lane, source in enumerate(uop.src):
        current = ctx.assign(f"insertelement {vector} {current}, {scalar} {ctx.value(source)}, i32 {lane}")
    ctx.names[uop] = current


def _gep(ctx: LLVMContext, uop: UOp) -> None:
    source = uop.src[0]
    vector = llvm_type(source.dtype)
    lanes = list(uop.arg)
    if len(lanes) == 1:
        ctx.names[uop] = ctx.assign(f"extractelement {vector} {ctx.value(source)}, i32 {lanes[0]}")
        return
    mask = f"<{len(lanes)} x i32> <" + ", ".join(f"i32 {lane}" for lane in lanes) + ">"
    ctx.names[uop] = ctx.assign(f"shufflevector {vector} {ctx.value(source)}, {vector} undef, {mask}")

# ---- conversions ----


def _load(ctx: LLVMContext, uop: UOp) -> None:
    pointer = ctx.pointer_of(uop.src[0])
    dtype = uop.dtype
    count = dtype.count
    memory_type, value_type = llvm_type(dtype, memory=True), llvm_type(dtype)
    alignment = dtype.scalar.itemsize
    alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
    if pointer.gate is None:
        loaded = ctx.assign(f"load {memory_type}, ptr {ctx.address(pointer, pointer.index)}, align {alignment}")
        ctx.names[uop] = ctx.from_memory(loaded, dtype)
        return
    alternative = ctx.operand(alternatives[0], count) if alternatives else ctx.zero(dtype.scalar, count)
    flag = "i1" if count == 1 else f"<{count} x i1>"
    if pointer.index is not None and pointer.elements >= max(count, 1):
        # a gated read loads element 0 where the gate is off, so it needs no branch and vectorizes
        index = ctx.assign(f"select i1 {pointer.gate}, {pointer.index_type} {pointer.index}, "
                            f"{pointer.index_type} 0")
        loaded = ctx.assign(f"load {memory_type}, ptr {ctx.address(pointer, index)}, align {alignment}")
        value = ctx.from_memory(loaded, dtype)
        gate = pointer.gate if count == 1 else ctx.splat(pointer.gate, dtypes.bool, count)
        del flag
        ctx.names[uop] = ctx.assign(f"select {'i1' if count == 1 else f'<{count} x i1>'} {gate}, "
                                      f"{value_type} {value}, {value_type} {alternative}")
        return
    number = ctx.counter = ctx.counter + 1
    then, after = f"load_then{number}", f"load_end{number}"
    before = ctx.block
    ctx.emit(f"br i1 {pointer.gate}, label %{then}, label %{after}")
    ctx.label(then)
    loaded = ctx.assign(f"load {memory_type}, ptr {ctx.address(pointer, pointer.index)}, align {alignment}")
    value = ctx.from_memory(loaded, dtype)
    loaded_block = ctx.block
    ctx.emit(f"br label %{after}")
    ctx.label(after)
    ctx.names[uop] = ctx.assign(f"phi {value_type} [ {value}, %{loaded_block} ], [ {alternative}, %{before} ]")


def _store(ctx: LLVMContext, uop: UOp) -> None:
    pointer = ctx.pointer_of(uop.src[0])
    value = uop.src[1]
    dtype = value.dtype
    if uop.arg is not None and dtype.count != 1:
        raise ValueError(f"the LLVM renderer updates scalars atomically, got a combining store ({uop.arg}) of "
                         f"{dtype}: codegen must split it into lanes")
    text = ctx.value(value)
    if uop.arg is not None:
        ctx.atomic_update(pointer, text, dtype, str(uop.arg))
        return
    if dtype.scalar == dtypes.bool:
        text = ctx.assign(f"zext {llvm_type(dtype)} {text} to {llvm_type(dtype, memory=True)}")
    after = None
    if pointer.gate is not None:
        number = ctx.counter = ctx.counter + 1
        then, after = f"store_then{number}", f"store_end{number}"
        ctx.emit(f"br i1 {pointer.gate}, label %{then}, label %{after}")
        ctx.label(then)
    address = ctx.address(pointer, pointer.index)
    ctx.emit(f"store {llvm_type(dtype, memory=True)} {text}, ptr {address}, align {dtype.scalar.itemsize}")
    if after is not None:
        ctx.emit(f"br label %{after}")
        ctx.label(after)


def _alu(ctx: LLVMContext, uop: UOp) -> None:
    ctx.names[uop] = ctx.alu(uop)


llvm_rendering = text_rules([
    (UPat(Ops.DEFINE_GLOBAL, name="uop"), statement_rule(_define_global)),
    (UPat(Ops.DEFINE_VAR, name="uop"), statement_rule(_define_var)),
    (UPat(Ops.SPECIAL, name="uop"), statement_rule(_special)),
    (UPat(Ops.CONST, name="uop"), statement_rule(_const)),
    (UPat(Ops.VCONST, name="uop"), statement_rule(_vconst)),
    (UPat((Ops.NOOP, Ops.PRECAST, Ops.BIND), name="uop"), statement_rule(_noop)),
    (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="uop"), statement_rule(LLVMContext.alloca)),
    (UPat(Ops.RANGE, name="uop"), statement_rule(_range)),
    (UPat(Ops.END, name="uop"), statement_rule(_end)),
    (UPat(Ops.IF, name="uop"), statement_rule(_if)),
    (UPat(Ops.ENDIF, name="uop"), statement_rule(_endif)),
    (UPat(Ops.INDEX, name="uop"), statement_rule(_index)),
    (UPat(Ops.CAST, name="uop"), statement_rule(_cast)),
    (UPat(Ops.BITCAST, name="uop"), statement_rule(_bitcast)),
    (UPat(Ops.VECTORIZE, name="uop"), statement_rule(_vectorize)),
    (UPat(Ops.GEP, name="uop"), statement_rule(_gep)),
    (UPat(Ops.LOAD, name="uop"), statement_rule(_load)),
    (UPat(Ops.STORE, name="uop"), statement_rule(_store)),
    (UPat(GroupOp.ALU, name="uop"), statement_rule(_alu)),
    (UPat((Ops.SINK, Ops.GROUP, Ops.BARRIER)), lambda: ""),
])
"""LLVM IR's rules: each UOp rendered into the LLVMContext (registers, blocks, loops)."""
LLVMRenderer.string_rewrite = llvm_rendering


def _entry_point(name: str, buffers: int, variable_types: list[str]) -> list[str]:
    """`void @NAME_entry(ptr %arguments, i32 %core_id)`: the kernel's arguments unpacked from 64-bit words."""
    lines = [f"define void @{name}_entry(ptr %arguments, i32 %core_id) #0 {{"]
    arguments = []
    for position in range(buffers + len(variable_types)):
        lines.append(f"  %slot{position} = getelementptr i64, ptr %arguments, i64 {position}")
        lines.append(f"  %word{position} = load i64, ptr %slot{position}, align 8")
        if position < buffers:
            lines.append(f"  %argument{position} = inttoptr i64 %word{position} to ptr")
            arguments.append(f"ptr %argument{position}")
        else:
            variable_type = variable_types[position - buffers]
            converted = f"trunc i64 %word{position} to {variable_type}" if variable_type != "i64" else \
                f"add i64 %word{position}, 0"
            lines.append(f"  %argument{position} = {converted}")
            arguments.append(f"{variable_type} %argument{position}")
    arguments.append("i32 %core_id")
    lines += [f"  call void @{name}({', '.join(arguments)})", "  ret void", "}"]
    return lines
