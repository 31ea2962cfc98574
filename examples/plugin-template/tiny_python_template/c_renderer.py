"""The optional C renderer: kernels as portable C, compiled to a shared object by the system's C compiler.

This is the worked example of a C-rendering plugin. tinycore's `CStyleLanguage` renders each UOp of the linear
program with rules (`string_rewrite`: a PatternMatcher of UOp -> text) and asks this subclass only for what differs
between C-like languages: its own rules in front of the base's (`template_rendering` below), type names
(`type_map`), math spellings (`code_for_op`), literals (`infinity`, `nan`), the lines before the kernel
(`render_prelude`) and launch limits.
The compiler turns the source into bytes (here: a shared object) that `runtime.CProgram` loads.

Enable it with `C_RENDERER = True` in hooks.py; select it with `DEV=PYTHON:C` (it is then preferred by default).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from tinycore.device.compiler import CompileError, Compiler
from tinycore.dtype import DType, dtypes
from tinycore.renderer.cstyle import (
    BASE_CODE_FOR_OP,
    BASE_TYPE_MAP,
    CodeForOp,
    CStyleLanguage,
    RenderContext,
    base_rendering,
)
from tinycore.renderer.renderer import text_rules
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

C_DTYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                      dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64})
"""What portable C has: no half or bfloat16 type (a compiler extension such as _Float16 would add float16)."""


def _math(name: str) -> CodeForOp:
    """A <math.h> function: `sqrtf` for float, `sqrt` for double."""
    def code(operand: str, dtype: DType) -> str:
        return f"{name}({operand})" if dtype.scalar == dtypes.float64 else f"{name}f({operand})"
    return code


def _pow(base: str, exponent: str, dtype: DType) -> str:
    if dtype.scalar == dtypes.float64:
        return f"pow({base},{exponent})"
    if dtypes.is_float(dtype):
        return f"powf({base},{exponent})"
    return f"(({C_TYPE_MAP[dtype.scalar]})pow((double)({base}),(double)({exponent})))"


C_CODE_FOR_OP: dict[Ops, CodeForOp] = {
    **BASE_CODE_FOR_OP,  # + - * / % < != == & | ^ << >> ?: are the same in every C-like language
    Ops.EXP2: _math("exp2"), Ops.LOG2: _math("log2"), Ops.SIN: _math("sin"), Ops.SQRT: _math("sqrt"),
    Ops.TRUNC: _math("trunc"), Ops.POW: _pow,
}

C_TYPE_MAP: dict[DType, str] = {
    **BASE_TYPE_MAP,  # "bool" needs <stdbool.h> (render_prelude includes it)
    dtypes.int8: "signed char",  # plain char may be unsigned
    dtypes.int64: "long long", dtypes.uint64: "unsigned long long",  # long is 32 bits on some platforms
}


def _is_nan(ctx: RenderContext, value: UOp) -> str | None:
    """`value != value` (how Tensor.isnan asks) as <math.h>'s `isnan(value)`: the same answer, said plainly. Only
    scalar floats; returning None leaves the UOp to the next rule (the base's `!=`)."""
    if not dtypes.is_float(value.dtype) or value.dtype.count != 1:
        return None
    return f"isnan({ctx.expression(value)})"


template_rendering = text_rules([
    # both sources are the same UOp: a name used twice in a pattern must match one UOp
    (UPat(Ops.CMPNE, src=(UPat.var("value"), UPat.var("value")), name="x"),
     lambda ctx, x, value: None if (text := _is_nan(ctx, value)) is None else ctx.bind(x, text)),
])
"""This renderer's own rules. Each is (UPat, function): the pattern says which UOps it applies to (op, dtype,
sources, arg; see tinycore/uop/patterns.py), the function receives the matched UOps by name and the RenderContext as
`ctx`, writes through it (`ctx.bind` names a value or renders it in place, `ctx.emit` writes a statement,
`ctx.expression` reads a source's text) and returns the UOp's text, or None to leave the UOp to the next rule."""


class CRenderer(CStyleLanguage):
    """Portable C99 for PYTHON: one function per kernel, plain loops over scalars, `float*` buffer parameters and
    `const int` integer parameters, in DEFINE_GLOBAL then DEFINE_VAR order (the order runtime.CProgram passes)."""

    device = "PYTHON"
    suffix = "c"
    has_local = False  # no workgroups: codegen makes loops, never SPECIAL thread indices
    has_shared = False
    has_threads = False  # no CPU worker split (no core_id parameter)
    global_max = None
    local_max = None
    shared_max = 0
    supports_float4 = False
    vector_widths: dict[DType, tuple[int, ...]] = {}  # scalars only: no vector types to declare
    buffer_suffix = " restrict"  # outputs never alias inputs within a kernel
    type_map = C_TYPE_MAP
    code_for_op = C_CODE_FOR_OP
    string_rewrite = template_rendering + base_rendering  # our rules first, the base's for everything else
    infinity = "INFINITY"  # from <math.h>
    nan = "NAN"
    capabilities = DeviceCapabilities(dtypes=C_DTYPES, large_grids=True)
    """What the conformance suite checks when this renderer is used (the device takes its renderer's)."""

    def __init__(self, device: str = "PYTHON"):
        self.device = device

    def render_prelude(self, uops: list[Any], used_dtypes: set[DType]) -> list[str]:
        """The headers every kernel needs: bool, INFINITY/NAN and the math functions."""
        return ["#include <stdbool.h>", "#include <math.h>"]


class SystemCCompiler(Compiler):
    """The system's C compiler ($CC, else cc, gcc or clang) building a shared object; the bytes of the .so are the
    binary, cached on disk by tinycore under the compiler's name, version and flags."""

    flags = ("-O2", "-shared", "-fPIC", "-std=c99", "-fno-math-errno")

    def __init__(self, executable: str):
        # names that README section 1's renaming turns into the plugin's own ("mydev-c", "tiny-mydev-c-")
        super().__init__("python-template-c")
        self.executable = executable
        self.name = f"python-template-c-{os.path.basename(executable)}"

    def version(self) -> str:
        """The compiler's first `--version` line (part of the cache key)."""
        result = subprocess.run([self.executable, "--version"], capture_output=True, text=True, timeout=30)
        return (result.stdout.splitlines() or ["unknown"])[0]

    def compile(self, src: str) -> bytes:
        """Compile `src` to a shared object and return its bytes; CompileError with the compiler's log on failure."""
        with tempfile.TemporaryDirectory(prefix="tiny-python-template-c-") as directory:
            output = os.path.join(directory, "kernel.so")
            command = [self.executable, *self.flags, "-x", "c", "-", "-o", output, "-lm"]
            result = subprocess.run(command, input=src, capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                raise CompileError(f"{self.executable} failed to compile a kernel (exit {result.returncode})",
                                   log=result.stderr[-4000:] + "\n" + src[:4000])
            with open(output, "rb") as file:
                return file.read()


def find_c_compiler() -> str | None:
    """The C compiler to use: $CC, else the first of cc, gcc, clang on PATH (None when there is none)."""
    candidates = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    return next((found for found in map(shutil.which, candidates) if found), None)


def make_c_renderer(device: str, arch: str | None) -> tuple[CRenderer, SystemCCompiler]:
    """The C renderer and the system compiler; raises (so the next renderer is tried) when there is no compiler."""
    executable = find_c_compiler()
    if executable is None:
        raise RuntimeError("no C compiler found: install one (cc, gcc or clang) or set CC")
    return CRenderer(device), SystemCCompiler(executable)
