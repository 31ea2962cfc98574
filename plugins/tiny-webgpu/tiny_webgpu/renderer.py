"""The WGSL renderer of the WEBGPU device: one compute entry point per kernel, scalar code only.

The C-style base (`base_rendering`) renders control flow and arithmetic; this module's rules (`wgsl_rendering`) come
first for what WGSL does differently: thread indices, loops (Mesa's loop limit), workgroup memory, element-indexed
storage arrays (packed narrow types and atomic buffers as u32 words updated with atomics) and bindings: binding 0 is a
uniform `Params` struct (thread count, dispatch strides, each buffer's start, the DEFINE_VARs), binding 1 + k is
DEFINE_GLOBAL k. The hooks give WGSL's types, `let`s, literals, casts, bitcasts and math with C / numpy semantics.
Kernels with lidx SPECIALs use the hardware workgroup layout (their lidx sizes become `@workgroup_size`); the others
decode gidx0..2 from one flat invocation number (workgroups of WORKGROUP_SIZE) and return past the end.
The runtime reads each kernel's layout from the header comment on its first line (`KernelLayout`).
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.cstyle import CStyleLanguage, RenderContext, base_rendering
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

HEADER_PREFIX = "// tinycore-webgpu"
"""The first line of every rendered kernel: the layout the runtime needs (see `KernelLayout.header`)."""
PACKED_DTYPES = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
"""Element types stored packed in u32 words (WGSL has no 8- or 16-bit integer types)."""
WORKGROUP_SIZE = 64
"""Threads per workgroup for flat-mapped kernels."""
PREFERRED_INVOCATIONS = 256
"""Invocations per workgroup codegen aims at on GPU adapters (within maxComputeInvocationsPerWorkgroup)."""
CPU_PREFERRED_INVOCATIONS = 64
"""Invocations per workgroup on CPU adapters: a workgroup runs on one driver thread, so smaller groups spread a kernel
over more of them (a 256x256 matmul in 16x16 tiles ran 1.9x slower on lavapipe's 2 threads as one workgroup)."""
CPU_REGISTER_TILE = (16, 16)
"""Outputs per invocation of matmul-like kernels on CPU adapters: lavapipe's loads are loops over the SIMD lanes, so
16x16 (32 loads per 256 multiply-adds) beats 8x8 by 1.7x to 1.9x at 256x256x256."""
CPU_GROUP_MAX_OUTPUTS = 256
"""Reduces with more outputs skip the group reduce on CPU adapters: one invocation per output already fills the lanes
and threads (1024 row sums of 1024: about 25% faster without)."""
MAX_UNROLL = 32
"""The longest constant-trip loop the drivers with a loop limit (llvmpipe) unroll, used to stretch long loops."""

_VALUE_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
    dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float32: "f32", dtypes.float16: "f16"}
_WRAP: dict[DType, Callable[[str], str]] = {
    dtypes.int8: lambda x: f"(({x} << 24u) >> 24u)", dtypes.int16: lambda x: f"(({x} << 16u) >> 16u)",
    dtypes.uint8: lambda x: f"({x} & 0xFFu)", dtypes.uint16: lambda x: f"({x} & 0xFFFFu)"}
# ALU op -> WGSL expression with C / numpy semantics; a b c the operands, the other fields constants of their type.
# The adapters leave log2 of 0 and of negatives (and sqrt of negatives) undefined; WGSL's integer division truncates
# like C, % is spelled out because some backends get negative operands wrong, and a zero divisor gives 0 as in the
# core's constant folding; x != x must be true for NaN where backends compare ordered.
_MATH: dict[Ops, str] = {
    Ops.NEG: "({negate}{a})", Ops.EXP2: "exp2({a})", Ops.TRUNC: "{a}", Ops.RECIPROCAL: "({one} / {a})",
    Ops.LOG2: "select(select(log2({a}), {minus_inf}, {a} == {zero}), {nan}, {a} < {zero})",
    Ops.SIN: "select(sin({a}), {nan}, abs({a}) == {inf})", Ops.SQRT: "select(sqrt({a}), {nan}, {a} < {zero})",
    Ops.ADD: "({a} + {b})", Ops.SUB: "({a} - {b})", Ops.MUL: "({a} * {b})", Ops.FDIV: "({a} / {b})",
    Ops.IDIV: "select(({a} / select({b}, {one}, {b} == {zero})), {zero}, {b} == {zero})",
    Ops.MOD: "select(({a} - ({a} / select({b}, {one}, {b} == {zero})) * select({b}, {one}, {b} == {zero})), {zero}, "
             "{b} == {zero})",
    Ops.MAX: "select({a}, {b}, {a} < {b})", Ops.POW: "pow({a}, {b})", Ops.CMPLT: "({a} < {b})",
    Ops.CMPNE: "({a} != {b})", Ops.CMPEQ: "({a} == {b})", Ops.AND: "({a} & {b})", Ops.OR: "({a} | {b})",
    Ops.XOR: "({a} ^ {b})", Ops.SHL: "({a} << u32({b}))", Ops.SHR: "({a} >> u32({b}))",
    Ops.WHERE: "select({c}, {b}, {a})", Ops.MULACC: "(({a} * {b}) + {c})"}
_FLOAT_MATH = {Ops.TRUNC: "trunc({a})", Ops.IDIV: "({a} / {b})", Ops.MOD: "({a} - {b} * trunc({a} / {b}))",
               Ops.CMPNE: "(!({a} == {b}))"}
_BOOL_MATH = {Ops.NEG: "(!{a})", Ops.ADD: "({a} | {b})", Ops.MUL: "({a} & {b})", Ops.SUB: "({a} != {b})",
              Ops.FDIV: "({a} & {b})", Ops.MAX: "({a} | {b})", Ops.CMPLT: "((!{a}) & {b})", Ops.XOR: "({a} != {b})"}


class UnsupportedDTypeError(TypeError):
    """A kernel uses a dtype the WebGPU adapter cannot compute with."""


@dataclass
class KernelLayout:
    """What the runtime must know about a rendered kernel: per buffer, its element size and whether it is packed;
    the DEFINE_VAR names in parameter order; the workgroup size and whether threads are flat-mapped."""

    element_sizes: list[int] = field(default_factory=list)
    packed: list[bool] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    workgroup: tuple[int, int, int] = (WORKGROUP_SIZE, 1, 1)
    flat: bool = True

    def header(self) -> str:
        """The header line encoding this layout."""
        buffers = ",".join(f"{size}{'p' if packed else 'w'}" for size, packed in zip(self.element_sizes, self.packed,
                                                                                      strict=True))
        return (f"{HEADER_PREFIX} buffers={buffers or '-'} vars={','.join(self.variables) or '-'} "
                f"workgroup={'x'.join(str(size) for size in self.workgroup)} mode={'flat' if self.flat else 'local'}")

    @staticmethod
    def parse(source: str) -> KernelLayout:
        """The layout from a rendered kernel's first line; ValueError when it is not a WGSL kernel of this plugin."""
        first = source.split("\n", 1)[0]
        if not first.startswith(HEADER_PREFIX):
            raise ValueError("not a kernel rendered by the WGSL renderer of tiny-webgpu (its layout header is missing)")
        fields = dict(item.split("=", 1) for item in first[len(HEADER_PREFIX):].split())
        buffers = [] if fields["buffers"] == "-" else fields["buffers"].split(",")
        sizes = tuple(int(size) for size in fields["workgroup"].split("x"))
        return KernelLayout([int(item[:-1]) for item in buffers], [item.endswith("p") for item in buffers],
                            [] if fields["vars"] == "-" else fields["vars"].split(","),
                            (sizes[0], sizes[1], sizes[2]), fields["mode"] == "flat")


class WGSLRenderer(CStyleLanguage):
    """WGSL compute shaders for WebGPU adapters: the C-style base with WGSL's rules and hooks (module docstring).

    `has_f16`: the adapter has `shader-f16`; `max_storage_buffers` (maxStorageBuffersPerShaderStage) is also
    `max_buffers`, which the scheduler splits kernels to fit; `max_workgroup_storage` is `shared_max`;
    `max_loop_iterations`: the most iterations the driver runs of one loop (llvmpipe and lavapipe stop at 65535),
    longer loops are rendered as blocks of unrolled steps. `max_workgroup_size`, `max_workgroup_invocations` and
    `max_workgroups_per_dimension` are the adapter's limits (WebGPU's guaranteed minimums by default), which the
    core's GPU codegen reads as `local_max`, `max_groups` and `global_max`; kernels past them are refused naming the
    limit. `cpu_adapter` (a software adapter such as lavapipe, where every memory access is a loop over the SIMD
    lanes) tunes codegen: CPU_REGISTER_TILE, one SIMD vector (`simd_lanes`) per group, CPU_GROUP_MAX_OUTPUTS and
    smaller workgroups (CPU_PREFERRED_INVOCATIONS).
    """

    device, suffix = "WEBGPU", "wgsl"
    has_local, has_shared, has_threads = True, True, False
    global_max, local_max, shared_max = (2 ** 31 - 1, 65535, 65535), (256, 256, 64), 16384
    supports_float4 = False
    vector_widths: dict[DType, tuple[int, ...]] = {}
    atomic_dtypes = frozenset({dtypes.int32, dtypes.uint32, dtypes.float32})  # atomic<i32> / atomic<u32> words
    # no vector ALU ops (scalar code); `render_math` wraps narrow results and guards integer division itself
    vector_alu_ops: frozenset[Ops] = frozenset()
    narrow_dtypes: tuple[DType, ...] = ()
    guard_integer_division = False
    barrier = "workgroupBarrier();"

    def __init__(self, device: str = "WEBGPU", has_f16: bool = False, max_storage_buffers: int = 8,
                 max_workgroup_storage: int = 16384, adapter_name: str = "the WebGPU adapter",
                 max_loop_iterations: int | None = None, max_workgroup_size: tuple[int, int, int] = (256, 256, 64),
                 max_workgroup_invocations: int = 256, max_workgroups_per_dimension: int = 65535,
                 cpu_adapter: bool = False, simd_lanes: int = 8):
        self.device, self.has_f16, self.adapter_name, self.cpu_adapter = device, has_f16, adapter_name, cpu_adapter
        self.max_loop_iterations, self.shared_max = max_loop_iterations, max_workgroup_storage
        self.max_storage_buffers = max_storage_buffers
        self.max_buffers: int | None = max_storage_buffers
        self.max_workgroup_size = (int(max_workgroup_size[0]), int(max_workgroup_size[1]), int(max_workgroup_size[2]))
        self.max_workgroup_invocations = int(max_workgroup_invocations)
        self.max_groups = int(max_workgroups_per_dimension)
        self.local_max, self.global_max = self.max_workgroup_size, (2 ** 31 - 1, self.max_groups, self.max_groups)
        preferred = CPU_PREFERRED_INVOCATIONS if cpu_adapter else PREFERRED_INVOCATIONS
        self.max_local_total = max(1, min(preferred, self.max_workgroup_invocations))
        self.register_tile: tuple[int, int] | None = CPU_REGISTER_TILE if cpu_adapter else None
        self.group_size: int | None = max(2, simd_lanes) if cpu_adapter else None
        self.group_max_outputs: int | None = CPU_GROUP_MAX_OUTPUTS if cpu_adapter else None
        self.math_templates: dict[tuple[Ops, DType], str] = {}

    def context_state(self, uops: list[UOp]) -> _State:
        """What the WGSL rules keep while rendering `uops`: buffers a combining store updates are atomic words (every
        access to them is atomic); programs with lidx indices use the hardware's workgroup layout."""
        return _State(any(uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx") for uop in uops),
                      {uop.src[0].src[0].arg for uop in uops if uop.op is Ops.STORE and uop.arg is not None and
                       uop.src[0].op is Ops.INDEX and uop.src[0].src[0].op is Ops.DEFINE_GLOBAL})

    def render_function(self, ctx: RenderContext, name: str) -> str:
        """The module around the body (see `_assemble`)."""
        return _assemble(ctx, name)

    def check_workgroup(self, sizes: tuple[int, int, int], name: str) -> None:
        """Raise a ValueError naming the adapter limit when a kernel's workgroup of `sizes` does not fit it."""
        for axis, (size, limit) in enumerate(zip(sizes, self.max_workgroup_size, strict=True)):
            if size > limit:
                raise ValueError(f"kernel {name}: workgroup size {size} along {'xyz'[axis]} is more than "
                                 f"{self.adapter_name} allows (maxComputeWorkgroupSize{'XYZ'[axis]} = {limit}); "
                                 f"pick smaller LOCAL/GROUP opts")
        if sizes[0] * sizes[1] * sizes[2] > self.max_workgroup_invocations:
            raise ValueError(f"kernel {name}: a workgroup of {sizes[0]}x{sizes[1]}x{sizes[2]} invocations is more than "
                             f"{self.adapter_name} allows (maxComputeInvocationsPerWorkgroup = "
                             f"{self.max_workgroup_invocations}); pick smaller LOCAL/GROUP opts")

    def value_type(self, dtype: DType) -> str:
        """The WGSL type holding a value of scalar `dtype`; UnsupportedDTypeError naming dtype and device if none."""
        scalar = dtype.scalar
        if scalar == dtypes.float16 and not self.has_f16:
            raise UnsupportedDTypeError(
                f"{scalar} is not supported on {self.device} ({self.adapter_name}): the adapter lacks the "
                f"'shader-f16' feature; cast to float32 first or use another device")
        if scalar not in _VALUE_TYPES:
            raise UnsupportedDTypeError(
                f"{scalar} is not supported on {self.device} ({self.adapter_name}): WGSL has no 64-bit or "
                f"bfloat16 types; cast to a 32-bit dtype (float32, int32, uint32) first or use another device")
        return _VALUE_TYPES[scalar]

    def render_const(self, value: object, dtype: DType) -> str:
        """A WGSL literal of scalar `dtype` (infinities and NaN through bitcasts, which WGSL literals cannot be)."""
        scalar = dtype.scalar
        type_name = self.value_type(scalar)
        if scalar == dtypes.bool:
            return "true" if value else "false"
        if dtypes.is_float(scalar):
            number = float(value)  # type: ignore[arg-type]
            if math.isnan(number) or math.isinf(number):
                bits = 0x7FC00000 if math.isnan(number) else (0x7F800000 if number > 0 else 0xFF800000)
                return f"bitcast<f32>({bits:#x}u)" if scalar == dtypes.float32 else f"f16(bitcast<f32>({bits:#x}u))"
            if scalar == dtypes.float32:
                number = struct.unpack("<f", struct.pack("<f", number))[0]
            literal = repr(number)
            literal += "" if "e" in literal or "." in literal else ".0"
            return f"{literal}{'f' if scalar == dtypes.float32 else 'h'}"
        number = int(value)  # type: ignore[call-overload]
        if type_name == "u32":
            return f"{number & 0xFFFFFFFF}u"
        return "i32(-2147483647 - 1)" if number == -2 ** 31 else (f"{number}i" if number >= 0 else f"({number}i)")

    def spelled_dtypes(self) -> set[DType]:
        """Every dtype: `value_type` refuses the ones WGSL lacks when a kernel uses them, naming the adapter."""
        return set(dtypes.all)

    def render_dtype(self, dtype: DType) -> str:
        """The WGSL type of a scalar dtype (scalar code only: vectors are refused)."""
        if isinstance(dtype, PtrDType):
            return self.render_dtype(dtype.base)
        if dtype.count != 1:
            raise ValueError(f"the WGSL renderer renders scalar code only, got a {dtype.count}-lane {dtype}")
        return self.value_type(dtype)

    def render_declaration(self, name: str, dtype: DType, code: str) -> str:
        """A typed `let` (values are immutable; accumulators are declared as `var` arrays by the DEFINE_REG rule)."""
        return f"let {name}: {self.render_dtype(dtype)} = {code};"

    def render_vector(self, dtype: DType, items: list[str]) -> str:
        """Refused: WGSL kernels of this renderer are scalar code (`supports_float4` is False)."""
        raise ValueError(f"the WGSL renderer renders scalar code only, got a {dtype.count}-lane {dtype}")

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversion between scalar dtypes with C semantics (narrow integers wrap)."""
        from_type, to_type = self.render_dtype(from_dtype), self.render_dtype(to_dtype)
        if from_dtype == to_dtype:
            return expression
        if to_dtype == dtypes.bool:
            return f"({expression} != {self.render_const(0, from_dtype)})"
        if dtypes.is_float(from_dtype) and to_type == "u32":
            # C converts negative floats to unsigned through the signed integer (numpy and clang agree)
            zero = self.render_const(0, from_dtype)
            converted = f"select(u32({expression}), bitcast<u32>(i32({expression})), {expression} < {zero})"
        else:
            converted = expression if from_type == to_type else f"{to_type}({expression})"
        wrap = _WRAP.get(to_dtype)
        return wrap(converted) if wrap is not None and not _fits(from_dtype, to_dtype) else converted

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Reinterpretation of the bits of a scalar: `bitcast<T>()` for 32-bit types, through a `vec2<f16>` for
        float16, a wrap to the other signedness between 8- or 16-bit integers."""
        source, target = from_dtype.scalar, to_dtype.scalar
        if source.itemsize != target.itemsize:
            raise ValueError(f"BITCAST from {source} to {target}: the sizes differ")
        from_type, to_type = self.render_dtype(source), self.render_dtype(target)
        if source.itemsize == 4:
            return expression if from_type == to_type else f"bitcast<{to_type}>({expression})"
        if source == dtypes.float16:
            bits = f"(bitcast<u32>(vec2<f16>({expression}, 0.0h)) & 0xFFFFu)"
            return bits if to_type == "u32" else _WRAP[dtypes.int16](f"bitcast<i32>({bits})")
        if target == dtypes.float16:
            return f"bitcast<vec2<f16>>(u32({expression}) & 0xFFFFu).x"
        return self.render_cast(expression, source, target)

    def render_math(self, op: Ops, operands: list[str], dtype: DType) -> str:
        """The WGSL expression of one scalar ALU op on operands of `dtype` (`_MATH`, with `_FLOAT_MATH` or
        `_BOOL_MATH` first), results of narrow integer types wrapped."""
        if (template := self.math_templates.get((op, dtype.scalar))) is None:
            template = self.math_templates[(op, dtype.scalar)] = self.math_template(op, dtype.scalar)
        return template.format(*operands)

    def math_template(self, op: Ops, dtype: DType) -> str:
        """`render_math`'s expression of `op` on `dtype` with the operands as {0}, {1}, {2}."""
        value_type, is_float = self.render_dtype(dtype), dtypes.is_float(dtype)
        code = ((_FLOAT_MATH if is_float else _BOOL_MATH if dtype == dtypes.bool else {}).get(op) or _MATH.get(op))
        if code is None:
            raise ValueError(f"the WGSL renderer cannot render {op}: codegen must rewrite it first")
        zero = self.render_const(0, dtype)
        constants = {"zero": zero, "one": self.render_const(1, dtype),
                     "negate": "0u - " if value_type == "u32" else "-",
                     "nan": self.render_const(math.nan, dtype) if is_float else zero,
                     **({"inf": self.render_const(math.inf, dtype), "minus_inf": self.render_const(-math.inf, dtype)}
                        if is_float else {})}
        try:
            code = code.format(a="{0}", b="{1}", c="{2}", **constants)
        except KeyError as missing:
            raise ValueError(f"the WGSL renderer cannot render {op} on {dtype}: it has no {missing}") from None
        wrap = _WRAP.get(dtype)
        return wrap(code) if wrap is not None and op not in GroupOp.Comparison else code


@dataclass
class _Access:
    """A rendered INDEX: which memory (a global buffer's position, or a register/workgroup array name), the element
    index expression, the optional gate, the element dtype."""

    memory: str
    index: str
    gate: str | None
    element: DType
    global_position: int | None = None


@dataclass
class _State:
    """What the WGSL rules keep while rendering one program (RenderContext.state)."""

    local_mode: bool
    atomic_globals: set[int]
    accesses: dict[UOp, _Access] = field(default_factory=dict)
    module_lines: list[str] = field(default_factory=list)
    globals: dict[int, DType] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    closing: dict[UOp, int] = field(default_factory=dict)
    open_ranges: list[int | None] = field(default_factory=list)
    workgroup_bytes: int = 0


def _assemble(ctx: RenderContext, name: str) -> str:
    """The WGSL module of the program: buffers and variables bound through the parameter struct and storage bindings
    instead of a C signature."""
    renderer, state = ctx.renderer, ctx.state
    assert isinstance(renderer, WGSLRenderer)
    positions = sorted(state.globals)
    if positions != list(range(len(positions))):
        raise ValueError(f"DEFINE_GLOBAL positions must be 0..n-1, got {positions}")
    if len(positions) > renderer.max_storage_buffers:
        raise RuntimeError(
            f"kernel {name} needs {len(positions)} storage buffers but {renderer.device} ({renderer.adapter_name}) "
            f"allows {renderer.max_storage_buffers} per shader stage (maxStorageBuffersPerShaderStage); the scheduler "
            f"splits the kernels it makes to fit (the renderer's max_buffers), so this kernel was built elsewhere: "
            f"realize intermediate results first, or run it on another device")
    workgroup = (max(1, min(WORKGROUP_SIZE, renderer.max_workgroup_size[0], renderer.max_workgroup_invocations)), 1, 1)
    if state.local_mode:
        sizes = [1, 1, 1]
        for uop in ctx.uops:
            if uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx"):
                if not uop.src or uop.src[0].op is not Ops.CONST:
                    raise ValueError(f"{uop.arg} needs a constant size to be a WGSL workgroup size")
                sizes[int(str(uop.arg)[-1])] = int(uop.src[0].arg)
        workgroup = (sizes[0], sizes[1], sizes[2])
        renderer.check_workgroup(workgroup, name)
    if state.workgroup_bytes > renderer.shared_max:
        raise ValueError(f"kernel {name} declares {state.workgroup_bytes} bytes of workgroup memory, more than "
                         f"{renderer.adapter_name} allows (maxComputeWorkgroupStorageSize = {renderer.shared_max}); "
                         f"pick a smaller GROUP opt")
    variables = sorted(state.variables)
    layout = KernelLayout([state.globals[position].itemsize for position in positions],
                          [state.globals[position] in PACKED_DTYPES for position in positions], variables,
                          workgroup, not state.local_mode)
    fields = ["total: u32", "stride_y: u32", "stride_z: u32", "size0: u32", "size1: u32", "size2: u32",
              *(f"start{position}: i32" for position in positions),
              *(f"{state.variables[key]}: i32" for key in variables)]
    module = [layout.header(), *(["enable f16;"] if dtypes.float16 in ctx.used_dtypes else []),
              "struct Params { " + ", ".join(fields) + " }", "@group(0) @binding(0) var<uniform> params: Params;"]
    for position in positions:
        element = state.globals[position]
        if position in state.atomic_globals:
            array = "atomic<i32>" if element == dtypes.int32 else "atomic<u32>"
        else:
            array = "atomic<u32>" if element in PACKED_DTYPES else renderer.render_dtype(element)
        module.append(f"@group(0) @binding({position + 1}) var<storage, read_write> data{position}: array<{array}>;")
    module += [*state.module_lines, f"@compute @workgroup_size({','.join(str(size) for size in workgroup)})",
               f"fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>, "
               "@builtin(local_invocation_id) lid: vec3<u32>) {"]
    if not state.local_mode:
        module += ["  let flat = gid.x + gid.y * params.stride_y + gid.z * params.stride_z;",
                   "  if (flat >= params.total) { return; }"]
    return "\n".join(module + ctx.lines + ["}"]) + "\n"


def _define_global(ctx: RenderContext, x: UOp) -> str:
    assert isinstance(pointer := x.dtype, PtrDType), f"DEFINE_GLOBAL needs a pointer dtype, got {x.dtype}"
    if pointer.base.count != 1:
        raise ValueError(f"the WGSL renderer renders scalar buffers only, got {pointer.base}")
    ctx.renderer.render_dtype(pointer.base)  # refuses a dtype the adapter lacks
    ctx.state.globals[x.arg] = pointer.base.scalar
    return ctx.name(x, f"data{x.arg}")


def _define_var(ctx: RenderContext, x: UOp) -> str:
    variable = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(x.arg[0]))
    ctx.state.variables[str(x.arg[0])] = f"var_{variable}"
    return ctx.name(x, f"params.var_{variable}")


def _special(ctx: RenderContext, x: UOp) -> str:
    label = str(x.arg)
    axis = int(label[-1])
    if label.startswith("lidx"):
        code = f"i32(lid.{'xyz'[axis]})"
    elif ctx.state.local_mode:
        code = f"i32(group.{'xyz'[axis]})"
    elif label.startswith("gidx"):
        below = "".join(f" / params.size{inner}" for inner in range(axis))
        code = f"i32((flat{below}) % params.size{axis})" if axis < 2 else f"i32(flat{below})"
    else:
        raise ValueError(f"the WGSL renderer has no thread index {label!r} (only gidx0..2 and lidx0..2)")
    ctx.emit(f"let {label}: i32 = {code};")
    return ctx.name(x, label)


def _define_memory(ctx: RenderContext, x: UOp) -> str:
    """DEFINE_REG: a `var` array in the function; DEFINE_LOCAL: a `var<workgroup>` array of the module."""
    assert isinstance(pointer := x.dtype, PtrDType), f"{x.op} needs a pointer dtype, got {x.dtype}"
    declaration = f"array<{ctx.renderer.render_dtype(pointer.base)}, {max(pointer.size, 1)}>;"
    if x.op is Ops.DEFINE_REG:
        ctx.emit(f"var {(name := ctx.fresh('acc'))}: {declaration}")
    else:
        ctx.state.workgroup_bytes += max(pointer.size, 1) * pointer.base.itemsize
        ctx.state.module_lines.append(f"var<workgroup> {(name := ctx.fresh('temp'))}: {declaration}")
    return ctx.name(x, name)


def _range(ctx: RenderContext, x: UOp) -> str:
    renderer, state = ctx.renderer, ctx.state
    assert isinstance(renderer, WGSLRenderer)
    name, end = ctx.fresh("ridx"), ctx.expression(x.src[0])
    ctx.names[x] = name
    limit, size = renderer.max_loop_iterations, x.src[0].arg if x.src[0].op is Ops.CONST else None
    # a loop nested in others runs (product of the enclosing trip counts) x its own trip count times in a thread
    entries = math.prod(enclosing if enclosing is not None else 1 for enclosing in state.open_ranges)
    state.open_ranges.append(size)
    total = None if size is None else entries * size
    if limit is None or (total is not None and total <= limit):
        ctx.emit(f"for (var {name}: i32 = 0; {name} < {end}; {name}++) {{")
        ctx.depth, state.closing[x] = ctx.depth + 1, 1
        return name
    # the driver stops a loop after `limit` iterations in a thread (counted over all its entries): run blocks of up
    # to MAX_UNROLL steps, the inner loop of constant trip count being unrolled by the driver
    unroll = MAX_UNROLL if total is None else 1 << max(0, (-(-total // limit) - 1).bit_length())
    if unroll > MAX_UNROLL:
        raise RuntimeError(
            f"a loop of this kernel runs {total} times in one thread, but {renderer.adapter_name} ends a loop after "
            f"{limit} iterations (even unrolled {MAX_UNROLL} times it would stop early); reduce in several steps "
            f"(e.g. sum over a reshaped axis first) or use another device")
    if x.src[0] in ctx.inlined:  # the bound is written twice below: compute it once
        ctx.materialize(x.src[0])
        end = ctx.expression(x.src[0])
    ctx.emit(f"for (var {name}_block: i32 = 0; {name}_block < {end}; {name}_block += {unroll}i) {{")
    ctx.emit(f"  for (var {name}_step: i32 = 0; {name}_step < {unroll}i; {name}_step++) {{")
    ctx.emit(f"    let {name}: i32 = {name}_block + {name}_step;")
    ctx.emit(f"    if ({name} < {end}) {{")
    ctx.depth, state.closing[x] = ctx.depth + 3, 3
    return name


def _end(ctx: RenderContext, x: UOp) -> str:
    ranges = [source for source in x.src if source.op is Ops.RANGE]
    for _ in range(sum(ctx.state.closing.get(source, 1) for source in ranges) or 1):
        ctx.depth -= 1
        ctx.emit("}")
    del ctx.state.open_ranges[len(ctx.state.open_ranges) - len(ranges):]
    return ""


def _barrier(ctx: RenderContext) -> str:
    if not ctx.state.local_mode:
        raise ValueError("a BARRIER needs a workgroup layout (lidx thread indices): flat-mapped WGSL kernels return "
                         "early and cannot synchronize")
    ctx.emit("workgroupBarrier();")
    return ""


def _index(ctx: RenderContext, x: UOp) -> str:
    buffer = x.src[0]
    if x.src[1] in ctx.inlined and ctx.uses.get(x, 0) > 1:  # an index used several times: once
        ctx.materialize(x.src[1])
    index = ctx.expression(x.src[1]) if len(x.src) > 1 else "0i"
    gate = ctx.expression(x.src[2]) if len(x.src) > 2 else None
    element = buffer.dtype.base if isinstance(buffer.dtype, PtrDType) else buffer.dtype
    position = buffer.arg if buffer.op is Ops.DEFINE_GLOBAL else None
    ctx.state.accesses[x] = _Access(ctx.expression(buffer), index, gate, element.scalar, position)
    return ctx.name(x, f"&{ctx.expression(buffer)}[{index}]")


def _cast(ctx: RenderContext, x: UOp) -> str:
    if isinstance(x.dtype, PtrDType):
        raise ValueError("the WGSL renderer has no pointer casts (vector memory access is not used)")
    return ctx.bind(x, ctx.renderer.render_cast(ctx.expression(x.src[0]), x.src[0].dtype.scalar, x.dtype.scalar))


def _bitcast(ctx: RenderContext, x: UOp) -> str:
    """A bitcast; rendered in place when used once (WGSL's is an expression)."""
    code = ctx.renderer.render_bitcast(ctx.expression(x.src[0]), x.src[0].dtype.scalar, x.dtype.scalar)
    if ctx.uses.get(x, 0) <= 1:
        ctx.inlined.add(x)
        return ctx.name(x, code)
    return ctx.bind(x, code)


def _access_of(ctx: RenderContext, uop: UOp) -> _Access:
    if (access := ctx.state.accesses.get(uop)) is None:
        raise ValueError(f"LOAD/STORE needs an INDEX as its first source, got {uop.op}")
    return access


def _packed(ctx: RenderContext, access: _Access) -> tuple[str, str, str]:
    """A packed element's word (a `let` holds its byte address), mask and bit shift."""
    name, size = ctx.fresh("addr"), access.element.itemsize
    ctx.emit(f"let {name}: u32 = u32(params.start{access.global_position} + "
             f"{f'({access.index})' if size == 1 else f'({access.index}) * {size}'});")
    return (f"&{access.memory}[{name} >> 2u]", "0xFFu" if size == 1 else "0xFFFFu",
            f"(({name} & {'3u' if size == 1 else '2u'}) * 8u)")


def _read(ctx: RenderContext, access: _Access) -> str:
    """The expression reading the element (emitting address lets for packed buffers)."""
    if access.global_position is None:
        return f"{access.memory}[{access.index}]"
    element = f"{access.memory}[params.start{access.global_position} + {access.index}]"
    if access.global_position in ctx.state.atomic_globals:
        loaded = f"atomicLoad(&{element})"
        return f"bitcast<f32>({loaded})" if access.element == dtypes.float32 else loaded
    if access.element not in PACKED_DTYPES:
        return element
    word, mask, shift = _packed(ctx, access)
    bits = f"((atomicLoad({word}) >> {shift}) & {mask})"
    if access.element == dtypes.bool:
        return f"({bits} != 0u)"
    return bits if dtypes.is_unsigned(access.element) else _WRAP[access.element](f"bitcast<i32>({bits})")


def _load(ctx: RenderContext, x: UOp) -> str:
    access, name, type_name = _access_of(ctx, x.src[0]), ctx.fresh("val"), ctx.renderer.render_dtype(x.dtype)
    if access.gate is None:
        ctx.emit(f"let {name}: {type_name} = {_read(ctx, access)};")
    else:
        alternatives = [source for source in x.src[1:] if source.dtype != dtypes.void]
        alternative = ctx.expression(alternatives[0]) if alternatives else ctx.renderer.render_const(0, x.dtype)
        ctx.emit(f"var {name}: {type_name} = {alternative};")
        ctx.emit(f"if ({access.gate}) {{")
        ctx.depth += 1
        ctx.emit(f"{name} = {_read(ctx, access)};")
        ctx.depth -= 1
        ctx.emit("}")
    return ctx.name(x, name)


def _store(ctx: RenderContext, x: UOp) -> str:
    access, value = _access_of(ctx, x.src[0]), ctx.expression(x.src[1])
    if access.gate is not None:
        ctx.emit(f"if ({access.gate}) {{")
        ctx.depth += 1
    if access.global_position is None:
        ctx.emit(f"{access.memory}[{access.index}] = {value};")
    elif access.global_position in ctx.state.atomic_globals:
        _atomic_word_update(ctx, access, value, None if x.arg is None else str(x.arg))
    elif access.element not in PACKED_DTYPES:
        ctx.emit(f"{access.memory}[params.start{access.global_position} + {access.index}] = {value};")
    else:
        word, mask, shift = _packed(ctx, access)
        bits = f"select(0u, 1u, {value})" if access.element == dtypes.bool else f"(u32({value}) & {mask})"
        ctx.emit(f"atomicAnd({word}, ~({mask} << {shift}));")
        ctx.emit(f"atomicOr({word}, {bits} << {shift});")
    if access.gate is not None:
        ctx.depth -= 1
        ctx.emit("}")
    return ""


def _atomic_word_update(ctx: RenderContext, access: _Access, value: str, reduce: str | None) -> None:
    """Combine `value` into an element of an atomic buffer: atomicAdd / atomicMax / atomicMin for integers, else a
    compare-exchange loop over the element's bits (floats, integer products); no reduce is atomicStore."""
    dtype = access.element
    word = f"&{access.memory}[params.start{access.global_position} + {access.index}]"
    bits = (lambda text: f"bitcast<u32>({text})") if dtype == dtypes.float32 else (lambda text: text)
    if reduce is None or (dtype != dtypes.float32 and reduce in ("add", "max", "min")):
        ctx.emit(f"atomicStore({word}, {bits(value)});" if reduce is None else
                 f"atomic{reduce.capitalize()}({word}, {value});")
        return
    operand, old = ctx.fresh("operand"), ctx.fresh("old")
    ctx.emit(f"let {operand}: {ctx.renderer.render_dtype(dtype)} = {value};")
    ctx.emit(f"var {old} = atomicLoad({word});")
    ctx.emit("loop {")
    combined = ctx.combine_code(reduce, f"bitcast<f32>({old})" if dtype == dtypes.float32 else old, operand, dtype)
    result = ctx.fresh("exchange")
    ctx.emit(f"  let {result} = atomicCompareExchangeWeak({word}, {old}, {bits(combined)});")
    ctx.emit(f"  if ({result}.exchanged) {{ break; }}")
    ctx.emit(f"  {old} = {result}.old_value;")
    ctx.emit("}")


def _fits(from_dtype: DType, to_dtype: DType) -> bool:
    """True when every value of integer `from_dtype` is a value of `to_dtype` (no wrap needed)."""
    if from_dtype == dtypes.bool:
        return True
    if not (dtypes.is_int(from_dtype) and dtypes.is_int(to_dtype)):
        return False
    return dtypes.min(from_dtype) >= dtypes.min(to_dtype) and dtypes.max(from_dtype) <= dtypes.max(to_dtype)


wgsl_rendering = text_rules([
    (UPat(Ops.DEFINE_GLOBAL, name="x"), _define_global), (UPat(Ops.DEFINE_VAR, name="x"), _define_var),
    (UPat(Ops.SPECIAL, name="x"), _special), (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _define_memory),
    (UPat(Ops.RANGE, name="x"), _range), (UPat(Ops.END, name="x"), _end), (UPat(Ops.BARRIER), _barrier),
    (UPat(Ops.INDEX, name="x"), _index), (UPat(Ops.CAST, name="x"), _cast), (UPat(Ops.BITCAST, name="x"), _bitcast),
    (UPat(Ops.LOAD, name="x"), _load), (UPat(Ops.STORE, name="x"), _store),
])
"""WGSL's own rules, before the base's: thread indices, loops (Mesa's loop limit), workgroup memory, memory accesses
(element-indexed storage arrays, packed words, atomics) and bindings instead of parameters."""
WGSLRenderer.string_rewrite = wgsl_rendering + base_rendering

__all__ = ["WGSLRenderer", "KernelLayout", "UnsupportedDTypeError", "PACKED_DTYPES", "WORKGROUP_SIZE"]
