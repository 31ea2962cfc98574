"""The UOPS renderer and its compiler: the "source" of a PYTHON kernel is the linear program itself.

`render` writes a readable listing of the UOps (one per line, as comments) followed by one line holding the
program packed with pickle and base64. The compiler checks that the packed program is a list of UOps and returns
its bytes; the runtime unpacks it and runs it in tinycore's interpreter.
"""
from __future__ import annotations

import base64
import binascii
import pickle
from typing import Any

from tinycore.device.compiler import CompileError, Compiler
from tinycore.renderer.renderer import Renderer
from tinycore.uop.uop import UOp

PAYLOAD_PREFIX = "program "


class PythonRenderer(Renderer):
    """Renders linear programs for PYTHON. No workgroups, no shared memory, no CPU threads, no vectors: codegen
    produces plain loops over scalars, which the interpreter runs one UOp at a time."""

    device = "PYTHON"
    suffix = "py"
    has_local = False
    has_shared = False
    has_threads = False
    global_max = None
    local_max = None
    shared_max = 0
    supports_float4 = False
    vector_widths: dict[Any, tuple[int, ...]] = {}

    def __init__(self, device: str = "PYTHON"):
        self.device = device

    def render(self, uops: list[UOp]) -> str:
        """The listing of `uops` (position, op, dtype, sources by position, argument) and the packed program."""
        position_of = {uop: position for position, uop in enumerate(uops)}
        lines = [f"# PYTHON linear program, {len(uops)} uops"]
        for position, uop in enumerate(uops):
            sources = ", ".join(str(position_of.get(source, "?")) for source in uop.src)
            lines.append(f"# {position:4d} {uop.op.name:<14} {uop.dtype!s:<28} [{sources}] {uop.arg!r}")
        packed = base64.b64encode(pickle.dumps(list(uops), protocol=pickle.HIGHEST_PROTOCOL)).decode()
        lines.append(PAYLOAD_PREFIX + packed)
        return "\n".join(lines) + "\n"


class PythonCompiler(Compiler):
    """Checks a rendered program and returns it packed (bytes). Nothing is compiled, so nothing is cached on disk."""

    name = "python-uops"

    def __init__(self) -> None:
        super().__init__("python-uops")

    def compile(self, src: str) -> bytes:
        """The packed program of `src`; CompileError when `src` is not a rendered PYTHON program."""
        payload = next((line[len(PAYLOAD_PREFIX):] for line in src.splitlines() if line.startswith(PAYLOAD_PREFIX)),
                       None)
        if payload is None:
            raise CompileError("not a PYTHON program: no line starting with 'program ' (render it with the UOPS "
                               "renderer)", log=src[:2000])
        try:
            binary = base64.b64decode(payload, validate=True)
            program = pickle.loads(binary)
        except (binascii.Error, pickle.UnpicklingError, EOFError, ValueError) as error:
            raise CompileError(f"the packed PYTHON program is corrupt: {error}") from error
        if not isinstance(program, list) or not all(isinstance(uop, UOp) for uop in program):
            raise CompileError(f"the packed PYTHON program is a {type(program).__name__}, not a list of UOps")
        return binary

    def compile_cached(self, src: str) -> bytes:
        """Packing is cheaper than a cache lookup: compile every time, store nothing."""
        return self.compile(src)


def make_renderer(device: str, arch: str | None) -> tuple[PythonRenderer, PythonCompiler]:
    """The UOPS renderer and its compiler (`arch` is not used: there is one Python)."""
    return PythonRenderer(device), PythonCompiler()
