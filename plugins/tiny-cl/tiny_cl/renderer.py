"""The OpenCL C renderer: the core's C-like family with OpenCL work-item functions, address spaces and vectors.

SPECIAL indices: gidxN is the work-group index (get_group_id) and lidxN the index inside the group (get_local_id);
a program without lidx indices reads gidxN with get_global_id instead, which is the same value for a launch with
one work-item per group and lets the runtime leave the work-group shape to the driver. Vector loads and stores
go through vloadN / vstoreN (element alignment only). half and double are enabled with their pragmas only when
the device reports cl_khr_fp16 / cl_khr_fp64; without them the dtype is refused with a clear error.
"""
from __future__ import annotations

from typing import Any

from tinycore.dtype import DType, PtrDType, dtypes
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

CL_TYPE_MAP: dict[DType, str] = {
    **BASE_TYPE_MAP, dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint",
    dtypes.int64: "long", dtypes.uint64: "ulong"}

_EXTENSION_OF = {dtypes.float16: "cl_khr_fp16", dtypes.float64: "cl_khr_fp64"}

_VECTOR_WIDTHS = (2, 4, 8, 16)

_INT64_ATOMICS = "cl_khr_int64_base_atomics"


def _pow(base: str, exponent: str, dtype: DType) -> str:
    """pow for floats; integers go through double (or float) and back."""
    if dtypes.is_float(dtype):
        return f"pow({base},{exponent})"
    return f"(({CL_TYPE_MAP[dtype.scalar]})pow((float)({base}),(float)({exponent})))"


CL_CODE_FOR_OP: dict[Ops, CodeForOp] = {**BASE_CODE_FOR_OP, Ops.POW: _pow}

_BF16_HELPERS = """inline float tc_bf16_to_f32(ushort bits) { return as_float(((uint)bits) << 16); }
inline ushort tc_f32_to_bf16(float value) {
  uint word = as_uint(value);
  if ((word & 0x7fffffffu) > 0x7f800000u) return (ushort)((word >> 16) | 64u);
  word += 0x7fffu + ((word >> 16) & 1u); return (ushort)(word >> 16);
}"""


def _vector_address(pointer: RenderedPointer, value_dtype: DType) -> str | None:
    """The scalar address of a vector access of `value_dtype`, or None for a scalar access."""
    if value_dtype.count <= 1 or value_dtype.count <= pointer.element.count:
        return None
    if pointer.cast is not None:
        return pointer.buffer if pointer.index in (None, "0") else f"({pointer.buffer}+{pointer.index})"
    return pointer.address()


def _vector_store(ctx: RenderContext, x: UOp) -> str | None:
    """A vector write is vstoreN(value, 0, address); scalar writes are left to the base rules."""
    pointer = ctx.pointer_of(x.src[0])
    address = _vector_address(pointer, x.src[1].dtype)
    if address is None or x.arg is not None:
        return None
    ctx.emit(ctx.gated(pointer, f"vstore{x.src[1].dtype.count}({ctx.expression(x.src[1])}, 0, {address});"))
    return ""


def _atomic_update(ctx: RenderContext, x: UOp) -> str | None:
    """OpenCL 1.1's 32-bit global atomics (atomic_add / atomic_max / atomic_min for integers, else an atomic_cmpxchg
    loop over the element's bits: floats, integer products) and, with cl_khr_int64_base_atomics, their 64-bit forms
    (atom_add for integer sums, else an atom_cmpxchg loop)."""
    if x.arg is None:
        return None
    pointer, value, reduce = ctx.pointer_of(x.src[0]), x.src[1], str(x.arg)
    dtype = value.dtype
    type_name = ctx.renderer.render_dtype(dtype)
    address = pointer.address()
    wide = dtype.itemsize == 8
    if dtypes.is_int(dtype) and (reduce == "add" or (not wide and reduce in ("max", "min"))):
        function = f"atom_{reduce}" if wide else f"atomic_{reduce}"
        ctx.emit(ctx.gated(pointer, f"{function}((volatile __global {type_name}*){address}, "
                                    f"{ctx.expression(value)});"))
        return ""
    bits = "ulong" if wide else "uint"
    exchange = "atom_cmpxchg" if wide else "atomic_cmpxchg"
    target, operand, seen, expected = (ctx.fresh(prefix) for prefix in ("target", "operand", "seen", "expected"))
    combined = ctx.combine_code(reduce, f"as_{type_name}({expected})", operand, dtype)
    ctx.emit(ctx.gated(pointer, f"{{ volatile __global {bits}* {target} = (volatile __global {bits}*){address}; "
                                f"{type_name} {operand} = {ctx.expression(value)}; {bits} {seen} = *{target}, "
                                f"{expected}; do {{ {expected} = {seen}; {seen} = {exchange}({target}, {expected}, "
                                f"as_{bits}({combined})); }} while ({seen} != {expected}); }}"))
    return ""


cl_rendering = text_rules([(UPat(Ops.STORE, name="x"), _atomic_update),
                           (UPat(Ops.STORE, name="x"), _vector_store)])
"""OpenCL's own rules: vector stores through vstoreN and atomic updates (vector loads: `render_access`)."""


class OpenCLRenderer(CStyleLanguage):
    """OpenCL C for one device: work-item functions, __global/__local address spaces, vector types, extensions."""

    string_rewrite = cl_rendering + base_rendering

    device = "CL"
    suffix = "cl"
    has_local = True
    has_shared = True
    has_threads = False
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    arg_int_prefix = "const int"
    code_for_op = CL_CODE_FOR_OP
    vector_alu_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.AND, Ops.OR, Ops.XOR})

    def __init__(self, device: str = "CL", extensions: frozenset[str] | set[str] = frozenset(),
                 global_max: tuple[int, ...] | None = None, local_max: tuple[int, ...] | None = None,
                 shared_max: int = 32768):
        self.device = device
        self.extensions = frozenset(extensions)
        self.type_map = {dtype: name for dtype, name in CL_TYPE_MAP.items()
                         if dtype not in _EXTENSION_OF or _EXTENSION_OF[dtype] in self.extensions}
        self.global_max = global_max or (2 ** 31 - 1,) * 3
        self.local_max = local_max or (256, 256, 64)
        self.shared_max = shared_max
        # OpenCL 1.1 core 32-bit atomics; 64-bit ones with cl_khr_int64_base_atomics (float64 also needs fp64)
        atomic = {dtypes.int32, dtypes.uint32, dtypes.float32}
        if _INT64_ATOMICS in self.extensions:
            atomic |= {dtype for dtype in (dtypes.int64, dtypes.uint64, dtypes.float64) if dtype in self.type_map}
        self.atomic_dtypes = frozenset(atomic)
        self.vector_widths = {dtype: _VECTOR_WIDTHS for dtype in self.type_map
                              if dtype not in (dtypes.bool, dtypes.void, dtypes.bfloat16)}
        self._uses_local_ids = False

    # ---- types and literals ----

    def storage_type(self, dtype: DType) -> str:
        """The OpenCL scalar type of `dtype`; half and double need the device's extension."""
        extension = _EXTENSION_OF.get(dtype)
        if extension is not None and dtype not in self.type_map:
            raise ValueError(f"{self.device} does not support {dtype}: the OpenCL device does not report {extension}; "
                             f"cast to float32 first (devices reporting it: see `tiny devices`)")
        return super().storage_type(dtype)

    def render_const(self, value: object, dtype: DType) -> str:
        """Literals; 64-bit integers with OpenCL's l / ul suffixes (long long is reserved in OpenCL C)."""
        if dtype.scalar == dtypes.int64:
            number = int(value)  # type: ignore[call-overload]
            if number == -2 ** 63:
                return "(-9223372036854775807l-1)"
            return f"({number}l)" if number < 0 else f"{number}l"
        if dtype.scalar == dtypes.uint64:
            return f"{int(value)}ul"  # type: ignore[call-overload]
        return super().render_const(value, dtype)

    def render_bitcast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str:
        """as_<type>(x) reinterprets bits between types of the same size."""
        return f"as_{self.render_dtype(to_dtype)}({expression})"

    def render_gep(self, expression: str, lane: int, dtype: DType) -> str:
        """Lane `lane` of a vector: x.s0 ... x.sf."""
        return f"({expression}).s{lane:x}"

    def render_vector_cast(self, expression: str, from_dtype: DType, to_dtype: DType) -> str | None:
        """convert_<typeN>(x) between numeric vectors (bool and bfloat16 lane by lane)."""
        plain = {dtypes.bool, dtypes.bfloat16}
        if from_dtype.scalar in plain or to_dtype.scalar in plain:
            return None
        return f"convert_{self.render_dtype(to_dtype)}({expression})"

    # ---- memory ----

    def render_access(self, pointer: RenderedPointer, index_uop: UOp, value_dtype: DType) -> str:
        """A vector read is vloadN(0, address); scalar reads and writes are the base's lvalues."""
        address = _vector_address(pointer, value_dtype)
        if address is None:
            return super().render_access(pointer, index_uop, value_dtype)
        return f"vload{value_dtype.count}(0, {address})"

    def _memory_type(self, dtype: DType) -> str:
        """The type stored in memory: bool is a uchar (bool has no defined size in OpenCL C memory)."""
        return "uchar" if dtype == dtypes.bool else self.render_dtype(dtype)

    def render_buffer_parameter(self, name: str, dtype: PtrDType, read_only: bool) -> str:
        """`__global [const] T* name`."""
        const = self.const_buffer_prefix if read_only else ""
        return f"{self.buffer_prefix}{const}{self._memory_type(dtype.base)}* {name}"

    def render_local(self, name: str, dtype: DType, size: int) -> str:
        """`__local T name[size];`."""
        return f"{self.smem_prefix}{self._memory_type(dtype)} {name}[{size}];"

    # ---- work items ----

    def render_special(self, name: str) -> str:
        """get_group_id / get_local_id, or get_global_id for gidx in programs without local indices."""
        axis = int(name[-1])
        if name.startswith("lidx"):
            return f"get_local_id({axis})"
        if name.startswith("gidx"):
            return f"get_group_id({axis})" if self._uses_local_ids else f"get_global_id({axis})"
        if name.startswith("idx"):
            return f"get_global_id({axis})"
        raise ValueError(f"OpenCL has no thread index {name!r}: expected gidxN, lidxN or idxN")

    # ---- the program ----

    def render_prelude(self, uops: list[UOp], used_dtypes: set[DType]) -> list[str]:
        """No contraction of a*b+c into fma (numpy rounds twice), extension pragmas for half and double, and the
        bfloat16 helpers."""
        lines = ["#pragma OPENCL FP_CONTRACT OFF"]
        scalars = {dtype.scalar for dtype in used_dtypes}
        for dtype, extension in _EXTENSION_OF.items():
            if dtype in scalars:
                self.storage_type(dtype)
                lines.append(f"#pragma OPENCL EXTENSION {extension} : enable")
        if any(uop.op is Ops.STORE and uop.arg is not None and uop.src[1].dtype.itemsize == 8 for uop in uops):
            lines.append(f"#pragma OPENCL EXTENSION {_INT64_ATOMICS} : enable")
        if dtypes.bfloat16 in scalars:
            lines.append(_BF16_HELPERS)
        for dtype in used_dtypes:
            if dtype.count > 1 and dtype.count not in _VECTOR_WIDTHS + (3,):
                raise ValueError(f"OpenCL C has no vector of {dtype.count} lanes ({dtype}); use 2, 3, 4, 8 or 16")
        return lines

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The OpenCL C source of the linear program `uops` as a kernel called `name`."""
        self._uses_local_ids = any(uop.op is Ops.SPECIAL and str(uop.arg).startswith("lidx") for uop in uops)
        return super().render_named(uops, name)


def make_cl_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The OpenCL renderer and compiler for the CL device `device` (opens its context; `arch` is not used by CL)."""
    from tiny_cl.compiler import CLCompiler
    from tiny_cl.driver import open_device
    if arch:
        raise ValueError(f"the CL renderer takes no arch (got {arch!r}); the driver compiles for its own device: "
                         "use DEV=CL or DEV=CL:OPENCL")
    opened = open_device(device)
    hardware = opened.device
    renderer = OpenCLRenderer(device, opened.extensions, global_max=(2 ** 31 - 1,) * 3,
                              local_max=tuple(int(size) for size in hardware.max_work_item_sizes[:3]),
                              shared_max=int(hardware.local_mem_size))
    return renderer, CLCompiler(opened)
