"""PTX's compiler side (DEV=NV:PTX): the PTX text is the binary the CUDA driver assembles when it loads the module,
ptxas (from the nvidia-cuda-nvcc wheel) assembles it for checks, and the factory pairs the renderer with them."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from tiny_nv.ptx import PTXRenderer
from tinycore.device.compiler import CompileError, Compiler


class PTXCompiler(Compiler):
    """The PTX text itself is the binary: the CUDA driver assembles it when the module is loaded."""

    def __init__(self, arch: str):
        super().__init__("nv-ptx")
        self.arch, self.name = arch, f"ptx-{arch}"

    def compile(self, src: str) -> bytes:
        """The NUL-terminated PTX (checked to be one module for this arch)."""
        if f".target {self.arch}" not in src or ".entry" not in src:
            raise CompileError(f"not a PTX module for {self.arch} (no '.target {self.arch}' or no .entry)",
                               log=src[:2000])
        return src.encode() + b"\0"

    def compile_cached(self, src: str) -> bytes:
        """Nothing to cache: the driver assembles (and caches) PTX itself."""
        return self.compile(src)

def assemble_with_ptxas(source: str, arch: str) -> bytes | None:
    """The CUBIN ptxas (from the nvidia-cuda-nvcc wheel) makes of `source`, None when ptxas is not installed;
    CompileError with ptxas's messages when it refuses the PTX."""
    from tiny_nv.toolkit import find_tool
    if (ptxas := find_tool("ptxas")) is None:
        return None
    with tempfile.TemporaryDirectory() as directory:
        source_path, output = Path(directory) / "kernel.ptx", Path(directory) / "kernel.cubin"
        source_path.write_text(source)
        finished = subprocess.run([ptxas, f"-arch={arch}", str(source_path), "-o", str(output)], capture_output=True,
                                  text=True, timeout=120, check=False)
        if finished.returncode != 0:
            raise CompileError(f"ptxas refused the PTX for {arch} (exit {finished.returncode})",
                               log=finished.stderr + "\n--- source ---\n" + source)
        return output.read_bytes()

def make_ptx_renderer(device: str, arch: str | None) -> tuple[PTXRenderer, Compiler]:
    """The PTX renderer and its (pass-through) compiler for `device` (DEV=NV:PTX, NV:PTX:sm_90)."""
    from tiny_nv.target import device_arch
    from tinycore.device.registry import target_for
    chosen = arch or device_arch(device)
    if target_for(device).interface == "MOCK":  # the MOCK GPU runs the linear program carried in the source
        from tiny_nv.mock import MockCompiler
        return PTXRenderer(chosen, device, embed_program=True), MockCompiler(chosen, language="ptx")
    return PTXRenderer(chosen, device), PTXCompiler(chosen)
