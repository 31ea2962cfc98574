"""The CPU's C renderer: GNU C (gcc, clang) with vector extensions, one function per kernel and an entry point taking
its arguments as one array. Vector selects, maxima and comparisons are lane masks (all ones where true) and bitwise
blends; x86 builtins (masked loads, FMA, MAXPS/MINPS) sit behind macros that fall back to plain C on other targets."""
from __future__ import annotations

import os
from collections import Counter

from tiny_cpu import target
from tiny_cpu.compiler import ClangCompiler
from tiny_cpu.lowering import NOT_WHOLE, c_lowering
from tinycore.codegen.int8_dot import DOT4_NAME, dot4_widths
from tinycore.dtype import DType, dtypes
from tinycore.helpers import NUM_CPU_THREADS
from tinycore.renderer.cstyle import CStyleLanguage, RenderContext, RenderedPointer, atomic_rule, math_functions
from tinycore.renderer.cstyle import render_load as base_load
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import FUSED, GroupOp, Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

F32, F64, _X86 = dtypes.float32, dtypes.float64, "defined({}) && defined(__x86_64__)"
C_TYPE_MAP: dict[DType, str] = {**CStyleLanguage.type_map, dtypes.bool: "_Bool", dtypes.float16: "_Float16"}
_MASK_DTYPES = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}  # lane bytes -> mask lanes
_WIDE_MASKS = {F32: "(unsigned short)-1", F64: "(unsigned char)-1"}  # all lanes of a 512-bit vector
_MASK_SYMBOLS = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
# x86's masked loads read only the lanes whose mask is set and fault on none of the others (a padded row may start
# before the buffer); other vectors and targets read lane by lane behind each lane's test
_MASKED_LOAD_BUILTINS = {F32.vec(4): ("__AVX__", "__builtin_ia32_maskloadps((const float4*)(address), (mask))"),
                         F32.vec(8): ("__AVX__", "__builtin_ia32_maskloadps256((const float8*)(address), (mask))"),
                         F32.vec(16): ("__AVX512F__", "__builtin_ia32_loadups512_mask((const float*)(address), "
                                       "(float16){0}, __builtin_ia32_cmpd512_mask((mask), (int16){0}, 4, "
                                       "(unsigned short)-1))")}
# fused multiply-adds (MULACC marked FUSED), x86 builtins where the target has FMA; kernels compile with
# -ffp-contract=off, so nothing else is fused. The 512-bit builtins take a lane mask and a rounding mode.
_FMA_BUILTINS = {"__FMA__": {F32.vec(8): "ia32_vfmaddps256", F32.vec(4): "ia32_vfmaddps", F32: "fmaf",
                             F64.vec(4): "ia32_vfmaddpd256", F64.vec(2): "ia32_vfmaddpd", F64: "fma"},
                 "__AVX512F__": {F32.vec(16): "ia32_vfmaddps512_mask", F64.vec(8): "ia32_vfmaddpd512_mask"}}
_FMA_DTYPES = {dtype for table in _FMA_BUILTINS.values() for dtype in table}
# x86's vmaxps(a, b) is exactly `b < a ? a : b` per lane (b where either is NaN, or for -0 and +0), vminps(a, b)
# `a < b ? a : b`. 512-bit builtins: clang's take a rounding mode, gcc's also a pass-through source and a lane mask.
_MIN_MAX = {F32.vec(8): ("__AVX__", "ps256"), F32.vec(4): ("__SSE__", "ps"), F64.vec(4): ("__AVX__", "pd256"),
            F64.vec(2): ("__SSE2__", "pd"), F32.vec(16): ("__AVX512F__", "ps512"), F64.vec(8): ("__AVX512F__", "pd512")}

def _suffix(dtype: DType) -> str:  # FLOAT8, DOUBLE, ...: how macros name a dtype
    return f"{dtype.scalar.name.upper()}{dtype.count if dtype.count > 1 else ''}"

def _choice(branches: list[tuple[str, list[str]]], fallback: list[str], guard: str | None = None) -> str:
    """Macros defined by the first branch whose condition holds, else `fallback`; inside `#ifndef guard` if given."""
    lines = [line for position, (condition, defines) in enumerate(branches)
             for line in [f"#{'el' if position else ''}if {condition}", *defines]]
    lines = [*lines, "#else", *fallback, "#endif"] if branches else fallback
    return "\n".join([f"#ifndef {guard}", *lines, "#endif"] if guard else lines)

def _fma_define(dtype: DType, builtin: str | None) -> str:
    tail = f", {_WIDE_MASKS[dtype.scalar]}, 4" if dtype.itemsize * dtype.count == 64 else ""
    code = f"__builtin_{builtin}((a), (b), (c){tail})" if builtin else "((a) * (b) + (c))"
    return f"#define TC_FMA_{_suffix(dtype)}(a, b, c) {code}"

_FMA_MACROS = _choice([], [  # one #if per feature: FMA's widths, then AVX-512's
    _choice([(_X86.format(feature), [_fma_define(dtype, call) for dtype, call in calls.items()])],
            [_fma_define(dtype, None) for dtype in calls]) for feature, calls in _FMA_BUILTINS.items()],
    "TC_FMA_FLOAT8")
# A vector load feeding several FMAs (a conv tile's input times 4 channels' weights) is kept in a register, else gcc 12
# folds it into each FMA as a memory operand, loading it 4 times (conv2d, one thread: 35-42 GFLOPS folded, 72-76 kept).
# The empty asm takes the value in a vector register ("v": any of AVX-512's 32, "x": the first 16), no instruction.
_IN_REGISTER_MACRO = _choice([(f"defined(__x86_64__) && defined({feature})", [
    f'#define TC_IN_REGISTER(value) __asm__("" : "+{constraint}"(value))']) for feature, constraint in (
    ("__AVX512F__", "v"), ("__AVX__", "x"))], ["#define TC_IN_REGISTER(value) ((void)0)"], "TC_IN_REGISTER")

def _dot4_macro(count: int) -> str:
    """tc_dot4_u8s8_COUNT(acc, a, b) (tinycore.codegen.int8_dot): per int32 lane, acc plus the sum of a's 4 unsigned
    bytes times b's 4 signed bytes. vpdpbusd where the target has it: 512-bit with AVX-512 VNNI, 256-bit with AVX-VNNI
    or AVX512VL (gcc 12 on Zen 4 runs without VL, see compiler._workarounds: there 8 lanes go through the 512-bit
    instruction, the upper half zero); elsewhere the bytes' products in plain C, as the expression the op replaced."""
    name, vnni, clang = f"{DOT4_NAME}_{count}", _X86.format("__AVX512VNNI__"), " && defined(__clang__)"
    native = vnni if count == 16 else f"({_X86.format('__AVXVNNI__')}) || ({vnni} && defined(__AVX512VL__))"
    branches = [(native + clang if count == 16 else f"({native}){clang}",
                 [f"#define {name}(acc, a, b) __builtin_ia32_vpdpbusd{count * 32}((acc), (a), (b))"]),
                (native, [f"#define {name}(acc, a, b) __builtin_ia32_vpdpbusd_v{count}si((acc), (a), (b))"])]
    wide, low = ", ".join([*map(str, range(count)), *["-1"] * (16 - count)]), ", ".join(map(str, range(count)))
    branches += [(vnni + tail, [f"#define TC_WIDE{count}(x) __builtin_shufflevector((x), (x), {wide})",
                                f"#define {name}(acc, a, b) ({{ __attribute__((vector_size(64))) int tc_dot = "
                                f"{builtin}(TC_WIDE{count}(acc), TC_WIDE{count}(a), TC_WIDE{count}(b)); "
                                f"__builtin_shufflevector(tc_dot, tc_dot, {low}); }})"])
                 for tail, builtin in ((clang, "__builtin_ia32_vpdpbusd512"), ("", "__builtin_ia32_vpdpbusd_v16si"))]
    terms = " + ".join(f"((((a) >> {8 * position}) & 255) * (((((b) >> {8 * position}) & 255) ^ 128) - 128))"
                       for position in range(4))
    return _choice(branches[:2] if count == 16 else branches if count in (4, 8) else [],
                   [f"#define {name}(acc, a, b) ((acc) + {terms})"], name)

def _masked_load_name(dtype: DType) -> str:  # TC_MASKED_LOAD_<TYPE>: loads a `dtype` vector under a mask
    return f"TC_MASKED_LOAD_{_suffix(dtype)}"

def _masked_load_macro(dtype: DType) -> str:
    """The masked load of a float vector dtype: x86's where the target has it, else a loop reading the set lanes."""
    name, (feature, builtin) = _masked_load_name(dtype), _MASKED_LOAD_BUILTINS.get(dtype, ("", ""))
    loop = (f"#define {name}(address, mask) ({{ float{dtype.count} tc_lanes; for (int tc_lane = 0; tc_lane < "
            f"{dtype.count}; tc_lane++) tc_lanes[tc_lane] = (mask)[tc_lane] ? (address)[tc_lane] : 0.0f; tc_lanes; }})")
    branches = [(_X86.format(feature), [f"#define {name}(address, mask) {builtin}"])] if builtin else []
    return _choice(branches, [loop], name)

def _min_max_macros(dtype: DType) -> str:
    """The TC_MAX_/TC_MIN_ macros of one vector dtype: the x86 builtin where the target has it, else the blend."""
    (feature, builtin), suffix = _MIN_MAX[dtype], _suffix(dtype)
    forms = [(" && defined(__clang__)", "", "(a), (b), 4"), ("", "_mask", f"(a), (b), (a), {_WIDE_MASKS[dtype.scalar]}"
             ", 4")] if dtype.count * dtype.itemsize == 64 else [("", "", "(a), (b)")]
    return _choice([(_X86.format(feature) + compiler, [f"#define TC_{kind}_{suffix}(a, b, blend) __builtin_ia32_"
                     f"{kind.lower()}{builtin}{tail}({arguments})" for kind in ("MAX", "MIN")])
                    for compiler, tail, arguments in forms],
                   [f"#define TC_{kind}_{suffix}(a, b, blend) (blend)" for kind in ("MAX", "MIN")], f"TC_MAX_{suffix}")

def _loads_kept_in_registers(uops: list[UOp]) -> set[UOp]:
    """Float vector loads of at most 64 bytes that feed at least 2 fused multiply-adds (see _IN_REGISTER_MACRO)."""
    fmas = Counter(source for uop in uops if uop.op is Ops.MULACC and uop.arg == FUSED for source in set(uop.src)
                   if source.op is Ops.LOAD and source.dtype.count > 1 and dtypes.is_float(source.dtype.scalar) and
                   source.dtype.itemsize * source.dtype.count <= 64)
    return {load for load, count in fmas.items() if count >= 2}

def _lane_gated(load: UOp) -> bool:  # a LOAD whose INDEX has a bool vector gate (a masked load)
    return load.src[0].op is Ops.INDEX and len(load.src[0].src) > 2 and load.src[0].src[2].dtype.count > 1

def _vector_lanes(dtype: DType) -> bool:  # vectors blended and compared whole
    return dtype.count > 1 and dtype.scalar not in NOT_WHOLE and dtype.scalar.itemsize in _MASK_DTYPES

def _whole(ctx: RenderContext, uop: UOp, count: int) -> str:  # a vector of `count` lanes (scalars broadcast)
    text = ctx.expression(uop)
    return ctx.renderer.render_vector(uop.dtype.scalar.vec(count), [text] * count) \
        if uop.op is Ops.CONST or uop.dtype.count == 1 else text

def _variable(ctx: RenderContext, dtype: DType, code: str, prefix: str) -> str:
    ctx.note(dtype)
    ctx.emit(ctx.renderer.render_declaration(name := ctx.fresh(prefix), dtype, code))
    return name

def _mask_of(ctx: RenderContext, uop: UOp, lane_bytes: int, count: int) -> str:
    """`uop` (a bool vector) as a mask with lanes of `lane_bytes` bytes: its mask (converted), or a new one."""
    text, dtype = ctx.masks.get(uop, ("", dtypes.void))
    if text and dtype.itemsize == lane_bytes:
        return text
    mask_dtype = _MASK_DTYPES[lane_bytes].vec(count)
    code = f"__builtin_convertvector({text}, {ctx.renderer.render_dtype(mask_dtype)})" if text else \
        ctx.renderer.render_vector(mask_dtype, ["-1" if uop.arg else "0"] * count) if uop.op is Ops.CONST else \
        f"(-__builtin_convertvector({_whole(ctx, uop, count)}, {ctx.renderer.render_dtype(mask_dtype)}))"
    return _variable(ctx, mask_dtype, code, "mask")

def _blend(ctx: RenderContext, mask: str, when_true: str, when_false: str, dtype: DType) -> str:
    """Lanes of `when_true` where `mask` is set, of `when_false` elsewhere (bitwise, exact for every value)."""
    bits = ctx.renderer.render_dtype(_MASK_DTYPES[dtype.scalar.itemsize].vec(dtype.count))
    return f"(({ctx.renderer.render_dtype(dtype)})((({bits}){when_true}&{mask})|(({bits}){when_false}&~{mask})))"

def _vector_select(ctx: RenderContext, x: UOp) -> str | None:
    """WHERE and MAX of whole vectors: `?:` under a scalar (or uniform) condition, else a blend over a mask (through
    TC_MAX_/TC_MIN_, one instruction on x86, where the select is a maximum or a minimum)."""
    if not _vector_lanes(x.dtype):
        return None
    count, kind = x.dtype.count, None
    if x.op is Ops.MAX:  # (a < b) ? b : a, over variables (the code repeats the operands)
        operands = []
        for source in x.src:
            if source in ctx.inlined:
                ctx.materialize(source)
            operands.append(ctx.expression(source) if source.op is not Ops.CONST and source.dtype.count > 1 else
                            _variable(ctx, source.dtype.scalar.vec(count), _whole(ctx, source, count), "alu"))
        (when_false, when_true), kind = operands, "MAX"
        mask = _variable(ctx, _MASK_DTYPES[x.dtype.scalar.itemsize].vec(count), f"({when_false}<{when_true})", "mask")
    else:
        condition, when_true, when_false = x.src[0], _whole(ctx, x.src[1], count), _whole(ctx, x.src[2], count)
        uniform = condition.op is Ops.VECTORIZE and all(lane is condition.src[0] for lane in condition.src)
        if condition.dtype.count == 1 or uniform:
            condition = condition.src[0] if uniform else condition
            return ctx.bind(x, f"({ctx.expression(condition)}?{when_true}:{when_false})")
        mask = _mask_of(ctx, condition, x.dtype.scalar.itemsize, count)
        if condition.op is Ops.CMPLT and condition.src[0].dtype == x.dtype:  # (a < b) ? b : a is a maximum, ...
            kind = {x.src[2:0:-1]: "MAX", x.src[1:]: "MIN"}.get(condition.src)  # ... (a < b) ? a : b a minimum
    blend = _blend(ctx, mask, when_true, when_false, x.dtype)
    return ctx.bind(x, f"TC_{kind}_{_suffix(x.dtype)}({when_true}, {when_false}, {blend})"
                    if kind and x.dtype in _MIN_MAX else blend)

def _mask_op(ctx: RenderContext, x: UOp) -> str | None:
    """A comparison of whole vectors, or logic on masks, as a mask (read as bools: converted to 0 or 1 per lane)."""
    if (count := x.dtype.count) == 1:
        return None
    if x.op in GroupOp.Comparison and _vector_lanes(x.src[0].dtype):
        lane_bytes, (left, right) = x.src[0].dtype.scalar.itemsize, (_whole(ctx, source, count) for source in x.src)
    elif x.op not in GroupOp.Comparison and x.dtype.scalar == dtypes.bool and any(s in ctx.masks for s in x.src):
        lane_bytes = next(ctx.masks[source][1] for source in x.src if source in ctx.masks).itemsize
        left, right = (_mask_of(ctx, source, lane_bytes, count) for source in x.src)
    else:
        return None
    mask_dtype = _MASK_DTYPES[lane_bytes].vec(count)
    ctx.masks[x] = (_variable(ctx, mask_dtype, f"({left}{_MASK_SYMBOLS[x.op]}{right})", "mask"), mask_dtype.scalar)
    return ctx.name(x, f"__builtin_convertvector(-{ctx.masks[x][0]}, {ctx.renderer.render_dtype(x.dtype)})")

def _fused_multiply_add(ctx: RenderContext, x: UOp) -> str | None:
    if x.arg != FUSED or x.dtype not in _FMA_DTYPES:
        return None
    operands = [_whole(ctx, source, x.dtype.count) if x.dtype.count > 1 else ctx.expression(source) for source in x.src]
    return ctx.bind(x, f"TC_FMA_{_suffix(x.dtype)}({', '.join(operands)})")

def _load(ctx: RenderContext, x: UOp) -> str:
    """The base's load, or a masked one where the gate is a bool vector; kept in a register where it feeds FMAs."""
    if not _lane_gated(x):
        name = base_load(ctx, x)
    else:
        mask = _mask_of(ctx, x.src[0].src[2], x.dtype.scalar.itemsize, x.dtype.count)
        value = f"{_masked_load_name(x.dtype)}({ctx.pointer_of(x.src[0]).address()}, {mask})"
        alternative = next((source for source in x.src[1:] if source.dtype != dtypes.void), None)
        lanes = () if alternative is None else alternative.src if alternative.op is Ops.VECTORIZE else (alternative,)
        if alternative is not None and not all(lane.op is Ops.CONST and lane.arg == 0 for lane in lanes):
            loaded = _variable(ctx, x.dtype, value, "val")
            value = _blend(ctx, mask, loaded, _whole(ctx, alternative, x.dtype.count), x.dtype)
        name = ctx.declare(x, value, "val")
    if x in ctx.state:
        ctx.emit(f"TC_IN_REGISTER({name});")
    return name

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

c_rendering = text_rules([
    (UPat((Ops.WHERE, Ops.MAX), name="x"), _vector_select),
    (UPat(Ops.MULACC, name="x"), _fused_multiply_add),
    (UPat(tuple(_MASK_SYMBOLS), name="x"), _mask_op),
    (UPat(Ops.GEP, name="x"), lambda ctx, x: ctx.name(x, f"(-{ctx.masks[x.src[0]][0]}[{x.arg[0]}])")
     if x.src[0] in ctx.masks and len(x.arg) == 1 else None),  # a lane of a mask read as a bool (0 or 1)
    (UPat(Ops.LOAD, name="x"), _load),
    (UPat(Ops.STORE, name="x"), atomic_rule(_atomic)),
])
"""The C renderer's own rules, before the base's: masks and blends, FMA, masked loads, atomics and selects."""

def _builtin(name: str, dtype: DType, *operands: str) -> str:  # double's builtin, or float's (f): see lowering.py
    return f"__builtin_{name}{'' if dtype.scalar == F64 else 'f'}({','.join(operands)})"

class CRenderer(CStyleLanguage):
    """GNU C for the host CPU: vector_size vectors, _Float16 halves, bfloat16 as bits, restrict pointers."""

    device, suffix, has_local, has_shared, has_threads, local_max, shared_max = "CPU", "c", False, False, True, None, 0
    buffer_suffix, infinity, nan, type_map = " restrict", "__builtin_inff()", "__builtin_nanf(\"\")", C_TYPE_MAP
    code_for_op = {**CStyleLanguage.code_for_op, **math_functions(_builtin)}
    vector_format, vector_cast = "({type}){{{items}}}", "__builtin_convertvector({x}, {type})"
    string_rewrite, post_matcher = c_rendering + CStyleLanguage.string_rewrite, c_lowering
    vector_alu_ops = CStyleLanguage.vector_alu_ops | {Ops.NEG, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.MAX,
                                                      Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.CAST, Ops.BITCAST}
    # masks (_mask_op), masked loads (_masked_load_macro) and FMA (_FMA_MACROS; else a multiply and an add); float32
    # exp2/log2 as arithmetic, since a libm call per element stops vectorizing
    vector_masks, masked_load_dtypes, fused_multiply_add, decompose_transcendentals = True, frozenset({F32}), True, True
    vector_widths: dict[DType, tuple[int, ...]] = {dtype: (2, 4, 8) if dtype.itemsize == 8 else (2, 4, 8, 16)
                                                   for dtype in C_TYPE_MAP if dtype != dtypes.void}
    atomic_dtypes = frozenset(vector_widths) | {dtypes.bfloat16}

    def __init__(self, device: str = "CPU", arch: str | None = None):
        self.device, self.arch, self.global_max = device, arch, (NUM_CPU_THREADS.value or os.cpu_count() or 1, 1, 1)
        # AVX-512 targets get 16-lane float vectors and 64-column matmul panels (the columns of the register tile)
        self.preferred_vector_bytes = target.c_vector_bytes(arch)
        self.matmul_panel_bytes = target.matmul_panel_bytes(self.preferred_vector_bytes)
        # the host's L2 sizes matmul row groups; a kernel compiled for another `arch` keeps the default groups
        self.core_cache_bytes = target.host_core_cache_bytes() if arch is None else None
        self.int8_dot_products = target.host_int8_dot_products(arch)

    def vector_type_name(self, scalar: str, count: int) -> str:
        """Bool vectors are boolN, vectors of unsigned char (0 or 1 per lane)."""
        return f"bool{count}" if scalar == C_TYPE_MAP[dtypes.bool] else super().vector_type_name(scalar, count)

    def render_pointer_type(self, dtype: DType, addrspace: str) -> str:
        """Vector accesses go through the unaligned, may-alias variant of the vector type."""
        return f"{self.render_dtype(dtype)}_u*" if dtype.count > 1 else f"{self.render_dtype(dtype)}*"

    def context_state(self, uops: list[UOp]) -> set[UOp]:
        """The loads kept in registers (`_loads_kept_in_registers`)."""
        return _loads_kept_in_registers(uops)

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Vector typedefs (aligned, and unaligned may-alias for memory), bfloat16 helpers, the kernel's x86 macros."""
        lines = []
        for dtype in sorted((dtype for dtype in used_dtypes if dtype.count > 1), key=lambda d: (d.scalar, d.count)):
            if dtype.scalar == dtypes.bfloat16 and not self.native_bfloat16:
                raise ValueError("vectors of bfloat16 are not supported by the C renderer: use scalar bfloat16")
            scalar = "unsigned char" if dtype.scalar == dtypes.bool else self.storage_type(dtype.scalar)
            if (size := dtype.itemsize * dtype.count) & (size - 1):
                raise ValueError(f"vector {dtype} has {dtype.count} lanes; the C renderer needs a power of two")
            typedef = f"typedef {scalar} {self.render_dtype(dtype)}{{}} __attribute__((vector_size({size}){{}}));"
            lines += [typedef.format("", ""), typedef.format("_u", f", aligned({dtype.itemsize}), __may_alias__")]
        if dtypes.bfloat16 in used_dtypes and not self.native_bfloat16:
            lines += ["#ifndef TC_BF16_HELPERS", "#define TC_BF16_HELPERS", self.bfloat16_helpers("static inline"),
                      "#endif"]
        if any(uop.op is Ops.MULACC and uop.arg == FUSED for uop in uops):
            lines += [_FMA_MACROS] + [_IN_REGISTER_MACRO] * bool(_loads_kept_in_registers(uops))
        lines += [_dot4_macro(count) for count in sorted(dot4_widths(uops))]
        masked = {uop.dtype for uop in uops if uop.op is Ops.LOAD and _lane_gated(uop)}
        lines += [_masked_load_macro(dtype) for dtype in sorted(masked, key=lambda vector: vector.count)]
        selected = {uop.dtype for uop in uops if uop.op in (Ops.MAX, Ops.WHERE)}
        return lines + [_min_max_macros(dtype) for dtype in _MIN_MAX if dtype in selected]

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str],
                      attributes: str = "") -> str:
        """An exported C function and its entry point for the command queue and the worker pool (see entry_point)."""
        core_id = parameters[-1:] == ["const int core_id"]
        entry = entry_point(name, parameters[:-1] if core_id else parameters, core_id)
        return f"{super().render_kernel(name, parameters, body, prelude)}{entry}\n"

def entry_point(name: str, parameters: list[str], takes_core_id: bool = True) -> str:
    """`void NAME_entry(const long long *arguments, int core_id)`: calls kernel `name` with its arguments unpacked from
    one array (the calling convention of the queue and the worker pool, pool.py), and core_id if the kernel takes it."""
    arguments = [f"({declared})(__INTPTR_TYPE__)arguments[{position}]" if declared.endswith("*") else
                 f"(int)arguments[{position}]" for position, parameter in enumerate(parameters)
                 for declared in [parameter.rsplit(" ", 1)[0].replace(" restrict", "")]]
    unpacked = ", ".join([*arguments, "core_id"] if takes_core_id else arguments)
    return f"void {name}_entry(const long long *arguments, const int core_id) {{ {name}({unpacked}); }}"

def make_c_renderer(device: str, arch: str | None) -> tuple[CRenderer, ClangCompiler]:
    """The CPU's C renderer and its compiler ($CC, gcc or clang), for `device` and an optional -march `arch`."""
    return CRenderer(device, arch), ClangCompiler(arch)
