"""The CUDA C renderer: the core's C-like family with CUDA's thread indices, shared memory and types.

- SPECIAL gidxN is `blockIdx.{x,y,z}`, lidxN `threadIdx.{x,y,z}` (the core's launch contract: global_size counts
  blocks, local_size threads per block); kernels with thread indices get `__launch_bounds__` of their block size.
- DEFINE_LOCAL is `__shared__` memory (group reduces), BARRIER is `__syncthreads()`.
- half and bfloat16 are small structs declared in the kernel's prelude (no cuda_fp16.h / cuda_bf16.h, so NVRTC
  needs no toolkit headers): 16 bits in memory, converted to float for arithmetic and rounded back after each op
  (round to nearest even; half through PTX's cvt.rn.f16.f32), which gives the per-op rounding of the IEEE types.
- Scatter reductions update global memory atomically (`atomic_dtypes`: 32- and 64-bit integers and floats, half
  and bfloat16): atomicAdd for sums (64-bit integers through the unsigned long long overload; float64 from sm_60),
  atomicMax / atomicMin for integers, and an atomicCAS loop over the element's bits for the rest (products, float
  max/min); half and bfloat16 exchange the aligned 32-bit word that holds them.
- Vector values use CUDA's built-in float2/float4, int4, ... (make_float4(...), .x .y .z .w). Vector memory
  accesses are rendered lane by lane: a buffer view may start at any element, and CUDA's 8- and 16-byte vector
  loads fault on addresses that are not aligned to their size.
"""
from __future__ import annotations

from typing import Any

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import ContextVar
from tinycore.renderer.cstyle import (
    BASE_CODE_FOR_OP,
    BASE_TYPE_MAP,
    CodeForOp,
    CStyleLanguage,
    RenderContext,
    RenderedPointer,
    base_rendering,
)
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

CUDA_TYPE_MAP: dict[DType, str] = {
    **BASE_TYPE_MAP, dtypes.int8: "signed char", dtypes.int64: "long long", dtypes.uint64: "unsigned long long",
    dtypes.float16: "tc_half", dtypes.bfloat16: "tc_bfloat16"}

NV_TENSOR_CORES = ContextVar("NV_TENSOR_CORES", 1)
"""NV_TENSOR_CORES=0 keeps half matmuls off the tensor cores (on sm_80 and later they are used by default)."""
_AXES = "xyz"
_VECTOR_WIDTHS = (2, 4)
_VECTOR_SCALARS = (dtypes.float32, dtypes.int32, dtypes.uint32)
_LANES = "xyzw"


def _pow(base: str, exponent: str, dtype: DType) -> str:
    """pow for floats (float or double overload); integers through float and back."""
    if dtype.scalar == dtypes.float64:
        return f"pow({base},{exponent})"
    if dtypes.is_float(dtype):
        return f"powf((float)({base}),(float)({exponent}))"
    return f"(({CUDA_TYPE_MAP[dtype.scalar]})powf((float)({base}),(float)({exponent})))"


def _float_math(name: str) -> CodeForOp:
    """A unary math builtin: the f-suffixed float version except for double (half and bfloat16 go through float)."""
    def code(operand: str, dtype: DType) -> str:
        if dtype.scalar == dtypes.float64:
            return f"{name}({operand})"
        return f"{name}f((float)({operand}))"
    return code


CUDA_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    **BASE_CODE_FOR_OP, Ops.POW: _pow, Ops.EXP2: _float_math("exp2"), Ops.LOG2: _float_math("log2"),
    Ops.SIN: _float_math("sin"), Ops.SQRT: _float_math("sqrt"), Ops.TRUNC: _float_math("trunc")}

PRELUDE = r"""#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
struct __align__(2) tc_half {
  unsigned short bits;
  tc_half() = default;
  __device__ __forceinline__ tc_half(float value) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value)); }
  __device__ __forceinline__ operator float() const { float out; asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(bits));
    return out; }
};
struct __align__(2) tc_bfloat16 {
  unsigned short bits;
  tc_bfloat16() = default;
  __device__ __forceinline__ tc_bfloat16(float value) {
    unsigned int word = __float_as_uint(value);
    bits = ((word & 0x7fffffffu) > 0x7f800000u) ? (unsigned short)((word >> 16) | 64u)
                                                 : (unsigned short)((word + 0x7fffu + ((word >> 16) & 1u)) >> 16); }
  __device__ __forceinline__ operator float() const { return __uint_as_float(((unsigned int)bits) << 16); }
};
template <class To, class From> __device__ __forceinline__ To tc_bitcast(From value) {
  static_assert(sizeof(To) == sizeof(From), "bitcast between types of different sizes");
  union { From from; To to; } both; both.from = value; return both.to; }"""


_ATOMIC_DTYPES = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64,
                            dtypes.float16, dtypes.bfloat16})
# the overloads of CUDA's atomic functions (by element size) and the native sums
_CAS_BITS = {2: "unsigned int", 4: "unsigned int", 8: "unsigned long long"}
_NATIVE_ADD = {dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "unsigned long long",
               dtypes.uint64: "unsigned long long", dtypes.float32: "float", dtypes.float64: "double"}
_NATIVE_MAX_MIN = {dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
                   dtypes.uint64: "unsigned long long"}


def _atomic_update(ctx: RenderContext, x: UOp) -> str | None:
    """atomicAdd / atomicMax / atomicMin where CUDA has the operation for the type, else an atomicCAS loop over the
    element's bits (over the 32-bit word holding a 16-bit element)."""
    if x.arg is None:
        return None
    pointer, value, reduce = ctx.pointer_of(x.src[0]), x.src[1], str(x.arg)
    dtype = value.dtype
    renderer = ctx.renderer
    assert isinstance(renderer, CUDARenderer)
    address = pointer.address()
    operand_code = ctx.expression(value)
    native = _NATIVE_ADD if reduce == "add" else _NATIVE_MAX_MIN if reduce in ("max", "min") else {}
    if dtype in native and not (dtype == dtypes.float64 and renderer.arch_number < 60):
        cast = native[dtype]
        function = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}[reduce]
        ctx.emit(ctx.gated(pointer, f"{function}(({cast}*){address}, ({cast})({operand_code}));"))
        return ""
    type_name = renderer.render_dtype(dtype)
    bits = _CAS_BITS[dtype.itemsize]
    word, operand, seen, expected, old = (ctx.fresh(prefix)
                                         for prefix in ("word", "operand", "seen", "expected", "old"))
    combined = ctx.combine_code(reduce, old, operand, dtype)
    if dtype.itemsize == 2:  # the aligned word holding the element; the other half is written back unchanged
        shift = ctx.fresh("shift")
        head = (f"{bits}* {word} = ({bits}*)((unsigned long long){address} & ~3ull); {bits} {shift} = "
                f"(unsigned int)(((unsigned long long){address} & 2ull) * 8ull);")
        unpack = f"{type_name} {old}; {old}.bits = (unsigned short)({expected} >> {shift});"
        pack = f"({expected} & ~(0xffffu << {shift})) | ((unsigned int)({type_name}({combined})).bits << {shift})"
    else:
        head = f"{bits}* {word} = ({bits}*){address};"
        unpack = f"{type_name} {old} = tc_bitcast<{type_name}, {bits}>({expected});"
        pack = f"tc_bitcast<{bits}, {type_name}>(({type_name})({combined}))"
    ctx.emit(ctx.gated(pointer, f"{{ {head} {type_name} {operand} = {operand_code}; {bits} {seen} = *{word}, "
                                f"{expected}; do {{ {expected} = {seen}; {unpack} {seen} = atomicCAS({word}, "
                                f"{expected}, {pack}); }} while ({seen} != {expected}); }}"))
    return ""


def _lane_addresses(pointer: RenderedPointer, value_dtype: DType) -> list[str] | None:
    """The scalar lvalues of a vector access of `value_dtype` at `pointer`, or None for a scalar access."""
    if value_dtype.count <= 1 or (pointer.cast is None and value_dtype.count <= pointer.element.count):
        return None
    base = pointer.buffer
    index = pointer.index if pointer.index not in (None, "0") else None
    return [f"{base}[{index}+{lane}]" if index is not None else f"{base}[{lane}]" for lane in range(value_dtype.count)]


def _vector_store(ctx: RenderContext, x: UOp) -> str | None:
    """A vector write stores lane by lane; scalar writes are left to the base rules."""
    pointer, value = ctx.pointer_of(x.src[0]), x.src[1]
    lanes = _lane_addresses(pointer, value.dtype)
    if lanes is None:
        return None
    if ctx.names.get(value, "").isidentifier():
        source = ctx.names[value]
    else:
        source = ctx.fresh("vec")
        ctx.emit(f"{ctx.renderer.render_dtype(value.dtype)} {source} = {ctx.expression(value)};")
    ctx.emit(ctx.gated(pointer, " ".join(f"{lane} = {ctx.renderer.render_gep(source, position, value.dtype)};"
                                         for position, lane in enumerate(lanes))))
    return ""


cuda_rendering = text_rules([(UPat(Ops.STORE, name="x"), _vector_store),
                                 (UPat(Ops.STORE, name="x"), _atomic_update)])
"""CUDA's own rules: vector stores lane by lane (no alignment is assumed; vector loads: `render_access`) and
atomic updates."""


class CUDARenderer(CStyleLanguage):
    """CUDA C for one NVIDIA architecture (`arch`, e.g. "sm_90")."""

    device = "NV"
    suffix = "cu"
    has_local = True
    has_shared = True
    has_threads = False
    kernel_prefix = 'extern "C" __global__ '
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    arg_int_prefix = "const int"
    native_bfloat16 = True  # tc_bfloat16 converts itself; see PRELUDE
    string_rewrite = cuda_rendering + base_rendering
    code_for_op = CUDA_CODE_FOR_OP
    type_map = CUDA_TYPE_MAP
    vector_alu_ops: frozenset[Ops] = frozenset()  # CUDA's vector structs have no arithmetic operators
    global_max = (2 ** 31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    max_local_total = 256
    shared_max = 48 * 1024
    group_size = 128
    register_tile = (4, 4)
    max_buffers = 500  # 4 KB of kernel parameters at 8 bytes a pointer, with room for the integer arguments

    def __init__(self, arch: str = "sm_80", device: str = "NV", embed_program: bool = False,
                 tensor_cores: bool | None = None):
        self.arch, self.device, self.embed_program = arch, device, embed_program
        number = int(arch[3:5]) if arch[3:5].isdigit() else 0
        self.arch_number = number
        self.atomic_dtypes = _ATOMIC_DTYPES
        wanted = NV_TENSOR_CORES.value != 0 if tensor_cores is None else tensor_cores
        if wanted and number >= 80:  # mma.sync.m16n8k16 with f16 inputs needs sm_80 or later
            from tiny_nv.tensor_core import tensor_core_opt
            self.tensor_core_opt = tensor_core_opt
        self.vector_widths = {dtype: _VECTOR_WIDTHS for dtype in _VECTOR_SCALARS}
        self._block_size: int | None = None

    # ---- types and literals ----

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversions; to half and bfloat16 through float (their only constructor)."""
        if to_dtype.scalar in (dtypes.float16, dtypes.bfloat16) and from_dtype.scalar != to_dtype.scalar:
            return f"{self.storage_type(to_dtype.scalar)}((float)({expression}))"
        return super().render_cast(expression, from_dtype, to_dtype)

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """A union-based bit copy (see tc_bitcast in the prelude)."""
        return f"tc_bitcast<{self.render_dtype(to_dtype)}, {self.render_dtype(from_dtype)}>({expression})"

    def render_vector(self, dtype: DType, items: list[str]) -> str:
        """make_float4(a, b, c, d) and friends."""
        return f"make_{self.render_dtype(dtype)}({','.join(items)})"

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of a CUDA vector: .x .y .z .w."""
        if lane >= len(_LANES):
            raise ValueError(f"CUDA vectors have at most 4 lanes; lane {lane} of {dtype} was asked")
        return f"({expression}).{_LANES[lane]}"

    def vector_type_name(self, scalar: str, count: int) -> str:
        """CUDA's built-in vector type names (float4, uint2, longlong2, ...)."""
        if count not in (2, 3, 4):
            raise ValueError(f"CUDA has no built-in vector of {count} lanes of {scalar}; use 2, 3 or 4")
        short = {"signed char": "char", "unsigned char": "uchar", "unsigned short": "ushort",
                 "unsigned int": "uint", "long long": "longlong", "unsigned long long": "ulonglong"}.get(scalar, scalar)
        if short in ("tc_half", "tc_bfloat16", "bool"):
            raise ValueError(f"CUDA has no built-in vector of {scalar}: codegen must keep it scalar")
        return f"{short}{count}"

    # ---- memory declarations and thread indices ----

    def render_access(self, pointer: RenderedPointer, index_uop: UOp, value_dtype: DType) -> str:
        """A vector read is built from its lanes; scalar reads are the base's lvalues."""
        lanes = _lane_addresses(pointer, value_dtype)
        if lanes is None:
            return super().render_access(pointer, index_uop, value_dtype)
        return self.render_vector(value_dtype, lanes)

    def render_buffer_parameter(self, name: str, dtype: PtrDType, read_only: bool) -> str:
        """`[const] T* name` (global memory is the default address space in CUDA)."""
        const = self.const_buffer_prefix if read_only else ""
        return f"{const}{self.render_dtype(dtype.base)}* {name}"

    def render_special(self, name: str) -> str:
        """blockIdx / threadIdx, or the flat global index for idxN."""
        axis = _AXES[int(name[-1])]
        if name.startswith("lidx"):
            return f"(int)threadIdx.{axis}"
        if name.startswith("gidx"):
            return f"(int)blockIdx.{axis}"
        if name.startswith("idx"):
            return f"(int)(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})"
        raise ValueError(f"CUDA has no thread index {name!r}: expected gidxN, lidxN or idxN")

    # ---- the program ----

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Infinity and NaN literals, the half and bfloat16 structs and the bitcast helper (and the mma helper for
        tensor-core kernels)."""
        from tiny_nv.tensor_core import MMA_PRELUDE, uses_tensor_cores
        return [PRELUDE, MMA_PRELUDE] if uses_tensor_cores(uops) else [PRELUDE]

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str]) -> str:
        """The source with `__launch_bounds__` of the block size when the kernel has thread indices."""
        bounds = f"__launch_bounds__({self._block_size}) " if self._block_size else ""
        signature = f"{self.kernel_prefix}{bounds}void {name}({', '.join(parameters)}) {{"
        return "\n".join(prelude + [signature] + body + ["}"]) + "\n"

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The CUDA C source of the linear program `uops` as a kernel called `name`."""
        block = 1
        for uop in uops:
            if uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx"):
                size = uop.src[0] if uop.src else None
                block = block * size.arg if size is not None and size.op is Ops.CONST else 0
        self._block_size = block if block > 1 else None
        source = super().render_named(uops, name)
        if self.embed_program:  # the MOCK GPU runs the linear program itself (see tiny_nv.mock)
            from tiny_nv.mock import embed_program
            source = embed_program(source, uops)
        return source


def make_cuda_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The CUDA renderer and NVRTC compiler for `device`: the arch from DEV (NV::sm_90), else the GPU's own. Under
    DEV=MOCK+NV the source also carries its linear program and the compiler packs it with the CUBIN."""
    from tiny_nv.nvrtc import NVRTCCompiler, parse_arch
    from tiny_nv.target import device_arch
    from tinycore.device.registry import target_for
    chosen = arch or device_arch(device)
    parse_arch(chosen)
    if target_for(device).interface == "MOCK":
        from tiny_nv.mock import MockCompiler
        return CUDARenderer(chosen, device, embed_program=True), MockCompiler(chosen)
    return CUDARenderer(chosen, device), NVRTCCompiler(chosen)
