"""DEV=CPU:X86: the CPU's kernels as x86-64 machine code selected, allocated and encoded in Python (no toolchain).

The renderer runs instruction selection (tiny_cpu.x86.isel) when a kernel is rendered, so a construct it cannot
encode is refused there with a SelectionError naming it; nothing falls back to another renderer. Its "source" is a
short text header followed by the machine code in hex, which keys the compile cache as any source does; the
"compiler" only turns the hex back into bytes, and `X86Program` maps them into executable memory (W^X) and hands the
entry point to the CPU queue and its worker pool as the other CPU renderers do.
"""

from __future__ import annotations

import gc

from tiny_cpu.runtime import EntryProgram
from tiny_cpu.x86.executable import ExecutableCode
from tiny_cpu.x86.float64_math import float64_transcendentals
from tiny_cpu.x86.isel import VectorX86Contract, select_kernel
from tinycore.device.compiler import CompileError, Compiler
from tinycore.dtype import DType, dtypes
from tinycore.renderer.renderer import Renderer, kernel_name
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

_HEADER = "; x86-64 machine code, tinycore x86 renderer"
WIDE_TILE_VECTOR_BYTES = 64
"""preferred_vector_bytes with 32 vector registers: codegen sizes register tiles for them by it (and, with 16-lane
vectors declared in `vector_widths`, picks them)."""
AVX512_FLAGS = frozenset({"avx512f", "avx512vl", "avx512dq"})
"""The AVX-512 subsets the selection's EVEX code uses: F (zmm, k masks), VL (xmm16-31 in 128/256-bit instructions),
DQ (vextractf32x8, vinsertf32x8, vpmovm2d, vpmovd2m)."""


def host_has_avx512(flags: frozenset[str] | None = None) -> bool:
    """True where the CPU (or the feature `flags` given, as /proc/cpuinfo spells them) has `AVX512_FLAGS`."""
    from tiny_cpu.target import host_cpu_flags
    return AVX512_FLAGS <= (host_cpu_flags() if flags is None else flags)


def host_vector_registers() -> int:
    """32 where this CPU has AVX-512 F, VL and DQ (xmm16-31 usable by 256-bit EVEX instructions), else 16."""
    return 32 if host_has_avx512() else 16


def _in_float32(value: UOp, operation: UOp) -> UOp:
    """`operation` of a half computed on the float32 of its operand, then rounded back to the half."""
    return UOp(operation.op, dtypes.float32, (value.cast(dtypes.float32),)).cast(operation.dtype)


# the core decomposes float32 exp2, log2 and sin into arithmetic; halves take that path through float32 (as the C
# renderer computes them), float64 has arithmetic of its own (tiny_cpu.x86.float64_math)
_transcendentals = PatternMatcher([
    (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), dtype=(dtypes.float16, dtypes.bfloat16), src=(UPat.var("value"),),
          name="operation"), _in_float32),
]) + float64_transcendentals


class X86Renderer(VectorX86Contract, Renderer):
    """The x86 renderer on the CPU device: float32 in AVX2 vectors of 8 lanes (16-lane zmm where the CPU has
    AVX-512), every other dtype as scalars (codegen devectorizes them), split across the worker pool's threads by
    core_id, with the core's transcendental decomposition (and this renderer's for halves and float64).

    `vector_registers` (16 or 32) and `vector_lanes` (8 or 16) default to the host's: 32 and 16 with AVX-512 F, VL
    and DQ, else 16 and 8 (AVX2). 16 lanes need 32 registers (the selection's 512-bit code is EVEX throughout)."""

    suffix = "x86"
    has_threads = True
    shared_max = 0
    preferred_vector_bytes = 32
    fused_multiply_add = True  # the probe requires FMA: reduce loops' multiply-adds round once, as the C renderer's
    pre_matcher = _transcendentals
    guard_integer_division = True  # codegen's pass "guarded division": idiv by 0 or of int min by -1 raises SIGFPE

    def __init__(self, device: str = "CPU", arch: str | None = None, vector_registers: int | None = None,
                 vector_lanes: int | None = None):
        from tiny_cpu.runtime import worker_count
        self.device = device
        self.arch = arch
        self.global_max = (worker_count(), 1, 1)
        self.vector_registers = vector_registers or host_vector_registers()
        if vector_lanes is None:
            vector_lanes = 16 if self.vector_registers == 32 and host_has_avx512() else 8
        if vector_lanes not in (8, 16) or (vector_lanes == 16 and self.vector_registers != 32):
            raise ValueError(f"the x86 renderer's float32 vectors are 8 lanes, or 16 with 32 registers (AVX-512), "
                             f"not {vector_lanes} with {self.vector_registers}")
        self.vector_lanes = vector_lanes
        if vector_lanes == 16:  # zmm: codegen vectorizes to 16 lanes, 8 still serving narrower rows
            self.vector_widths = {dtypes.float32: (8, 16)}
        if self.vector_registers == 32:
            # codegen's wide-register tiles (a matmul's 6 rows x 4 vectors, a convolution's window over more rows)
            # fit AVX-512's 32 registers, in 16-lane vectors or 8 (1024^2 matmul 34.5 -> 31.6 ms single-threaded
            # against 6 x 2 in 8 lanes)
            self.preferred_vector_bytes = WIDE_TILE_VECTOR_BYTES

    def spelled_dtypes(self) -> set[DType]:
        """Every dtype the selection has rules for (fp8 has none)."""
        from tiny_cpu.x86.isel import SELECTED_DTYPES
        return {dtype for dtype in dtypes.all if dtype in SELECTED_DTYPES}

    def render(self, uops: list[UOp]) -> str:
        """The machine code of the linear program `uops`, as text (see the module's docstring)."""
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The header naming the kernel, then its machine code in hex: the entry convention of the CPU queue
        (a pointer to one 64-bit word per argument, then the worker's core_id)."""
        # the selection allocates tens of thousands of short-lived objects per large kernel (instructions, operands,
        # intervals), and each collection they trigger walks every object the process tracks (the core's graphs): 40%
        # of the render's CPU time on the digits demo's random-number kernels. Only the bytes outlive the call.
        collecting = gc.isenabled()
        gc.disable()
        try:
            code = select_kernel(uops, entry=True, vector_registers=self.vector_registers)
        finally:
            if collecting:
                gc.enable()
        return f"{_HEADER}: {name}\n{code.hex()}\n"


def machine_code(src: str) -> bytes:
    """The bytes of a rendered kernel's text (CompileError when it is not the x86 renderer's)."""
    lines = src.splitlines()
    if len(lines) < 2 or not lines[0].startswith(_HEADER):
        raise CompileError("not a kernel rendered by the x86 renderer (DEV=CPU:X86)", log=src[:2000])
    try:
        return bytes.fromhex("".join(lines[1:]))
    except ValueError as error:
        raise CompileError(f"the x86 kernel's hex is damaged: {error}", log=src[:2000]) from error


class X86Compiler(Compiler):
    """Hex to bytes: the code was selected, allocated and encoded when the kernel was rendered."""

    def __init__(self) -> None:
        super().__init__("cpu-x86")
        self.name = "x86"
        self.flags = ()

    def version(self) -> str:
        """The encoder's own version: there is no external tool."""
        return "tinycore-x86 1"

    def compile(self, src: str) -> bytes:
        """The machine code of a rendered kernel."""
        return machine_code(src)

    def program_loader(self) -> type[X86Program]:
        """What loads this compiler's binaries on the CPU device."""
        return X86Program


class X86Program(EntryProgram):
    """Machine code in executable memory: `program(*addresses, global_size=(N, 1, 1), vals=(ints), wait=False)`.

    `_entry` is the address of its entry point `(const long long *arguments, int core_id)`, which the CPU queue's
    EXEC command and the worker pool call."""

    def __init__(self, name: str, lib: bytes):
        self._code = ExecutableCode(lib)  # kept alive with the program: the entry point lies in it
        super().__init__(name, self._code.address)


def make_x86_renderer(device: str, arch: str | None) -> tuple[X86Renderer, X86Compiler]:
    """The CPU's x86 renderer and its compiler; RuntimeError on a host that is not x86-64 or with an arch."""
    from tiny_cpu.hooks import x86_probe  # here: the hooks module is what plugin discovery imports first
    available, reason = x86_probe()
    if not available:
        raise RuntimeError(reason)
    if arch is not None:
        raise ValueError(f"DEV=CPU:X86:{arch}: the x86 renderer encodes for this host only; leave the arch out")
    from tiny_cpu.target import NARROW_VECTOR_BYTES, host_core_cache_bytes, matmul_panel_bytes
    renderer = X86Renderer(device, arch)
    # as the C and LLVM renderers: large matmuls stream packed panels as wide as the tile's columns (two ymm with 16
    # registers, four with 32: ymm, or zmm with 16 lanes), and cache blocks are sized by this host's private cache
    renderer.matmul_panel_bytes = matmul_panel_bytes(4 * renderer.vector_lanes) if renderer.vector_lanes == 16 else \
        4 * NARROW_VECTOR_BYTES if renderer.vector_registers == 32 else matmul_panel_bytes(NARROW_VECTOR_BYTES)
    renderer.core_cache_bytes = host_core_cache_bytes()
    return renderer, X86Compiler()
