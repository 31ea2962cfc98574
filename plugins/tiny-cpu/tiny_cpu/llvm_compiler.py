"""The CPU's LLVM compiler and loader: LLVM IR to a relocatable object and the object to callable code, both in this
process through llvmlite (no compiler subprocess, no shared object written or opened).

The object is what the disk cache keeps; loading links it in memory with an MCJIT engine of its own, whose symbols
resolve against the running process (libm for the math calls LLVM leaves as calls).
"""
from __future__ import annotations

import functools
import platform
import struct
import threading
from typing import Any

from tiny_cpu.runtime import EntryProgram
from tinycore.device.compiler import CompileError, Compiler

_LOCK = threading.Lock()  # llvmlite's global state (targets, the symbol table) is set up once


@functools.cache
def _llvm() -> Any:
    """llvmlite.binding, with the native target and the process's math library ready; a clear error without it."""
    try:
        import llvmlite.binding as llvm
    except ImportError as error:
        from tiny_cpu.hooks import llvm_missing_reason
        raise RuntimeError(f"the LLVM renderer needs llvmlite: {llvm_missing_reason()}; or use DEV=CPU:C") from error
    with _LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        _resolve_math_library(llvm)
    return llvm


def _resolve_math_library(llvm: Any) -> None:
    """Make libm's functions (the calls LLVM emits for sin, pow, exp2 of doubles, ...) and libgcc's (half
    conversions of doubles) known to the object linker. By soname: the dynamic loader finds them without running
    ldconfig or a compiler, as ctypes.util.find_library would."""
    for library in ("libm.so.6", "libgcc_s.so.1", "libm.dylib"):
        try:
            llvm.load_library_permanently(library)
        except RuntimeError:
            continue


@functools.cache
def _host_cpu() -> tuple[str, str]:
    """The host CPU's name and its feature string (asked once: the features take LLVM a fraction of a ms)."""
    llvm = _llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.cache
def _target_machine(arch: str | None) -> Any:
    """The compiler's target machine for `arch` (the host CPU when None), made once."""
    return _new_target_machine(arch)


def _new_target_machine(arch: str | None) -> Any:
    """A target machine of its own: an MCJIT engine takes ownership of (and frees) the one it is given."""
    llvm = _llvm()
    cpu, features = _host_cpu()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    cpu, features = (arch, "") if arch else (cpu, features)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")


@functools.cache
def _check_cpu(arch: str) -> None:
    """ValueError unless LLVM knows the CPU `arch`. LLVM only warns on stderr about an unknown one, then aborts the
    process while emitting code for it (no 64-bit mode), so a tiny module is emitted with 64-bit mode forced and
    stderr captured."""
    import os
    import platform
    import tempfile
    llvm = _llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    features = "+64bit" if platform.machine() in ("x86_64", "AMD64") else ""
    machine = target.create_target_machine(cpu=arch, features=features, opt=0, reloc="pic")
    module = llvm.parse_assembly("define void @probe() {\n  ret void\n}\n")
    module.triple = machine.triple
    with tempfile.TemporaryFile() as captured, _LOCK:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            machine.emit_object(module)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        complaint = captured.read().decode(errors="replace")
    if "not a recognized processor" in complaint:
        raise ValueError(f"DEV=CPU:LLVM:{arch}: LLVM does not know the CPU {arch!r}; name one it knows (znver3, "
                         "skylake-avx512, x86-64-v3, apple-m1, ...) or leave the arch out to compile for this host")


class LLVMCompiler(Compiler):
    """LLVM IR to an object file at -O3 for the host CPU (or `arch`), in process; no fused multiply-add, so results
    round as numpy's (as the C compiler's -ffp-contract=off)."""

    def __init__(self, arch: str | None = None):
        super().__init__("cpu-llvm")
        _llvm()  # llvmlite missing: the error with the pip command comes here, when CPU is opened
        if arch is not None:
            _check_cpu(arch)
        self.arch = arch
        self.name = "llvmlite"
        self.flags = ("-O3", f"-mcpu={arch or _host_cpu()[0]}")
        self.machine = _target_machine(arch)
        self.lock = threading.Lock()  # one target machine, so one emission at a time (ctypes lets threads overlap)

    def version(self) -> str:
        """llvmlite's and LLVM's versions, and the target CPU with its features."""
        import llvmlite
        llvm = _llvm()
        cpu, features = _host_cpu()
        return f"llvmlite {llvmlite.__version__} LLVM {'.'.join(map(str, llvm.llvm_version_info))} | " \
               f"{self.arch or cpu} {'' if self.arch else features}"

    def optimized(self, src: str) -> Any:
        """The module of `src`, verified and optimized at -O3 (loop and SLP vectorizers on)."""
        llvm = _llvm()
        try:
            module = llvm.parse_assembly(src)
            module.verify()
        except RuntimeError as error:
            raise CompileError(f"LLVM rejected the kernel's IR: {error}", log=src) from error
        module.triple = self.machine.triple
        module.data_layout = str(self.machine.target_data)
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        tuning.loop_unrolling = True
        builder = llvm.create_pass_builder(self.machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return module

    def compile(self, src: str) -> bytes:
        """The relocatable object of LLVM IR `src`; CompileError with the IR when LLVM rejects it."""
        with self.lock:
            module = self.optimized(src)
            return bytes(self.machine.emit_object(module))

    def disassemble(self, lib: bytes) -> str:
        """Not available for an object file here: the optimized assembly comes from `assembly(src)`."""
        raise NotImplementedError("the LLVM compiler shows assembly with LLVMCompiler.assembly(source)")

    def assembly(self, src: str) -> str:
        """The host assembly of LLVM IR `src` after optimization (for DEBUG and tests)."""
        with self.lock:
            return str(self.machine.emit_assembly(self.optimized(src)))


def undefined_symbols(obj: bytes) -> list[str]:
    """The names an ELF64 object file needs from elsewhere (its undefined global symbols)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2:
        return []
    section_offset, = struct.unpack_from("<Q", obj, 0x28)
    entry_size, count = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, section_offset + number * entry_size)
                for number in range(count)]
    names: list[str] = []
    for section in sections:
        if section[1] != 2:  # SHT_SYMTAB
            continue
        strings = sections[section[6]]
        for offset in range(section[4], section[4] + section[5], 24):
            name_offset, info, _other, section_index = struct.unpack_from("<IBBH", obj, offset)
            if section_index == 0 and name_offset and info >> 4 in (1, 2):  # SHN_UNDEF, GLOBAL or WEAK
                start = strings[4] + name_offset
                names.append(obj[start:obj.index(b"\0", start)].decode())
    return names


class LLVMProgram(EntryProgram):
    """A kernel object linked into this process: `program(*addresses, global_size=(N, 1, 1), vals=(ints), wait)`.

    `_entry` is the address of `NAME_entry(const long long *arguments, int core_id)` that the CPU's command queue
    and worker pool call; the engine that linked it stays alive with the program."""

    def __init__(self, name: str, lib: bytes):
        llvm = _llvm()
        missing = [symbol for symbol in undefined_symbols(lib) if not llvm.address_of_symbol(symbol)]
        if missing:
            raise RuntimeError(f"kernel {name!r} calls {', '.join(missing)}, which this process does not provide; "
                               "use DEV=CPU:C for it")
        with _LOCK:
            empty = llvm.parse_assembly("")
            self._engine = llvm.create_mcjit_compiler(empty, _new_target_machine(None))
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(lib))
            self._engine.finalize_object()
            entry = self._engine.get_function_address(f"{name}_entry")
        if not entry:
            raise RuntimeError(f"kernel {name!r} has no entry point {name}_entry: it was not rendered by the LLVM "
                               "renderer of this tiny-cpu (clear the compile cache if it is older)")
        super().__init__(name, entry)


_WIDE_PROBE = """define <16 x float> @probe(<16 x float> %a, <16 x float> %b) #0 {
  %sum = fadd <16 x float> %a, %b
  ret <16 x float> %sum
}
attributes #0 = { "min-legal-vector-width"="512" }
"""


@functools.cache
def llvm_vector_bytes(arch: str | None) -> int:
    """64 when LLVM's target `arch` (None: this host) has 512-bit vector registers (AVX-512F), else 32: the
    host's feature string tells; for a named CPU, the assembly of a 16-lane add does (zmm registers or not)."""
    from tiny_cpu.target import NARROW_VECTOR_BYTES, WIDE_VECTOR_BYTES
    if arch is None:
        wide = platform.machine().lower() in ("x86_64", "amd64") and "+avx512f" in _host_cpu()[1].split(",")
    else:
        llvm = _llvm()
        module = llvm.parse_assembly(_WIDE_PROBE)
        module.triple = _target_machine(arch).triple
        wide = "zmm" in str(_target_machine(arch).emit_assembly(module))
    return WIDE_VECTOR_BYTES if wide else NARROW_VECTOR_BYTES


def make_llvm_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The CPU's LLVM renderer and its in-process compiler (needs llvmlite: pip install 'tiny-cpu[llvm]')."""
    from tiny_cpu.llvm_renderer import LLVMRenderer
    from tiny_cpu.target import host_core_cache_bytes, matmul_panel_bytes
    compiler = LLVMCompiler(arch)
    renderer = LLVMRenderer(device, arch)
    # AVX-512 targets get 16-lane float vectors and 64-column matmul panels, as the C renderer (tiny_cpu/target.py)
    renderer.preferred_vector_bytes = llvm_vector_bytes(arch)
    renderer.matmul_panel_bytes = matmul_panel_bytes(renderer.preferred_vector_bytes)
    renderer.core_cache_bytes = host_core_cache_bytes() if arch is None else None
    return renderer, compiler
