"""The WGSL renderer of the WEBGPU device: scalar code, one compute entry point per kernel, bound to a uniform `Params`
(binding 0) and storage arrays (binding 1 + k: DEFINE_GLOBAL k; narrow types packed in u32 words, buffers of combining
stores as atomic words). A kernel's first line is the layout the runtime reads (`KernelLayout`)."""
from __future__ import annotations

import json
import math
from typing import NamedTuple, NoReturn

from tiny_webgpu.lowering import PACKED_DTYPES, wgsl_lowering
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.cstyle import BASE_CODE_FOR_OP, CStyleLanguage, RenderContext, base_rendering
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

HEADER_PREFIX = "// tinycore-webgpu"  # how the first line of every kernel starts (`KernelLayout.header`)
WORKGROUP_SIZE, MAX_UNROLL = 64, 32  # threads per workgroup of flat-mapped kernels; the longest loop llvmpipe unrolls
# Codegen aims at 256 invocations per workgroup on GPUs. On CPU adapters (a workgroup on one driver thread, each load a
# loop over the SIMD lanes): 64 (256 ran a 256x256 matmul 1.9x slower on lavapipe's 2 threads), 16x16 register tiles
# (1.7x to 1.9x faster than 8x8 at 256^3), no group reduce past 256 outputs (1024 row sums of 1024: 25% faster).
PREFERRED_INVOCATIONS, CPU_PREFERRED_INVOCATIONS, CPU_REGISTER_TILE, CPU_GROUP_MAX_OUTPUTS = 256, 64, (16, 16), 256

_VALUE_TYPES: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
    dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float32: "f32", dtypes.float16: "f16"}
_WRAP: dict[DType, str] = {dtypes.int8: "(({} << 24u) >> 24u)", dtypes.int16: "(({} << 16u) >> 16u)",
                           dtypes.uint8: "({} & 0xFFu)", dtypes.uint16: "({} & 0xFFFFu)"}
_PARAMS = "total: u32, stride_y: u32, stride_z: u32, size0: u32, size1: u32, size2: u32"

class UnsupportedDTypeError(TypeError):
    """A kernel uses a dtype the WebGPU adapter cannot compute with."""

class KernelLayout(NamedTuple):
    """What the runtime reads of a kernel: per buffer its element size and packing, variables, workgroup, flat mode."""
    element_sizes: list[int]
    packed: list[bool]
    variables: list[str]
    workgroup: tuple[int, int, int]
    flat: bool

    def header(self) -> str:
        """The header line encoding this layout (as JSON)."""
        return f"{HEADER_PREFIX} {json.dumps(self._asdict(), separators=(',', ':'))}"

    @staticmethod
    def parse(source: str) -> KernelLayout:
        """The layout from a rendered kernel's first line; ValueError when it is not a WGSL kernel of this plugin."""
        if not (first := source.split("\n", 1)[0]).startswith(HEADER_PREFIX):
            raise ValueError("not a kernel rendered by the WGSL renderer of tiny-webgpu (its layout header is missing)")
        fields = json.loads(first[len(HEADER_PREFIX):])
        return KernelLayout(**{**fields, "workgroup": tuple(fields["workgroup"])})

class WGSLRenderer(CStyleLanguage):
    """WGSL compute shaders shaped by the adapter: `has_f16` (`shader-f16`), its limits (`max_storage_buffers` is also
    `max_buffers`; kernels past a limit are refused naming it), `max_loop_iterations` (llvmpipe and lavapipe end a loop
    after 65535: longer ones run as blocks of unrolled steps), `cpu_adapter` and `simd_lanes` (the tuning above)."""
    device, suffix, barrier, supports_float4 = "WEBGPU", "wgsl", "workgroupBarrier();", False
    atomic_dtypes = frozenset({dtypes.int32, dtypes.uint32, dtypes.float32})  # atomic<i32> / atomic<u32> words
    # scalar code, lowered by `wgsl_lowering` (packed words, narrow results, remainders, domains) after codegen's
    # guarded division; no type_map spells every dtype, `render_dtype` refusing those WGSL lacks with the adapter's name
    vector_alu_ops, narrow_dtypes, type_map, post_matcher = frozenset(), (), {}, wgsl_lowering
    infinity, nan, integer_suffix = "bitcast<f32>(0x7f800000u)", "bitcast<f32>(0x7fc00000u)", {dtypes.int32: "i"}
    code_for_op = {**BASE_CODE_FOR_OP, Ops.WHERE: lambda condition, a, b, dtype: f"select({b}, {a}, {condition})",
                   Ops.MAX: lambda a, b, dtype: f"select({a}, {b}, {a} < {b})",
                   Ops.SHL: lambda a, b, dtype: f"({a} << u32({b}))", Ops.SHR: lambda a, b, dtype: f"({a} >> u32({b}))"}

    def __init__(self, device: str = "WEBGPU", has_f16: bool = False, max_storage_buffers: int = 8,
                 max_workgroup_storage: int = 16384, adapter_name: str = "the WebGPU adapter",
                 max_loop_iterations: int | None = None, max_workgroup_size: tuple[int, int, int] = (256, 256, 64),
                 max_workgroup_invocations: int = 256, max_workgroups_per_dimension: int = 65535,
                 cpu_adapter: bool = False, simd_lanes: int = 8):
        self.device, self.has_f16, self.adapter_name, self.cpu_adapter = device, has_f16, adapter_name, cpu_adapter
        self.max_loop_iterations, self.shared_max = max_loop_iterations, max_workgroup_storage
        self.max_storage_buffers = self.max_buffers = max_storage_buffers
        self.max_workgroup_size = self.local_max = tuple(int(size) for size in max_workgroup_size)
        self.max_workgroup_invocations, groups = int(max_workgroup_invocations), int(max_workgroups_per_dimension)
        self.max_groups, self.global_max = groups, (2 ** 31 - 1, groups, groups)
        preferred = CPU_PREFERRED_INVOCATIONS if cpu_adapter else PREFERRED_INVOCATIONS
        self.max_local_total = max(1, min(preferred, self.max_workgroup_invocations))
        tuning = (CPU_REGISTER_TILE, max(2, simd_lanes), CPU_GROUP_MAX_OUTPUTS) if cpu_adapter else (None, None, None)
        self.register_tile, self.group_size, self.group_max_outputs = tuning

    def context_state(self, uops: list[UOp]) -> _State:
        """The rules' state: atomic buffers, workgroup arrays and size, loop trip counts (`_State`)."""
        return _State(uops)

    def render_function(self, ctx: RenderContext, name: str) -> str:
        """The module (header, `Params`, bindings, workgroup arrays, entry point), or an error naming a limit."""
        state, elements = ctx.state, {uop.arg: uop.dtype.base for uop in ctx.uops
                                      if uop.op is Ops.DEFINE_GLOBAL and isinstance(uop.dtype, PtrDType)}
        if (positions := sorted(elements)) != list(range(len(positions))):
            raise ValueError(f"DEFINE_GLOBAL positions must be 0..n-1, got {positions}")
        if len(positions) > self.max_storage_buffers:
            raise RuntimeError(
                f"kernel {name} needs {len(positions)} storage buffers but {self.device} ({self.adapter_name}) allows "
                f"{self.max_storage_buffers} per shader stage (maxStorageBuffersPerShaderStage); the scheduler splits "
                f"its kernels to fit (max_buffers), so this one was built elsewhere: realize intermediate results "
                f"first, or run it on another device")
        x, y, z = state.workgroup if ctx.local_ids else \
            (max(1, min(WORKGROUP_SIZE, self.max_workgroup_size[0], self.max_workgroup_invocations)), 1, 1)
        limits = [(f"workgroup size {size} along {axis}", size, f"maxComputeWorkgroupSize{axis.upper()}", limit)
                  for axis, size, limit in zip("xyz", (x, y, z), self.max_workgroup_size, strict=True)]
        limits += [(f"a workgroup of {x}x{y}x{z} invocations", x * y * z, "maxComputeInvocationsPerWorkgroup",
                    self.max_workgroup_invocations),
                   (f"{state.workgroup_bytes} bytes of workgroup memory", state.workgroup_bytes,
                    "maxComputeWorkgroupStorageSize", self.shared_max)]
        for what, size, limit_name, limit in limits:
            if size > limit:
                raise ValueError(f"kernel {name}: {what} is more than {self.adapter_name} allows ({limit_name} = "
                                 f"{limit}); pick smaller LOCAL/GROUP opts")
        layout = KernelLayout([elements[position].itemsize for position in positions],
                              [elements[position] in PACKED_DTYPES for position in positions], sorted(ctx.variables),
                              (x, y, z), not ctx.local_ids)
        arrays = [f"atomic<{'i32' if element == dtypes.int32 else 'u32'}>" if position in state.atomic_globals or
                  element in PACKED_DTYPES else self.render_dtype(element) for position, element in
                  sorted(elements.items())]
        fields = ", ".join([_PARAMS, *(f"start{position}: i32" for position in positions),
                            *(f"{ctx.variables[key]}: i32" for key in layout.variables)])
        return "\n".join([
            layout.header(), *(["enable f16;"] if dtypes.float16 in ctx.used_dtypes else []),
            f"struct Params {{ {fields} }}", "@group(0) @binding(0) var<uniform> params: Params;",
            *(f"@group(0) @binding({position + 1}) var<storage, read_write> data{position}: array<{array}>;"
              for position, array in enumerate(arrays)), *state.module_lines, f"@compute @workgroup_size({x},{y},{z})",
            f"fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>, "
            "@builtin(local_invocation_id) lid: vec3<u32>) {",
            *([] if ctx.local_ids else ["  let flat = gid.x + gid.y * params.stride_y + gid.z * params.stride_z;",
                                           "  if (flat >= params.total) { return; }"]), *ctx.lines, "}"]) + "\n"

    def render_dtype(self, dtype: DType) -> str:
        """The WGSL type of a scalar dtype; UnsupportedDTypeError, naming the adapter, for those WGSL lacks."""
        if dtype.count != 1:
            raise ValueError(f"the WGSL renderer renders scalar code only, got a {dtype.count}-lane {dtype}")
        if dtype not in _VALUE_TYPES or not self.has_f16 and dtype == dtypes.float16:
            reason = "the adapter lacks the 'shader-f16' feature; cast to float32" if dtype == dtypes.float16 else \
                "WGSL has no 64-bit or bfloat16 types; cast to a 32-bit dtype (float32, int32, uint32)"
            raise UnsupportedDTypeError(f"{dtype} is not supported on {self.device} ({self.adapter_name}): {reason} "
                                        f"first or use another device")
        return _VALUE_TYPES[dtype]

    def render_const(self, value: object, dtype: DType) -> str:
        """A WGSL literal of scalar `dtype`: bool and u32 here, i32 (narrow integers too) and floats by the base."""
        if (type_name := self.render_dtype(dtype.scalar)) == "bool":
            return "true" if value else "false"
        if type_name == "u32":
            return f"{int(value) & 0xFFFFFFFF}u"  # type: ignore[call-overload]
        return super().render_const(value, dtypes.int32 if type_name == "i32" else dtype)

    def render_declaration(self, name: str, dtype: DType, code: str) -> str:
        """A typed `let` (values are immutable; accumulators are declared as `var` arrays by the DEFINE_REG rule)."""
        return f"let {name}: {self.render_dtype(dtype)} = {code};"

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversion between scalar dtypes with C semantics (narrow integers wrap)."""
        from_type, to_type = self.render_dtype(from_dtype), self.render_dtype(to_dtype)
        converted = expression if from_type == to_type else f"{to_type}({expression})"
        if from_type in ("f32", "f16") and to_type == "u32":  # C converts negative floats through the signed integer
            converted = f"select({converted}, bitcast<u32>(i32({expression})), {expression} < " \
                f"{self.render_const(0, from_dtype)})"
        fits = to_dtype not in _WRAP or from_dtype == dtypes.bool or dtypes.is_int(from_dtype) and \
            dtypes.min(from_dtype) >= dtypes.min(to_dtype) and dtypes.max(from_dtype) <= dtypes.max(to_dtype)
        return converted if fits else _WRAP[to_dtype].format(converted)

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Reinterpret a scalar's bits: `bitcast<T>()` (32 bits), through a `vec2<f16>` (float16), a wrap (integers)."""
        if (source := from_dtype.scalar).itemsize != (target := to_dtype.scalar).itemsize:
            raise ValueError(f"BITCAST from {source} to {target}: the sizes differ")
        if source.itemsize == 4:
            return expression if source == target else f"bitcast<{self.render_dtype(target)}>({expression})"
        if source == dtypes.float16:  # through pack2x16float: naga rejects bitcasts between vec2<f16> and u32
            bits = f"pack2x16float(vec2<f32>(f32({expression}), 0.0f))"
            return bits if target == dtypes.uint16 else _WRAP[dtypes.int16].format(f"bitcast<i32>({bits})")
        if target == dtypes.float16:
            return f"f16(unpack2x16float(u32({expression}) & 0xFFFFu).x)"
        return self.render_cast(expression, source, target)

class _State:
    def __init__(self, uops: list[UOp]):  # atomic buffers are those of combining stores
        self.atomic_globals = {uop.src[0].src[0].arg for uop in uops if uop.op is Ops.STORE and uop.arg is not None
                               and uop.src[0].op is Ops.INDEX and uop.src[0].src[0].op is Ops.DEFINE_GLOBAL}
        self.module_lines, self.workgroup, self.workgroup_bytes = list[str](), [1, 1, 1], 0  # arrays, lidx sizes
        self.trips = dict[UOp, int]()  # RANGE -> its trip count (1 if unknown); open while in ctx.braces

def _define_var(ctx: RenderContext, x: UOp) -> str:
    name = ctx.variables[str(x.arg[0])] = "var_" + "".join(ch if ch.isalnum() else "_" for ch in str(x.arg[0]))
    return ctx.name(x, f"params.{name}")

def _special(ctx: RenderContext, x: UOp) -> str:
    label, axis, state = str(x.arg), int(str(x.arg)[-1]), ctx.state
    if label.startswith("lidx"):
        if not x.src or x.src[0].op is not Ops.CONST:
            raise ValueError(f"{label} needs a constant size to be a WGSL workgroup size")
        state.workgroup[axis], code = int(x.src[0].arg), f"i32(lid.{'xyz'[axis]})"
    elif ctx.local_ids:
        code = f"i32(group.{'xyz'[axis]})"
    elif label.startswith("gidx"):
        below = "".join(f" / params.size{inner}" for inner in range(axis))
        code = f"i32((flat{below}) % params.size{axis})" if axis < 2 else f"i32(flat{below})"
    else:
        raise ValueError(f"the WGSL renderer has no thread index {label!r} (only gidx0..2 and lidx0..2)")
    ctx.emit(f"let {label}: i32 = {code};")
    return ctx.name(x, label)

def _define_memory(ctx: RenderContext, x: UOp) -> str:  # a `var` array, of the module's workgroup memory for locals
    assert isinstance(pointer := x.dtype, PtrDType), f"{x.op} needs a pointer dtype, got {x.dtype}"
    size, register = max(pointer.size, 1), x.op is Ops.DEFINE_REG
    name = ctx.fresh("acc" if register else "temp")
    (ctx.emit if register else ctx.state.module_lines.append)(
        f"var{'' if register else '<workgroup>'} {name}: array<{ctx.renderer.render_dtype(pointer.base)}, {size}>;")
    ctx.state.workgroup_bytes += 0 if register else size * pointer.base.itemsize
    return ctx.name(x, name)

def _range(ctx: RenderContext, x: UOp) -> str:
    renderer, state, name, end = ctx.renderer, ctx.state, ctx.fresh("ridx"), ctx.expression(x.src[0])
    assert isinstance(renderer, WGSLRenderer)
    limit, size = renderer.max_loop_iterations, x.src[0].arg if x.src[0].op is Ops.CONST else None
    # a loop nested in others runs (product of the enclosing trip counts) x its own trip count times in a thread
    total = None if size is None else size * math.prod(state.trips[loop] for loop in ctx.braces)
    if limit is None or (total is not None and total <= limit):
        lines = [f"for (var {name}: i32 = 0; {name} < {end}; {name}++) {{"]
    else:  # the driver ends a loop after `limit` iterations in a thread: blocks of up to MAX_UNROLL steps it unrolls
        unroll = MAX_UNROLL if total is None else 1 << max(0, (-(-total // limit) - 1).bit_length())
        if unroll > MAX_UNROLL:
            raise RuntimeError(f"a loop of this kernel runs {total} times in one thread, but {renderer.adapter_name} "
                               f"ends loops after {limit} iterations, even unrolled {MAX_UNROLL} times: reduce in "
                               f"several steps (e.g. sum over a reshaped axis first) or use another device")
        if x.src[0] in ctx.inlined:  # the bound is written twice below: compute it once
            ctx.materialize(x.src[0])
            end = ctx.expression(x.src[0])
        lines = [f"for (var {name}_block: i32 = 0; {name}_block < {end}; {name}_block += {unroll}i) {{",
                 f"  for (var {name}_step: i32 = 0; {name}_step < {unroll}i; {name}_step++) {{",
                 f"    let {name}: i32 = {name}_block + {name}_step;", f"    if ({name} < {end}) {{"]
    _emit(ctx, lines)
    ctx.braces[x], state.trips[x] = sum(line.endswith("{") for line in lines), 1 if size is None else size
    ctx.depth += ctx.braces[x]
    return ctx.name(x, name)

def _index(ctx: RenderContext, x: UOp) -> str:  # loads and stores render the access (`_access`)
    if x.src[1] in ctx.inlined and ctx.uses.get(x, 0) > 1:  # an index used several times is computed once
        ctx.materialize(x.src[1])
    return ctx.name(x, f"&{ctx.expression(x.src[0])}[{ctx.expression(x.src[1])}]")

def _access(ctx: RenderContext, index: UOp) -> tuple[str, str, DType, str | None]:
    """The element at `index`, its kind ("plain", "atomic": of combining stores and packed words), dtype and gate (a
    packed buffer's INDEX is of its u32 words, from its start: wgsl_lowering)."""
    if index.op is not Ops.INDEX or not isinstance(index.src[0].dtype, PtrDType):
        raise ValueError(f"LOAD/STORE needs an INDEX into a buffer as its first source, got {index.op}")
    buffer, dtype, offset = index.src[0], index.src[0].dtype.base, ctx.expression(index.src[1])
    gate = ctx.expression(index.src[2]) if len(index.src) > 2 else None
    start = "" if buffer.op is not Ops.DEFINE_GLOBAL or dtype in PACKED_DTYPES else f"params.start{buffer.arg} + "
    atomic = buffer.op is Ops.DEFINE_GLOBAL and (buffer.arg in ctx.state.atomic_globals or dtype in PACKED_DTYPES)
    return f"{ctx.expression(buffer)}[{start}{offset}]", "atomic" if atomic else "plain", dtype, gate

def _emit(ctx: RenderContext, lines: list[str], gate: str | None = None) -> None:
    for line in lines if gate is None else [f"if ({gate}) {{", *["  " + line for line in lines], "}"]:
        ctx.emit(line)

def _refuse(message: str) -> NoReturn:
    raise ValueError(message)

def _load(ctx: RenderContext, x: UOp) -> str:
    (value, kind, dtype, gate), name = _access(ctx, x.src[0]), ctx.fresh("val")
    if kind == "atomic":
        value = f"bitcast<f32>(atomicLoad(&{value}))" if dtype == dtypes.float32 else f"atomicLoad(&{value})"
    declaration = f"{name}: {ctx.renderer.render_dtype(x.dtype)}"
    if gate is not None:  # sources of dtype void only order the load; the first other is the alternative
        alternative = next((ctx.expression(source) for source in x.src[1:] if source.dtype != dtypes.void), None)
        ctx.emit(f"var {declaration} = {alternative or ctx.renderer.render_const(0, x.dtype)};")
    _emit(ctx, [f"let {declaration} = {value};" if gate is None else f"{name} = {value};"], gate)
    return ctx.name(x, name)

def _store(ctx: RenderContext, x: UOp) -> str:
    (element, kind, dtype, gate), value = _access(ctx, x.src[0]), ctx.expression(x.src[1])
    if kind == "plain":
        lines = [f"{element} = {value};"]
    elif x.arg is None:
        lines = [f"atomicStore(&{element}, {f'bitcast<u32>({value})' if dtype == dtypes.float32 else value});"]
    elif dtype != dtypes.float32 and x.arg in ("add", "max", "min", "and", "or"):  # and, or: packed words
        lines = [f"atomic{str(x.arg).capitalize()}(&{element}, {value});"]
    else:  # a compare-exchange loop over the element's bits
        old, result, operand, is_float = ctx.fresh("old"), ctx.fresh("exchange"), ctx.fresh("operand"), \
            dtype == dtypes.float32
        combined = ctx.combine_code(str(x.arg), f"bitcast<f32>({old})" if is_float else old, operand, dtype)
        lines = [f"let {operand}: {ctx.renderer.render_dtype(dtype)} = {value};",
                 f"var {old} = atomicLoad(&{element});", "loop {",
                 f"  let {result} = atomicCompareExchangeWeak(&{element}, {old}, "
                 f"{f'bitcast<u32>({combined})' if is_float else combined});",
                 f"  if ({result}.exchanged) {{ break; }}", f"  {old} = {result}.old_value;", "}"]
    _emit(ctx, lines, gate)
    return ""

wgsl_rendering = text_rules([
    (UPat(Ops.DEFINE_VAR, name="x"), _define_var), (UPat(Ops.SPECIAL, name="x"), _special),
    (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _define_memory), (UPat(Ops.RANGE, name="x"), _range),
    (UPat(Ops.INDEX, name="x"), _index), (UPat(Ops.LOAD, name="x"), _load), (UPat(Ops.STORE, name="x"), _store),
    (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.bind(x, ctx.renderer.render_bitcast(  # an expression, inlined
        ctx.expression(x.src[0]), x.src[0].dtype.scalar, x.dtype.scalar))),
    (UPat(Ops.BARRIER), lambda ctx: None if ctx.local_ids else _refuse(
        "a BARRIER needs a workgroup layout (lidx thread indices): flat-mapped WGSL kernels return early and cannot "
        "synchronize")),
    (UPat(Ops.CAST, name="x"), lambda x: _refuse("the WGSL renderer has no pointer casts (vector memory access is not "
                                                 "used)") if isinstance(x.dtype, PtrDType) else None),
])
"""WGSL's own rules (thread indices, loops, memory, bitcasts, barriers), before the base's (buffers, ALU, casts)."""
WGSLRenderer.string_rewrite = wgsl_rendering + base_rendering

__all__ = ["WGSLRenderer", "KernelLayout", "UnsupportedDTypeError", "PACKED_DTYPES", "WORKGROUP_SIZE"]
