"""The CUDA C renderer: gidxN is blockIdx, lidxN threadIdx (global_size counts blocks), `__launch_bounds__`.
half and bfloat16 are 16-bit structs from the prelude (NVRTC needs no toolkit headers), computed in float. Scatter
reduces are atomicAdd/Max/Min where CUDA has them, else an atomicCAS loop over the element's bits (the aligned word
for 16-bit types). Vector memory accesses go lane by lane: a buffer view may start at any element (no alignment)."""
from __future__ import annotations

from typing import Any

from tinycore.codegen.integer_pow import integer_pow_rules
from tinycore.dtype import DType, dtypes
from tinycore.helpers import ContextVar
from tinycore.renderer import cstyle
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

CUDA_TYPE_MAP: dict[DType, str] = {**cstyle.BASE_TYPE_MAP, dtypes.float16: "tc_half", dtypes.bfloat16: "tc_bfloat16"}
NV_TENSOR_CORES = ContextVar("NV_TENSOR_CORES", 1)
"""NV_TENSOR_CORES=0 keeps half matmuls off the tensor cores (on sm_80 and later they are used by default)."""

def _math(name: str, dtype: DType, *operands: str) -> str:
    """A math function of double, else of float (half and bfloat16 through float; integer pow: `integer_pow_rules`)."""
    return f"{name}({','.join(operands)})" if dtype.scalar == dtypes.float64 else \
        f"{name}f({','.join(f'(float)({operand})' for operand in operands)})"

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

# the overloads of CUDA's atomic functions: by element size for atomicCAS, by dtype for the native operations
_CAS_BITS = {2: "unsigned int", 4: "unsigned int", 8: "unsigned long long"}
_MAX_TYPES = {dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
              dtypes.uint64: "unsigned long long"}
_NATIVE = {"add": {**_MAX_TYPES, dtypes.int64: "unsigned long long", dtypes.float32: "float", dtypes.float64: "double"},
           "max": _MAX_TYPES, "min": _MAX_TYPES}

def _atomic(ctx: cstyle.RenderContext, pointer: cstyle.RenderedPointer, value: str, dtype: DType, reduce: str) -> str:
    """atomicAdd / Max / Min where CUDA has them for the type (float64 sums from sm_60), else an atomicCAS loop."""
    renderer, address, type_name, bits = ctx.renderer, pointer.address(), ctx.renderer.render_dtype(dtype), \
        _CAS_BITS[dtype.itemsize]
    assert isinstance(renderer, CUDARenderer)
    if (cast := _NATIVE.get(reduce, {}).get(dtype)) and not (dtype == dtypes.float64 and renderer.arch_number < 60):
        return f"atomic{reduce.capitalize()}(({cast}*){address}, ({cast})({value}));"
    word, operand, seen, expected, old = (ctx.fresh(name) for name in ("word", "operand", "seen", "expected", "old"))
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
    return (f"{{ {head} {type_name} {operand} = {value}; {bits} {seen} = *{word}, {expected}; do {{ {expected} = "
            f"{seen}; {unpack} {seen} = atomicCAS({word}, {expected}, {pack}); }} while ({seen} != {expected}); }}")

cuda_rendering = text_rules([(UPat(Ops.STORE, name="x"), cstyle.atomic_rule(_atomic))])
"""CUDA's own rules: atomic updates (vector accesses go lane by lane: `vector_by_lanes`)."""

class CUDARenderer(cstyle.CStyleLanguage):
    """CUDA C for one NVIDIA architecture (`arch`, e.g. "sm_90")."""

    device, suffix, has_local, has_shared, has_threads = "NV", "cu", True, True, False
    kernel_prefix, smem_prefix, barrier = 'extern "C" __global__ ', "__shared__ ", "__syncthreads();"
    native_bfloat16, emulated_floats = True, frozenset()  # tc_half and tc_bfloat16 convert themselves; see PRELUDE
    vector_by_lanes = True  # a buffer view may start at any element
    string_rewrite = cuda_rendering + cstyle.base_rendering
    code_for_op, type_map = {**cstyle.BASE_CODE_FOR_OP, **cstyle.math_functions(_math)}, CUDA_TYPE_MAP
    post_matcher = integer_pow_rules(dtypes.float32)
    vector_format, bitcast_format = "make_{type}({items})", "tc_bitcast<{type}, {source}>({x})"
    code_for_workitem = {"g": lambda axis: f"(int)blockIdx.{'xyz'[axis]}",
                         "l": lambda axis: f"(int)threadIdx.{'xyz'[axis]}",
                         "i": lambda axis: "(int)(blockIdx.{0}*blockDim.{0}+threadIdx.{0})".format("xyz"[axis])}
    vector_alu_ops: frozenset[Ops] = frozenset()  # CUDA's vector structs have no arithmetic operators
    global_max, local_max, max_local_total, shared_max = (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 256, 48 * 1024
    group_size, register_tile = 128, (4, 4)
    max_buffers = 500  # 4 KB of kernel parameters at 8 bytes a pointer, with room for the integer arguments
    atomic_dtypes = frozenset({*_MAX_TYPES, dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16})

    def __init__(self, arch: str = "sm_80", device: str = "NV", embed_program: bool = False,
                 tensor_cores: bool | None = None):
        from tinycore.hcq.mock import embed_program as embed  # MOCK GPUs run the linear program the source carries
        self.arch, self.device, self.program_embedder = arch, device, embed if embed_program else None
        self.arch_number = int(arch[3:5]) if arch[3:5].isdigit() else 0
        if (NV_TENSOR_CORES.value != 0 if tensor_cores is None else tensor_cores) and self.arch_number >= 80:
            from tiny_nv.tensor_core import tensor_core_opt  # mma.sync.m16n8k16 with f16 inputs needs sm_80 or later
            self.tensor_core_opt = tensor_core_opt
        self.vector_widths = {dtype: (2, 4) for dtype in (dtypes.float32, dtypes.int32, dtypes.uint32)}

    def render_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """Value conversions; to half and bfloat16 through float (their only constructor)."""
        if to_dtype.scalar in (dtypes.float16, dtypes.bfloat16) and from_dtype.scalar != to_dtype.scalar:
            return f"{self.storage_type(to_dtype.scalar)}((float)({expression}))"
        return super().render_cast(expression, from_dtype, to_dtype)

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of a CUDA vector (at most 4 lanes, see `vector_type_name`): .x .y .z .w."""
        return f"({expression}).{'xyzw'[lane]}"

    def vector_type_name(self, scalar: str, count: int) -> str:
        """CUDA's built-in vector type names (float4, uint2, longlong2, ...)."""
        if count not in (2, 3, 4) or scalar in ("tc_half", "tc_bfloat16", "bool"):
            raise ValueError(f"CUDA has no built-in vector of {count} lanes of {scalar}: codegen must keep it scalar")
        return super().vector_type_name("char" if scalar == "signed char" else scalar, count)  # uchar, longlong, ...

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Infinity and NaN, the half and bfloat16 structs, the bitcast helper (and mma for tensor-core kernels)."""
        from tiny_nv.tensor_core import MMA_PRELUDE, uses_tensor_cores
        return [PRELUDE, MMA_PRELUDE] if uses_tensor_cores(uops) else [PRELUDE]

    def kernel_attributes(self, uops: list[UOp]) -> str:
        """`__launch_bounds__` of the block size when the kernel has thread indices of constant sizes."""
        return f"__launch_bounds__({block}) " if (block := cstyle.threads_per_group(uops)) and block > 1 else ""

def make_cuda_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The CUDA renderer and NVRTC compiler for `device` and the DEV arch (NV::sm_90) or the GPU's (MOCK too)."""
    from tiny_nv.mock import MockCompiler
    from tiny_nv.nvrtc import NVRTCCompiler, parse_arch
    from tiny_nv.target import device_arch
    from tinycore.device.registry import target_for
    parse_arch(chosen := arch or device_arch(device))
    mock = target_for(device).interface == "MOCK"
    return CUDARenderer(chosen, device, embed_program=mock), (MockCompiler if mock else NVRTCCompiler)(chosen)
