"""clang and ld.lld: HIP-style C -> an HSA code object (.hsaco) for one gfx target, with no ROCm install.

clang renders the device code to AMDGPU assembly (`-x hip --cuda-device-only -nogpuinc -nogpulib`), assembles it
for amdgcn-amd-amdhsa and ld.lld links the relocatable object into the shared object the runtimes load. The
code-object version is pinned (CODE_OBJECT_VERSION) so every clang produces the same metadata layout. The newest
clang-N on PATH that knows the target is used; the core's Compiler caches binaries on disk, keyed by the source, the
target, the flags and the clang version.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from tiny_amd.target import parse_target
from tinycore.device.compiler import CompileError, Compiler

CODE_OBJECT_VERSION = 5
"""HSA code object v5: accepted by ld.lld 15 and newer and by ROCm 5.3 and newer."""
CLANG_VERSIONS = (22, 21, 20, 19, 18, 17, 16, 15)
INSTALL_HINT = ("apt-get install -y clang-19 lld-19 (it covers every target; clang 16 covers gfx90a and gfx1100, "
                "clang 15 gfx90a only)")
TOO_OLD = {("gfx1100", 15): "clang 15 knows gfx1100 but fails to assemble some of its own code for it (kernel.s: "
                            "'destination must be different than all sources': its register allocator lets "
                            "v_mad_u64_u32 write registers it reads, which its assembler then rejects)"}
"""(target, clang major version) pairs a clang knows but builds wrongly, and why (shown when it is the newest here)."""
COMPILE_FLAGS = ("-O3", "-ffp-contract=fast", "-fno-exceptions", "-std=c++17")


class ToolchainMissingError(RuntimeError):
    """No clang or ld.lld able to build code objects for the asked target; the message says what to install."""


@functools.cache
def toolchains() -> tuple[tuple[int, str, str], ...]:
    """(clang major version, clang path, ld.lld path) of each clang-N / ld.lld-N pair on PATH, newest first."""
    found: list[tuple[int, str, str]] = []
    for version in CLANG_VERSIONS:
        clang, linker = shutil.which(f"clang-{version}"), shutil.which(f"ld.lld-{version}")
        if clang and linker:
            found.append((version, clang, linker))
    return tuple(found)


def toolchain_status() -> tuple[bool, str]:
    """(ok, detail) for `tiny devices`: the clang and ld.lld that compile AMD kernels, or what to install."""
    found = toolchains()
    if not found:
        return False, f"no clang-N with a matching ld.lld-N (N >= 15) on PATH to compile AMD kernels: {INSTALL_HINT}"
    version, clang, _linker = found[0]
    targets = ", ".join(target.name for target in _targets_for(version))
    return True, f"clang {version} ({clang}) compiles for {targets}"


def _targets_for(version: int) -> list:
    from tiny_amd.target import TARGETS
    return [target for target in TARGETS.values() if target.min_clang <= version]


def find_toolchain(arch: str) -> tuple[int, str, str]:
    """The newest (version, clang, ld.lld) that knows `arch`; ToolchainMissingError saying what to install."""
    target = parse_target(arch)
    found = toolchains()
    for version, clang, linker in found:
        if version >= target.min_clang:
            return version, clang, linker
    have = f"clang {found[0][0]} is the newest here" if found else "no clang-N/ld.lld-N pair is on PATH"
    why = f" ({TOO_OLD[(arch, found[0][0])]})" if found and (arch, found[0][0]) in TOO_OLD else ""
    raise ToolchainMissingError(f"compiling for {arch} ({target.family}) needs clang {target.min_clang} or newer with "
                                f"its ld.lld, and {have}{why}: {INSTALL_HINT}")


def run_tool(command: list[str], what: str) -> None:
    """Run one step of the build; CompileError with the tool's output when it fails."""
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if finished.returncode != 0:
        raise CompileError(f"{what} failed (exit {finished.returncode}): {' '.join(command)}",
                           (finished.stderr or finished.stdout).strip())


class AMDCompiler(Compiler):
    """HIP-style C -> .hsaco for `arch` (gfx90a, gfx942, gfx1100, gfx1201) with clang and ld.lld."""

    def __init__(self, arch: str):
        self.arch = arch
        self.version_number, self.clang, self.linker = find_toolchain(arch)
        self.name = f"amd-{arch}"
        self.flags = (*COMPILE_FLAGS, f"-mcode-object-version={CODE_OBJECT_VERSION}")
        super().__init__("kernels")

    def version(self) -> str:
        """clang's version line (part of the cache key)."""
        return _clang_version(self.clang)

    def compile(self, src: str) -> bytes:
        """The .hsaco of `src` (CompileError with clang's or ld.lld's messages on failure)."""
        with tempfile.TemporaryDirectory(prefix="tinycore-amd-") as directory:
            folder = Path(directory)
            (folder / "kernel.hip").write_text(src)
            run_tool([self.clang, "-x", "hip", f"--offload-arch={self.arch}", "--cuda-device-only", "-nogpuinc",
                      "-nogpulib", *self.flags, "-S", str(folder / "kernel.hip"), "-o", str(folder / "kernel.s")],
                     f"clang (HIP to AMDGPU assembly for {self.arch})")
            run_tool([self.clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={self.arch}",
                      f"-mcode-object-version={CODE_OBJECT_VERSION}", "-c", str(folder / "kernel.s"),
                      "-o", str(folder / "kernel.o")], "clang (assembling the AMDGPU object)")
            run_tool([self.linker, "-shared", str(folder / "kernel.o"), "-o", str(folder / "kernel.hsaco")],
                     "ld.lld (linking the code object)")
            return (folder / "kernel.hsaco").read_bytes()

    def disassemble(self, lib: bytes) -> str:
        """The GCN/RDNA assembly of a code object, through llvm-objdump of the same LLVM version."""
        objdump = shutil.which(f"llvm-objdump-{self.version_number}") or shutil.which("llvm-objdump")
        if objdump is None:
            raise RuntimeError(f"llvm-objdump is not installed: apt-get install -y llvm-{self.version_number}")
        with tempfile.NamedTemporaryFile(suffix=".hsaco") as file:
            file.write(lib)
            file.flush()
            finished = subprocess.run([objdump, "-d", f"--mcpu={self.arch}", file.name], capture_output=True,
                                      text=True, timeout=60, check=False)
        if finished.returncode != 0:
            raise RuntimeError(f"llvm-objdump failed ({finished.returncode}): {finished.stderr.strip()}")
        return finished.stdout


@functools.cache
def _clang_version(clang: str) -> str:
    finished = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return finished.stdout.splitlines()[0] if finished.stdout else clang
