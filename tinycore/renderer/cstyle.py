"""CStyleLanguage: the C-like family (C, OpenCL C, CUDA, HIP, WGSL) as rules (`string_rewrite`, a PatternMatcher over
a RenderContext: a language's rules before `base_rendering`, None falls through) and data (types, literals, formats)."""
from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.renderer import Renderer, TextRule, kernel_name, pointer_root, text_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

CodeForOp = Callable[..., str]
MATH_FUNCTIONS = {op: op.name.lower() for op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.POW)}

def math_functions(code: Callable[..., str]) -> dict[Ops, CodeForOp]:
    """`code_for_op` entries of the math functions (MATH_FUNCTIONS) from `code(name, dtype, *operands)`."""
    return {op: (lambda *operands, name=name: code(name, operands[-1], *operands[:-1]))
            for op, name in MATH_FUNCTIONS.items()}

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
# ALU op -> expression over the rendered operands and the operand dtype (scalar); languages replace entries
BASE_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    **{op: (lambda a, b, dtype, symbol=symbol: f"({a}{symbol}{b})") for op, symbol in _INFIX.items()},
    **math_functions(lambda name, dtype, *operands: f"{name}({','.join(operands)})"),
    Ops.NEG: lambda x, dtype: f"(!{x})" if dtype == dtypes.bool else f"(-{x})", Ops.RECIPROCAL: lambda x, _: f"(1/{x})",
    Ops.MAX: lambda a, b, dtype: f"(({a}<{b})?{b}:{a})", Ops.MULACC: lambda a, b, c, dtype: f"(({a}*{b})+{c})",
    Ops.WHERE: lambda condition, a, b, dtype: f"({condition}?{a}:{b})"}

# long may have 32 bits and plain char no sign; bfloat16 has no entry: it is stored as its bits (`storage_type`)
BASE_TYPE_MAP: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double",
    dtypes.void: "void"}

# ops rendered in place when they have one user and are scalar
_INLINE_WHEN_SINGLE_USE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE, Ops.VCONST, Ops.CUSTOM}

def bfloat16_bits(value: float) -> int:
    """The bfloat16 bit pattern of `value` (round to nearest even, quiet NaN kept)."""
    if math.isnan(value):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF

def threads_per_group(uops: list[UOp]) -> int | None:
    """The product of the program's lidx sizes (1 without any), or None when one of them is not a constant."""
    indices = [uop for uop in uops if uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx")]
    constant = all(index.src and index.src[0].op is Ops.CONST for index in indices)
    return math.prod(int(index.src[0].arg) for index in indices) if constant else None

class RenderedPointer:
    """A rendered INDEX: buffer and index expressions, optional gate, element dtype and vector-pointer cast."""

    def __init__(self, buffer: str, index: str | None, gate: str | None, element: DType, cast: str | None = None):
        self.buffer, self.index, self.gate, self.element, self.cast = buffer, index, gate, element, cast

    def address(self) -> str:
        """The pointer expression (with the vector-pointer cast if any)."""
        address = self.buffer if self.index in (None, "0") else f"({self.buffer}+{self.index})"
        return f"(({self.cast})({address}))" if self.cast else address

    def vector_access(self, dtype: DType) -> bool:
        """Whether reading `dtype` here reads a vector of elements (through a vector pointer cast or wider)."""
        return dtype.count > 1 and (self.cast is not None or dtype.count > self.element.count)

    def lanes(self, count: int) -> list[str]:
        """The lvalues of the `count` elements from this address (vector accesses lane by lane)."""
        index = f"{self.index}+" if self.index not in (None, "0") else ""
        return [f"{self.buffer}[{index}{lane}]" for lane in range(count)]

class CStyleLanguage(Renderer):
    """C-like languages: rules (`string_rewrite`: the language's own + `base_rendering`), data and `render_*` hooks."""

    kernel_prefix, buffer_prefix, buffer_suffix, const_buffer_prefix, smem_prefix = "", "", "", "const ", ""
    arg_int_prefix, barrier = "const int", ""
    code_for_workitem: dict[str, Callable[[int], str]] = {}  # SPECIAL kind "g"/"l"/"i" -> expression of the axis
    flat_group_ids = False  # without local ids, gidxN reads the global id idxN (OpenCL: the driver picks the groups)
    infinity, nan, float_suffix = "INFINITY", "NAN", "f"
    integer_suffix: dict[DType, str] = {dtypes.int32: "", dtypes.uint32: "u", dtypes.int64: "ll", dtypes.uint64: "ull"}
    vector_format: str = "({type})({items})"  # a vector value from its lanes
    vector_cast: str | None = None  # a whole-vector conversion ({type}, {x}); None converts lane by lane
    # a vector read and write at a scalar address ({count}, {address}, {value}); None: through a vector pointer cast
    vector_load: str | None = None
    vector_store: str | None = None
    vector_by_lanes = False  # vector reads and writes lane by lane (buffer views of any element alignment)
    bitcast_format: str = ("({{ {source} tc_source = {x}; {type} tc_result; __builtin_memcpy(&tc_result, &tc_source, "
                           "sizeof(tc_result)); tc_result; }})")
    native_bfloat16, emulated_floats = False, frozenset({dtypes.bfloat16})  # codegen computes bfloat16 in float32
    # MOCK GPUs: (source, uops) -> the source carrying its linear program (the core's renderers import no device code)
    program_embedder: Callable[[str, list[UOp]], str] | None = None
    vector_alu_ops: frozenset[Ops] = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC})
    code_for_op: dict[Ops, CodeForOp] = BASE_CODE_FOR_OP
    type_map: dict[DType, str] = BASE_TYPE_MAP
    memory_types: dict[DType, str] = {}  # the types in buffers and local memory that differ from the value types
    guard_integer_division = True  # codegen's pass "guarded division": a zero divisor gives 0, never a trap
    # results of these dtypes are cast back after each op (against C's integer promotion and excess float precision)
    narrow_dtypes: tuple[DType, ...] = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.float16)
    string_rewrite: ClassVar[PatternMatcher]

    def render_dtype(self, dtype: DType) -> str:
        """The type name of a scalar or vector dtype (pointers: the pointee's name followed by '*')."""
        if isinstance(dtype, PtrDType):
            return f"{self.render_dtype(dtype.base)}*"
        scalar = self.storage_type(dtype.scalar)
        return scalar if dtype.count == 1 else self.vector_type_name(scalar, dtype.count)

    def memory_type(self, dtype: DType) -> str:
        """The type of `dtype` in buffers and local memory (`memory_types`, else its value type)."""
        return self.memory_types.get(dtype) or self.render_dtype(dtype)

    def spelled_dtypes(self) -> set[DType]:
        """The dtypes `type_map` names, and bfloat16 wherever uint16 is (its bits, computed in float32)."""
        spelled = super().spelled_dtypes()
        return spelled | {dtypes.bfloat16} if not self.native_bfloat16 and dtypes.uint16 in self.type_map else spelled

    def storage_type(self, dtype: DType) -> str:
        """The scalar type name of `dtype` (bfloat16 without native support is stored as its 16 bits)."""
        if dtype == dtypes.bfloat16 and not self.native_bfloat16:
            return self.type_map[dtypes.uint16]
        if dtype not in self.type_map:
            raise ValueError(f"{type(self).__name__} has no type for {dtype}: cast to a supported dtype first")
        return self.type_map[dtype]

    def vector_type_name(self, scalar: str, count: int) -> str:
        """The name of a vector of `count` lanes of the scalar type `scalar` (float4, uint8, ...)."""
        return f"{scalar.replace('unsigned ', 'u').replace('signed ', 's').replace(' ', '')}{count}"

    def render_const(self, value: object, dtype: DType) -> str:
        """A literal of scalar `dtype`: floats (inf and NaN too), integers with their `integer_suffix` or a cast."""
        scalar = dtype.scalar
        if dtypes.is_float(dtype):
            real = float(value)  # type: ignore[arg-type]
            if math.isnan(real) or math.isinf(real):
                text = self.nan if math.isnan(real) else self.infinity if real > 0 else f"(-{self.infinity})"
            else:  # Python's repr of a finite float always has a "." or an exponent
                text = repr(real) + (self.float_suffix if scalar != dtypes.float64 else "")
                text = f"({text})" if text.startswith("-") else text
            return text if scalar in (dtypes.float32, dtypes.float64) else \
                self.render_cast(text, dtypes.float32, scalar)
        if scalar == dtypes.bool:
            return "1" if value else "0"
        number, suffix = int(value), self.integer_suffix.get(scalar)  # type: ignore[call-overload]
        if suffix is None:
            return f"(({self.render_dtype(scalar)}){number})"
        if number >= 0 or suffix.startswith("u"):  # unsigned literals carry a u
            return f"{number}{suffix}"
        limit = 2 ** (scalar.itemsize * 8 - 1)  # the most negative literal is out of range: written as -(max)-1
        return f"(-{limit - 1}{suffix}-1)" if number == -limit else f"({number}{suffix})"

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversion of a scalar expression (bfloat16 to and from float32 by the prelude's functions)."""
        if dtypes.bfloat16 in self.emulated_floats and dtypes.bfloat16 in (from_dtype, to_dtype):
            return f"tc_{'bf16_to_f32' if from_dtype == dtypes.bfloat16 else 'f32_to_bf16'}({expression})"
        return f"(({self.render_dtype(to_dtype)})({expression}))"

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Reinterpretation of the bits of an expression (`bitcast_format`)."""
        source = self.render_dtype(from_dtype) if "{source}" in self.bitcast_format else ""
        return self.bitcast_format.format(x=expression, type=self.render_dtype(to_dtype), source=source)

    def bfloat16_helpers(self, qualifier: str) -> str:
        """The prelude's tc_bf16_to_f32 and tc_f32_to_bf16 (to nearest even, NaN kept quiet) in this language."""
        bits, word, uint32, float32 = self.render_dtype(dtypes.uint16), self.render_dtype(dtypes.uint32), \
            dtypes.uint32, dtypes.float32
        return (f"{qualifier} float tc_bf16_to_f32({bits} bits) {{ return "
                f"{self.render_bitcast(f'(({word})bits) << 16', uint32, float32)}; }}\n{qualifier} {bits} "
                f"tc_f32_to_bf16(float value) {{\n  {word} word = {self.render_bitcast('value', float32, uint32)};\n"
                f"  if ((word & 0x7fffffffu) > 0x7f800000u) return ({bits})((word >> 16) | 64u);\n"
                f"  word += 0x7fffu + ((word >> 16) & 1u); return ({bits})(word >> 16);\n}}")

    def render_declaration(self, name: str, dtype: DType, code: str) -> str:
        """The statement declaring the value `name` of `dtype` as `code` (the named intermediate values)."""
        return f"{self.render_dtype(dtype)} {name} = {code};"

    def render_vector(self, dtype: DType, items: list[str]) -> str:
        """A vector value built from scalar expressions (`vector_format`)."""
        return self.vector_format.format(type=self.render_dtype(dtype), items=",".join(items))

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of the vector expression `expression` of `dtype`."""
        return f"{expression}[{lane}]"

    def render_pointer_type(self, dtype: DType, addrspace: str) -> str:
        """The type of a pointer to `dtype` (a vector, for vector loads and stores) in `addrspace`."""
        prefix = self.buffer_prefix if addrspace == "global" else (self.smem_prefix if addrspace == "local" else "")
        return f"{prefix}{self.render_dtype(dtype)}*"

    def render_special(self, name: str) -> str:
        """The expression for the thread index SPECIAL `name` (gidx0, lidx1, idx2, ...)."""
        kind = {"lidx": "l", "gidx": "g", "idx": "i"}.get(name[:-1], "")
        if kind not in self.code_for_workitem or not name[-1].isdigit():
            raise ValueError(f"{type(self).__name__} has no thread index {name!r}")
        return self.code_for_workitem[kind](int(name[-1]))

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Lines before the kernel: type definitions and helper functions the body uses."""
        return []

    def kernel_attributes(self, uops: list[UOp]) -> str:
        """Text between `kernel_prefix` and `void` (launch bounds, say)."""
        return ""

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str],
                      attributes: str = "") -> str:
        """The complete source: prelude, signature and indented body."""
        signature = f"{self.kernel_prefix}{attributes}void {name}({', '.join(parameters)}) {{"
        return "\n".join(prelude + [signature] + body + ["}"]) + "\n"

    def render_math(self, op: Ops, operands: list[str], dtype: DType) -> str:
        """One scalar ALU op."""
        if op not in self.code_for_op or (dtype.scalar in self.emulated_floats and op is not Ops.WHERE):
            raise ValueError(f"{type(self).__name__} cannot render {op} on {dtype}: codegen must rewrite it first "
                             "(decompositions; the pass narrow floats for `emulated_floats`)")
        return self.code_for_op[op](*operands, dtype)

    def render(self, uops: list[UOp]) -> str:
        """The source of the linear program `uops` (the function is named from the SINK's arg, else 'kernel')."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The source of `uops` as a function `name`: each UOp by the first rule of `string_rewrite` that renders it."""
        ctx = RenderContext(self, uops)
        for uop in uops:
            ctx.note(uop.dtype)
            if self.string_rewrite.rewrite(uop, ctx) is None:
                raise ValueError(f"{type(self).__name__} cannot render {uop.op} (dtype {uop.dtype}, arg {uop.arg!r}): "
                                 f"it is not part of the linear program contract")
        source = self.render_function(ctx, name)
        return source if self.program_embedder is None else self.program_embedder(source, uops)

    def render_function(self, ctx: RenderContext, name: str) -> str:
        """The source around the body: parameters (buffers, variables, the CPU's core_id), prelude, signature."""
        parameters = [ctx.buffers[position] for position in sorted(ctx.buffers)]
        parameters += [ctx.variables[key] for key in sorted(ctx.variables)] + ["const int core_id"] * ctx.core_id
        prelude, attributes = self.render_prelude(ctx.uops, ctx.used_dtypes), self.kernel_attributes(ctx.uops)
        return self.render_kernel(name, parameters, ctx.lines, prelude, *([attributes] if attributes else []))

    def context_state(self, uops: list[UOp]) -> object:
        """What the language's own rules keep while rendering one program (RenderContext.state; None by default)."""
        return None

    def render_access(self, pointer: RenderedPointer, index_uop: UOp, value_dtype: DType) -> str:
        """The lvalue reading or writing `value_dtype` at `pointer` (a vector access through a cast if needed)."""
        if self.vector_by_lanes and pointer.vector_access(value_dtype):
            return self.render_vector(value_dtype, pointer.lanes(value_dtype.count))
        if pointer.cast is None and value_dtype.count > pointer.element.count:
            if self.vector_load is not None:
                return self.vector_load.format(count=value_dtype.count, address=pointer.address())
            space = index_uop.dtype.addrspace if isinstance(index_uop.dtype, PtrDType) else "global"
            return f"(*(({self.render_pointer_type(value_dtype, space)})({pointer.address()})))"
        return f"{pointer.buffer}[{pointer.index}]" if pointer.cast is None and pointer.index is not None else \
            f"(*{pointer.address()})"

    def render_store(self, ctx: RenderContext, pointer: RenderedPointer, index_uop: UOp, value: UOp) -> str:
        """The statement writing `value` at `pointer` (behind the pointer's gate, added by the caller)."""
        if self.vector_by_lanes and pointer.vector_access(value.dtype):  # from a variable, lane by lane
            if not (source := ctx.names.get(value, "")).isidentifier():
                source = ctx.declare(value, ctx.expression(value), "vec")
            return " ".join(f"{lvalue} = {self.render_gep(source, lane, value.dtype)};"
                            for lane, lvalue in enumerate(pointer.lanes(value.dtype.count)))
        if self.vector_store is not None and pointer.cast is None and value.dtype.count > pointer.element.count:
            return self.vector_store.format(count=value.dtype.count, value=ctx.expression(value),
                                            address=pointer.address())
        return f"{self.render_access(pointer, index_uop, value.dtype)} = {ctx.expression(value)};"

class RenderContext:
    """The state of rendering one program: value names, pointers, lines, parameters, `state` for a language's rules."""

    def __init__(self, renderer: CStyleLanguage, uops: list[UOp]):
        self.renderer, self.uops, self.depth, self.lines = renderer, uops, 1, list[str]()
        self.names, self.pointers, self.counters = dict[UOp, str](), dict[UOp, RenderedPointer](), dict[str, int]()
        self.buffers, self.variables, self.masks = dict[int, str](), dict[str, str](), dict[UOp, tuple[str, DType]]()
        self.used_dtypes, self.inlined, self.core_id = set[DType](), set[UOp](), False
        self.local_ids = any(uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx") for uop in uops)
        self.braces = dict[UOp, int]()  # RANGE -> the braces it opened where that is not 1 (blocks of unrolled steps)
        self.uses: Counter[UOp] = Counter(source for uop in uops for source in uop.src)
        self.stored = {pointer_root(uop.src[0]) for uop in uops if uop.op is Ops.STORE}
        self.state: Any = renderer.context_state(uops)  # each language's own type (its rules know it)

    def fresh(self, prefix: str) -> str:
        """A new variable name `prefix` + a counter."""
        self.counters[prefix] = self.counters.get(prefix, 0) + 1
        return f"{prefix}{self.counters[prefix] - 1}"

    def emit(self, line: str) -> None:
        """Append a line of the body at the current depth."""
        self.lines.append("  " * self.depth + line)

    def note(self, dtype: DType) -> None:
        """Record a dtype the program uses (the prelude declares what they need)."""
        base = dtype.base if isinstance(dtype, PtrDType) else dtype
        self.used_dtypes.update((base, base.scalar))

    def expression(self, uop: UOp) -> str:
        """The text a rendered value is known by (a constant is rendered in place)."""
        if uop in self.names:
            return self.names[uop]
        if uop.op is Ops.CONST:
            return self.renderer.render_const(uop.arg, uop.dtype)
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order")

    def name(self, uop: UOp, text: str) -> str:
        """Let `uop` be known by `text`; the text."""
        self.names[uop] = text
        return text

    def bind(self, uop: UOp, code: str, prefix: str = "alu") -> str:
        """Render `code` in place for single-use scalars, else declare a variable for it; the name either way."""
        if uop.op in _INLINE_WHEN_SINGLE_USE and self.uses.get(uop, 0) <= 1 and uop.dtype.count == 1:
            self.inlined.add(uop)
            return self.name(uop, code)
        return self.declare(uop, code, prefix)

    def declare(self, uop: UOp, code: str, prefix: str) -> str:
        """Declare a variable of `uop`'s type holding `code` (never in place); its name."""
        self.emit(self.renderer.render_declaration(name := self.fresh(prefix), uop.dtype, code))
        return self.name(uop, name)

    def materialize(self, uop: UOp) -> None:
        """Give an expression rendered in place a variable of its own, declared here."""
        self.inlined.discard(uop)
        self.declare(uop, self.names[uop], "alu")

    def cast(self, source: UOp, dtype: DType) -> str:
        """The conversion of `source` to `dtype`: vectors by `vector_cast` (not of bool or bfloat16) or lane by lane."""
        renderer, text, (before, after) = self.renderer, self.expression(source), (source.dtype.scalar, dtype.scalar)
        if dtype.count > 1 and renderer.vector_cast and not {before, after} & {dtypes.bool, dtypes.bfloat16}:
            return renderer.vector_cast.format(x=text, type=renderer.render_dtype(dtype))
        lanes = [text if source.dtype.count == 1 else renderer.render_gep(text, lane, source.dtype)
                 for lane in range(dtype.count)]
        lanes = [lane if before == after else renderer.render_cast(lane, before, after) for lane in lanes]
        return lanes[0] if dtype.count == 1 else renderer.render_vector(dtype, lanes)

    def alu(self, uop: UOp) -> str:
        """Bind an ALU op's code; an inlined operand it repeats gets a variable first (no exponential source growth)."""
        probes = [f"\x00{position}\x00" for position in range(len(uop.src))]
        probed = self.compose_alu(uop, probes)
        for source in dict.fromkeys(source for source, probe in zip(uop.src, probes, strict=True)
                                    if source in self.inlined and probed.count(probe) > 1):
            self.materialize(source)
        return self.bind(uop, self.compose_alu(uop, [self.expression(source) for source in uop.src]))

    def compose_alu(self, uop: UOp, operands: list[str]) -> str:
        """The code of an ALU op over operand texts (lane by lane where needed); `narrow_dtypes` results cast back."""
        renderer = self.renderer
        operand_dtype = uop.src[1].dtype if uop.op is Ops.WHERE else uop.src[0].dtype
        count, scalar, narrow = max(source.dtype.count for source in uop.src), operand_dtype.scalar, \
            uop.dtype.scalar in renderer.narrow_dtypes
        vector_ok = uop.op in renderer.vector_alu_ops and scalar != dtypes.bool and \
            scalar not in renderer.narrow_dtypes and scalar not in renderer.emulated_floats
        if count == 1 or (vector_ok and all(source.dtype.count == count for source in uop.src)):
            code = renderer.render_math(uop.op, operands, operand_dtype)
            return renderer.render_cast(code, uop.dtype, uop.dtype) if count == 1 and narrow else code
        items = [renderer.render_math(uop.op, [text if source.dtype.count == 1 else renderer.render_gep(text, lane,
                 source.dtype) for source, text in zip(uop.src, operands, strict=True)], scalar)
                 for lane in range(count)]
        return renderer.render_vector(uop.dtype, [renderer.render_cast(item, uop.dtype.scalar, uop.dtype.scalar)
                                                  if narrow else item for item in items])

    def pointer_of(self, uop: UOp) -> RenderedPointer:
        """The rendered INDEX (or pointer CAST) a LOAD or STORE reads."""
        if uop in self.pointers:
            return self.pointers[uop]
        raise ValueError(f"{uop.op} is used before it is rendered: the linear program is out of order" if uop.op in
                         (Ops.INDEX, Ops.CAST) else f"LOAD/STORE needs an INDEX (or its pointer CAST), got {uop.op}")

    def gated(self, pointer: RenderedPointer, statement: str) -> str:
        """`statement` behind the pointer's gate, if it has one."""
        return f"if ({pointer.gate}) {{ {statement} }}" if pointer.gate is not None else statement

    def combine_code(self, reduce: str, old: str, new: str, dtype: DType) -> str:
        """The expression combining the stored `old` with `new` by a scatter reduce (names, evaluated once each)."""
        renderer, boolean = self.renderer, dtype == dtypes.bool
        if dtype in renderer.emulated_floats:  # the update is no UOp the pass "narrow floats" could rewrite
            wide_old, wide_new = (renderer.render_cast(operand, dtype, dtypes.float32) for operand in (old, new))
            return renderer.render_cast(self.combine_code(reduce, wide_old, wide_new, dtypes.float32), dtypes.float32,
                                        dtype)
        if reduce == "min":
            below = renderer.render_math(Ops.CMPLT, [new, old], dtype)
            code = renderer.render_math(Ops.WHERE, [below, new, old], dtype)
        else:
            op = {"add": Ops.OR if boolean else Ops.ADD, "mul": Ops.AND if boolean else Ops.MUL, "max": Ops.MAX}[reduce]
            code = renderer.render_math(op, [old, new], dtype)
        return renderer.render_cast(code, dtype, dtype) if dtype in renderer.narrow_dtypes else code

AtomicStatement = Callable[[RenderContext, RenderedPointer, str, DType, str], str]

def atomic_rule(statement: AtomicStatement) -> TextRule:
    """A STORE rule for scatter reduces: `statement(ctx, pointer, value, dtype, reduce)`; plain stores fall through."""
    def rule(ctx: RenderContext, x: UOp) -> str | None:
        if x.arg is None:
            return None
        pointer = ctx.pointer_of(x.src[0])
        ctx.emit(ctx.gated(pointer, statement(ctx, pointer, ctx.expression(x.src[1]), x.src[1].dtype, str(x.arg))))
        return ""
    return rule

# ---- the base rules: each renders its UOp into the context and returns the text it is known by ("" for a statement)

def _define_global(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType), f"DEFINE_GLOBAL needs a pointer dtype, got {x.dtype}"
    renderer, const = ctx.renderer, ctx.renderer.const_buffer_prefix if x not in ctx.stored else ""
    type_name = f"{renderer.buffer_prefix}{const}{renderer.memory_type(x.dtype.base)}*{renderer.buffer_suffix}"
    ctx.buffers[x.arg] = f"{type_name} data{x.arg}"
    return ctx.name(x, f"data{x.arg}")

def _define_var(ctx: RenderContext, x: UOp) -> str:
    name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(x.arg[0]))
    ctx.variables[str(x.arg[0])] = f"{ctx.renderer.arg_int_prefix} {name}"
    return ctx.name(x, name)

def _special(ctx: RenderContext, x: UOp) -> str:
    ctx.core_id |= (label := str(x.arg)) == "core_id"  # the CPU worker's index is a parameter, not a thread index
    if label != "core_id":
        comment = f" /* {x.src[0].arg} */" if x.src and x.src[0].op is Ops.CONST else ""
        flat = ctx.renderer.flat_group_ids and not ctx.local_ids and label.startswith("gidx")
        special = ctx.renderer.render_special(f"idx{label[-1]}" if flat else label)
        ctx.emit(f"{ctx.renderer.render_dtype(x.dtype)} {label} = {special};{comment}")
    return ctx.name(x, label)

def _define_memory(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType), f"{x.op} needs a pointer dtype, got {x.dtype}"
    name, base, size = ctx.fresh("acc" if x.op is Ops.DEFINE_REG else "temp"), x.dtype.base, max(x.dtype.size, 1)
    ctx.emit(f"{ctx.renderer.render_dtype(base)} {name}[{size}];" if x.op is Ops.DEFINE_REG else
             f"{ctx.renderer.smem_prefix}{ctx.renderer.memory_type(base)} {name}[{size}];")
    return ctx.name(x, name)

def _open(ctx: RenderContext, line: str) -> str:
    ctx.emit(line)
    ctx.depth += 1
    return ""

def _range(ctx: RenderContext, x: UOp) -> str:
    name, type_name = ctx.fresh("ridx"), ctx.renderer.render_dtype(x.dtype if x.dtype != dtypes.void else dtypes.int32)
    _open(ctx, f"for ({type_name} {name} = 0; {name} < {ctx.expression(x.src[0])}; {name}++) {{")
    return ctx.name(x, name)

def _close(ctx: RenderContext, x: UOp) -> str:
    for _ in range(sum(ctx.braces.pop(source, 1) for source in x.src if source.op is Ops.RANGE) or 1):
        ctx.depth -= 1
        ctx.emit("}")
    return ""

def _index(ctx: RenderContext, x: UOp) -> str:
    buffer = x.src[0]
    buffer_text = ctx.pointers[buffer].address() if buffer in ctx.pointers else ctx.expression(buffer)
    if ctx.uses.get(x, 0) > 1:  # an address used several times computes its index once
        for source in (source for source in x.src[1:] if source in ctx.inlined):
            ctx.materialize(source)
    index, gate = (ctx.expression(x.src[i]) if len(x.src) > i else None for i in (1, 2))
    element = buffer.dtype.base if isinstance(buffer.dtype, PtrDType) else buffer.dtype
    ctx.pointers[x] = RenderedPointer(buffer_text, index, gate, element)
    return ctx.name(x, ctx.pointers[x].address())

def _cast(ctx: RenderContext, x: UOp) -> str:
    if not isinstance(x.dtype, PtrDType):
        return ctx.bind(x, ctx.cast(x.src[0], x.dtype))
    if (pointer := ctx.pointers.get(x.src[0])) is None:  # a pointer cast: vector access through an INDEX
        raise ValueError(f"a pointer CAST needs an INDEX source, got {x.src[0].op}")
    cast = ctx.renderer.render_pointer_type(x.dtype.base, x.dtype.addrspace)
    ctx.pointers[x] = RenderedPointer(pointer.buffer, pointer.index, pointer.gate, x.dtype.base, cast)
    return ctx.name(x, ctx.pointers[x].address())

def _bitcast(ctx: RenderContext, x: UOp) -> str:
    source = x.src[0]
    if source.dtype.itemsize * source.dtype.count != x.dtype.itemsize * x.dtype.count:
        raise ValueError(f"BITCAST from {source.dtype} to {x.dtype}: the sizes differ")
    return ctx.declare(x, ctx.renderer.render_bitcast(ctx.expression(source), source.dtype, x.dtype), "alu")

def _gep(ctx: RenderContext, x: UOp) -> str:
    lanes = [ctx.renderer.render_gep(ctx.expression(x.src[0]), lane, x.src[0].dtype) for lane in x.arg]
    return ctx.name(x, lanes[0]) if len(lanes) == 1 else ctx.bind(x, ctx.renderer.render_vector(x.dtype, lanes))

def _custom(ctx: RenderContext, x: UOp) -> str:
    code = str(x.arg).format(*[ctx.expression(source) for source in x.src])
    if x.dtype != dtypes.void:
        return ctx.bind(x, code, "custom")
    ctx.emit(code if code.rstrip().endswith((";", "}")) else code + ";")
    return ""

def render_load(ctx: RenderContext, x: UOp) -> str:
    """The base rule of a LOAD: a variable holding the access (behind its gate, with the load's alternative)."""
    pointer, renderer = ctx.pointer_of(x.src[0]), ctx.renderer
    value = renderer.render_access(pointer, x.src[0], x.dtype)
    if pointer.gate is not None:
        # sources of dtype void (an END, STORE or BARRIER) only order the load; the first other is the alternative
        alternatives = [source for source in x.src[1:] if source.dtype != dtypes.void]
        zero = renderer.render_const(0, x.dtype.scalar)
        alternative = ctx.expression(alternatives[0]) if alternatives else zero if x.dtype.count == 1 else \
            renderer.render_vector(x.dtype, [zero] * x.dtype.count)
        if x.dtype.count > 1:  # the access may have a differently qualified vector type (C's unaligned one)
            value = f"(({renderer.render_dtype(x.dtype)}){value})"
        value = f"({pointer.gate}?{value}:{alternative})"
    return ctx.declare(x, value, "val")

def _store(ctx: RenderContext, x: UOp) -> str:
    pointer = ctx.pointer_of(x.src[0])
    if x.arg is not None:
        raise ValueError(f"{type(ctx.renderer).__name__} declares no atomic updates, got a combining store ({x.arg}) "
                         f"of {x.src[1].dtype}: codegen must resolve it first (codegen/atomics.py)")
    ctx.emit(ctx.gated(pointer, ctx.renderer.render_store(ctx, pointer, x.src[0], x.src[1])))
    return ""

base_rendering = text_rules([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), _define_global),
    (UPat(Ops.DEFINE_VAR, name="x"), _define_var),
    (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.alu(x)),
    (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.name(x, ctx.renderer.render_const(x.arg, x.dtype))),
    (UPat((Ops.NOOP, Ops.PRECAST, Ops.BIND), name="x"), lambda ctx, x: ctx.name(x, ctx.expression(x.src[0]))),
    (UPat(Ops.INDEX, name="x"), _index),
    (UPat(Ops.LOAD, name="x"), render_load),
    (UPat(Ops.STORE, name="x"), _store),
    (UPat(Ops.RANGE, name="x"), _range),
    (UPat((Ops.END, Ops.ENDIF), name="x"), _close),
    (UPat(Ops.IF, name="x"), lambda ctx, x: _open(ctx, f"if ({ctx.expression(x.src[0])}) {{")),
    (UPat(Ops.CAST, name="x"), _cast),
    (UPat(Ops.BITCAST, name="x"), _bitcast),
    (UPat(Ops.VECTORIZE, name="x"),
     lambda ctx, x: ctx.bind(x, ctx.renderer.render_vector(x.dtype, [ctx.expression(source) for source in x.src]))),
    (UPat(Ops.VCONST, name="x"), lambda ctx, x: ctx.bind(x, ctx.renderer.render_vector(
        x.dtype, [ctx.renderer.render_const(value, x.dtype.scalar) for value in x.arg]))),
    (UPat(Ops.GEP, name="x"), _gep),
    (UPat(Ops.SPECIAL, name="x"), _special),
    (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _define_memory),
    (UPat(Ops.BARRIER), lambda ctx: ctx.emit(ctx.renderer.barrier) or "" if ctx.renderer.barrier else ""),
    (UPat(Ops.CUSTOM, name="x"), _custom),
    (UPat((Ops.SINK, Ops.GROUP)), lambda: ""),
])
"""UOp -> text for the C-like family: what every language shares (a language's rules go first)."""

CStyleLanguage.string_rewrite = base_rendering
