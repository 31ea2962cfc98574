"""The HIP-style C renderer for AMD GPUs, compiled by clang for amdgcn-amd-amdhsa without ROCm headers or libraries.
gidxN/lidxN are the workgroup/work-item id builtins; LDS is address space 3; half is `_Float16`, bfloat16 its bits
computed in float32; float64 has sqrt and trunc only. Scatter reduces are agent-scope `__hip_atomic_*` (float32 sums:
the global fadd instruction), else a compare-exchange loop. No vectors: buffer views may start at any element."""
from __future__ import annotations

from functools import partial
from typing import Any

from tinycore.dtype import DType, dtypes
from tinycore.helpers import ContextVar
from tinycore.renderer import cstyle
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

HIP_TYPE_MAP: dict[DType, str] = {**cstyle.BASE_TYPE_MAP, dtypes.float16: "_Float16"}  # bfloat16: its bits
AMD_MATRIX_CORES = ContextVar("AMD_MATRIX_CORES", 1)
"""AMD_MATRIX_CORES=0 keeps half matmuls off the matrix cores (WMMA on gfx11/gfx12, MFMA on gfx90a/gfx942)."""

def _float_math(name: str, dtype: DType, *operands: str) -> str:
    """`__builtin_<name>f` for float (half and bfloat16 through float), `__builtin_<name>` for double if native; pow is
    the prelude's tc_pow (exp2 and log2 with the sign of odd integer powers of negative bases), of any dtype."""
    if dtype.scalar == dtypes.float64 and name not in ("sqrt", "trunc"):
        raise ValueError(f"AMD kernels have no float64 {name} without ROCm's device library: compute it in "
                         "float32 (x.float()) or on another device")
    if dtype.scalar == dtypes.float64:
        return f"__builtin_{name}({operands[0]})"
    floats = ",".join(f"(float)({operand})" for operand in operands)
    result = f"tc_pow({floats})" if name == "pow" else f"__builtin_{name}f({floats})"
    return result if dtype.scalar == dtypes.float32 and name != "pow" else f"(({HIP_TYPE_MAP[dtype.scalar]}){result})"

PRELUDE = r"""#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define TC_DEVICE __attribute__((device)) static inline
TC_DEVICE float tc_bf16_to_f32(unsigned short bits) { return __builtin_bit_cast(float, ((unsigned int)bits) << 16); }
TC_DEVICE unsigned short tc_f32_to_bf16(float value) {
  unsigned int word = __builtin_bit_cast(unsigned int, value);
  if ((word & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((word >> 16) | 64u);
  return (unsigned short)((word + 0x7fffu + ((word >> 16) & 1u)) >> 16); }
TC_DEVICE float tc_pow(float base, float exponent) {
  if (exponent == 0.0f) return 1.0f;
  float magnitude = __builtin_exp2f(exponent * __builtin_log2f(__builtin_fabsf(base)));
  if (base >= 0.0f) return magnitude;
  if (__builtin_truncf(exponent) != exponent) return NAN;
  return (__builtin_fmodf(exponent, 2.0f) != 0.0f) ? -magnitude : magnitude; }
#if __has_builtin(__builtin_amdgcn_global_atomic_fadd_f32)
#define TC_ATOMIC_ADD_F32(address, value) __builtin_amdgcn_global_atomic_fadd_f32(address, value)
#else
#define TC_ATOMIC_ADD_F32(address, value) \
  __hip_atomic_fetch_add(address, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
#endif"""

_INTEGERS = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})
_NATIVE = {"add": _INTEGERS | {dtypes.float32, dtypes.float64}, "max": _INTEGERS, "min": _INTEGERS}
_BITS = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_GLOBAL, _ORDER, _SCOPE = "__attribute__((address_space(1)))", "__ATOMIC_RELAXED", "__HIP_MEMORY_SCOPE_AGENT"

def _atomic(ctx: cstyle.RenderContext, pointer: cstyle.RenderedPointer, value: str, dtype: DType, reduce: str) -> str:
    """fetch-add / -max / -min where native for the type, else a compare-exchange loop over the element's bits."""
    type_name, address = ctx.renderer.render_dtype(dtype), pointer.address()
    if reduce == "add" and dtype == dtypes.float32:  # a plain fetch-add is a compare-exchange loop on gfx90a, gfx11+
        return f"TC_ATOMIC_ADD_F32(({_GLOBAL} float*){address}, (float)({value}));"
    if dtype in _NATIVE.get(reduce, ()):
        return (f"__hip_atomic_fetch_{reduce}(({_GLOBAL} {type_name}*){address}, ({type_name})({value}), {_ORDER}, "
                f"{_SCOPE});")
    bits = _BITS[dtype.itemsize]
    target, operand, seen, expected, old, done = (ctx.fresh(name) for name in
                                                 ("target", "operand", "seen", "expected", "old", "done"))
    combined = ctx.combine_code(reduce, old, operand, dtype)
    return (f"{{ {_GLOBAL} {bits}* {target} = ({_GLOBAL} {bits}*){address}; {type_name} {operand} = {value}; {bits} "
            f"{seen} = __hip_atomic_load({target}, {_ORDER}, {_SCOPE}), {expected}; bool {done}; do {{ {expected} = "
            f"{seen}; {type_name} {old} = __builtin_bit_cast({type_name}, {expected}); {done} = "
            f"__hip_atomic_compare_exchange_strong({target}, &{seen}, __builtin_bit_cast({bits}, ({type_name})("
            f"{combined})), {_ORDER}, {_ORDER}, {_SCOPE}); }} while (!{done}); }}")

hip_rendering = text_rules([(UPat(Ops.STORE, name="x"), cstyle.atomic_rule(_atomic))])
"""HIP's own rules: scatter reductions as agent-scope atomics on global pointers."""

class HIPRenderer(cstyle.CStyleLanguage):
    """HIP-style C for one AMD target (`arch`, e.g. "gfx1100"), compiled by clang (tiny_amd.compiler)."""

    device, suffix, has_local, has_shared, has_threads, supports_float4 = "AMD", "hip", True, True, False, False
    kernel_prefix, smem_prefix = 'extern "C" __attribute__((global)) ', "__attribute__((shared)) "
    barrier = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
               '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')
    string_rewrite = hip_rendering + cstyle.base_rendering
    code_for_op = {**cstyle.BASE_CODE_FOR_OP, **cstyle.math_functions(_float_math)}
    type_map, bitcast_format = HIP_TYPE_MAP, "__builtin_bit_cast({type}, ({source})({x}))"
    code_for_workitem = {"g": lambda axis: f"(int)__builtin_amdgcn_workgroup_id_{'xyz'[axis]}()",
                         "l": lambda axis: f"(int)__builtin_amdgcn_workitem_id_{'xyz'[axis]}()"}
    vector_alu_ops: frozenset[Ops] = frozenset()
    global_max, local_max, max_local_total, shared_max = (2 ** 31 - 1, 65535, 65535), (1024, 1024, 1024), 256, 65536
    group_size, register_tile = 128, (4, 4)
    max_buffers = 200  # kernarg segments stay well under the 4 KB the AQL path preloads
    atomic_dtypes = _NATIVE["add"] | {dtypes.float16, dtypes.bfloat16}

    def __init__(self, arch: str = "gfx1100", device: str = "AMD", embed_program: bool = False,
                 matrix_cores: bool | None = None):
        from tiny_amd.target import parse_target
        self.target = parse_target(arch)
        from tinycore.hcq.mock import embed_program as embed  # MOCK GPUs run the linear program the source carries
        self.arch, self.device, self.program_embedder = arch, device, embed if embed_program else None
        self.matrix_instructions: tuple[Any, ...] = ()  # no vector types (the contract's empty vector_widths)
        if AMD_MATRIX_CORES.value != 0 if matrix_cores is None else matrix_cores:
            from tiny_amd.matrix_core import matrix_core_opt, matrix_instructions
            self.matrix_instructions = matrix_instructions(arch)
            self.tensor_core_opt = partial(matrix_core_opt, self.matrix_instructions)

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Infinity and NaN, the bfloat16 conversions and pow; the matrix-instruction helper when the kernel uses it."""
        from tiny_amd.matrix_core import uses_matrix_cores
        return [PRELUDE] + [instruction.prelude() for instruction in self.matrix_instructions
                            if uses_matrix_cores(uops, instruction)]

    def kernel_attributes(self, uops: list[UOp]) -> str:
        """The flat work-group size (1024 where a work-item count is not a constant)."""
        return f"__attribute__((amdgpu_flat_work_group_size(1, {min(cstyle.threads_per_group(uops) or 1024, 1024)}))) "

def make_hip_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The HIP renderer and clang compiler for `device` and the DEV target (AMD::gfx1100) or the GPU's (MOCK too)."""
    from tiny_amd.amd_mock import MockCompiler
    from tiny_amd.compiler import AMDCompiler
    from tiny_amd.target import device_target, parse_target
    from tinycore.device.registry import target_for
    parse_target(chosen := arch or device_target(device))
    mock = target_for(device).interface == "MOCK"
    return HIPRenderer(chosen, device, embed_program=mock), (MockCompiler if mock else AMDCompiler)(chosen)
