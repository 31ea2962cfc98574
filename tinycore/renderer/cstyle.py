"""CStyleLanguage: a table-driven renderer of linear kernel programs into C-like source.

The C, OpenCL C, CUDA and HIP renderers share this walk over the linear program and differ only in the tables and
small hooks below: type names, literals, casts, vector syntax, thread indices, qualifiers and the kernel signature.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import ClassVar

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.renderer import Renderer, kernel_name
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp

CodeForOp = Callable[..., str]

# The default ALU table: each entry takes the rendered operands and the operand dtype (scalar) and returns an
# expression. Renderers replace entries (math builtins, MAX, ...) in their own `code_for_op`.
BASE_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    Ops.NEG: lambda x, dtype: f"(!{x})" if dtype == dtypes.bool else f"(-{x})",
    Ops.EXP2: lambda x, dtype: f"exp2({x})", Ops.LOG2: lambda x, dtype: f"log2({x})",
    Ops.SIN: lambda x, dtype: f"sin({x})", Ops.SQRT: lambda x, dtype: f"sqrt({x})",
    Ops.RECIPROCAL: lambda x, dtype: f"(1/{x})", Ops.TRUNC: lambda x, dtype: f"trunc({x})",
    Ops.ADD: lambda a, b, dtype: f"({a}+{b})", Ops.SUB: lambda a, b, dtype: f"({a}-{b})",
    Ops.MUL: lambda a, b, dtype: f"({a}*{b})", Ops.FDIV: lambda a, b, dtype: f"({a}/{b})",
    Ops.IDIV: lambda a, b, dtype: f"({a}/{b})", Ops.MOD: lambda a, b, dtype: f"({a}%{b})",
    Ops.MAX: lambda a, b, dtype: f"(({a}<{b})?{b}:{a})", Ops.POW: lambda a, b, dtype: f"pow({a},{b})",
    Ops.CMPLT: lambda a, b, dtype: f"({a}<{b})", Ops.CMPNE: lambda a, b, dtype: f"({a}!={b})",
    Ops.CMPEQ: lambda a, b, dtype: f"({a}=={b})",
    Ops.AND: lambda a, b, dtype: f"({a}&{b})", Ops.OR: lambda a, b, dtype: f"({a}|{b})",
    Ops.XOR: lambda a, b, dtype: f"({a}^{b})", Ops.SHL: lambda a, b, dtype: f"({a}<<{b})",
    Ops.SHR: lambda a, b, dtype: f"({a}>>{b})",
    Ops.WHERE: lambda condition, a, b, dtype: f"({condition}?{a}:{b})",
    Ops.MULACC: lambda a, b, c, dtype: f"(({a}*{b})+{c})",
}

BASE_TYPE_MAP: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long",
    dtypes.uint64: "unsigned long", dtypes.float16: "half", dtypes.bfloat16: "__bf16", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.void: "void"}

# ops that never get a variable of their own (always rendered in place)
_ALWAYS_INLINE = {Ops.CONST, Ops.INDEX, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.NOOP, Ops.BIND, Ops.PRECAST}
# ops that are rendered in place when they have one user and are scalar
_INLINE_WHEN_SINGLE_USE = GroupOp.ALU | {Ops.CAST, Ops.GEP, Ops.VECTORIZE, Ops.VCONST, Ops.CUSTOM}
_NARROW_RESULTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)


def bfloat16_bits(value: float) -> int:
    """The bfloat16 bit pattern of `value` (round to nearest even, quiet NaN kept)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0] if math.isfinite(value) or math.isinf(value) \
        else 0x7FC00000
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


class RenderedPointer:
    """A rendered INDEX: the buffer expression, the element index expression, the optional gate, the element dtype
    and the vector-pointer cast if any (what `CStyleWalk.access` receives)."""

    def __init__(self, buffer: str, index: str | None, gate: str | None, element: DType, cast: str | None = None):
        self.buffer, self.index, self.gate, self.element, self.cast = buffer, index, gate, element, cast

    def address(self) -> str:
        """The pointer expression (with the vector-pointer cast if any)."""
        address = self.buffer if self.index in (None, "0") else f"({self.buffer}+{self.index})"
        return f"(({self.cast})({address}))" if self.cast else address


class CStyleLanguage(Renderer):
    """A renderer for C-like languages driven by tables; subclasses override tables and a few hooks.

    Tables: `code_for_op` (ALU op -> expression), `type_map` (scalar dtype -> type name), `kernel_prefix`,
    `buffer_prefix` / `buffer_suffix` / `const_buffer_prefix` (kernel buffer parameter qualifiers), `arg_int_prefix`
    (how DEFINE_VAR parameters are declared), `code_for_workitem` (SPECIAL "g"/"l"/"i" + axis -> expression),
    `barrier`, `smem_prefix` (local memory declaration), `infinity` / `nan` literals, `float_suffix`,
    `vector_alu_ops` (ALU ops the language applies lane-wise to vector types), `native_bfloat16`.
    Hooks: `render_dtype`, `render_const`, `render_cast`, `render_bitcast`, `render_declaration`, `render_vector`,
    `render_gep`, `render_vector_pointer`, `render_kernel`, `render_special`, `render_local`, `render_math`.
    """

    kernel_prefix: str = ""
    buffer_prefix: str = ""
    buffer_suffix: str = ""
    const_buffer_prefix: str = "const "
    smem_prefix: str = ""
    arg_int_prefix: str = "const int"
    barrier: str = ""
    code_for_workitem: dict[str, Callable[[int], str]] = {}
    infinity: str = "INFINITY"
    nan: str = "NAN"
    float_suffix: str = "f"
    native_bfloat16: bool = False
    vector_alu_ops: frozenset[Ops] = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC})
    code_for_op: dict[Ops, CodeForOp] = BASE_CODE_FOR_OP
    type_map: dict[DType, str] = BASE_TYPE_MAP
    # divide by a non-constant integer: 0 where the divisor is 0, as the constant folder does, instead of a trap
    guard_integer_division: bool = True
    # wrap results of these dtypes in a cast after each op so C's integer promotion and excess float precision
    # give the same value as a per-op rounded computation
    narrow_dtypes: tuple[DType, ...] = _NARROW_RESULTS + (dtypes.float16,)
    # the walk that renders one program; a subclass of CStyleWalk changes how memory is accessed
    walk_class: ClassVar[type[CStyleWalk]]

    # ---------------------------------------------------------------- hooks

    def render_dtype(self, dtype: DType) -> str:
        """The type name of a scalar or vector dtype (pointers: the pointee's name followed by '*')."""
        if isinstance(dtype, PtrDType):
            return f"{self.render_dtype(dtype.base)}*"
        scalar = self.storage_type(dtype.scalar)
        if dtype.count == 1:
            return scalar
        return self.vector_type_name(scalar, dtype.count)

    def spelled_dtypes(self) -> set[DType]:
        """The dtypes `type_map` has names for, and bfloat16 wherever uint16 is (stored as its bits when the language
        has no bfloat16, computed in float32)."""
        spelled = super().spelled_dtypes()
        if not self.native_bfloat16 and dtypes.uint16 in self.type_map:
            spelled.add(dtypes.bfloat16)
        return spelled

    def storage_type(self, dtype: DType) -> str:
        """The scalar type name of `dtype` (bfloat16 without native support is stored as its 16 bits)."""
        if dtype == dtypes.bfloat16 and not self.native_bfloat16:
            return self.type_map[dtypes.uint16]
        if dtype not in self.type_map:
            raise ValueError(f"{type(self).__name__} has no type for {dtype}: cast to a supported dtype first")
        return self.type_map[dtype]

    def vector_type_name(self, scalar: str, count: int) -> str:
        """The name of a vector of `count` lanes of the scalar type `scalar` (float4, uint8, ...)."""
        short = scalar.replace("unsigned ", "u").replace("signed ", "s").replace(" ", "")
        return f"{short}{count}"

    def render_float(self, value: float, dtype: DType) -> str:
        """A floating point literal of `dtype`, infinities and NaN included."""
        if math.isnan(value):
            text = self.nan
        elif math.isinf(value):
            text = self.infinity if value > 0 else f"(-{self.infinity})"
        else:
            text = repr(float(value))
            if "e" not in text and "." not in text:
                text += ".0"
            if dtype.scalar != dtypes.float64:
                text += self.float_suffix
            if text.startswith("-"):
                text = f"({text})"
        if dtype.scalar in (dtypes.float32, dtypes.float64):
            return text
        return self.render_cast(text, dtypes.float32, dtype.scalar)

    def render_const(self, value: object, dtype: DType) -> str:
        """A literal of scalar `dtype`."""
        if dtype.scalar == dtypes.bfloat16 and not self.native_bfloat16:
            return f"(({self.storage_type(dtypes.bfloat16)}){bfloat16_bits(float(value))}u)"  # type: ignore[arg-type]
        if dtypes.is_float(dtype):
            return self.render_float(float(value), dtype)  # type: ignore[arg-type]
        if dtype.scalar == dtypes.bool:
            return "1" if value else "0"
        number = int(value)  # type: ignore[call-overload]
        scalar = dtype.scalar
        if scalar == dtypes.int32:
            return "(-2147483647-1)" if number == -2**31 else (f"({number})" if number < 0 else str(number))
        if scalar == dtypes.uint32:
            return f"{number}u"
        if scalar == dtypes.int64:
            return "(-9223372036854775807ll-1)" if number == -2**63 else (
                f"({number}ll)" if number < 0 else f"{number}ll")
        if scalar == dtypes.uint64:
            return f"{number}ull"
        return f"(({self.render_dtype(scalar)}){number})"

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversion of a scalar expression."""
        return f"(({self.render_dtype(to_dtype)})({expression}))"

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Reinterpretation of the bits of an expression (GNU C statement expression with memcpy by default)."""
        return (f"({{ {self.render_dtype(from_dtype)} tc_source = {expression}; {self.render_dtype(to_dtype)} "
                f"tc_result; __builtin_memcpy(&tc_result, &tc_source, sizeof(tc_result)); tc_result; }})")

    def render_declaration(self, name: str, dtype: DType, code: str) -> str:
        """The statement declaring the value `name` of `dtype` as `code` (the walk's named intermediate values)."""
        return f"{self.render_dtype(dtype)} {name} = {code};"

    def render_vector(self, dtype: DType, items: list[str]) -> str:
        """A vector value built from scalar expressions (OpenCL syntax by default)."""
        return f"({self.render_dtype(dtype)})({','.join(items)})"

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of the vector expression `expression` of `dtype`."""
        return f"{expression}[{lane}]"

    def render_pointer_type(self, dtype: DType, addrspace: str) -> str:
        """The type of a pointer to `dtype` (a vector, for vector loads and stores) in `addrspace`."""
        prefix = self.buffer_prefix if addrspace == "global" else (self.smem_prefix if addrspace == "local" else "")
        return f"{prefix}{self.render_dtype(dtype)}*"

    def render_vector_pointer(self, address: str, dtype: DType, addrspace: str) -> str:
        """A pointer to a vector of `dtype` at the scalar address `address`."""
        return f"(({self.render_pointer_type(dtype, addrspace)})({address}))"

    def render_vector_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str | None:
        """A whole-vector value conversion, or None to convert lane by lane."""
        return None

    def render_special(self, name: str) -> str:
        """The expression for the thread index SPECIAL `name` (gidx0, lidx1, idx2, ...)."""
        kind = "l" if name.startswith("lidx") else ("g" if name.startswith("gidx") else "i")
        if kind not in self.code_for_workitem:
            raise ValueError(f"{type(self).__name__} has no thread index {name!r}")
        return self.code_for_workitem[kind](int(name[-1]))

    def render_local(self, name: str, dtype: DType, size: int) -> str:
        """The declaration of a local (shared) memory array."""
        return f"{self.smem_prefix}{self.render_dtype(dtype)} {name}[{size}];"

    def render_buffer_parameter(self, name: str, dtype: PtrDType, read_only: bool) -> str:
        """The kernel parameter declaration of a global buffer."""
        const = self.const_buffer_prefix if read_only else ""
        return f"{self.buffer_prefix}{const}{self.render_dtype(dtype.base)}*{self.buffer_suffix} {name}"

    def render_var_parameter(self, name: str, dtype: DType) -> str:
        """The kernel parameter declaration of a DEFINE_VAR (an int)."""
        return f"{self.arg_int_prefix} {name}"

    def extra_parameters(self, uops: list[UOp]) -> list[str]:
        """Parameters after buffers and variables (the CPU's core_id, for example)."""
        return []

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Lines before the kernel: type definitions and helper functions the body uses."""
        return []

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str]) -> str:
        """The complete source: prelude, signature and indented body."""
        signature = f"{self.kernel_prefix}void {name}({', '.join(parameters)}) {{"
        return "\n".join(prelude + [signature] + body + ["}"]) + "\n"

    def render_math(self, op: Ops, operands: list[str], dtype: DType) -> str:
        """One scalar ALU op (bfloat16 computed in float32 when it is only a storage type)."""
        if dtype.scalar == dtypes.bfloat16 and not self.native_bfloat16:
            widened = [f"tc_bf16_to_f32({operand})" for operand in operands]
            if op is Ops.WHERE:
                return self.code_for_op[op](*operands, dtype)
            result = self.code_for_op[op](*widened, dtypes.float32)
            return result if op in GroupOp.Comparison else f"tc_f32_to_bf16({result})"
        if op not in self.code_for_op:
            raise ValueError(f"{type(self).__name__} cannot render {op}: codegen must rewrite it first")
        return self.code_for_op[op](*operands, dtype)

    # ---------------------------------------------------------------- the walk

    def render(self, uops: list[UOp]) -> str:
        """The source of the linear program `uops` (the function is named from the SINK's arg, else 'kernel')."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The source of the linear program `uops` as a function called `name`."""
        return self.walk_class(self, uops).run(name)


class CStyleWalk:
    """The state of rendering one linear program: names given to values, rendered pointers, the lines so far.

    Public so that renderers of C-like languages can override how memory is accessed (`access`, `pointer_of`) or
    how single ops are written; set the subclass as the renderer's `walk_class`."""

    def __init__(self, renderer: CStyleLanguage, uops: list[UOp]):
        self.renderer, self.uops = renderer, uops
        self.names: dict[UOp, str] = {}
        self.pointers: dict[UOp, RenderedPointer] = {}
        self.counters: dict[str, int] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.used_dtypes: set[DType] = set()
        self.uses: dict[UOp, int] = {}
        self.inlined: set[UOp] = set()
        self.stored: set[UOp] = set()
        for uop in uops:
            for source in uop.src:
                self.uses[source] = self.uses.get(source, 0) + 1
            if uop.op is Ops.STORE:
                target = uop.src[0]
                while target.op in (Ops.INDEX, Ops.CAST) and target.src:
                    target = target.src[0]
                self.stored.add(target)

    # ---- helpers ----

    def fresh(self, prefix: str) -> str:
        number = self.counters.get(prefix, 0)
        self.counters[prefix] = number + 1
        return f"{prefix}{number}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def note(self, dtype: DType) -> None:
        base = dtype.base if isinstance(dtype, PtrDType) else dtype
        self.used_dtypes.add(base)
        self.used_dtypes.add(base.scalar)

    def expression(self, uop: UOp) -> str:
        if uop in self.names:
            return self.names[uop]
        if uop.op is Ops.CONST:
            return self.renderer.render_const(uop.arg, uop.dtype)
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")

    def bind(self, uop: UOp, code: str, prefix: str = "alu") -> None:
        """Render `code` in place for single-use scalars, else declare a variable for it."""
        single = self.uses.get(uop, 0) <= 1 and uop.dtype.count == 1
        if uop.op in _INLINE_WHEN_SINGLE_USE and single:
            self.names[uop] = code
            self.inlined.add(uop)
            return
        name = self.fresh(prefix)
        self.emit(self.renderer.render_declaration(name, uop.dtype, code))
        self.names[uop] = name

    def lane(self, uop: UOp, lane: int) -> str:
        """Lane `lane` of a source (scalars broadcast)."""
        text = self.expression(uop)
        return text if uop.dtype.count == 1 else self.renderer.render_gep(text, lane, uop.dtype)

    # ---- ops ----

    def run(self, name: str) -> str:
        renderer = self.renderer
        parameters: list[str] = []
        variables: dict[str, str] = {}
        globals_: dict[int, str] = {}
        for uop in self.uops:
            self.note(uop.dtype)
            handler = getattr(self, f"op_{uop.op.name.lower()}", None)
            if uop.op is Ops.DEFINE_GLOBAL:
                buffer_name = f"data{uop.arg}"
                self.names[uop] = buffer_name
                assert isinstance(uop.dtype, PtrDType), f"DEFINE_GLOBAL needs a pointer dtype, got {uop.dtype}"
                globals_[uop.arg] = renderer.render_buffer_parameter(buffer_name, uop.dtype, uop not in self.stored)
            elif uop.op is Ops.DEFINE_VAR:
                variable_name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(uop.arg[0]))
                self.names[uop] = variable_name
                variables[str(uop.arg[0])] = renderer.render_var_parameter(variable_name, uop.dtype)
            elif uop.op in GroupOp.ALU:
                self.op_alu(uop)
            elif handler is not None:
                handler(uop)
            elif uop.op in (Ops.SINK, Ops.GROUP):
                continue
            else:
                raise ValueError(f"{type(renderer).__name__} cannot render {uop.op} (dtype {uop.dtype}, arg "
                                 f"{uop.arg!r}): it is not part of the linear program contract")
        parameters += [globals_[position] for position in sorted(globals_)]
        parameters += [variables[key] for key in sorted(variables)]
        parameters += renderer.extra_parameters(self.uops)
        prelude = renderer.render_prelude(self.uops, self.used_dtypes)
        return renderer.render_kernel(name, parameters, self.lines, prelude)

    def op_const(self, uop: UOp) -> None:
        self.names[uop] = self.renderer.render_const(uop.arg, uop.dtype)

    def op_vconst(self, uop: UOp) -> None:
        items = [self.renderer.render_const(value, uop.dtype.scalar) for value in uop.arg]
        self.bind(uop, self.renderer.render_vector(uop.dtype, items))

    def op_noop(self, uop: UOp) -> None:
        self.names[uop] = self.expression(uop.src[0])

    op_precast = op_noop
    op_bind = op_noop

    def op_special(self, uop: UOp) -> None:
        label = str(uop.arg)
        if label == "core_id":
            self.names[uop] = "core_id"
            return
        size = uop.src[0] if uop.src else None
        comment = f" /* {size.arg} */" if size is not None and size.op is Ops.CONST else ""
        self.emit(f"{self.renderer.render_dtype(uop.dtype)} {label} = {self.renderer.render_special(label)};"
                  f"{comment}")
        self.names[uop] = label

    def op_define_reg(self, uop: UOp) -> None:
        name = self.fresh("acc")
        pointer = uop.dtype
        assert isinstance(pointer, PtrDType), f"DEFINE_REG needs a pointer dtype, got {pointer}"
        self.emit(f"{self.renderer.render_dtype(pointer.base)} {name}[{max(pointer.size, 1)}];")
        self.names[uop] = name

    def op_define_local(self, uop: UOp) -> None:
        name = self.fresh("temp")
        pointer = uop.dtype
        assert isinstance(pointer, PtrDType), f"DEFINE_LOCAL needs a pointer dtype, got {pointer}"
        self.emit(self.renderer.render_local(name, pointer.base, max(pointer.size, 1)))
        self.names[uop] = name

    def op_range(self, uop: UOp) -> None:
        name = self.fresh("ridx")
        type_name = self.renderer.render_dtype(uop.dtype if uop.dtype != dtypes.void else dtypes.int32)
        self.emit(f"for ({type_name} {name} = 0; {name} < {self.expression(uop.src[0])}; {name}++) {{")
        self.names[uop] = name
        self.depth += 1

    def op_end(self, uop: UOp) -> None:
        closing = sum(1 for source in uop.src if source.op is Ops.RANGE) or 1
        for _ in range(closing):
            self.depth -= 1
            self.emit("}")

    def op_if(self, uop: UOp) -> None:
        self.emit(f"if ({self.expression(uop.src[0])}) {{")
        self.depth += 1

    def op_endif(self, uop: UOp) -> None:
        self.depth -= 1
        self.emit("}")

    def op_barrier(self, uop: UOp) -> None:
        if self.renderer.barrier:
            self.emit(self.renderer.barrier)

    def op_index(self, uop: UOp) -> None:
        buffer = uop.src[0]
        base_pointer = self.pointers.get(buffer)
        buffer_text = base_pointer.address() if base_pointer is not None else self.expression(buffer)
        if self.uses.get(uop, 0) > 1:  # an address used several times computes its index once
            for source in uop.src[1:]:
                if source in self.inlined:
                    self.materialize(source)
        index = self.expression(uop.src[1]) if len(uop.src) > 1 else None
        gate = self.expression(uop.src[2]) if len(uop.src) > 2 else None
        element = buffer.dtype.base if isinstance(buffer.dtype, PtrDType) else buffer.dtype
        self.pointers[uop] = RenderedPointer(buffer_text, index, gate, element)
        self.names[uop] = self.pointers[uop].address()

    def op_cast(self, uop: UOp) -> None:
        source = uop.src[0]
        if isinstance(uop.dtype, PtrDType):  # a pointer cast: vector access through an INDEX
            pointer = self.pointers.get(source)
            if pointer is None:
                raise ValueError(f"a pointer CAST needs an INDEX source, got {source.op}")
            cast = self.renderer.render_pointer_type(uop.dtype.base, uop.dtype.addrspace)
            self.pointers[uop] = RenderedPointer(pointer.buffer, pointer.index, pointer.gate, uop.dtype.base, cast)
            self.names[uop] = self.pointers[uop].address()
            return
        self.bind(uop, self.render_cast(source, uop.dtype))

    def render_cast(self, source: UOp, dtype: DType) -> str:
        renderer = self.renderer
        from_dtype = source.dtype
        if dtype.count > 1:
            whole = self.vector_cast(source, dtype)
            if whole is not None:
                return whole
            items = [self.scalar_cast(self.lane(source, lane), from_dtype.scalar, dtype.scalar)
                     for lane in range(dtype.count)]
            return renderer.render_vector(dtype, items)
        return self.scalar_cast(self.expression(source), from_dtype, dtype)

    def vector_cast(self, source: UOp, dtype: DType) -> str | None:
        """A whole-vector conversion, where the renderer has one (None: convert lane by lane)."""
        return self.renderer.render_vector_cast(self.expression(source), source.dtype, dtype)

    def scalar_cast(self, text: str, from_dtype: DType, to_dtype: DType) -> str:
        renderer = self.renderer
        emulated = not renderer.native_bfloat16
        if from_dtype == to_dtype:
            return text
        if emulated and from_dtype == dtypes.bfloat16:
            widened = f"tc_bf16_to_f32({text})"
            return widened if to_dtype == dtypes.float32 else renderer.render_cast(widened, dtypes.float32, to_dtype)
        if emulated and to_dtype == dtypes.bfloat16:
            narrowed = text if from_dtype == dtypes.float32 else renderer.render_cast(text, from_dtype,
                                                                                        dtypes.float32)
            return f"tc_f32_to_bf16({narrowed})"
        return renderer.render_cast(text, from_dtype, to_dtype)

    def op_bitcast(self, uop: UOp) -> None:
        source = uop.src[0]
        if source.dtype.itemsize * source.dtype.count != uop.dtype.itemsize * uop.dtype.count:
            raise ValueError(f"BITCAST from {source.dtype} to {uop.dtype}: the sizes differ")
        name = self.fresh("alu")
        code = self.renderer.render_bitcast(self.expression(source), source.dtype, uop.dtype)
        self.emit(f"{self.renderer.render_dtype(uop.dtype)} {name} = {code};")
        self.names[uop] = name

    def op_vectorize(self, uop: UOp) -> None:
        self.bind(uop, self.renderer.render_vector(uop.dtype, [self.expression(source) for source in uop.src]))

    def op_gep(self, uop: UOp) -> None:
        source = uop.src[0]
        text = self.expression(source)
        lanes = [self.renderer.render_gep(text, lane, source.dtype) for lane in uop.arg]
        if len(lanes) == 1:
            self.names[uop] = lanes[0]
        else:
            self.bind(uop, self.renderer.render_vector(uop.dtype, lanes))

    def op_custom(self, uop: UOp) -> None:
        code = str(uop.arg).format(*[self.expression(source) for source in uop.src])
        if uop.dtype == dtypes.void:
            self.emit(code if code.rstrip().endswith((";", "}")) else code + ";")
        else:
            self.bind(uop, code, "custom")

    def op_alu(self, uop: UOp) -> None:
        code = self.compose_alu(uop, [self.expression(source) for source in uop.src])
        # an operand rendered in place that the code repeats (MAX, a division guard, lanes of a broadcast scalar)
        # gets a variable first, so nested repeats cannot grow the source exponentially
        probes = [f"\x00{position}\x00" for position in range(len(uop.src))]
        probed = self.compose_alu(uop, probes)
        repeated = [source for source, probe in zip(uop.src, probes, strict=True)
                    if source in self.inlined and probed.count(probe) > 1]
        if repeated:
            for source in dict.fromkeys(repeated):
                self.materialize(source)
            code = self.compose_alu(uop, [self.expression(source) for source in uop.src])
        self.bind(uop, code)

    def materialize(self, uop: UOp) -> None:
        """Give an expression rendered in place a variable of its own, declared here."""
        name = self.fresh("alu")
        self.emit(self.renderer.render_declaration(name, uop.dtype, self.names[uop]))
        self.names[uop] = name
        self.inlined.discard(uop)

    def compose_alu(self, uop: UOp, operands: list[str]) -> str:
        """The code of an ALU op over the given operand texts (lane by lane where the language needs it)."""
        renderer = self.renderer
        operand_dtype = uop.src[1].dtype if uop.op is Ops.WHERE else uop.src[0].dtype
        count = max(source.dtype.count for source in uop.src)
        scalar = operand_dtype.scalar
        vector_ok = (uop.op in renderer.vector_alu_ops and scalar != dtypes.bool
                     and scalar not in renderer.narrow_dtypes
                     and not (scalar == dtypes.bfloat16 and not renderer.native_bfloat16))
        if count == 1 or (vector_ok and all(source.dtype.count == count for source in uop.src)):
            code = self.scalar_alu(uop.op, operands, operand_dtype, uop.src)
            if count == 1 and uop.dtype in renderer.narrow_dtypes:
                code = renderer.render_cast(code, uop.dtype, uop.dtype)
            return code
        items = []
        for lane in range(count):
            lanes = [text if source.dtype.count == 1 else renderer.render_gep(text, lane, source.dtype)
                     for source, text in zip(uop.src, operands, strict=True)]
            item = self.scalar_alu(uop.op, lanes, scalar, uop.src)
            if uop.dtype.scalar in renderer.narrow_dtypes:
                item = renderer.render_cast(item, uop.dtype.scalar, uop.dtype.scalar)
            items.append(item)
        return renderer.render_vector(uop.dtype, items)

    def scalar_alu(self, op: Ops, operands: list[str], dtype: DType, sources: tuple[UOp, ...]) -> str:
        renderer = self.renderer
        if op in (Ops.IDIV, Ops.MOD) and renderer.guard_integer_division and not dtypes.is_float(dtype):
            divisor = sources[1]
            constant = divisor.op is Ops.CONST or (divisor.op is Ops.VCONST and all(divisor.arg))
            if not (constant and (divisor.op is Ops.VCONST or divisor.arg != 0)):
                zero = renderer.render_const(0, dtype.scalar)
                return f"(({operands[1]}==0)?{zero}:{renderer.render_math(op, operands, dtype)})"
        return renderer.render_math(op, operands, dtype)

    # ---- memory ----

    def pointer_of(self, uop: UOp) -> RenderedPointer:
        pointer = self.pointers.get(uop)
        if pointer is None and uop.op in (Ops.INDEX, Ops.CAST):
            raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")
        if pointer is None:
            raise ValueError(f"LOAD/STORE needs an INDEX (or a pointer CAST of one) as its first source, got {uop.op}")
        return pointer

    def access(self, pointer: RenderedPointer, index_uop: UOp, value_dtype: DType) -> str:
        """The lvalue reading or writing `value_dtype` at `pointer` (a vector access through a cast if needed)."""
        if pointer.cast is None and value_dtype.count > pointer.element.count:
            address = pointer.address()
            space = index_uop.dtype.addrspace if isinstance(index_uop.dtype, PtrDType) else "global"
            return f"(*{self.renderer.render_vector_pointer(address, value_dtype, space)})"
        if pointer.cast is None and pointer.index is not None:
            return f"{pointer.buffer}[{pointer.index}]"
        return f"(*{pointer.address()})"

    def op_load(self, uop: UOp) -> None:
        pointer = self.pointer_of(uop.src[0])
        value = self.access(pointer, uop.src[0], uop.dtype)
        # extra sources of dtype void (an END, STORE or BARRIER) only order the load; the first other one is the
        # value of a gated load where the gate is false
        alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
        if pointer.gate is not None:
            if alternatives:
                alternative = self.expression(alternatives[0])
            elif uop.dtype.count > 1:
                zero = self.renderer.render_const(0, uop.dtype.scalar)
                alternative = self.renderer.render_vector(uop.dtype, [zero] * uop.dtype.count)
            else:
                alternative = self.renderer.render_const(0, uop.dtype)
            if uop.dtype.count > 1:  # the access may have a differently qualified vector type (C's unaligned one)
                value = f"(({self.renderer.render_dtype(uop.dtype)}){value})"
            value = f"({pointer.gate}?{value}:{alternative})"
        name = self.fresh("val")
        self.emit(f"{self.renderer.render_dtype(uop.dtype)} {name} = {value};")
        self.names[uop] = name

    def op_store(self, uop: UOp) -> None:
        pointer = self.pointer_of(uop.src[0])
        value = uop.src[1]
        if uop.arg is not None:
            statement = self.atomic_update(pointer, uop.src[0], value, str(uop.arg))
        else:
            statement = f"{self.access(pointer, uop.src[0], value.dtype)} = {self.expression(value)};"
        self.emit(f"if ({pointer.gate}) {{ {statement} }}" if pointer.gate is not None else statement)

    def atomic_update(self, pointer: RenderedPointer, index_uop: UOp, value: UOp, reduce: str) -> str:
        """The statement combining `value` into the element at `pointer` atomically (a STORE whose arg is a scatter
        reduce: add, mul, max or min). Renderers that declare `atomic_dtypes` override it."""
        raise ValueError(f"{type(self.renderer).__name__} declares no atomic updates, got a combining store "
                         f"({reduce}) of {value.dtype}: codegen must resolve it first (codegen/atomics.py)")

    def combine_code(self, reduce: str, old: str, new: str, dtype: DType) -> str:
        """The expression combining the stored `old` with `new` by a scatter reduce (names, evaluated once each)."""
        renderer = self.renderer
        if reduce == "min":
            below = renderer.render_math(Ops.CMPLT, [new, old], dtype)
            code = renderer.render_math(Ops.WHERE, [below, new, old], dtype)
        else:
            boolean = dtype == dtypes.bool
            op = {"add": Ops.OR if boolean else Ops.ADD, "mul": Ops.AND if boolean else Ops.MUL, "max": Ops.MAX}[reduce]
            code = renderer.render_math(op, [old, new], dtype)
        return renderer.render_cast(code, dtype, dtype) if dtype in renderer.narrow_dtypes else code


CStyleLanguage.walk_class = CStyleWalk
