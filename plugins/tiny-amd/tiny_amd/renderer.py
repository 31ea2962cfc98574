"""The HIP-style C renderer for AMD GPUs: the core's C-like family compiled by clang for amdgcn-amd-amdhsa, with no
ROCm headers or device libraries (everything the kernels use is a clang builtin or defined in the prelude).

- SPECIAL gidxN is `__builtin_amdgcn_workgroup_id_{x,y,z}()`, lidxN `__builtin_amdgcn_workitem_id_{x,y,z}()` (the
  core's launch contract: global_size counts workgroups, local_size work-items per group); kernels with work-item
  ids declare their group size with `amdgpu_flat_work_group_size`, so the backend sizes registers for it.
- DEFINE_LOCAL is LDS (`__attribute__((shared))`, address space 3); BARRIER is a workgroup release fence, `s_barrier`
  and an acquire fence, so LDS writes before the barrier are seen after it.
- half is clang's `_Float16` (native arithmetic); bfloat16 is stored as its 16 bits and computed in float32.
- Math is clang's builtins, which the AMDGPU backend lowers to instructions (no libm, no ocml): exp2, log2, sin,
  sqrt and trunc of float; pow through exp2/log2 in the prelude. float64 keeps sqrt and trunc (native) and refuses
  the transcendental ops, which only ROCm's device library provides.
- Scatter reductions update global memory atomically at agent scope through clang's `__hip_atomic_*` builtins on
  address-space-1 (global) pointers (`atomic_dtypes`: 32- and 64-bit integers and floats, half, bfloat16): fetch-add
  for integer and float64 sums, `__builtin_amdgcn_global_atomic_fadd_f32` for float32 sums (kernel buffers are
  coarse-grained device memory, where the instruction is exact; the generic fetch-add would be a compare-exchange
  loop on gfx90a, gfx11 and gfx12), fetch-max / fetch-min for integers, and a compare-exchange loop over the
  element's bits for the rest (products, float max/min, 16-bit floats; the backend widens 16-bit exchanges to the
  32-bit word). Where a target has no instruction for an operation (float64 add on gfx90a, gfx11 and gfx12) the
  backend itself makes the compare-exchange loop.
- Vectors are not used (every access and op is scalar): buffer views may start at any element.
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
    base_rendering,
)
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

HIP_TYPE_MAP: dict[DType, str] = {
    **BASE_TYPE_MAP, dtypes.int8: "signed char", dtypes.int64: "long long", dtypes.uint64: "unsigned long long",
    dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short"}

AMD_MATRIX_CORES = ContextVar("AMD_MATRIX_CORES", 1)
"""AMD_MATRIX_CORES=0 keeps half matmuls off the matrix cores (WMMA on gfx11/gfx12, MFMA on gfx90a/gfx942; used by
default)."""
_AXES = "xyz"
_NATIVE_DOUBLE = {"sqrt", "trunc"}


def _float_math(name: str) -> CodeForOp:
    """A unary math builtin: `__builtin_<name>f` for float (half and bfloat16 through float), `__builtin_<name>` for
    double where the backend has an instruction for it."""
    def code(operand: str, dtype: DType) -> str:
        if dtype.scalar == dtypes.float64:
            if name not in _NATIVE_DOUBLE:
                raise ValueError(f"AMD kernels have no float64 {name} without ROCm's device library: compute it in "
                                 "float32 (x.float()) or on another device")
            return f"__builtin_{name}({operand})"
        result = f"__builtin_{name}f((float)({operand}))"
        return result if dtype.scalar == dtypes.float32 else f"(({HIP_TYPE_MAP[dtype.scalar]}){result})"
    return code


def _pow(base: str, exponent: str, dtype: DType) -> str:
    """pow through the prelude's tc_pow (exp2 and log2 with the sign of odd integer powers of negative bases)."""
    if dtype.scalar == dtypes.float64:
        raise ValueError("AMD kernels have no float64 pow without ROCm's device library: compute it in float32")
    return f"(({HIP_TYPE_MAP[dtype.scalar]})tc_pow((float)({base}),(float)({exponent})))"


HIP_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    **BASE_CODE_FOR_OP, Ops.POW: _pow, Ops.EXP2: _float_math("exp2"), Ops.LOG2: _float_math("log2"),
    Ops.SIN: _float_math("sin"), Ops.SQRT: _float_math("sqrt"), Ops.TRUNC: _float_math("trunc")}

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

_ATOMIC_DTYPES = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64,
                            dtypes.float16, dtypes.bfloat16})
_NATIVE_ADD = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64})
_NATIVE_MAX_MIN = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})
_BITS = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_GLOBAL = "__attribute__((address_space(1)))"
_ORDER = "__ATOMIC_RELAXED"
_SCOPE = "__HIP_MEMORY_SCOPE_AGENT"


def _atomic_update(ctx: RenderContext, x: UOp) -> str | None:
    """fetch-add / fetch-max / fetch-min where the operation is native for the type, else a compare-exchange loop over
    the element's bits."""
    if x.arg is None:
        return None
    pointer, value, reduce = ctx.pointer_of(x.src[0]), x.src[1], str(x.arg)
    dtype = value.dtype
    type_name = ctx.renderer.render_dtype(dtype)
    address = pointer.address()
    operand_code = ctx.expression(value)
    native = _NATIVE_ADD if reduce == "add" else _NATIVE_MAX_MIN if reduce in ("max", "min") else frozenset()
    if reduce == "add" and dtype == dtypes.float32:
        # the builtin asserts coarse-grained memory (kernel buffers are), where a plain fetch-add on gfx90a and
        # gfx11/gfx12 becomes a compare-exchange loop
        statement = f"TC_ATOMIC_ADD_F32(({_GLOBAL} float*){address}, (float)({operand_code}));"
    elif dtype in native:
        statement = (f"__hip_atomic_fetch_{reduce}(({_GLOBAL} {type_name}*){address}, ({type_name})({operand_code}), "
                     f"{_ORDER}, {_SCOPE});")
    else:
        bits = _BITS[dtype.itemsize]
        target, operand, seen, expected, old, done = (ctx.fresh(prefix) for prefix in
                                                     ("target", "operand", "seen", "expected", "old", "done"))
        combined = ctx.combine_code(reduce, old, operand, dtype)
        statement = (f"{{ {_GLOBAL} {bits}* {target} = ({_GLOBAL} {bits}*){address}; {type_name} {operand} = "
                     f"{operand_code}; {bits} {seen} = __hip_atomic_load({target}, {_ORDER}, {_SCOPE}), {expected}; "
                     f"bool {done}; do {{ {expected} = {seen}; {type_name} {old} = __builtin_bit_cast({type_name}, "
                     f"{expected}); {done} = __hip_atomic_compare_exchange_strong({target}, &{seen}, "
                     f"__builtin_bit_cast({bits}, ({type_name})({combined})), {_ORDER}, {_ORDER}, {_SCOPE}); }} "
                     f"while (!{done}); }}")
    ctx.emit(ctx.gated(pointer, statement))
    return ""


hip_rendering = text_rules([(UPat(Ops.STORE, name="x"), _atomic_update)])
"""HIP's own rules: scatter reductions as agent-scope atomics on global pointers."""


BARRIER = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
           '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')


class HIPRenderer(CStyleLanguage):
    """HIP-style C for one AMD target (`arch`, e.g. "gfx1100"), compiled by clang (tiny_amd.compiler)."""

    device = "AMD"
    suffix = "hip"
    has_local = True
    has_shared = True
    has_threads = False
    supports_float4 = False
    kernel_prefix = 'extern "C" __attribute__((global)) '
    smem_prefix = "__attribute__((shared)) "
    barrier = BARRIER
    arg_int_prefix = "const int"
    native_bfloat16 = False
    string_rewrite = hip_rendering + base_rendering
    code_for_op = HIP_CODE_FOR_OP
    type_map = HIP_TYPE_MAP
    vector_alu_ops: frozenset[Ops] = frozenset()
    global_max = (2 ** 31 - 1, 65535, 65535)
    local_max = (1024, 1024, 1024)
    max_local_total = 256
    shared_max = 64 * 1024
    group_size = 128
    register_tile = (4, 4)
    max_buffers = 200  # kernarg segments stay well under the 4 KB the AQL path preloads

    def __init__(self, arch: str = "gfx1100", device: str = "AMD", embed_program: bool = False,
                 matrix_cores: bool | None = None):
        from tiny_amd.target import parse_target
        self.target = parse_target(arch)
        self.arch, self.device, self.embed_program = arch, device, embed_program
        self.vector_widths: dict[DType, tuple[int, ...]] = {}
        self.atomic_dtypes = _ATOMIC_DTYPES
        self._group_size: int | None = None
        self.matrix_instructions: tuple[Any, ...] = ()
        if AMD_MATRIX_CORES.value != 0 if matrix_cores is None else matrix_cores:
            from functools import partial

            from tiny_amd.matrix_core import matrix_core_opt, matrix_instructions
            self.matrix_instructions = matrix_instructions(arch)
            self.tensor_core_opt = partial(matrix_core_opt, self.matrix_instructions)

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """clang's bit cast between types of the same size."""
        return f"__builtin_bit_cast({self.render_dtype(to_dtype)}, ({self.render_dtype(from_dtype)})({expression}))"

    def render_buffer_parameter(self, name: str, dtype: PtrDType, read_only: bool) -> str:
        """`[const] T* name` (flat pointers to global memory)."""
        const = self.const_buffer_prefix if read_only else ""
        return f"{const}{self.render_dtype(dtype.base)}* {name}"

    def render_special(self, name: str) -> str:
        """Workgroup and work-item ids from the AMDGPU builtins."""
        if name[:-1] not in ("gidx", "lidx") or not name[-1].isdigit() or int(name[-1]) > 2:
            raise ValueError(f"AMD has no thread index {name!r}: expected gidxN or lidxN with N in 0..2")
        kind = "workitem" if name.startswith("lidx") else "workgroup"
        return f"(int)__builtin_amdgcn_{kind}_id_{_AXES[int(name[-1])]}()"

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """Infinity and NaN, the bfloat16 conversions and pow; the matrix-instruction helper when the kernel uses it."""
        from tiny_amd.matrix_core import uses_matrix_cores
        return [PRELUDE] + [instruction.prelude() for instruction in self.matrix_instructions
                            if uses_matrix_cores(uops, instruction)]

    def render_kernel(self, name: str, parameters: list[str], body: list[str], prelude: list[str]) -> str:
        """The source, declaring the flat work-group size when the kernel has work-item ids."""
        size = self._group_size or 1
        bounds = f"__attribute__((amdgpu_flat_work_group_size(1, {size}))) "
        signature = f"{self.kernel_prefix}{bounds}void {name}({', '.join(parameters)}) {{"
        return "\n".join(prelude + [signature] + body + ["}"]) + "\n"

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The source of the linear program `uops` as a kernel called `name`."""
        group = 1
        for uop in uops:
            if uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx"):
                size = uop.src[0] if uop.src else None
                group = group * size.arg if size is not None and size.op is Ops.CONST else 1024
        self._group_size = min(group, 1024)
        source = super().render_named(uops, name)
        if self.embed_program:  # the MOCK GPU runs the linear program itself (see tinycore.hcq.mock)
            from tinycore.hcq.mock import embed_program
            source = embed_program(source, uops)
        return source


def make_hip_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The HIP renderer and clang compiler for `device`: the target from DEV (AMD::gfx1100), else the GPU's own. Under
    DEV=MOCK+AMD the source also carries its linear program and the compiler packs it with the code object."""
    from tiny_amd.compiler import AMDCompiler
    from tiny_amd.target import device_target, parse_target
    from tinycore.device.registry import target_for
    chosen = arch or device_target(device)
    parse_target(chosen)
    if target_for(device).interface == "MOCK":
        from tiny_amd.amd_mock import MockCompiler
        return HIPRenderer(chosen, device, embed_program=True), MockCompiler(chosen)
    return HIPRenderer(chosen, device), AMDCompiler(chosen)
