"""CStyleLanguage: renderers of linear kernel programs into C-like source, as rules.

Each UOp of the linear program is rendered to text by the first rule of the language's `string_rewrite` (a
PatternMatcher over a RenderContext that holds the names given so far) that matches it: a language puts its own
rules before `base_rendering` and falls through to it by returning None. The C, OpenCL C, CUDA, HIP and WGSL
renderers differ in those rules and in data: type names, literals, casts, vector syntax, thread indices,
qualifiers, the barrier and the kernel signature (the tables and small hooks of CStyleLanguage).
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any, ClassVar

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.renderer import Renderer, kernel_name, text_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
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
    and the vector-pointer cast if any (what `CStyleLanguage.render_access` receives)."""

    def __init__(self, buffer: str, index: str | None, gate: str | None, element: DType, cast: str | None = None):
        self.buffer, self.index, self.gate, self.element, self.cast = buffer, index, gate, element, cast

    def address(self) -> str:
        """The pointer expression (with the vector-pointer cast if any)."""
        address = self.buffer if self.index in (None, "0") else f"({self.buffer}+{self.index})"
        return f"(({self.cast})({address}))" if self.cast else address


class CStyleLanguage(Renderer):
    """A renderer for C-like languages: rules (`string_rewrite`), tables and a few hooks.

    Rules: `string_rewrite`, a PatternMatcher of UOp -> text rules called with the RenderContext as `ctx`; a
    language (or a vendor's plugin) writes `string_rewrite = text_rules([...]) + base_rendering`, its rules
    returning None to leave a UOp to the next rule, and `context_state` for what its rules keep per program.
    Tables: `code_for_op` (ALU op -> expression), `type_map` (scalar dtype -> type name), `kernel_prefix`,
    `buffer_prefix` / `buffer_suffix` / `const_buffer_prefix` (kernel buffer parameter qualifiers), `arg_int_prefix`
    (how DEFINE_VAR parameters are declared), `code_for_workitem` (SPECIAL "g"/"l"/"i" + axis -> expression),
    `barrier`, `smem_prefix` (local memory declaration), `infinity` / `nan` literals, `float_suffix`,
    `vector_alu_ops` (ALU ops the language applies lane-wise to vector types), `native_bfloat16`.
    Hooks: `render_dtype`, `render_const`, `render_cast`, `render_bitcast`, `render_declaration`, `render_vector`,
    `render_gep`, `render_vector_pointer`, `render_access`, `render_kernel`, `render_function`, `render_special`,
    `render_local`, `render_math`.
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
    # the rules rendering each UOp to text: the language's own first, then `base_rendering` (see the module's end)
    string_rewrite: ClassVar[PatternMatcher]

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
        """The statement declaring the value `name` of `dtype` as `code` (the named intermediate values)."""
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

    # ---------------------------------------------------------------- the rules

    def render(self, uops: list[UOp]) -> str:
        """The source of the linear program `uops` (the function is named from the SINK's arg, else 'kernel')."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The source of the linear program `uops` as a function called `name`: each UOp, in order, rendered into a
        RenderContext by the first rule of `string_rewrite` that matches it, then `render_function`."""
        ctx = RenderContext(self, uops)
        rules = self.string_rewrite
        for uop in uops:
            ctx.note(uop.dtype)
            if rules.rewrite(uop, ctx) is None:
                raise ValueError(f"{type(self).__name__} cannot render {uop.op} (dtype {uop.dtype}, arg {uop.arg!r}): "
                                 f"it is not part of the linear program contract")
        return self.render_function(ctx, name)

    def render_function(self, ctx: RenderContext, name: str) -> str:
        """The source around the rendered body: parameters (buffers by position, variables by name, then
        `extra_parameters`), the prelude and the kernel signature (`render_kernel`)."""
        parameters = [ctx.buffers[position] for position in sorted(ctx.buffers)]
        parameters += [ctx.variables[key] for key in sorted(ctx.variables)]
        parameters += self.extra_parameters(ctx.uops)
        return self.render_kernel(name, parameters, ctx.lines, self.render_prelude(ctx.uops, ctx.used_dtypes))

    def context_state(self, uops: list[UOp]) -> object:
        """What the language's own rules keep while rendering one program (RenderContext.state; None by default)."""
        return None

    def render_access(self, pointer: RenderedPointer, index_uop: UOp, value_dtype: DType) -> str:
        """The lvalue reading or writing `value_dtype` at `pointer` (a vector access through a cast if needed)."""
        if pointer.cast is None and value_dtype.count > pointer.element.count:
            space = index_uop.dtype.addrspace if isinstance(index_uop.dtype, PtrDType) else "global"
            return f"(*{self.render_vector_pointer(pointer.address(), value_dtype, space)})"
        if pointer.cast is None and pointer.index is not None:
            return f"{pointer.buffer}[{pointer.index}]"
        return f"(*{pointer.address()})"


class RenderContext:
    """The state of rendering one linear program: the names given to values, rendered pointers, the lines so far,
    the kernel's parameters, and `state` for the language's own rules (`CStyleLanguage.context_state`). Rules read
    and extend it through the helpers below; a language never subclasses it."""

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
        self.buffers: dict[int, str] = {}
        self.variables: dict[str, str] = {}
        self.masks: dict[UOp, tuple[str, DType]] = {}
        for uop in uops:
            for source in uop.src:
                self.uses[source] = self.uses.get(source, 0) + 1
            if uop.op is Ops.STORE:
                target = uop.src[0]
                while target.op in (Ops.INDEX, Ops.CAST) and target.src:
                    target = target.src[0]
                self.stored.add(target)
        # each language's own type (its rules know it; the core does not)
        self.state: Any = renderer.context_state(uops)

    def fresh(self, prefix: str) -> str:
        """A new variable name `prefix` + a counter."""
        number = self.counters.get(prefix, 0)
        self.counters[prefix] = number + 1
        return f"{prefix}{number}"

    def emit(self, line: str) -> None:
        """Append a line of the body at the current depth."""
        self.lines.append("  " * self.depth + line)

    def note(self, dtype: DType) -> None:
        """Record a dtype the program uses (the prelude declares what they need)."""
        base = dtype.base if isinstance(dtype, PtrDType) else dtype
        self.used_dtypes.add(base)
        self.used_dtypes.add(base.scalar)

    def expression(self, uop: UOp) -> str:
        """The text a rendered value is known by (a constant is rendered in place)."""
        if uop in self.names:
            return self.names[uop]
        if uop.op is Ops.CONST:
            return self.renderer.render_const(uop.arg, uop.dtype)
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")

    def bind(self, uop: UOp, code: str, prefix: str = "alu") -> str:
        """Render `code` in place for single-use scalars, else declare a variable for it; the name either way."""
        if uop.op in _INLINE_WHEN_SINGLE_USE and self.uses.get(uop, 0) <= 1 and uop.dtype.count == 1:
            self.inlined.add(uop)
            self.names[uop] = code
            return code
        name = self.fresh(prefix)
        self.emit(self.renderer.render_declaration(name, uop.dtype, code))
        self.names[uop] = name
        return name

    def declare(self, uop: UOp, code: str, prefix: str) -> str:
        """Declare a variable of `uop`'s type holding `code` (never in place); its name."""
        name = self.fresh(prefix)
        self.emit(f"{self.renderer.render_dtype(uop.dtype)} {name} = {code};")
        self.names[uop] = name
        return name

    def lane(self, uop: UOp, lane: int) -> str:
        """Lane `lane` of a source (scalars broadcast)."""
        text = self.expression(uop)
        return text if uop.dtype.count == 1 else self.renderer.render_gep(text, lane, uop.dtype)

    def materialize(self, uop: UOp) -> None:
        """Give an expression rendered in place a variable of its own, declared here."""
        name = self.fresh("alu")
        self.emit(self.renderer.render_declaration(name, uop.dtype, self.names[uop]))
        self.names[uop] = name
        self.inlined.discard(uop)

    def cast(self, source: UOp, dtype: DType, vector_cast: str | None = None) -> str:
        """The value conversion of `source` to `dtype`: `vector_cast` or the renderer's whole-vector conversion,
        else lane by lane."""
        renderer = self.renderer
        if dtype.count > 1:
            whole = vector_cast or renderer.render_vector_cast(self.expression(source), source.dtype, dtype)
            if whole is not None:
                return whole
            items = [self.scalar_cast(self.lane(source, lane), source.dtype.scalar, dtype.scalar)
                     for lane in range(dtype.count)]
            return renderer.render_vector(dtype, items)
        return self.scalar_cast(self.expression(source), source.dtype, dtype)

    def scalar_cast(self, text: str, from_dtype: DType, to_dtype: DType) -> str:
        """The conversion of a scalar expression (bfloat16 through float32 where it is only a storage type)."""
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

    def alu(self, uop: UOp) -> str:
        """Bind the code of an ALU op; an operand rendered in place that the code repeats (MAX, a division guard,
        lanes of a broadcast scalar) gets a variable first, so nested repeats cannot grow the source exponentially."""
        code = self.compose_alu(uop, [self.expression(source) for source in uop.src])
        probes = [f"\x00{position}\x00" for position in range(len(uop.src))]
        probed = self.compose_alu(uop, probes)
        repeated = [source for source, probe in zip(uop.src, probes, strict=True)
                    if source in self.inlined and probed.count(probe) > 1]
        if repeated:
            for source in dict.fromkeys(repeated):
                self.materialize(source)
            code = self.compose_alu(uop, [self.expression(source) for source in uop.src])
        return self.bind(uop, code)

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
        """One scalar ALU op; integer division by a non-constant is guarded (0 where the divisor is 0)."""
        renderer = self.renderer
        if op in (Ops.IDIV, Ops.MOD) and renderer.guard_integer_division and not dtypes.is_float(dtype):
            divisor = sources[1]
            constant = divisor.op is Ops.CONST or (divisor.op is Ops.VCONST and all(divisor.arg))
            if not (constant and (divisor.op is Ops.VCONST or divisor.arg != 0)):
                zero = renderer.render_const(0, dtype.scalar)
                return f"(({operands[1]}==0)?{zero}:{renderer.render_math(op, operands, dtype)})"
        return renderer.render_math(op, operands, dtype)

    def pointer_of(self, uop: UOp) -> RenderedPointer:
        """The rendered INDEX (or pointer CAST) a LOAD or STORE reads."""
        pointer = self.pointers.get(uop)
        if pointer is None and uop.op in (Ops.INDEX, Ops.CAST):
            raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")
        if pointer is None:
            raise ValueError(f"LOAD/STORE needs an INDEX (or a pointer CAST of one) as its first source, got {uop.op}")
        return pointer

    def gated(self, pointer: RenderedPointer, statement: str) -> str:
        """`statement` behind the pointer's gate, if it has one."""
        return f"if ({pointer.gate}) {{ {statement} }}" if pointer.gate is not None else statement

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


# ---- the base rules: each renders its UOp into the context and returns the text it is known by ("" for a
# statement); a language puts its own rules before these (CStyleLanguage.string_rewrite)


def _define_global(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType), f"DEFINE_GLOBAL needs a pointer dtype, got {x.dtype}"
    ctx.names[x] = name = f"data{x.arg}"
    ctx.buffers[x.arg] = ctx.renderer.render_buffer_parameter(name, x.dtype, x not in ctx.stored)
    return name


def _define_var(ctx: RenderContext, x: UOp) -> str:
    ctx.names[x] = name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(x.arg[0]))
    ctx.variables[str(x.arg[0])] = ctx.renderer.render_var_parameter(name, x.dtype)
    return name


def _named(ctx: RenderContext, x: UOp, text: str) -> str:
    ctx.names[x] = text
    return text


def _special(ctx: RenderContext, x: UOp) -> str:
    label = str(x.arg)
    if label == "core_id":
        return _named(ctx, x, label)
    size = x.src[0] if x.src else None
    comment = f" /* {size.arg} */" if size is not None and size.op is Ops.CONST else ""
    ctx.emit(f"{ctx.renderer.render_dtype(x.dtype)} {label} = {ctx.renderer.render_special(label)};{comment}")
    return _named(ctx, x, label)


def _define_reg(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType), f"DEFINE_REG needs a pointer dtype, got {x.dtype}"
    name = ctx.fresh("acc")
    ctx.emit(f"{ctx.renderer.render_dtype(x.dtype.base)} {name}[{max(x.dtype.size, 1)}];")
    return _named(ctx, x, name)


def _define_local(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType), f"DEFINE_LOCAL needs a pointer dtype, got {x.dtype}"
    name = ctx.fresh("temp")
    ctx.emit(ctx.renderer.render_local(name, x.dtype.base, max(x.dtype.size, 1)))
    return _named(ctx, x, name)


def _range(ctx: RenderContext, x: UOp) -> str:
    name = ctx.fresh("ridx")
    type_name = ctx.renderer.render_dtype(x.dtype if x.dtype != dtypes.void else dtypes.int32)
    ctx.emit(f"for ({type_name} {name} = 0; {name} < {ctx.expression(x.src[0])}; {name}++) {{")
    ctx.depth += 1
    return _named(ctx, x, name)


def _close(ctx: RenderContext, x: UOp) -> str:
    for _ in range(sum(1 for source in x.src if source.op is Ops.RANGE) or 1):
        ctx.depth -= 1
        ctx.emit("}")
    return ""


def _if(ctx: RenderContext, x: UOp) -> str:
    ctx.emit(f"if ({ctx.expression(x.src[0])}) {{")
    ctx.depth += 1
    return ""


def _barrier(ctx: RenderContext) -> str:
    if ctx.renderer.barrier:
        ctx.emit(ctx.renderer.barrier)
    return ""


def _index(ctx: RenderContext, x: UOp) -> str:
    buffer = x.src[0]
    base_pointer = ctx.pointers.get(buffer)
    buffer_text = base_pointer.address() if base_pointer is not None else ctx.expression(buffer)
    if ctx.uses.get(x, 0) > 1:  # an address used several times computes its index once
        for source in x.src[1:]:
            if source in ctx.inlined:
                ctx.materialize(source)
    index = ctx.expression(x.src[1]) if len(x.src) > 1 else None
    gate = ctx.expression(x.src[2]) if len(x.src) > 2 else None
    element = buffer.dtype.base if isinstance(buffer.dtype, PtrDType) else buffer.dtype
    ctx.pointers[x] = RenderedPointer(buffer_text, index, gate, element)
    return _named(ctx, x, ctx.pointers[x].address())


def _cast(ctx: RenderContext, x: UOp) -> str:
    if not isinstance(x.dtype, PtrDType):
        return ctx.bind(x, ctx.cast(x.src[0], x.dtype))
    pointer = ctx.pointers.get(x.src[0])  # a pointer cast: vector access through an INDEX
    if pointer is None:
        raise ValueError(f"a pointer CAST needs an INDEX source, got {x.src[0].op}")
    cast = ctx.renderer.render_pointer_type(x.dtype.base, x.dtype.addrspace)
    ctx.pointers[x] = RenderedPointer(pointer.buffer, pointer.index, pointer.gate, x.dtype.base, cast)
    return _named(ctx, x, ctx.pointers[x].address())


def _bitcast(ctx: RenderContext, x: UOp) -> str:
    source = x.src[0]
    if source.dtype.itemsize * source.dtype.count != x.dtype.itemsize * x.dtype.count:
        raise ValueError(f"BITCAST from {source.dtype} to {x.dtype}: the sizes differ")
    return ctx.declare(x, ctx.renderer.render_bitcast(ctx.expression(source), source.dtype, x.dtype), "alu")


def _gep(ctx: RenderContext, x: UOp) -> str:
    text = ctx.expression(x.src[0])
    lanes = [ctx.renderer.render_gep(text, lane, x.src[0].dtype) for lane in x.arg]
    return _named(ctx, x, lanes[0]) if len(lanes) == 1 else ctx.bind(x, ctx.renderer.render_vector(x.dtype, lanes))


def _custom(ctx: RenderContext, x: UOp) -> str:
    code = str(x.arg).format(*[ctx.expression(source) for source in x.src])
    if x.dtype != dtypes.void:
        return ctx.bind(x, code, "custom")
    ctx.emit(code if code.rstrip().endswith((";", "}")) else code + ";")
    return ""


def render_load(ctx: RenderContext, x: UOp) -> str:
    """The base rule of a LOAD: a variable holding the access (behind its gate, with the load's alternative)."""
    pointer = ctx.pointer_of(x.src[0])
    value = ctx.renderer.render_access(pointer, x.src[0], x.dtype)
    # extra sources of dtype void (an END, STORE or BARRIER) only order the load; the first other one is the value
    # of a gated load where the gate is false
    alternatives = [source for source in x.src[1:] if source.dtype != dtypes.void]
    if pointer.gate is not None:
        renderer = ctx.renderer
        if alternatives:
            alternative = ctx.expression(alternatives[0])
        elif x.dtype.count > 1:
            alternative = renderer.render_vector(x.dtype, [renderer.render_const(0, x.dtype.scalar)] * x.dtype.count)
        else:
            alternative = renderer.render_const(0, x.dtype)
        if x.dtype.count > 1:  # the access may have a differently qualified vector type (C's unaligned one)
            value = f"(({renderer.render_dtype(x.dtype)}){value})"
        value = f"({pointer.gate}?{value}:{alternative})"
    return ctx.declare(x, value, "val")


def _store(ctx: RenderContext, x: UOp) -> str:
    pointer = ctx.pointer_of(x.src[0])
    if x.arg is not None:
        raise ValueError(f"{type(ctx.renderer).__name__} declares no atomic updates, got a combining store ({x.arg}) "
                         f"of {x.src[1].dtype}: codegen must resolve it first (codegen/atomics.py)")
    value = ctx.expression(x.src[1])
    ctx.emit(ctx.gated(pointer, f"{ctx.renderer.render_access(pointer, x.src[0], x.src[1].dtype)} = {value};"))
    return ""


base_rendering = text_rules([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), _define_global),
    (UPat(Ops.DEFINE_VAR, name="x"), _define_var),
    (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.alu(x)),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: _named(ctx, x, ctx.renderer.render_const(x.arg, x.dtype))),
    (UPat((Ops.NOOP, Ops.PRECAST, Ops.BIND), name="x"), lambda ctx, x: _named(ctx, x, ctx.expression(x.src[0]))),
    (UPat(Ops.INDEX, name="x"), _index),
    (UPat(Ops.LOAD, name="x"), render_load),
    (UPat(Ops.STORE, name="x"), _store),
    (UPat(Ops.RANGE, name="x"), _range),
    (UPat((Ops.END, Ops.ENDIF), name="x"), _close),
    (UPat(Ops.IF, name="x"), _if),
    (UPat(Ops.CAST, name="x"), _cast),
    (UPat(Ops.BITCAST, name="x"), _bitcast),
    (UPat(Ops.VECTORIZE, name="x"),
     lambda ctx, x: ctx.bind(x, ctx.renderer.render_vector(x.dtype, [ctx.expression(source) for source in x.src]))),
    (UPat(Ops.VCONST, name="x"), lambda ctx, x: ctx.bind(x, ctx.renderer.render_vector(
        x.dtype, [ctx.renderer.render_const(value, x.dtype.scalar) for value in x.arg]))),
    (UPat(Ops.GEP, name="x"), _gep),
    (UPat(Ops.SPECIAL, name="x"), _special),
    (UPat(Ops.DEFINE_REG, name="x"), _define_reg),
    (UPat(Ops.DEFINE_LOCAL, name="x"), _define_local),
    (UPat(Ops.BARRIER), _barrier),
    (UPat(Ops.CUSTOM, name="x"), _custom),
    (UPat((Ops.SINK, Ops.GROUP)), lambda: ""),
])
"""UOp -> text for the C-like family: what every language shares. A language's rules come first in its
`string_rewrite` and fall through to these by returning None."""

CStyleLanguage.string_rewrite = base_rendering
