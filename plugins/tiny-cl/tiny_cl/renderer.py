"""The OpenCL C renderer: the core's C-like family with OpenCL's work-item functions, address spaces and vectors.
gidxN is get_group_id and lidxN get_local_id; a program without lidx reads gidxN with get_global_id (the same value
with one work-item per group, and the driver chooses the group shape). Vector accesses use vloadN / vstoreN
(element alignment only). half and double need the device's cl_khr_fp16 / cl_khr_fp64, else they are refused."""
from __future__ import annotations

from typing import Any

from tinycore.codegen.integer_pow import integer_pow_rules
from tinycore.dtype import DType, dtypes
from tinycore.renderer.cstyle import CStyleLanguage, RenderContext, RenderedPointer, atomic_rule, base_rendering
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

CL_TYPE_MAP: dict[DType, str] = {
    **CStyleLanguage.type_map, dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.uint16: "ushort",
    dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong"}
_EXTENSION_OF = {dtypes.float16: "cl_khr_fp16", dtypes.float64: "cl_khr_fp64"}
_VECTOR_WIDTHS, _INT64_ATOMICS = (2, 4, 8, 16), "cl_khr_int64_base_atomics"

def _atomic(ctx: RenderContext, pointer: RenderedPointer, value: str, dtype: DType, reduce: str) -> str:
    """OpenCL 1.1's 32-bit atomics (atomic_add/max/min for integers, else an atomic_cmpxchg loop over the element's
    bits) and, with cl_khr_int64_base_atomics, their 64-bit forms (atom_add, else an atom_cmpxchg loop)."""
    type_name, address, wide = ctx.renderer.render_dtype(dtype), pointer.address(), dtype.itemsize == 8
    if dtypes.is_int(dtype) and (reduce == "add" or (not wide and reduce in ("max", "min"))):
        return f"{'atom' if wide else 'atomic'}_{reduce}((volatile __global {type_name}*){address}, {value});"
    bits, exchange = ("ulong", "atom_cmpxchg") if wide else ("uint", "atomic_cmpxchg")
    target, operand, seen, expected = (ctx.fresh(prefix) for prefix in ("target", "operand", "seen", "expected"))
    combined = ctx.combine_code(reduce, f"as_{type_name}({expected})", operand, dtype)
    return (f"{{ volatile __global {bits}* {target} = (volatile __global {bits}*){address}; {type_name} {operand} = "
            f"{value}; {bits} {seen} = *{target}, {expected}; do {{ {expected} = {seen}; {seen} = {exchange}({target}, "
            f"{expected}, as_{bits}({combined})); }} while ({seen} != {expected}); }}")

cl_rendering = text_rules([(UPat(Ops.STORE, name="x"), atomic_rule(_atomic))])
"""OpenCL's own rules: atomic updates (vector accesses are data: `vector_load` and `vector_store`)."""

class OpenCLRenderer(CStyleLanguage):
    """OpenCL C for one device: work-item functions, __global/__local address spaces, vector types, extensions."""

    string_rewrite = cl_rendering + base_rendering
    device, suffix, has_local, has_shared, has_threads = "CL", "cl", True, True, False
    kernel_prefix, buffer_prefix, smem_prefix = "__kernel ", "__global ", "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    post_matcher = integer_pow_rules(dtypes.float32)  # OpenCL C's pow takes floating point types only
    integer_suffix = {**CStyleLanguage.integer_suffix, dtypes.int64: "l", dtypes.uint64: "ul"}
    vector_cast, bitcast_format = "convert_{type}({x})", "as_{type}({x})"
    vector_load, vector_store = "vload{count}(0, {address})", "vstore{count}({value}, 0, {address});"  # element-aligned
    vector_alu_ops = CStyleLanguage.vector_alu_ops | {Ops.AND, Ops.OR, Ops.XOR}
    memory_types = {dtypes.bool: "uchar"}  # bool has no defined size in OpenCL C memory
    code_for_workitem = {"g": lambda axis: f"get_group_id({axis})", "l": lambda axis: f"get_local_id({axis})",
                         "i": lambda axis: f"get_global_id({axis})"}
    flat_group_ids = True

    def __init__(self, device: str = "CL", extensions: frozenset[str] | set[str] = frozenset(),
                 global_max: tuple[int, ...] | None = None, local_max: tuple[int, ...] | None = None,
                 shared_max: int = 32768):
        self.device, self.extensions, self.shared_max = device, frozenset(extensions), shared_max
        self.type_map = {dtype: name for dtype, name in CL_TYPE_MAP.items()
                         if dtype not in _EXTENSION_OF or _EXTENSION_OF[dtype] in self.extensions}
        self.global_max, self.local_max = global_max or (2 ** 31 - 1,) * 3, local_max or (256, 256, 64)
        # OpenCL 1.1 core 32-bit atomics; 64-bit ones with cl_khr_int64_base_atomics (float64 also needs fp64)
        wide = (dtypes.int64, dtypes.uint64, dtypes.float64) if _INT64_ATOMICS in self.extensions else ()
        self.atomic_dtypes = frozenset({dtypes.int32, dtypes.uint32, dtypes.float32}.union(
            dtype for dtype in wide if dtype in self.type_map))
        self.vector_widths = {dtype: _VECTOR_WIDTHS for dtype in self.type_map
                              if dtype not in (dtypes.bool, dtypes.void, dtypes.bfloat16)}

    def storage_type(self, dtype: DType) -> str:
        """The OpenCL scalar type of `dtype`; half and double need the device's extension."""
        if (extension := _EXTENSION_OF.get(dtype)) is not None and dtype not in self.type_map:
            raise ValueError(f"{self.device} does not support {dtype}: the OpenCL device does not report {extension}; "
                             f"cast to float32 first (devices reporting it: see `tiny devices`)")
        return super().storage_type(dtype)

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of a vector: x.s0 ... x.sf."""
        return f"({expression}).s{lane:x}"

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """No contraction of a*b+c into fma (numpy rounds twice), extension pragmas and the bfloat16 helpers."""
        scalars = {dtype.scalar for dtype in used_dtypes}
        if bad := [dtype for dtype in used_dtypes if dtype.count > 1 and dtype.count not in _VECTOR_WIDTHS + (3,)]:
            raise ValueError(f"OpenCL C has no vector of {bad[0].count} lanes ({bad[0]}); use 2, 3, 4, 8 or 16")
        wide_atomics = any(uop.op is Ops.STORE and uop.arg is not None and uop.src[1].dtype.itemsize == 8
                           for uop in uops)
        extensions = [extension for dtype, extension in _EXTENSION_OF.items() if dtype in scalars and
                      self.storage_type(dtype)] + [_INT64_ATOMICS] * wide_atomics
        return ["#pragma OPENCL FP_CONTRACT OFF", *(f"#pragma OPENCL EXTENSION {name} : enable" for name in extensions)
                ] + [self.bfloat16_helpers("inline")] * (dtypes.bfloat16 in scalars)

def make_cl_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The OpenCL renderer and compiler for the CL device `device` (opens its context; `arch` is not used by CL)."""
    from tiny_cl.compiler import CLCompiler
    from tiny_cl.driver import open_device
    if arch:
        raise ValueError(f"the CL renderer takes no arch (got {arch!r}); the driver compiles for its own device: "
                         "use DEV=CL or DEV=CL:OPENCL")
    opened = open_device(device)
    renderer = OpenCLRenderer(device, opened.extensions, shared_max=int(opened.device.local_mem_size),
                              local_max=tuple(int(size) for size in opened.device.max_work_item_sizes[:3]))
    return renderer, CLCompiler(opened)
