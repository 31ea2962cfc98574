"""The C renderer of the CPU device: GNU C (gcc and clang) with vector extensions, one function per kernel.

Kernels are `void name(buffers..., int vars..., int core_id)`; `core_id` is declared only when the program uses
SPECIAL "core_id" (the runtime always passes it as the trailing argument; an unused trailing int argument is
harmless in the C calling conventions of the supported hosts).
"""
from __future__ import annotations

import os
from typing import Any

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import NUM_CPU_THREADS
from tinycore.renderer.cstyle import (
    BASE_CODE_FOR_OP,
    CodeForOp,
    CStyleLanguage,
    RenderContext,
    base_rendering,
    render_load,
)
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import FUSED, GroupOp, Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

_HALF = "_Float16"


def _math_function(name: str) -> CodeForOp:
    """A unary math builtin with the float / double name and half computed in float."""
    def code(operand: str, dtype: DType) -> str:
        if dtype.scalar == dtypes.float64:
            return f"__builtin_{name}({operand})"
        if dtype.scalar == dtypes.float16:
            return f"(({_HALF})__builtin_{name}f((float)({operand})))"
        return f"__builtin_{name}f({operand})"
    return code


def _pow(base: str, exponent: str, dtype: DType) -> str:
    if dtype.scalar == dtypes.float64:
        return f"__builtin_pow({base},{exponent})"
    if dtype.scalar == dtypes.float16:
        return f"(({_HALF})__builtin_powf((float)({base}),(float)({exponent})))"
    if not dtypes.is_float(dtype):
        return f"(({CRenderer.type_map[dtype.scalar]})__builtin_pow((double)({base}),(double)({exponent})))"
    return f"__builtin_powf({base},{exponent})"


C_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    **BASE_CODE_FOR_OP,
    Ops.EXP2: _math_function("exp2"), Ops.LOG2: _math_function("log2"), Ops.SIN: _math_function("sin"),
    Ops.SQRT: _math_function("sqrt"), Ops.TRUNC: _math_function("trunc"), Ops.POW: _pow,
}

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


def _whole_vector_select(ctx: RenderContext, x: UOp) -> str | None:
    """A vector of WHEREs sharing one scalar condition as one select of whole vectors, `(c ? v : (float4){1,1,1,1})`,
    rather than a vector literal of per-lane selects: gcc 12 with AVX-512 (-march=native) crashes on, or
    miscompiles, the per-lane form (a cumulative product's masked lanes came out 1). Other vectors: the base rule."""
    sources = x.src
    if x.dtype.scalar in (dtypes.bool, dtypes.bfloat16) or x.dtype.scalar in ctx.renderer.narrow_dtypes:
        return None
    if not all(source.op is Ops.WHERE for source in sources):
        return None
    condition = sources[0].src[0]
    if condition.dtype.count != 1 or any(source.src[0] is not condition for source in sources):
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
    source, dtype = x.src[0], x.dtype
    from_dtype = source.dtype
    if isinstance(dtype, PtrDType) or dtype.count == 1 or not dtypes.is_int(from_dtype.scalar) or \
            from_dtype.scalar == dtypes.bool or from_dtype.scalar.itemsize >= 4:
        return None
    if dtypes.is_int(dtype.scalar) and dtype.scalar.itemsize > from_dtype.scalar.itemsize:
        items = [ctx.scalar_cast(ctx.lane(source, lane), from_dtype.scalar, dtype.scalar)
                 for lane in range(dtype.count)]
        return ctx.bind(x, ctx.renderer.render_vector(dtype, items))
    if dtypes.is_float(dtype.scalar) and dtype.scalar in (dtypes.float32, dtypes.float64):
        wide = dtypes.int32.vec(dtype.count)
        ctx.note(wide)
        lanes = [ctx.scalar_cast(ctx.lane(source, lane), from_dtype.scalar, dtypes.int32)
                 for lane in range(dtype.count)]
        return ctx.bind(x, f"__builtin_convertvector({ctx.renderer.render_vector(wide, lanes)}, "
                           f"{ctx.renderer.render_dtype(dtype)})")
    return None


def _atomic_update(ctx: RenderContext, x: UOp) -> str | None:
    """GCC's __atomic builtins: fetch-add for integer sums, else a compare-exchange loop over the combine (the generic
    builtins compare bytes, so floats, halves and bfloat16 bits work alike)."""
    if x.arg is None:
        return None
    pointer, value, reduce = ctx.pointer_of(x.src[0]), x.src[1], str(x.arg)
    dtype = value.dtype
    address = f"&{pointer.buffer}[{pointer.index}]" if pointer.index is not None else pointer.buffer
    if reduce == "add" and dtypes.is_int(dtype) and dtype != dtypes.bool:
        ctx.emit(ctx.gated(pointer, f"__atomic_fetch_add({address}, {ctx.expression(value)}, __ATOMIC_RELAXED);"))
        return ""
    type_name = ctx.renderer.render_dtype(dtype)
    target, operand, old, new = (ctx.fresh(prefix) for prefix in ("target", "operand", "old", "new"))
    combined = ctx.combine_code(reduce, old, operand, dtype)
    ctx.emit(ctx.gated(pointer, f"{{ {type_name}* {target} = {address}; {type_name} {operand} = "
                                f"{ctx.expression(value)}; {type_name} {old}, {new}; __atomic_load({target}, &{old}, "
                                f"__ATOMIC_RELAXED); do {{ {new} = {combined}; }} while (!__atomic_compare_exchange("
                                f"{target}, &{old}, &{new}, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); }}"))
    return ""


_MASK_DTYPES = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
# masked vector loads (a gate per lane, RendererContract.masked_load_dtypes): x86's masked loads read only the lanes
# whose mask is set and fault on none of the others (a row of a padded copy that starts in the padding may point
# before the buffer). gcc and clang share these builtins' names; elsewhere each lane is read behind its own test.
_MASKED_LOAD_MACROS = {
    dtypes.float32.vec(4): ("__AVX__", "__builtin_ia32_maskloadps((const float4*)(address), (mask))"),
    dtypes.float32.vec(8): ("__AVX__", "__builtin_ia32_maskloadps256((const float8*)(address), (mask))"),
    dtypes.float32.vec(16): ("__AVX512F__", "__builtin_ia32_loadups512_mask((const float*)(address), (float16){0}, "
                                            "__builtin_ia32_cmpd512_mask((mask), (int16){0}, 4, (unsigned short)-1))")}
"""The x86 masked loads by vector dtype; other widths (two lanes, or a target without the feature) read lane by
lane behind each lane's test."""


def _masked_load_name(dtype: DType) -> str:
    """TC_MASKED_LOAD_<TYPE>: the macro that loads a `dtype` vector under a mask."""
    return f"TC_MASKED_LOAD_{dtype.scalar.name.upper()}{dtype.count}"


def _lane_gated(uop: UOp) -> bool:
    """True for a LOAD whose INDEX has a bool vector gate (a masked load)."""
    index = uop.src[0] if uop.src else None
    return index is not None and index.op is Ops.INDEX and len(index.src) > 2 and index.src[2].dtype.count > 1


def _masked_load_macro(dtype: DType) -> str:
    """TC_MASKED_LOAD_<TYPE>(address, mask) for one float vector dtype: the x86 masked load where the target has it,
    else a loop over the lanes (a GNU C statement expression) that reads a lane only where its mask is set."""
    name, type_name = _masked_load_name(dtype), f"float{dtype.count}"
    lane_loop = (f"#define {name}(address, mask) ({{ {type_name} tc_lanes; for (int tc_lane = 0; "
                 f"tc_lane < {dtype.count}; tc_lane++) tc_lanes[tc_lane] = (mask)[tc_lane] ? "
                 f"(address)[tc_lane] : 0.0f; tc_lanes; }})")
    if dtype not in _MASKED_LOAD_MACROS:
        return "\n".join([f"#ifndef {name}", lane_loop, "#endif"])
    feature, builtin = _MASKED_LOAD_MACROS[dtype]
    return "\n".join([f"#ifndef {name}", f"#if defined({feature}) && defined(__x86_64__)",
                      f"#define {name}(address, mask) {builtin}", "#else", lane_loop, "#endif", "#endif"])
# fused multiply-adds (MULACC marked FUSED): x86 FMA builtins where the target has FMA (gcc and clang share their
# names), else a multiply and an add; kernels compile with -ffp-contract=off, so nothing else is fused
_FUSED_MULTIPLY_ADD = {dtypes.float32.vec(16): "TC_FMA_FLOAT16", dtypes.float64.vec(8): "TC_FMA_DOUBLE8",
                       dtypes.float32.vec(8): "TC_FMA_FLOAT8", dtypes.float32.vec(4): "TC_FMA_FLOAT4",
                       dtypes.float32: "TC_FMA_FLOAT", dtypes.float64.vec(4): "TC_FMA_DOUBLE4",
                       dtypes.float64.vec(2): "TC_FMA_DOUBLE2", dtypes.float64: "TC_FMA_DOUBLE"}
_FUSED_MULTIPLY_ADD_MACROS = """#ifndef TC_FMA_FLOAT8
#if defined(__FMA__) && defined(__x86_64__)
#define TC_FMA_FLOAT8(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define TC_FMA_FLOAT4(a, b, c) __builtin_ia32_vfmaddps((a), (b), (c))
#define TC_FMA_FLOAT(a, b, c) __builtin_fmaf((a), (b), (c))
#define TC_FMA_DOUBLE4(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#define TC_FMA_DOUBLE2(a, b, c) __builtin_ia32_vfmaddpd((a), (b), (c))
#define TC_FMA_DOUBLE(a, b, c) __builtin_fma((a), (b), (c))
#else
#define TC_FMA_FLOAT8(a, b, c) ((a) * (b) + (c))
#define TC_FMA_FLOAT4(a, b, c) ((a) * (b) + (c))
#define TC_FMA_FLOAT(a, b, c) ((a) * (b) + (c))
#define TC_FMA_DOUBLE4(a, b, c) ((a) * (b) + (c))
#define TC_FMA_DOUBLE2(a, b, c) ((a) * (b) + (c))
#define TC_FMA_DOUBLE(a, b, c) ((a) * (b) + (c))
#endif
#if defined(__AVX512F__) && defined(__x86_64__)
#define TC_FMA_FLOAT16(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (unsigned short)-1, 4)
#define TC_FMA_DOUBLE8(a, b, c) __builtin_ia32_vfmaddpd512_mask((a), (b), (c), (unsigned char)-1, 4)
#else
#define TC_FMA_FLOAT16(a, b, c) ((a) * (b) + (c))
#define TC_FMA_DOUBLE8(a, b, c) ((a) * (b) + (c))
#endif
#endif"""
# A vector load feeding several fused multiply-adds (one input vector of a convolution tile times 4 channels'
# weights) is kept in a register: without this, gcc 12 folds the load into each FMA as a memory operand, loading the
# same (often cache-line crossing) vector 4 times, and the tile runs on the load ports (conv2d 4 x 16 tile, one
# thread: 35-42 GFLOPS folded, 72-76 kept; clang keeps it by itself). The empty asm takes the value in an SSE/AVX
# register and gives it back, which the compiler cannot see through; it emits no instruction. "v" admits all 32
# AVX-512 registers (and the zmm a 64-byte vector needs), "x" only the first 16.
_IN_REGISTER_MACRO = """#ifndef TC_IN_REGISTER
#if defined(__x86_64__) && defined(__AVX512F__)
#define TC_IN_REGISTER(value) __asm__("" : "+v"(value))
#elif defined(__x86_64__) && defined(__AVX__)
#define TC_IN_REGISTER(value) __asm__("" : "+x"(value))
#else
#define TC_IN_REGISTER(value) ((void)0)
#endif
#endif"""
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


# MAXPS/MINPS-style maxima and minima: x86's vmaxps(a, b) is exactly `b < a ? a : b` per lane (b where either is NaN,
# b for equal lanes such as -0 and +0), vminps(a, b) `a < b ? a : b`, so a select of that form is one instruction
# instead of a compare and a blend; elsewhere the macro is the blend it replaces (its third argument)
_MIN_MAX = {dtypes.float32.vec(8): ("FLOAT8", "__AVX__", "ps256"),
            dtypes.float32.vec(4): ("FLOAT4", "__SSE__", "ps"),
            dtypes.float64.vec(4): ("DOUBLE4", "__AVX__", "pd256"),
            dtypes.float64.vec(2): ("DOUBLE2", "__SSE2__", "pd"),
            dtypes.float32.vec(16): ("FLOAT16", "__AVX512F__", "ps512"),
            dtypes.float64.vec(8): ("DOUBLE8", "__AVX512F__", "pd512")}
# the 512-bit builtins are spelled differently: clang's take a rounding argument (4: the current direction), gcc's
# also a pass-through source and a lane mask (all lanes)
_WIDE_MASKS = {"ps512": "(unsigned short)-1", "pd512": "(unsigned char)-1"}


def _min_max_macros(dtype: DType) -> str:
    """The TC_MAX_/TC_MIN_ macros of one vector dtype: the x86 builtin where the target has it, else the blend."""
    suffix, feature, builtin = _MIN_MAX[dtype]
    lines = [f"#ifndef TC_MAX_{suffix}"]
    if builtin in _WIDE_MASKS:
        lines += [f"#if defined({feature}) && defined(__x86_64__) && defined(__clang__)",
                  f"#define TC_MAX_{suffix}(a, b, blend) __builtin_ia32_max{builtin}((a), (b), 4)",
                  f"#define TC_MIN_{suffix}(a, b, blend) __builtin_ia32_min{builtin}((a), (b), 4)",
                  f"#elif defined({feature}) && defined(__x86_64__)",
                  f"#define TC_MAX_{suffix}(a, b, blend) __builtin_ia32_max{builtin}_mask((a), (b), (a), "
                  f"{_WIDE_MASKS[builtin]}, 4)",
                  f"#define TC_MIN_{suffix}(a, b, blend) __builtin_ia32_min{builtin}_mask((a), (b), (a), "
                  f"{_WIDE_MASKS[builtin]}, 4)"]
    else:
        lines += [f"#if defined({feature}) && defined(__x86_64__)",
                  f"#define TC_MAX_{suffix}(a, b, blend) __builtin_ia32_max{builtin}((a), (b))",
                  f"#define TC_MIN_{suffix}(a, b, blend) __builtin_ia32_min{builtin}((a), (b))"]
    return "\n".join([*lines, "#else", f"#define TC_MAX_{suffix}(a, b, blend) (blend)",
                      f"#define TC_MIN_{suffix}(a, b, blend) (blend)", "#endif", "#endif"])


# Lane masks: a vector comparison is a GNU C vector comparison (a vector of signed integers the width of the compared
# lanes, all ones where true), logic on masks is bitwise, and a select over a mask is a blend of bits,
# `(a & m) | (b & ~m)`, which gcc and clang turn into one blend instruction (C has no `?:` on vectors). A mask read
# as a bool vector (stored, converted) is converted to 0/1 bytes where it is read. RenderContext.masks holds them.


def _load(ctx: RenderContext, x: UOp) -> str:
    """A load as the base renders it, or masked where its gate is a bool vector (`_masked_load_macro`); one feeding
    several FMAs is then kept in a register (`_IN_REGISTER_MACRO`)."""
    name = _masked_load(ctx, x) if _lane_gated(x) else render_load(ctx, x)
    if x in ctx.state:
        ctx.emit(f"TC_IN_REGISTER({name});")
    return name


def _masked_load(ctx: RenderContext, x: UOp) -> str:
    """`TC_MASKED_LOAD_<TYPE>(address, mask)`: the lanes whose gate is true, zero elsewhere (no memory read there),
    then the load's alternative blended into those lanes unless it is zero."""
    count = x.dtype.count
    pointer = ctx.pointer_of(x.src[0])
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
    scalar = dtype.scalar
    return dtype.count > 1 and scalar not in (dtypes.bool, dtypes.bfloat16) and \
        scalar not in ctx.renderer.narrow_dtypes and scalar.itemsize in _MASK_DTYPES


def _whole(ctx: RenderContext, uop: UOp, count: int) -> str:
    """`uop` as a vector expression of `count` lanes (constants and scalars broadcast)."""
    text = ctx.expression(uop)
    if uop.op is Ops.CONST or uop.dtype.count == 1:
        return ctx.renderer.render_vector(uop.dtype.scalar.vec(count), [text] * count)
    return text


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
    name = ctx.fresh("mask")
    ctx.emit(f"{type_name} {name} = {code};")
    return name


def _blend(ctx: RenderContext, mask: str, when_true: str, when_false: str, dtype: DType) -> str:
    """Lanes of `when_true` where `mask` is set, of `when_false` elsewhere (bitwise, exact for every value)."""
    bits = ctx.renderer.render_dtype(_MASK_DTYPES[dtype.scalar.itemsize].vec(dtype.count))
    return f"(({ctx.renderer.render_dtype(dtype)})((({bits}){when_true}&{mask})|(({bits}){when_false}&~{mask})))"


def _min_max(kind: str, first: str, second: str, blend: str, dtype: DType) -> str:
    """`kind` ("MAX" or "MIN") of two vectors in x86's operand order, falling back to `blend`."""
    return f"TC_{kind}_{_MIN_MAX[dtype][0]}({first}, {second}, {blend})"


def _vector_where(ctx: RenderContext, x: UOp) -> str | None:
    """A vector select: `?:` under one scalar (or uniform) condition, else a blend over the mask (MIN/MAX where the
    select is a minimum or a maximum)."""
    if x.dtype.count == 1 or not _vector_lanes(ctx, x.dtype):
        return None
    count = x.dtype.count
    condition, sources = x.src[0], x.src
    when_true, when_false = _whole(ctx, sources[1], count), _whole(ctx, sources[2], count)
    uniform = condition.op is Ops.VECTORIZE and all(lane is condition.src[0] for lane in condition.src)
    if condition.dtype.count == 1 or uniform:
        scalar = condition.src[0] if uniform else condition
        return ctx.bind(x, f"({ctx.expression(scalar)}?{when_true}:{when_false})")
    mask = _mask_of(ctx, condition, x.dtype.scalar.itemsize, count)
    blend = _blend(ctx, mask, when_true, when_false, x.dtype)
    if x.dtype in _MIN_MAX and condition.op is Ops.CMPLT and condition.src[0].dtype == x.dtype:
        # (x < y) ? x : y is a minimum, (y < x) ? x : y a maximum, lane for lane
        if condition.src == (sources[1], sources[2]):
            blend = _min_max("MIN", when_true, when_false, blend, x.dtype)
        elif condition.src == (sources[2], sources[1]):
            blend = _min_max("MAX", when_true, when_false, blend, x.dtype)
    return ctx.bind(x, blend)


def _fused_multiply_add(ctx: RenderContext, x: UOp) -> str | None:
    if x.arg != FUSED or x.dtype not in _FUSED_MULTIPLY_ADD:
        return None
    count = x.dtype.count
    operands = ", ".join(_whole(ctx, source, count) if count > 1 else ctx.expression(source) for source in x.src)
    return ctx.bind(x, f"{_FUSED_MULTIPLY_ADD[x.dtype]}({operands})")


def _vector_max(ctx: RenderContext, x: UOp) -> str | None:
    if x.dtype.count == 1 or not _vector_lanes(ctx, x.dtype):
        return None
    count = x.dtype.count
    left, right = _materialized(ctx, x.src[0], count), _materialized(ctx, x.src[1], count)
    mask = _mask_variable(ctx, f"({left}<{right})", x.dtype)
    blend = _blend(ctx, mask, right, left, x.dtype)
    return ctx.bind(x, _min_max("MAX", right, left, blend, x.dtype) if x.dtype in _MIN_MAX else blend)


def _vector_compare(ctx: RenderContext, x: UOp) -> str | None:
    if x.dtype.count == 1 or not _vector_lanes(ctx, x.src[0].dtype):
        return None
    count = x.dtype.count
    left, right = _whole(ctx, x.src[0], count), _whole(ctx, x.src[1], count)
    symbol = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[x.op]
    return _bind_mask(ctx, x, f"({left}{symbol}{right})", x.src[0].dtype)


def _mask_logic(ctx: RenderContext, x: UOp) -> str | None:
    if x.dtype.count == 1 or x.dtype.scalar != dtypes.bool or not any(source in ctx.masks for source in x.src):
        return None
    reference = next(ctx.masks[source][1] for source in x.src if source in ctx.masks)
    left, right = (_mask_of(ctx, source, reference.itemsize, x.dtype.count) for source in x.src)
    symbol = {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}[x.op]
    return _bind_mask(ctx, x, f"({left}{symbol}{right})", reference)


def _materialized(ctx: RenderContext, uop: UOp, count: int) -> str:
    """`uop` as a vector variable (an operand the code repeats)."""
    if uop in ctx.inlined:
        ctx.materialize(uop)
    text = _whole(ctx, uop, count)
    if uop.op is Ops.CONST or uop.dtype.count == 1:
        name = ctx.fresh("alu")
        ctx.emit(f"{ctx.renderer.render_dtype(uop.dtype.scalar.vec(count))} {name} = {text};")
        return name
    return text


def _mask_variable(ctx: RenderContext, code: str, lane_dtype: DType) -> str:
    mask_dtype = _MASK_DTYPES[lane_dtype.scalar.itemsize].vec(lane_dtype.count)
    ctx.note(mask_dtype)
    name = ctx.fresh("mask")
    ctx.emit(f"{ctx.renderer.render_dtype(mask_dtype)} {name} = {code};")
    return name


def _bind_mask(ctx: RenderContext, uop: UOp, code: str, lane_dtype: DType) -> str:
    """Declare the mask `code` for the bool vector `uop`; read as bools it is converted to 0/1 bytes."""
    mask_dtype = _MASK_DTYPES[lane_dtype.scalar.itemsize].vec(uop.dtype.count)
    name = _mask_variable(ctx, code, mask_dtype)
    ctx.masks[uop] = (name, mask_dtype.scalar)
    ctx.names[uop] = text = f"__builtin_convertvector(-{name}, {ctx.renderer.render_dtype(uop.dtype)})"
    return text


def _mask_lane(ctx: RenderContext, x: UOp) -> str | None:
    """A lane of a mask read as a bool (0 or 1)."""
    if x.src[0] not in ctx.masks or len(x.arg) != 1:
        return None
    ctx.names[x] = text = f"(-{ctx.masks[x.src[0]][0]}[{x.arg[0]}])"
    return text


c_rendering = text_rules([
    (UPat(Ops.WHERE, name="x"), _vector_where),
    (UPat(Ops.MULACC, name="x"), _fused_multiply_add),
    (UPat(Ops.MAX, name="x"), _vector_max),
    (UPat(GroupOp.Comparison, name="x"), _vector_compare),
    (UPat((Ops.AND, Ops.OR, Ops.XOR), name="x"), _mask_logic),
    (UPat(Ops.GEP, name="x"), _mask_lane),
    (UPat(Ops.LOAD, name="x"), _load),
    (UPat(Ops.STORE, name="x"), _atomic_update),
    (UPat(Ops.VECTORIZE, name="x"), _whole_vector_select),
    (UPat(Ops.CAST, name="x"), _widening_cast),
])
"""The C renderer's own rules, before the base's: lane masks and blends, fused multiply-adds, masked loads and
loads kept in registers, atomic updates, whole-vector selects and widening casts."""


class CRenderer(CStyleLanguage):
    """GNU C for the host CPU: vector_size vectors, _Float16 halves, bfloat16 as bits, restrict pointers."""

    device = "CPU"
    suffix = "c"
    has_local = False
    has_shared = False
    has_threads = True
    global_max = None
    local_max = None
    shared_max = 0
    buffer_suffix = " restrict"
    arg_int_prefix = "const int"
    infinity = "__builtin_inff()"
    nan = "__builtin_nanf(\"\")"
    type_map = C_TYPE_MAP
    code_for_op = C_CODE_FOR_OP
    string_rewrite = c_rendering + base_rendering
    vector_alu_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR,
                                Ops.SHL, Ops.SHR, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.CAST,
                                Ops.BITCAST})
    vector_masks = True
    masked_load_dtypes = frozenset({dtypes.float32})  # _masked_load_macro
    decompose_transcendentals = True  # float32 exp2/log2 as arithmetic: a libm call per element stops vectorizing
    matmul_panel_bytes = 64  # the columns of the matmul register tile (set per target in __init__)
    fused_multiply_add = True  # FMA where the target has it (_FUSED_MULTIPLY_ADD_MACROS), a multiply and an add else
    vector_widths: dict[DType, tuple[int, ...]] = {
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.float32, dtypes.int32, dtypes.uint32)},
        **{dtype: (2, 4, 8) for dtype in (dtypes.float64, dtypes.int64, dtypes.uint64)},
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.float16, dtypes.int16, dtypes.uint16)},
        **{dtype: (2, 4, 8, 16) for dtype in (dtypes.int8, dtypes.uint8, dtypes.bool)}}

    atomic_dtypes = frozenset(dtype for dtype in C_TYPE_MAP if dtype != dtypes.void) | {dtypes.bfloat16}

    def __init__(self, device: str = "CPU", arch: str | None = None):
        from tiny_cpu.target import c_vector_bytes, host_core_cache_bytes, matmul_panel_bytes
        self.device = device
        self.arch = arch
        self.global_max = (_cpu_count(), 1, 1)
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

    def render_vector(self, dtype: DType, items: list[str]) -> str:
        """A compound literal `(float4){a,b,c,d}`."""
        return f"({self.render_dtype(dtype)}){{{','.join(items)}}}"

    def render_pointer_type(self, dtype: DType, addrspace: str) -> str:
        """Vector accesses go through the unaligned, may-alias variant of the vector type."""
        return f"{self.render_dtype(dtype)}_u*" if dtype.count > 1 else f"{self.render_dtype(dtype)}*"

    def render_vector_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str | None:
        """__builtin_convertvector between numeric vectors (bool and bfloat16 go lane by lane)."""
        plain = {dtypes.bool, dtypes.bfloat16}
        if from_dtype.scalar in plain or to_dtype.scalar in plain:
            return None
        return f"__builtin_convertvector({expression}, {self.render_dtype(to_dtype)})"

    def context_state(self, uops: list[UOp]) -> set[UOp]:
        """The loads kept in registers (`_loads_kept_in_registers`)."""
        return _loads_kept_in_registers(uops)

    def extra_parameters(self, uops: list[UOp]) -> list[str]:
        """`const int core_id` when the program splits its work across CPU workers."""
        uses_core_id = any(uop.op is Ops.SPECIAL and uop.arg == "core_id" for uop in uops)
        return ["const int core_id"] if uses_core_id else []

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Vector typedefs (aligned for values, unaligned may-alias for memory access) and bfloat16 helpers."""
        lines = []
        for dtype in sorted((dtype for dtype in used_dtypes if dtype.count > 1), key=lambda d: (d.scalar, d.count)):
            if dtype.scalar == dtypes.bfloat16 and not self.native_bfloat16:
                raise ValueError("vectors of bfloat16 are not supported by the C renderer: use scalar bfloat16")
            scalar = "unsigned char" if dtype.scalar == dtypes.bool else self.storage_type(dtype.scalar)
            name, size = self.render_dtype(dtype), dtype.itemsize * dtype.count
            if size & (size - 1):
                raise ValueError(f"vector {dtype} has {dtype.count} lanes; the C renderer needs a power of two")
            lines.append(f"typedef {scalar} {name} __attribute__((vector_size({size})));")
            lines.append(f"typedef {scalar} {name}_u __attribute__((vector_size({size}), aligned({dtype.itemsize}), "
                         f"__may_alias__));")
        if dtypes.bfloat16 in used_dtypes and not self.native_bfloat16:
            lines.append(_BF16_HELPERS)
        if any(uop.op is Ops.MULACC and uop.arg == FUSED for uop in uops):
            lines.append(_FUSED_MULTIPLY_ADD_MACROS)
            if _loads_kept_in_registers(uops):
                lines.append(_IN_REGISTER_MACRO)
        masked = {uop.dtype for uop in uops if uop.op is Ops.LOAD and _lane_gated(uop)}
        lines.extend(_masked_load_macro(dtype) for dtype in sorted(masked, key=lambda vector: vector.count))
        selected = {uop.dtype for uop in uops if uop.op in (Ops.MAX, Ops.WHERE)}
        lines.extend(_min_max_macros(dtype) for dtype in _MIN_MAX if dtype in selected)
        return lines

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str]) -> str:
        """An exported C function and its entry point for the command queue and the worker pool (see entry_point)."""
        signature = f"void {name}({', '.join(parameters)}) {{"
        lines = prelude + [signature] + body + ["}"]
        if parameters and parameters[-1] == "const int core_id":
            lines.append(entry_point(name, parameters[:-1]))
        else:
            lines.append(entry_point(name, parameters, takes_core_id=False))
        return "\n".join(lines) + "\n"


def entry_point(name: str, parameters: list[str], takes_core_id: bool = True) -> str:
    """`void NAME_entry(const long long *arguments, int core_id)`: calls kernel `name` with its buffer addresses and
    variable values unpacked from one array (the uniform calling convention of the command queue and the worker
    pool, see pool.py); `core_id` is passed on when the kernel takes it."""
    arguments = []
    for position, parameter in enumerate(parameters):
        declared_type = parameter.rsplit(" ", 1)[0].replace(" restrict", "")
        if declared_type.endswith("*"):
            arguments.append(f"({declared_type})(__INTPTR_TYPE__)arguments[{position}]")
        else:
            arguments.append(f"(int)arguments[{position}]")
    unpacked = ", ".join([*arguments, "core_id"] if takes_core_id else arguments)
    return f"void {name}_entry(const long long *arguments, const int core_id) {{ {name}({unpacked}); }}"


def make_c_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The CPU's C renderer and its compiler ($CC, gcc or clang), for `device` and an optional -march `arch`."""
    from tiny_cpu.compiler import ClangCompiler
    return CRenderer(device, arch), ClangCompiler(arch)
