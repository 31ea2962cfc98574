"""The C renderer of the CPU device: GNU C (gcc and clang) with vector extensions, one function per kernel.

Kernels are `void name(buffers..., int vars..., int core_id)` (core_id only where SPECIAL "core_id" is used) with an
entry point taking the arguments as one array. Vector selects, maxima and comparisons are lane masks (GNU C vector
comparisons, all ones where true) and bitwise blends, which gcc and clang turn into one blend instruction; x86
builtins (masked loads, FMA, MAXPS/MINPS) sit behind macros that fall back to plain C on other targets.
"""
from __future__ import annotations

import os
from typing import Any

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import NUM_CPU_THREADS
from tinycore.renderer.cstyle import (
    BASE_CODE_FOR_OP,
    CStyleLanguage,
    RenderContext,
    RenderedPointer,
    atomic_rule,
    base_rendering,
    math_functions,
    render_load,
)
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import FUSED, GroupOp, Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

_HALF, F32, F64 = "_Float16", dtypes.float32, dtypes.float64


def _math(name: str, operands: list[str], dtype: DType) -> str:
    """A math builtin: the double version, the float one (f), half through float, an integer pow through double."""
    if dtype.scalar == dtypes.float16:
        return f"(({_HALF})__builtin_{name}f({','.join(f'(float)({operand})' for operand in operands)}))"
    if name == "pow" and not dtypes.is_float(dtype):
        call = f"__builtin_{name}({','.join(f'(double)({operand})' for operand in operands)})"
        return f"(({C_TYPE_MAP[dtype.scalar]}){call})"
    return f"__builtin_{name}{'' if dtype.scalar == F64 else 'f'}({','.join(operands)})"


C_TYPE_MAP: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: _HALF, dtypes.float32: "float", dtypes.float64: "double",
    dtypes.void: "void"}

_BF16_HELPERS = """#ifndef TC_BF16_HELPERS
#define TC_BF16_HELPERS
static inline float tc_bf16_to_f32(unsigned short bits) {
  unsigned int word = ((unsigned int)bits) << 16; float value; __builtin_memcpy(&value, &word, 4); return value;
}
static inline unsigned short tc_f32_to_bf16(float value) {
  unsigned int word; __builtin_memcpy(&word, &value, 4);
  if ((word & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((word >> 16) | 64u);
  word += 0x7fffu + ((word >> 16) & 1u); return (unsigned short)(word >> 16);
}
#endif"""


def _cpu_count() -> int:
    return NUM_CPU_THREADS.value or os.cpu_count() or 1


def _suffix(dtype: DType) -> str:
    """FLOAT8, DOUBLE, ...: how macros name a dtype."""
    return f"{dtype.scalar.name.upper()}{dtype.count if dtype.count > 1 else ''}"


def _choice(branches: list[tuple[str, list[str]]], fallback: list[str], guard: str | None = None) -> str:
    """Preprocessor lines defining macros by the first branch whose condition holds (x86 features), else
    `fallback`; inside `#ifndef guard` when given."""
    lines = [line for position, (condition, defines) in enumerate(branches)
             for line in [f"#{'el' if position else ''}if {condition}", *defines]]
    lines = [*lines, "#else", *fallback, "#endif"] if branches else fallback
    return "\n".join([f"#ifndef {guard}", *lines, "#endif"] if guard else lines)


def _on_x86(feature: str, clang: bool = False) -> str:
    return f"defined({feature}) && defined(__x86_64__)" + (" && defined(__clang__)" if clang else "")


# masked vector loads (a gate per lane): x86's masked loads read only the lanes whose mask is set and fault on none
# of the others (a row of a padded copy that starts in the padding may point before the buffer); other widths or
# targets read lane by lane behind each lane's test
_MASK_DTYPES = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_MASKED_LOAD_BUILTINS = {
    F32.vec(4): ("__AVX__", "__builtin_ia32_maskloadps((const float4*)(address), (mask))"),
    F32.vec(8): ("__AVX__", "__builtin_ia32_maskloadps256((const float8*)(address), (mask))"),
    F32.vec(16): ("__AVX512F__", "__builtin_ia32_loadups512_mask((const float*)(address), (float16){0}, "
                                 "__builtin_ia32_cmpd512_mask((mask), (int16){0}, 4, (unsigned short)-1))")}


def _masked_load_name(dtype: DType) -> str:
    """TC_MASKED_LOAD_<TYPE>: the macro that loads a `dtype` vector under a mask."""
    return f"TC_MASKED_LOAD_{_suffix(dtype)}"


def _masked_load_macro(dtype: DType) -> str:
    """TC_MASKED_LOAD_<TYPE>(address, mask) for one float vector dtype: the x86 masked load where the target has it,
    else a loop over the lanes (a GNU C statement expression) that reads a lane only where its mask is set."""
    name = _masked_load_name(dtype)
    loop = (f"#define {name}(address, mask) ({{ float{dtype.count} tc_lanes; for (int tc_lane = 0; tc_lane < "
            f"{dtype.count}; tc_lane++) tc_lanes[tc_lane] = (mask)[tc_lane] ? (address)[tc_lane] : 0.0f; tc_lanes; }})")
    feature, builtin = _MASKED_LOAD_BUILTINS.get(dtype, ("", ""))
    return _choice([(_on_x86(feature), [f"#define {name}(address, mask) {builtin}"])] if builtin else [], [loop], name)


def _lane_gated(uop: UOp) -> bool:
    """True for a LOAD whose INDEX has a bool vector gate (a masked load)."""
    index = uop.src[0] if uop.src else None
    return index is not None and index.op is Ops.INDEX and len(index.src) > 2 and index.src[2].dtype.count > 1


# fused multiply-adds (MULACC marked FUSED): x86 FMA builtins where the target has FMA, else a multiply and an add;
# kernels compile with -ffp-contract=off, so nothing else is fused. 512-bit builtins take a lane mask and rounding.
_FMA_BUILTINS = {"__FMA__": {F32.vec(8): "ia32_vfmaddps256", F32.vec(4): "ia32_vfmaddps", F32: "fmaf",
                             F64.vec(4): "ia32_vfmaddpd256", F64.vec(2): "ia32_vfmaddpd", F64: "fma"},
                 "__AVX512F__": {F32.vec(16): "ia32_vfmaddps512_mask", F64.vec(8): "ia32_vfmaddpd512_mask"}}
_WIDE_MASKS = {F32: "(unsigned short)-1", F64: "(unsigned char)-1"}  # all lanes of a 512-bit vector


def _fma_define(dtype: DType, builtin: str | None) -> str:
    tail = f", {_WIDE_MASKS[dtype.scalar]}, 4" if dtype.itemsize * dtype.count == 64 else ""
    code = f"__builtin_{builtin}((a), (b), (c){tail})" if builtin else "((a) * (b) + (c))"
    return f"#define TC_FMA_{_suffix(dtype)}(a, b, c) {code}"


_FMA_MACROS = _choice([], [_choice([(_on_x86(feature), [_fma_define(dtype, call) for dtype, call in table.items()])],
                                   [_fma_define(dtype, None) for dtype in table])
                           for feature, table in _FMA_BUILTINS.items()], "TC_FMA_FLOAT8")
_FMA_DTYPES = {dtype for table in _FMA_BUILTINS.values() for dtype in table}
# A vector load feeding several FMAs (one input vector of a convolution tile times 4 channels' weights) is kept in
# a register: else gcc 12 folds the load into each FMA as a memory operand, loading the same (often cache-line
# crossing) vector 4 times (conv2d 4 x 16 tile, one thread: 35-42 GFLOPS folded, 72-76 kept). The empty asm takes
# the value in a vector register ("v": all 32 AVX-512 registers, "x": the first 16) and emits no instruction.
_IN_REGISTER_MACRO = _choice([(f"defined(__x86_64__) && defined({feature})", [
    f'#define TC_IN_REGISTER(value) __asm__("" : "+{constraint}"(value))']) for feature, constraint in (
    ("__AVX512F__", "v"), ("__AVX__", "x"))], ["#define TC_IN_REGISTER(value) ((void)0)"], "TC_IN_REGISTER")
IN_REGISTER_MIN_FMAS = 2
"""Fused multiply-adds a vector load must feed before it is kept in a register (`_IN_REGISTER_MACRO`)."""


def _loads_kept_in_registers(uops: list[UOp]) -> set[UOp]:
    """Float vector loads of at most 64 bytes that feed at least IN_REGISTER_MIN_FMAS fused multiply-adds."""
    fmas: dict[UOp, int] = {}
    for uop in uops:
        if uop.op is Ops.MULACC and uop.arg == FUSED:
            for source in set(uop.src):
                if source.op is Ops.LOAD and source.dtype.count > 1 and dtypes.is_float(source.dtype.scalar) and \
                        source.dtype.itemsize * source.dtype.count <= 64:
                    fmas[source] = fmas.get(source, 0) + 1
    return {load for load, count in fmas.items() if count >= IN_REGISTER_MIN_FMAS}


# MAXPS/MINPS: x86's vmaxps(a, b) is exactly `b < a ? a : b` per lane (b where either is NaN or for -0 and +0),
# vminps(a, b) `a < b ? a : b`, so such a select is one instruction; elsewhere the macro is the blend it replaces.
# The 512-bit builtins differ: clang's take a rounding argument, gcc's also a pass-through source and a lane mask.
_MIN_MAX = {F32.vec(8): ("__AVX__", "ps256"), F32.vec(4): ("__SSE__", "ps"), F64.vec(4): ("__AVX__", "pd256"),
            F64.vec(2): ("__SSE2__", "pd"), F32.vec(16): ("__AVX512F__", "ps512"), F64.vec(8): ("__AVX512F__", "pd512")}


def _min_max_macros(dtype: DType) -> str:
    """The TC_MAX_/TC_MIN_ macros of one vector dtype: the x86 builtin where the target has it, else the blend."""
    (feature, builtin), suffix = _MIN_MAX[dtype], _suffix(dtype)
    def defines(arguments: str, tail: str = "") -> list[str]:
        return [f"#define TC_{kind}_{suffix}(a, b, blend) __builtin_ia32_{kind.lower()}{builtin}{tail}({arguments})"
                for kind in ("MAX", "MIN")]
    branches = [(_on_x86(feature, clang=True), defines("(a), (b), 4")), (_on_x86(feature), defines(
        f"(a), (b), (a), {_WIDE_MASKS[dtype.scalar]}, 4", "_mask"))] if dtype.count * dtype.itemsize == 64 else \
        [(_on_x86(feature), defines("(a), (b)"))]
    return _choice(branches, [f"#define TC_{kind}_{suffix}(a, b, blend) (blend)" for kind in ("MAX", "MIN")],
                   f"TC_MAX_{suffix}")


def _load(ctx: RenderContext, x: UOp) -> str:
    """A load as the base renders it, or masked where its gate is a bool vector; one feeding several FMAs is then
    kept in a register (`_IN_REGISTER_MACRO`)."""
    name = _masked_load(ctx, x) if _lane_gated(x) else render_load(ctx, x)
    if x in ctx.state:
        ctx.emit(f"TC_IN_REGISTER({name});")
    return name


def _masked_load(ctx: RenderContext, x: UOp) -> str:
    """`TC_MASKED_LOAD_<TYPE>(address, mask)`: the lanes whose gate is true, zero elsewhere (no memory read there),
    then the load's alternative blended into those lanes unless it is zero."""
    pointer, count = ctx.pointer_of(x.src[0]), x.dtype.count
    mask = _mask_of(ctx, x.src[0].src[2], x.dtype.scalar.itemsize, count)
    ctx.note(x.dtype)
    value = f"{_masked_load_name(x.dtype)}({pointer.address()}, {mask})"
    alternatives = [source for source in x.src[1:] if source.dtype != dtypes.void]
    lanes = (alternatives[0].src if alternatives[0].op is Ops.VECTORIZE else alternatives[:1]) if alternatives else ()
    if not all(lane.op is Ops.CONST and lane.arg == 0 for lane in lanes):
        loaded = ctx.fresh("val")
        ctx.emit(f"{ctx.renderer.render_dtype(x.dtype)} {loaded} = {value};")
        value = _blend(ctx, mask, loaded, _whole(ctx, alternatives[0], count), x.dtype)
    return ctx.declare(x, value, "val")


def _vector_lanes(ctx: RenderContext, dtype: DType) -> bool:
    """True for vectors blended and compared whole (not bool, bfloat16 or a narrow dtype)."""
    return dtype.count > 1 and dtype.scalar not in (dtypes.bool, dtypes.bfloat16, *ctx.renderer.narrow_dtypes) and \
        dtype.scalar.itemsize in _MASK_DTYPES


def _whole(ctx: RenderContext, uop: UOp, count: int) -> str:
    """`uop` as a vector expression of `count` lanes (constants and scalars broadcast)."""
    text = ctx.expression(uop)
    return ctx.renderer.render_vector(uop.dtype.scalar.vec(count), [text] * count) \
        if uop.op is Ops.CONST or uop.dtype.count == 1 else text


def _materialized(ctx: RenderContext, uop: UOp, count: int) -> str:
    """`uop` as a vector variable (an operand the code repeats)."""
    if uop in ctx.inlined:
        ctx.materialize(uop)
    if uop.op is not Ops.CONST and uop.dtype.count > 1:
        return ctx.expression(uop)
    name = ctx.fresh("alu")
    ctx.emit(f"{ctx.renderer.render_dtype(uop.dtype.scalar.vec(count))} {name} = {_whole(ctx, uop, count)};")
    return name


def _mask_variable(ctx: RenderContext, code: str, lane_dtype: DType) -> str:
    """A variable holding the mask `code` with lanes as wide as those of `lane_dtype`."""
    mask_dtype = _MASK_DTYPES[lane_dtype.scalar.itemsize].vec(lane_dtype.count)
    ctx.note(mask_dtype)
    name = ctx.fresh("mask")
    ctx.emit(f"{ctx.renderer.render_dtype(mask_dtype)} {name} = {code};")
    return name


def _mask_of(ctx: RenderContext, uop: UOp, lane_bytes: int, count: int) -> str:
    """A variable or expression holding `uop` (a bool vector) as a mask with lanes of `lane_bytes` bytes."""
    mask_dtype = _MASK_DTYPES[lane_bytes].vec(count)
    ctx.note(mask_dtype)
    type_name = ctx.renderer.render_dtype(mask_dtype)
    if uop in ctx.masks:
        text, dtype = ctx.masks[uop]
        if dtype.itemsize == lane_bytes:
            return text
        code = f"__builtin_convertvector({text}, {type_name})"
    elif uop.op is Ops.CONST:
        code = ctx.renderer.render_vector(mask_dtype, ["-1" if uop.arg else "0"] * count)
    else:
        code = f"(-__builtin_convertvector({_whole(ctx, uop, count)}, {type_name}))"
    return _mask_variable(ctx, code, mask_dtype)


def _bind_mask(ctx: RenderContext, uop: UOp, code: str, lane_dtype: DType) -> str:
    """Declare the mask `code` for the bool vector `uop`; read as bools it is converted to 0/1 bytes."""
    mask_dtype = _MASK_DTYPES[lane_dtype.scalar.itemsize].vec(uop.dtype.count)
    ctx.masks[uop] = (_mask_variable(ctx, code, mask_dtype), mask_dtype.scalar)
    return ctx.name(uop, f"__builtin_convertvector(-{ctx.masks[uop][0]}, {ctx.renderer.render_dtype(uop.dtype)})")


def _blend(ctx: RenderContext, mask: str, when_true: str, when_false: str, dtype: DType) -> str:
    """Lanes of `when_true` where `mask` is set, of `when_false` elsewhere (bitwise, exact for every value)."""
    bits = ctx.renderer.render_dtype(_MASK_DTYPES[dtype.scalar.itemsize].vec(dtype.count))
    return f"(({ctx.renderer.render_dtype(dtype)})((({bits}){when_true}&{mask})|(({bits}){when_false}&~{mask})))"


def _min_max(kind: str, first: str, second: str, blend: str, dtype: DType) -> str:
    """`kind` ("MAX" or "MIN") of two vectors in x86's operand order, falling back to `blend`."""
    return f"TC_{kind}_{_suffix(dtype)}({first}, {second}, {blend})" if dtype in _MIN_MAX else blend


def _vector_where(ctx: RenderContext, x: UOp) -> str | None:
    """A vector select: `?:` under one scalar (or uniform) condition, else a blend over the mask (MIN/MAX where the
    select is a minimum or a maximum)."""
    if not _vector_lanes(ctx, x.dtype):
        return None
    count, (condition, when_true_uop, when_false_uop) = x.dtype.count, x.src
    when_true, when_false = _whole(ctx, when_true_uop, count), _whole(ctx, when_false_uop, count)
    uniform = condition.op is Ops.VECTORIZE and all(lane is condition.src[0] for lane in condition.src)
    if condition.dtype.count == 1 or uniform:
        return ctx.bind(x, f"({ctx.expression(condition.src[0] if uniform else condition)}?{when_true}:{when_false})")
    mask = _mask_of(ctx, condition, x.dtype.scalar.itemsize, count)
    blend = _blend(ctx, mask, when_true, when_false, x.dtype)
    if condition.op is Ops.CMPLT and condition.src[0].dtype == x.dtype:  # (x < y) ? x : y is a minimum, lane for lane
        kind = {x.src[2:0:-1]: "MAX", x.src[1:]: "MIN"}.get(condition.src)
        blend = _min_max(kind, when_true, when_false, blend, x.dtype) if kind else blend
    return ctx.bind(x, blend)


def _fused_multiply_add(ctx: RenderContext, x: UOp) -> str | None:
    if x.arg != FUSED or x.dtype not in _FMA_DTYPES:
        return None
    count = x.dtype.count
    operands = ", ".join(_whole(ctx, source, count) if count > 1 else ctx.expression(source) for source in x.src)
    return ctx.bind(x, f"TC_FMA_{_suffix(x.dtype)}({operands})")


def _vector_max(ctx: RenderContext, x: UOp) -> str | None:
    if not _vector_lanes(ctx, x.dtype):
        return None
    left, right = _materialized(ctx, x.src[0], x.dtype.count), _materialized(ctx, x.src[1], x.dtype.count)
    mask = _mask_variable(ctx, f"({left}<{right})", x.dtype)
    return ctx.bind(x, _min_max("MAX", right, left, _blend(ctx, mask, right, left, x.dtype), x.dtype))


_MASK_SYMBOLS = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}


def _mask_op(ctx: RenderContext, x: UOp) -> str | None:
    """A comparison of whole vectors, or logic on masks, as a mask."""
    if x.dtype.count == 1:
        return None
    if x.op in GroupOp.Comparison and _vector_lanes(ctx, x.src[0].dtype):
        reference, (left, right) = x.src[0].dtype, (_whole(ctx, source, x.dtype.count) for source in x.src)
    elif x.op not in GroupOp.Comparison and x.dtype.scalar == dtypes.bool and any(s in ctx.masks for s in x.src):
        reference = next(ctx.masks[source][1] for source in x.src if source in ctx.masks)
        left, right = (_mask_of(ctx, source, reference.itemsize, x.dtype.count) for source in x.src)
    else:
        return None
    return _bind_mask(ctx, x, f"({left}{_MASK_SYMBOLS[x.op]}{right})", reference)


def _mask_lane(ctx: RenderContext, x: UOp) -> str | None:
    """A lane of a mask read as a bool (0 or 1)."""
    if x.src[0] not in ctx.masks or len(x.arg) != 1:
        return None
    return ctx.name(x, f"(-{ctx.masks[x.src[0]][0]}[{x.arg[0]}])")


def _atomic(ctx: RenderContext, pointer: RenderedPointer, value: str, dtype: DType, reduce: str) -> str:
    """GCC's __atomic builtins: fetch-add for integer sums, else a compare-exchange loop over the combine (the generic
    builtins compare bytes, so floats, halves and bfloat16 bits work alike)."""
    address = f"&{pointer.buffer}[{pointer.index}]" if pointer.index is not None else pointer.buffer
    if reduce == "add" and dtypes.is_int(dtype) and dtype != dtypes.bool:
        return f"__atomic_fetch_add({address}, {value}, __ATOMIC_RELAXED);"
    type_name = ctx.renderer.render_dtype(dtype)
    target, operand, old, new = (ctx.fresh(prefix) for prefix in ("target", "operand", "old", "new"))
    return (f"{{ {type_name}* {target} = {address}; {type_name} {operand} = {value}; {type_name} {old}, {new}; "
            f"__atomic_load({target}, &{old}, __ATOMIC_RELAXED); do {{ {new} = "
            f"{ctx.combine_code(reduce, old, operand, dtype)}; }} while (!__atomic_compare_exchange({target}, &{old}, "
            f"&{new}, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); }}")


def _whole_vector_select(ctx: RenderContext, x: UOp) -> str | None:
    """A vector of WHEREs sharing one scalar condition as one select of whole vectors, `(c ? v : (float4){1,1,1,1})`,
    rather than a vector literal of per-lane selects: gcc 12 with AVX-512 (-march=native) crashes on, or
    miscompiles, the per-lane form (a cumulative product's masked lanes came out 1). Other vectors: the base rule."""
    sources = x.src
    if x.dtype.scalar in (dtypes.bool, dtypes.bfloat16, *ctx.renderer.narrow_dtypes) or \
            not all(source.op is Ops.WHERE for source in sources):
        return None
    if (condition := sources[0].src[0]).dtype.count != 1 or any(source.src[0] is not condition for source in sources):
        return None
    branches = []
    for position in (1, 2):
        values = [source.src[position] for source in sources]
        if all(value is values[0] for value in values):
            branches.append(ctx.renderer.render_vector(x.dtype, [ctx.expression(values[0])] * len(values)))
            continue
        vector = values[0].src[0] if values[0].op is Ops.GEP else None
        if vector is None or vector.dtype != x.dtype or any(
                value.op is not Ops.GEP or value.src[0] is not vector or value.arg != (lane,)
                for lane, value in enumerate(values)):
            return None
        branches.append(ctx.expression(vector))
    return ctx.bind(x, f"({ctx.expression(condition)}?{branches[0]}:{branches[1]})")


def _widening_cast(ctx: RenderContext, x: UOp) -> str | None:
    """Widening a vector of 8- or 16-bit integers as a literal of its lanes: gcc 12 compiles
    __builtin_convertvector(uchar8, int8) one byte at a time (about 20 instructions), the lane literal as one
    vpmovzxbd. To float, the lanes widen to int32 first and convert as a whole vector."""
    source, dtype, from_scalar = x.src[0], x.dtype, x.src[0].dtype.scalar
    if isinstance(dtype, PtrDType) or dtype.count == 1 or not dtypes.is_int(from_scalar) or \
            from_scalar == dtypes.bool or from_scalar.itemsize >= 4:
        return None
    widen_to = dtype.scalar if dtypes.is_int(dtype.scalar) and dtype.scalar.itemsize > from_scalar.itemsize else \
        dtypes.int32 if dtype.scalar in (F32, F64) else None
    if widen_to is None:
        return None
    if widen_to != dtype.scalar:
        ctx.note(dtypes.int32.vec(dtype.count))
    lanes = ctx.renderer.render_vector(widen_to.vec(dtype.count), [ctx.scalar_cast(
        ctx.lane(source, lane), from_scalar, widen_to) for lane in range(dtype.count)])
    return ctx.bind(x, lanes if widen_to == dtype.scalar else
                    f"__builtin_convertvector({lanes}, {ctx.renderer.render_dtype(dtype)})")


c_rendering = text_rules([
    (UPat(Ops.WHERE, name="x"), _vector_where),
    (UPat(Ops.MULACC, name="x"), _fused_multiply_add),
    (UPat(Ops.MAX, name="x"), _vector_max),
    (UPat(tuple(_MASK_SYMBOLS), name="x"), _mask_op),
    (UPat(Ops.GEP, name="x"), _mask_lane),
    (UPat(Ops.LOAD, name="x"), _load),
    (UPat(Ops.STORE, name="x"), atomic_rule(_atomic)),
    (UPat(Ops.VECTORIZE, name="x"), _whole_vector_select),
    (UPat(Ops.CAST, name="x"), _widening_cast),
])
"""The C renderer's own rules, before the base's: lane masks and blends, fused multiply-adds, masked loads and
loads kept in registers, atomic updates, whole-vector selects and widening casts."""


class CRenderer(CStyleLanguage):
    """GNU C for the host CPU: vector_size vectors, _Float16 halves, bfloat16 as bits, restrict pointers."""

    device, suffix, has_local, has_shared, has_threads = "CPU", "c", False, False, True
    global_max, local_max, shared_max = None, None, 0
    buffer_suffix, infinity, nan = " restrict", "__builtin_inff()", "__builtin_nanf(\"\")"
    type_map = C_TYPE_MAP
    code_for_op = {**BASE_CODE_FOR_OP, **math_functions(lambda name, x, dtype: _math(name, [x], dtype)),
                   Ops.POW: lambda base, exponent, dtype: _math("pow", [base, exponent], dtype)}
    vector_format, vector_cast = "({type}){{{items}}}", "__builtin_convertvector({x}, {type})"
    string_rewrite = c_rendering + base_rendering
    vector_alu_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR,
                                Ops.SHL, Ops.SHR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.CAST,
                                Ops.BITCAST})
    vector_masks = True
    masked_load_dtypes = frozenset({F32})  # _masked_load_macro
    decompose_transcendentals = True  # float32 exp2/log2 as arithmetic: a libm call per element stops vectorizing
    matmul_panel_bytes = 64  # the columns of the matmul register tile (set per target in __init__)
    fused_multiply_add = True  # FMA where the target has it (_FMA_MACROS), a multiply and an add else
    vector_widths: dict[DType, tuple[int, ...]] = {
        dtype: (2, 4, 8) if dtype.itemsize == 8 else (2, 4, 8, 16) for dtype in (
            F32, dtypes.int32, dtypes.uint32, F64, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.int16,
            dtypes.uint16, dtypes.int8, dtypes.uint8, dtypes.bool)}
    atomic_dtypes = frozenset(dtype for dtype in C_TYPE_MAP if dtype != dtypes.void) | {dtypes.bfloat16}

    def __init__(self, device: str = "CPU", arch: str | None = None):
        from tiny_cpu.target import c_vector_bytes, host_core_cache_bytes, matmul_panel_bytes
        self.device, self.arch, self.global_max = device, arch, (_cpu_count(), 1, 1)
        # AVX-512 targets get 16-lane float vectors and 64-column matmul panels (tiny_cpu/target.py)
        self.preferred_vector_bytes = c_vector_bytes(arch)
        self.matmul_panel_bytes = matmul_panel_bytes(self.preferred_vector_bytes)
        # the host's L2 sizes matmul row groups; a kernel compiled for another `arch` keeps the default groups
        self.core_cache_bytes = host_core_cache_bytes() if arch is None else None

    def render_dtype(self, dtype: DType) -> str:
        """Bool vectors are vectors of unsigned char (0 or 1 per lane)."""
        if dtype.count > 1 and dtype.scalar == dtypes.bool and not isinstance(dtype, PtrDType):
            return f"bool{dtype.count}"
        return super().render_dtype(dtype)

    def render_pointer_type(self, dtype: DType, addrspace: str) -> str:
        """Vector accesses go through the unaligned, may-alias variant of the vector type."""
        return f"{self.render_dtype(dtype)}_u*" if dtype.count > 1 else f"{self.render_dtype(dtype)}*"

    def context_state(self, uops: list[UOp]) -> set[UOp]:
        """The loads kept in registers (`_loads_kept_in_registers`)."""
        return _loads_kept_in_registers(uops)

    def extra_parameters(self, uops: list[UOp]) -> list[str]:
        """`const int core_id` when the program splits its work across CPU workers."""
        return ["const int core_id"] if any(uop.op is Ops.SPECIAL and uop.arg == "core_id" for uop in uops) else []

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Vector typedefs (aligned for values, unaligned may-alias for memory access), bfloat16 helpers and the
        macros of the x86 builtins the kernel uses."""
        lines = []
        for dtype in sorted((dtype for dtype in used_dtypes if dtype.count > 1), key=lambda d: (d.scalar, d.count)):
            if dtype.scalar == dtypes.bfloat16 and not self.native_bfloat16:
                raise ValueError("vectors of bfloat16 are not supported by the C renderer: use scalar bfloat16")
            scalar = "unsigned char" if dtype.scalar == dtypes.bool else self.storage_type(dtype.scalar)
            name, size = self.render_dtype(dtype), dtype.itemsize * dtype.count
            if size & (size - 1):
                raise ValueError(f"vector {dtype} has {dtype.count} lanes; the C renderer needs a power of two")
            lines += [f"typedef {scalar} {name} __attribute__((vector_size({size})));", f"typedef {scalar} {name}_u "
                      f"__attribute__((vector_size({size}), aligned({dtype.itemsize}), __may_alias__));"]
        lines += [_BF16_HELPERS] * (dtypes.bfloat16 in used_dtypes and not self.native_bfloat16)
        if any(uop.op is Ops.MULACC and uop.arg == FUSED for uop in uops):
            lines += [_FMA_MACROS] + [_IN_REGISTER_MACRO] * bool(_loads_kept_in_registers(uops))
        masked = {uop.dtype for uop in uops if uop.op is Ops.LOAD and _lane_gated(uop)}
        lines += [_masked_load_macro(dtype) for dtype in sorted(masked, key=lambda vector: vector.count)]
        selected = {uop.dtype for uop in uops if uop.op in (Ops.MAX, Ops.WHERE)}
        return lines + [_min_max_macros(dtype) for dtype in _MIN_MAX if dtype in selected]

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str],
                      attributes: str = "") -> str:
        """An exported C function and its entry point for the command queue and the worker pool (see entry_point)."""
        core_id = bool(parameters) and parameters[-1] == "const int core_id"
        lines = prelude + [f"void {name}({', '.join(parameters)}) {{"] + body + ["}"]
        return "\n".join(lines + [entry_point(name, parameters[:-1] if core_id else parameters, core_id)]) + "\n"


def entry_point(name: str, parameters: list[str], takes_core_id: bool = True) -> str:
    """`void NAME_entry(const long long *arguments, int core_id)`: calls kernel `name` with its buffer addresses and
    variable values unpacked from one array (the uniform calling convention of the command queue and the worker
    pool, see pool.py); `core_id` is passed on when the kernel takes it."""
    arguments = []
    for position, parameter in enumerate(parameters):
        declared_type = parameter.rsplit(" ", 1)[0].replace(" restrict", "")
        arguments.append(f"({declared_type})(__INTPTR_TYPE__)arguments[{position}]" if declared_type.endswith("*")
                         else f"(int)arguments[{position}]")
    unpacked = ", ".join([*arguments, "core_id"] if takes_core_id else arguments)
    return f"void {name}_entry(const long long *arguments, const int core_id) {{ {name}({unpacked}); }}"


def make_c_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The CPU's C renderer and its compiler ($CC, gcc or clang), for `device` and an optional -march `arch`."""
    from tiny_cpu.compiler import ClangCompiler
    return CRenderer(device, arch), ClangCompiler(arch)
