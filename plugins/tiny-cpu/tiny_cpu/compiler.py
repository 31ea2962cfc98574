"""The CPU's C compiler: $CC, else gcc, else clang, to a shared object returned as bytes."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from tiny_cpu.target import host_cpu_flags
from tinycore.device.compiler import CompileError, Compiler
from tinycore.helpers import environ


def _find_compiler() -> list[str]:
    """The compiler command: $CC (with any arguments it carries), else gcc, else clang.

    gcc comes first because it starts and compiles a small kernel about twice as fast as clang (and supports
    _Float16 on x86, which clang does only from version 15).
    """
    from tiny_cpu.hooks import find_c_compiler
    configured = environ("CC")
    if not (configured and configured.strip()):
        gcc = shutil.which("gcc")
        if gcc is not None:
            return [gcc]
    found = find_c_compiler()
    if found is None:
        if configured and configured.strip():
            raise RuntimeError(f"CC={configured!r} is not an executable on PATH: set CC to a C compiler")
        raise RuntimeError("no C compiler found for the CPU device: install gcc or clang, or set CC")
    extra = shlex.split(configured)[1:] if configured and configured.strip() else []
    return [found, *extra]


@functools.cache
def _compiler_version(executable: str) -> str:
    try:
        result = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30)
        return result.stdout.splitlines()[0] if result.stdout else result.stderr.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"


def _workarounds(executable: str, arch: str | None) -> list[str]:
    """Flags that keep a known-broken compiler from miscompiling kernels.

    - gcc (seen with 12.2 at -O3, -march=native and -march=x86-64-v3): the loop vectorizer's if-conversion turns
      a padded read (`valid ? data[i - 3] : 0`) into AVX2 masked loads with wrong lanes, so a pad returned zeros
      where input values belong. Without loop if-conversion gcc is correct; our codegen vectorizes kernels
      itself (float4/float8), so only gcc's own vectorization of masked scalar loops is lost.
    - gcc 12 with -march=native on a CPU with AVX-512VL (Zen 4 is taken for znver3 plus AVX-512) miscompiles the
      128-bit selects of vectorized kernels at -O2 and crashes at -O3; without the 128/256-bit EVEX forms it is
      correct, and the kernels' float4/float8 code keeps AVX2.
    - gcc 12 with that flag on a CPU with AVX512-FP16 (Sapphire Rapids) emits masked `vmovsh` moves for _Float16
      that the assembler rejects ("unsupported masking"); without AVX512-FP16 halves go through float32 (F16C), as
      on every other x86 host.
    """
    version = _compiler_version(executable)
    if "clang" in version.lower():
        return []
    match = re.search(r"\bgcc\b.*?\s(\d+)\.\d+", version, re.IGNORECASE) or re.search(r"^gcc.*?(\d+)\.\d+", version)
    if match is None:
        return []
    flags = ["-fno-tree-loop-if-convert"]
    host_flags = host_cpu_flags()
    if arch is None and "avx512vl" in host_flags and int(match.group(1)) <= 12:
        flags.append("-mno-avx512vl")
        if "avx512_fp16" in host_flags:
            flags.append("-mno-avx512fp16")
    return flags


@functools.cache
def _host_identity() -> str:
    """The host CPU model and feature flags, so -march=native binaries are not reused on another CPU."""
    details = [platform.machine()]
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith(("model name", "flags", "Features")):
                    details.append(line.split(":", 1)[1].strip())
                if len(details) >= 3:
                    break
    except OSError:
        details.append(platform.processor())
    return " | ".join(details)


@functools.cache
def _supports_float16(executable: str) -> bool:
    """True when `executable` compiles _Float16 arithmetic for the host (clang before 15 does not on x86)."""
    try:
        result = subprocess.run([executable, "-x", "c", "-c", "-", "-o", os.devnull],
                                input="_Float16 twice(_Float16 value) { return value + value; }\n",
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


class ClangCompiler(Compiler):
    """Compiles GNU C to a shared object with the host's C compiler at -O3 for the host CPU (or `arch`)."""

    def __init__(self, arch: str | None = None):
        super().__init__("cpu-kernels")
        self.command = _find_compiler()
        self.arch = arch
        self.name = os.path.basename(self.command[0])
        target = [f"-march={arch}"] if arch else (["-mcpu=native"] if platform.machine() in ("arm64",) else
                                                  ["-march=native"])
        # no -ffast-math: it breaks nan and inf; -fno-math-errno lets sqrt and friends compile inline;
        # -ffp-contract=off keeps a*b+c rounded twice, as numpy and torch compute it; -nostdlib skips the C runtime's
        # start files and libc at link time (a third of a small kernel's compile time): libm and libgcc (half
        # conversions) are linked, anything else a kernel calls (memset, memcpy) resolves against the already loaded
        # libc when the library is opened
        self.flags = (*self.command[1:], "-O3", *target, *_workarounds(self.command[0], arch), "-shared", "-fPIC",
                      "-fno-math-errno", "-ffp-contract=off", "-nostdlib", "-lm", "-lgcc")

    def version(self) -> str:
        """The compiler's --version line and, for native code, the host CPU."""
        return f"{_compiler_version(self.command[0])} | {self.arch or _host_identity()}"

    def compile(self, src: str) -> bytes:
        """The shared object built from C source `src`; CompileError with the compiler's log on failure."""
        with tempfile.TemporaryDirectory(prefix="tinycore-cc-") as directory:
            output = os.path.join(directory, "kernel.so")
            libraries = [flag for flag in self.flags if flag.startswith("-l")]  # after the input, as linkers want
            flags = [flag for flag in self.flags if not flag.startswith("-l")]
            command = [self._executable_for(src), *flags, "-x", "c", "-", "-o", output, *libraries]
            result = _run_compiler(command, src)
            if result.returncode != 0 and "internal compiler error" in result.stderr and "-O3" in command:
                # some gcc releases crash in their -O3 vectorizer on particular kernels (gcc 12.2 with
                # -march=znver3 does on a cumprod); the same code at -O2 is correct, only less unrolled
                first_log = result.stderr
                command = [("-O2" if flag == "-O3" else flag) for flag in command]
                result = _run_compiler(command, src)
                if result.returncode != 0:
                    result = subprocess.CompletedProcess(command, result.returncode, result.stdout,
                                                         first_log + "\n--- retried at -O2 ---\n" + result.stderr)
            if result.returncode != 0:
                raise CompileError(f"{self.name} failed to compile a kernel (exit {result.returncode}); command: "
                                   f"{shlex.join(command)}", log=result.stderr + "\n--- source ---\n" + src)
            with open(output, "rb") as file:
                return file.read()

    def _executable_for(self, src: str) -> str:
        """The compiler for `src`: gcc instead of a clang without _Float16 support when the source uses halves
        (unless CC names the compiler)."""
        if "_Float16" not in src or _supports_float16(self.command[0]) or environ("CC"):
            return self.command[0]
        fallback = shutil.which("gcc")
        return fallback if fallback is not None and _supports_float16(fallback) else self.command[0]

    def compile_batch(self, kernels: Sequence[tuple[str, str]]) -> tuple[bytes, list[str]]:
        """One shared object holding every kernel of `kernels` (pairs of function name and C source).

        Starting the compiler costs more than compiling a small kernel, so the kernels of one schedule are compiled
        together. Each function is renamed after its source's digest (kernels of different code may share a
        name); returns the binary (through the disk cache) and the symbol of each kernel, in order.
        """
        parts, symbols = [], []
        for name, src in kernels:
            signature = f"void {name}("
            if src.count(signature) != 1:
                raise CompileError(f"cannot batch kernel {name!r}: its source declares `{signature}` "
                                   f"{src.count(signature)} times, expected once")
            symbol = f"{name}_{hashlib.sha256(src.encode()).hexdigest()[:16]}"
            # the kernel, its pool entry point NAME_entry and the entry's call of the kernel
            parts.append(re.sub(rf"\b{re.escape(name)}(?=(?:_entry)?\()", symbol, src))
            symbols.append(symbol)
        return self.compile_cached("\n".join(parts)), symbols

    def disassemble(self, lib: bytes) -> str:
        """objdump -d of the shared object."""
        with tempfile.NamedTemporaryFile(suffix=".so") as file:
            file.write(lib)
            file.flush()
            result = subprocess.run(["objdump", "-d", file.name], capture_output=True, text=True)
            return result.stdout or result.stderr


def _run_compiler(command: list[str], src: str) -> subprocess.CompletedProcess[str]:
    """Run the C compiler `command` on `src` from standard input; CompileError when it cannot be started."""
    try:
        return subprocess.run(command, input=src, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise CompileError(f"could not run the C compiler {shlex.join(command)}: {error}") from error
