"""The WGSL renderer of the WEBGPU device: one compute entry point per kernel, scalar code only.

Its rules (`wgsl_rendering`) go before the C-style base's for what WGSL does differently: thread indices, loops (Mesa's
loop limit), workgroup memory, element-indexed storage arrays (narrow types packed in u32 words, buffers of combining
stores as atomic words) and bindings: binding 0 is a uniform `Params` (thread count, dispatch strides, each buffer's
start, the DEFINE_VARs), binding 1 + k is DEFINE_GLOBAL k. Kernels with lidx SPECIALs use the hardware workgroup layout;
the others decode gidx0..2 from one flat invocation number and return past the end. The first line is the layout the
runtime reads (`KernelLayout`).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.cstyle import CStyleLanguage, RenderContext, RenderedPointer, base_rendering
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
PREFERRED_INVOCATIONS, CPU_PREFERRED_INVOCATIONS = 256, 64
"""Invocations per workgroup codegen aims at on GPU and on CPU adapters, where a workgroup runs on one driver thread
(a 256x256 matmul in 16x16 tiles ran 1.9x slower on lavapipe's 2 threads as one workgroup)."""
CPU_REGISTER_TILE = (16, 16)
"""Outputs per invocation of matmul-like kernels on CPU adapters, whose loads loop over the SIMD lanes (16x16: 32
loads per 256 multiply-adds, 1.7x to 1.9x faster than 8x8 at 256x256x256)."""
CPU_GROUP_MAX_OUTPUTS = 256
"""Reduces with more outputs skip the group reduce on CPU adapters (1024 row sums of 1024: about 25% faster)."""
MAX_UNROLL = 32
"""The longest constant-trip loop the drivers with a loop limit (llvmpipe) unroll, used to stretch long loops."""

_VALUE_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
    dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float32: "f32", dtypes.float16: "f16"}
_WRAP: dict[DType, str] = {dtypes.int8: "(({} << 24u) >> 24u)", dtypes.int16: "(({} << 16u) >> 16u)",
                           dtypes.uint8: "({} & 0xFFu)", dtypes.uint16: "({} & 0xFFFFu)"}
_PARAMS = "total: u32, stride_y: u32, stride_z: u32, size0: u32, size1: u32, size2: u32"
# ALU op -> WGSL expression with C / numpy semantics; a b c the operands, the other fields constants of their type.
# The adapters leave log2 of 0 and of negatives (and sqrt of negatives) undefined; WGSL's integer division truncates
# like C, % is spelled out because some backends get negative operands wrong, and a zero divisor gives 0 as in the
# core's constant folding (`safe`: b with 0 replaced by 1); x != x must be true for NaN where backends compare ordered.
_MATH: dict[Ops, str] = {
    Ops.NEG: "({negate}{a})", Ops.EXP2: "exp2({a})", Ops.TRUNC: "{a}", Ops.RECIPROCAL: "({one} / {a})",
    Ops.LOG2: "select(select(log2({a}), {minus_inf}, {a} == {zero}), {nan}, {a} < {zero})",
    Ops.SIN: "select(sin({a}), {nan}, abs({a}) == {inf})", Ops.SQRT: "select(sqrt({a}), {nan}, {a} < {zero})",
    Ops.ADD: "({a} + {b})", Ops.SUB: "({a} - {b})", Ops.MUL: "({a} * {b})", Ops.FDIV: "({a} / {b})",
    Ops.IDIV: "select(({a} / {safe}), {zero}, {b} == {zero})",
    Ops.MOD: "select(({a} - ({a} / {safe}) * {safe}), {zero}, {b} == {zero})",
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
        buffers = ",".join(f"{size}{'pw'[not packed]}" for size, packed in zip(self.element_sizes, self.packed,
                                                                                strict=True))
        return (f"{HEADER_PREFIX} buffers={buffers or '-'} vars={','.join(self.variables) or '-'} "
                f"workgroup={'x'.join(map(str, self.workgroup))} mode={'flat' if self.flat else 'local'}")

    @staticmethod
    def parse(source: str) -> KernelLayout:
        """The layout from a rendered kernel's first line; ValueError when it is not a WGSL kernel of this plugin."""
        first = source.split("\n", 1)[0]
        if not first.startswith(HEADER_PREFIX):
            raise ValueError("not a kernel rendered by the WGSL renderer of tiny-webgpu (its layout header is missing)")
        fields = dict(item.split("=", 1) for item in first[len(HEADER_PREFIX):].split())
        buffers = [] if fields["buffers"] == "-" else fields["buffers"].split(",")
        x, y, z = (int(size) for size in fields["workgroup"].split("x"))
        return KernelLayout([int(item[:-1]) for item in buffers], [item.endswith("p") for item in buffers],
                            [] if fields["vars"] == "-" else fields["vars"].split(","), (x, y, z),
                            fields["mode"] == "flat")


class WGSLRenderer(CStyleLanguage):
    """WGSL compute shaders for a WebGPU adapter, shaped by its features and limits: `has_f16` (`shader-f16`),
    `max_storage_buffers` (also `max_buffers`: the scheduler splits kernels to fit), `max_workgroup_storage`
    (`shared_max`), `max_loop_iterations` (llvmpipe and lavapipe end a loop after 65535: longer loops run as blocks of
    unrolled steps), the workgroup limits (codegen's `local_max`, `max_groups`, `global_max`; kernels past them are
    refused naming the limit). `cpu_adapter` (lavapipe: each memory access loops over the SIMD lanes) tunes codegen:
    CPU_REGISTER_TILE, group reduces of one SIMD vector (`simd_lanes`), CPU_GROUP_MAX_OUTPUTS, smaller workgroups."""

    device, suffix, barrier = "WEBGPU", "wgsl", "workgroupBarrier();"
    has_local, has_shared, has_threads, supports_float4 = True, True, False, False
    global_max, local_max, shared_max = (2 ** 31 - 1, 65535, 65535), (256, 256, 64), 16384
    vector_widths: dict[DType, tuple[int, ...]] = {}
    atomic_dtypes = frozenset({dtypes.int32, dtypes.uint32, dtypes.float32})  # atomic<i32> / atomic<u32> words
    # scalar code: `render_math` wraps narrow results and guards integer division itself
    vector_alu_ops: frozenset[Ops] = frozenset()
    narrow_dtypes: tuple[DType, ...] = ()
    guard_integer_division = False

    def __init__(self, device: str = "WEBGPU", has_f16: bool = False, max_storage_buffers: int = 8,
                 max_workgroup_storage: int = 16384, adapter_name: str = "the WebGPU adapter",
                 max_loop_iterations: int | None = None, max_workgroup_size: tuple[int, int, int] = (256, 256, 64),
                 max_workgroup_invocations: int = 256, max_workgroups_per_dimension: int = 65535,
                 cpu_adapter: bool = False, simd_lanes: int = 8):
        self.device, self.has_f16, self.adapter_name, self.cpu_adapter = device, has_f16, adapter_name, cpu_adapter
        self.max_loop_iterations, self.shared_max = max_loop_iterations, max_workgroup_storage
        self.max_storage_buffers, self.max_buffers = max_storage_buffers, max_storage_buffers
        x, y, z = (int(size) for size in max_workgroup_size)
        self.max_workgroup_size = self.local_max = (x, y, z)
        self.max_workgroup_invocations, self.max_groups = int(max_workgroup_invocations), int(
            max_workgroups_per_dimension)
        self.global_max = (2 ** 31 - 1, self.max_groups, self.max_groups)
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
        """The WGSL module: the layout header, the `Params` uniform and the storage bindings (instead of a C signature),
        workgroup arrays, then the entry point; refused when it exceeds the adapter's limits."""
        state, uops = ctx.state, ctx.uops
        elements = {uop.arg: uop.dtype.base for uop in uops if uop.op is Ops.DEFINE_GLOBAL and isinstance(uop.dtype,
                                                                                                              PtrDType)}
        if (positions := sorted(elements)) != list(range(len(positions))):
            raise ValueError(f"DEFINE_GLOBAL positions must be 0..n-1, got {positions}")
        if len(positions) > self.max_storage_buffers:
            raise RuntimeError(
                f"kernel {name} needs {len(positions)} storage buffers but {self.device} ({self.adapter_name}) allows "
                f"{self.max_storage_buffers} per shader stage (maxStorageBuffersPerShaderStage); the scheduler splits "
                f"the kernels it makes to fit (the renderer's max_buffers), so this kernel was built elsewhere: "
                f"realize intermediate results first, or run it on another device")
        x, y, z = state.workgroup if state.local_mode else \
            (max(1, min(WORKGROUP_SIZE, self.max_workgroup_size[0], self.max_workgroup_invocations)), 1, 1)
        limits = [*((f"workgroup size {size} along {'xyz'[axis]}", size, f"maxComputeWorkgroupSize{'XYZ'[axis]}",
                     self.max_workgroup_size[axis]) for axis, size in enumerate((x, y, z))),
                  (f"a workgroup of {x}x{y}x{z} invocations", x * y * z, "maxComputeInvocationsPerWorkgroup",
                   self.max_workgroup_invocations),
                  (f"{state.workgroup_bytes} bytes of workgroup memory", state.workgroup_bytes,
                   "maxComputeWorkgroupStorageSize", self.shared_max)]
        for what, size, limit_name, limit in limits:
            if size > limit:
                raise ValueError(f"kernel {name}: {what} is more than {self.adapter_name} allows ({limit_name} = "
                                 f"{limit}); pick smaller LOCAL/GROUP opts")
        variables = sorted(ctx.variables)
        layout = KernelLayout([elements[position].itemsize for position in positions],
                              [elements[position] in PACKED_DTYPES for position in positions], variables, (x, y, z),
                              not state.local_mode)
        fields = ", ".join([_PARAMS, *(f"start{position}: i32" for position in positions),
                            *(f"{ctx.variables[key]}: i32" for key in variables)])
        module = [layout.header(), *(["enable f16;"] if dtypes.float16 in ctx.used_dtypes else []),
                  f"struct Params {{ {fields} }}", "@group(0) @binding(0) var<uniform> params: Params;"]
        for position, element in sorted(elements.items()):
            atomic = position in state.atomic_globals
            array = "atomic<i32>" if atomic and element == dtypes.int32 else "atomic<u32>" if atomic or \
                element in PACKED_DTYPES else self.render_dtype(element)
            module.append(f"@group(0) @binding({position + 1}) var<storage, read_write> data{position}: "
                          f"array<{array}>;")
        module += [*state.module_lines, f"@compute @workgroup_size({x},{y},{z})",
                   f"fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>, "
                   "@builtin(local_invocation_id) lid: vec3<u32>) {"]
        if not state.local_mode:
            module += ["  let flat = gid.x + gid.y * params.stride_y + gid.z * params.stride_z;",
                       "  if (flat >= params.total) { return; }"]
        return "\n".join(module + ctx.lines + ["}"]) + "\n"

    def render_dtype(self, dtype: DType) -> str:
        """The WGSL type of a scalar dtype (of a pointer's element): vectors are refused, and with
        UnsupportedDTypeError naming the adapter, the dtypes it lacks."""
        if isinstance(dtype, PtrDType):
            return self.render_dtype(dtype.base)
        if dtype.count != 1:
            raise ValueError(f"the WGSL renderer renders scalar code only, got a {dtype.count}-lane {dtype}")
        if dtype == dtypes.float16 and not self.has_f16:
            raise UnsupportedDTypeError(f"{dtype} is not supported on {self.device} ({self.adapter_name}): the adapter "
                                        f"lacks the 'shader-f16' feature; cast to float32 first or use another device")
        if dtype not in _VALUE_TYPES:
            raise UnsupportedDTypeError(
                f"{dtype} is not supported on {self.device} ({self.adapter_name}): WGSL has no 64-bit or bfloat16 "
                f"types; cast to a 32-bit dtype (float32, int32, uint32) first or use another device")
        return _VALUE_TYPES[dtype]

    def spelled_dtypes(self) -> set[DType]:
        """Every dtype: `render_dtype` refuses the ones WGSL lacks when a kernel uses them, naming the adapter."""
        return set(dtypes.all)

    def render_const(self, value: object, dtype: DType) -> str:
        """A WGSL literal of scalar `dtype` (infinities and NaN through bitcasts, which WGSL literals cannot be)."""
        if (type_name := self.render_dtype(dtype.scalar)) == "bool":
            return "true" if value else "false"
        if type_name in ("f32", "f16"):
            number = float(value)  # type: ignore[arg-type]
            if not math.isfinite(number):
                pattern = 0x7FC00000 if math.isnan(number) else 0x7F800000 if number > 0 else 0xFF800000
                bits = f"bitcast<f32>({pattern:#x}u)"
                return bits if type_name == "f32" else f"f16({bits})"
            literal = repr(struct.unpack("<f", struct.pack("<f", number))[0] if type_name == "f32" else number)
            return f"{literal}{'' if 'e' in literal or '.' in literal else '.0'}{'f' if type_name == 'f32' else 'h'}"
        number = int(value)  # type: ignore[call-overload]
        if type_name == "u32":
            return f"{number & 0xFFFFFFFF}u"
        return "i32(-2147483647 - 1)" if number == -2 ** 31 else (f"{number}i" if number >= 0 else f"({number}i)")

    def render_declaration(self, name: str, dtype: DType, code: str) -> str:
        """A typed `let` (values are immutable; accumulators are declared as `var` arrays by the DEFINE_REG rule)."""
        return f"let {name}: {self.render_dtype(dtype)} = {code};"

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversion between scalar dtypes with C semantics (narrow integers wrap)."""
        from_type, to_type = self.render_dtype(from_dtype), self.render_dtype(to_dtype)
        if from_dtype == to_dtype:
            return expression
        if to_dtype == dtypes.bool:
            return f"({expression} != {self.render_const(0, from_dtype)})"
        if from_type in ("f32", "f16") and to_type == "u32":  # C converts negative floats through the signed integer
            converted = f"select(u32({expression}), bitcast<u32>(i32({expression})), {expression} < " \
                        f"{self.render_const(0, from_dtype)})"
        else:
            converted = expression if from_type == to_type else f"{to_type}({expression})"
        fits = to_dtype not in _WRAP or from_dtype == dtypes.bool or dtypes.is_int(from_dtype) and \
            dtypes.min(from_dtype) >= dtypes.min(to_dtype) and dtypes.max(from_dtype) <= dtypes.max(to_dtype)
        return converted if fits else _WRAP[to_dtype].format(converted)

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
            return bits if to_type == "u32" else _WRAP[dtypes.int16].format(f"bitcast<i32>({bits})")
        if target == dtypes.float16:
            return f"bitcast<vec2<f16>>(u32({expression}) & 0xFFFFu).x"
        return self.render_cast(expression, source, target)

    def render_math(self, op: Ops, operands: list[str], dtype: DType) -> str:
        """One scalar ALU op on operands of `dtype`: its `_MATH` template (`_FLOAT_MATH` or `_BOOL_MATH` first) with the
        type's constants, narrow integer results wrapped; templates are made once per op and dtype."""
        if (template := self.math_templates.get((op, scalar := dtype.scalar))) is None:
            value_type, is_float = self.render_dtype(scalar), dtypes.is_float(scalar)
            code = (_FLOAT_MATH if is_float else _BOOL_MATH if scalar == dtypes.bool else {}).get(op) or _MATH.get(op)
            if code is None:
                raise ValueError(f"the WGSL renderer cannot render {op}: codegen must rewrite it first")
            zero, one = self.render_const(0, scalar), self.render_const(1, scalar)
            constants = {"zero": zero, "one": one, "negate": "0u - " if value_type == "u32" else "-",
                         "safe": f"select({{1}}, {one}, {{1}} == {zero})"}
            if is_float:
                constants |= {"nan": self.render_const(math.nan, scalar), "inf": self.render_const(math.inf, scalar),
                              "minus_inf": self.render_const(-math.inf, scalar)}
            try:
                template = code.format(a="{0}", b="{1}", c="{2}", **{"nan": zero, **constants})
            except KeyError as missing:
                raise ValueError(f"the WGSL renderer cannot render {op} on {scalar}: it has no {missing}") from None
            wrap = _WRAP.get(scalar, "{}") if op not in GroupOp.Comparison else "{}"
            template = self.math_templates[(op, scalar)] = wrap.format(template)
        return template.format(*operands)


@dataclass
class _State:
    """What the WGSL rules keep while rendering one program (RenderContext.state)."""

    local_mode: bool
    atomic_globals: set[int]
    module_lines: list[str] = field(default_factory=list)
    workgroup: list[int] = field(default_factory=lambda: [1, 1, 1])  # the lidx sizes
    open_ranges: dict[UOp, tuple[int | None, int]] = field(default_factory=dict)  # -> (constant trip count, braces)
    workgroup_bytes: int = 0


def _define_var(ctx: RenderContext, x: UOp) -> str:
    name = ctx.variables[str(x.arg[0])] = "var_" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in
                                                          str(x.arg[0]))
    return ctx.name(x, f"params.{name}")


def _special(ctx: RenderContext, x: UOp) -> str:
    label, state = str(x.arg), ctx.state
    axis = int(label[-1])
    if label.startswith("lidx"):
        if not x.src or x.src[0].op is not Ops.CONST:
            raise ValueError(f"{label} needs a constant size to be a WGSL workgroup size")
        state.workgroup[axis], code = int(x.src[0].arg), f"i32(lid.{'xyz'[axis]})"
    elif state.local_mode:
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
    renderer, state, name, end = ctx.renderer, ctx.state, ctx.fresh("ridx"), ctx.expression(x.src[0])
    assert isinstance(renderer, WGSLRenderer)
    limit, size = renderer.max_loop_iterations, x.src[0].arg if x.src[0].op is Ops.CONST else None
    # a loop nested in others runs (product of the enclosing trip counts) x its own trip count times in a thread
    total = None if size is None else size * math.prod(1 if trips is None else trips for trips, _ in
                                                       state.open_ranges.values())
    if limit is None or (total is not None and total <= limit):
        ctx.emit(f"for (var {name}: i32 = 0; {name} < {end}; {name}++) {{")
        ctx.depth, state.open_ranges[x] = ctx.depth + 1, (size, 1)
        return ctx.name(x, name)
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
    for line in (f"for (var {name}_block: i32 = 0; {name}_block < {end}; {name}_block += {unroll}i) {{",
                 f"  for (var {name}_step: i32 = 0; {name}_step < {unroll}i; {name}_step++) {{",
                 f"    let {name}: i32 = {name}_block + {name}_step;", f"    if ({name} < {end}) {{"):
        ctx.emit(line)
    ctx.depth, state.open_ranges[x] = ctx.depth + 3, (size, 3)
    return ctx.name(x, name)


def _end(ctx: RenderContext, x: UOp) -> str:
    for _ in range(sum(ctx.state.open_ranges.pop(source, (None, 1))[1] for source in x.src if source.op is Ops.RANGE)
                   or 1):
        ctx.depth -= 1
        ctx.emit("}")
    return ""


def _barrier(ctx: RenderContext) -> None:
    if not ctx.state.local_mode:  # else the base emits the renderer's barrier
        raise ValueError("a BARRIER needs a workgroup layout (lidx thread indices): flat-mapped WGSL kernels return "
                         "early and cannot synchronize")


def _cast(ctx: RenderContext, x: UOp) -> str:
    if isinstance(x.dtype, PtrDType):
        raise ValueError("the WGSL renderer has no pointer casts (vector memory access is not used)")
    return ctx.bind(x, ctx.renderer.render_cast(ctx.expression(x.src[0]), x.src[0].dtype.scalar, x.dtype.scalar))


def _bitcast(ctx: RenderContext, x: UOp) -> str:
    code = ctx.renderer.render_bitcast(ctx.expression(x.src[0]), x.src[0].dtype.scalar, x.dtype.scalar)
    if ctx.uses.get(x, 0) <= 1:  # WGSL's bitcast is an expression: in place when used once
        ctx.inlined.add(x)
        return ctx.name(x, code)
    return ctx.bind(x, code)


def _access(ctx: RenderContext, index: UOp) -> tuple[RenderedPointer, int | None, str]:
    """The rendered INDEX a LOAD or STORE goes through, its buffer's position (None for a register or workgroup array)
    and the array element it names."""
    pointer = ctx.pointer_of(index)
    position = index.src[0].arg if index.src[0].op is Ops.DEFINE_GLOBAL else None
    return pointer, position, f"{pointer.buffer}[{'' if position is None else f'params.start{position} + '}" \
        f"{pointer.index}]"


def _packed(ctx: RenderContext, pointer: RenderedPointer, position: int) -> tuple[str, str, str, str]:
    """A packed element's address (a `let` of its byte offset), word, mask and bit shift."""
    name, size = ctx.fresh("addr"), pointer.element.itemsize
    offset = f"({pointer.index})" if size == 1 else f"({pointer.index}) * {size}"
    return (f"let {name}: u32 = u32(params.start{position} + {offset});", f"&{pointer.buffer}[{name} >> 2u]",
            "0xFFu" if size == 1 else "0xFFFFu", f"(({name} & {'3u' if size == 1 else '2u'}) * 8u)")


def _emit_gated(ctx: RenderContext, gate: str | None, lines: list[str]) -> None:
    for line in lines if gate is None else [f"if ({gate}) {{", *(f"  {line}" for line in lines), "}"]:
        ctx.emit(line)


def _load(ctx: RenderContext, x: UOp) -> str:
    pointer, position, element = _access(ctx, x.src[0])
    name, type_name, lines = ctx.fresh("val"), ctx.renderer.render_dtype(x.dtype), []
    value, element_dtype = element, pointer.element
    if position in ctx.state.atomic_globals:
        value = f"atomicLoad(&{element})"
        value = f"bitcast<f32>({value})" if element_dtype == dtypes.float32 else value
    elif position is not None and element_dtype in PACKED_DTYPES:
        let, word, mask, shift = _packed(ctx, pointer, position)
        lines, bits = [let], f"((atomicLoad({word}) >> {shift}) & {mask})"
        value = f"({bits} != 0u)" if element_dtype == dtypes.bool else bits if dtypes.is_unsigned(element_dtype) else \
            _WRAP[element_dtype].format(f"bitcast<i32>({bits})")
    if pointer.gate is None:
        lines.append(f"let {name}: {type_name} = {value};")
    else:
        alternatives = [source for source in x.src[1:] if source.dtype != dtypes.void]
        ctx.emit(f"var {name}: {type_name} = "
                 f"{ctx.expression(alternatives[0]) if alternatives else ctx.renderer.render_const(0, x.dtype)};")
        lines.append(f"{name} = {value};")
    _emit_gated(ctx, pointer.gate, lines)
    return ctx.name(x, name)


def _store(ctx: RenderContext, x: UOp) -> str:
    (pointer, position, element), value = _access(ctx, x.src[0]), ctx.expression(x.src[1])
    dtype, word = pointer.element, f"&{element}"
    if position in ctx.state.atomic_globals and (x.arg is None or dtype != dtypes.float32 and
                                                 x.arg in ("add", "max", "min")):
        bits = f"bitcast<u32>({value})" if dtype == dtypes.float32 else value
        lines = [f"atomicStore({word}, {bits});" if x.arg is None else
                 f"atomic{str(x.arg).capitalize()}({word}, {value});"]
    elif position in ctx.state.atomic_globals:  # a compare-exchange loop over the element's bits
        operand, old, result = ctx.fresh("operand"), ctx.fresh("old"), ctx.fresh("exchange")
        combined = ctx.combine_code(str(x.arg), f"bitcast<f32>({old})" if dtype == dtypes.float32 else old, operand,
                                    dtype)
        lines = [f"let {operand}: {ctx.renderer.render_dtype(dtype)} = {value};", f"var {old} = atomicLoad({word});",
                 "loop {", f"  let {result} = atomicCompareExchangeWeak({word}, {old}, "
                 f"{f'bitcast<u32>({combined})' if dtype == dtypes.float32 else combined});",
                 f"  if ({result}.exchanged) {{ break; }}", f"  {old} = {result}.old_value;", "}"]
    elif position is None or dtype not in PACKED_DTYPES:
        lines = [f"{element} = {value};"]
    else:
        let, word, mask, shift = _packed(ctx, pointer, position)
        bits = f"select(0u, 1u, {value})" if dtype == dtypes.bool else f"(u32({value}) & {mask})"
        lines = [let, f"atomicAnd({word}, ~({mask} << {shift}));", f"atomicOr({word}, {bits} << {shift});"]
    _emit_gated(ctx, pointer.gate, lines)
    return ""


wgsl_rendering = text_rules([
    (UPat(Ops.DEFINE_VAR, name="x"), _define_var), (UPat(Ops.SPECIAL, name="x"), _special),
    (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _define_memory), (UPat(Ops.RANGE, name="x"), _range),
    (UPat(Ops.END, name="x"), _end), (UPat(Ops.BARRIER), _barrier), (UPat(Ops.CAST, name="x"), _cast),
    (UPat(Ops.BITCAST, name="x"), _bitcast), (UPat(Ops.LOAD, name="x"), _load), (UPat(Ops.STORE, name="x"), _store),
])
"""WGSL's own rules, before the base's (whose DEFINE_GLOBAL rule names the buffers and refuses dtypes WGSL lacks):
thread indices, loops (Mesa's loop limit), workgroup memory, memory accesses (element-indexed storage arrays, packed
words, atomics) and bindings instead of parameters."""
WGSLRenderer.string_rewrite = wgsl_rendering + base_rendering

__all__ = ["WGSLRenderer", "KernelLayout", "UnsupportedDTypeError", "PACKED_DTYPES", "WORKGROUP_SIZE"]
