"""The OpenCL compiler: OpenCL C built by the device's driver into a program binary, cached on disk.

The cache key (the core Compiler's) covers the source, the build options and the platform, device and driver
versions, so a driver update never reuses an old binary. A binary is stored with a one-line header saying whether
the kernel depends on the work-group shape (local ids, group ids, barriers or local memory), so the runtime lets the
driver choose the work-group size for kernels that do not, and which buffer parameters the kernel writes (those not
declared `const`), so the runtime knows which staged views to copy back.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tiny_cl.driver import OpenedDevice, import_pyopencl
from tinycore.device.compiler import CompileError, Compiler

_HEADER = b"TINYCORE-CL1 "
_SIGNATURE = re.compile(r"__kernel\s+void\s+\w+\s*\(([^)]*)\)")
_GROUP_SHAPE_WORDS = re.compile(r"\b(get_local_id|get_group_id|get_local_size|get_num_groups|barrier|__local)\b")


@dataclass(frozen=True)
class KernelFacts:
    """What the runtime needs to know about a kernel besides its binary.

    group_shape: the kernel depends on the work-group shape (local or group ids, barriers, local memory).
    written: the positions of the buffer parameters the kernel may write (None: unknown, treat all as written).
    """

    group_shape: bool
    written: tuple[int, ...] | None


def pack_binary(binary: bytes, facts: KernelFacts) -> bytes:
    """The cached form of a program binary: a JSON header line, then the driver's binary."""
    header = json.dumps({"group_shape": facts.group_shape,
                         "written": None if facts.written is None else list(facts.written)}).encode()
    return _HEADER + header + b"\n" + binary


def unpack_binary(lib: bytes) -> tuple[bytes, KernelFacts]:
    """(driver binary, kernel facts) of a packed binary."""
    if not lib.startswith(_HEADER) or b"\n" not in lib:
        raise ValueError("not a CL program binary made by tiny-cl's compiler (missing header); recompile the kernel")
    header, binary = lib[len(_HEADER):].split(b"\n", 1)
    decoded = json.loads(header)
    written = decoded.get("written")
    return binary, KernelFacts(bool(decoded["group_shape"]), None if written is None else tuple(written))


def written_parameters(src: str) -> tuple[int, ...] | None:
    """Positions of the `__global` parameters of the (single) kernel in `src` not declared const; None when the
    signature cannot be read (the runtime then treats every buffer as written)."""
    found = _SIGNATURE.search(src)
    if found is None:
        return None
    parameters = [parameter.strip() for parameter in found.group(1).split(",")]
    return tuple(position for position, parameter in enumerate(parameters)
                 if "__global" in parameter.split() and "const" not in parameter.replace("*", " * ").split())


def depends_on_group_shape(src: str) -> bool:
    """True when the OpenCL C source reads local or group ids, synchronises a group or declares local memory."""
    return _GROUP_SHAPE_WORDS.search(src) is not None


class CLCompiler(Compiler):
    """Builds OpenCL C with the device's driver (clBuildProgram) and returns the program binary."""

    flags: tuple[str, ...] = ("-cl-std=CL1.2", "-w")

    def __init__(self, opened: OpenedDevice):
        super().__init__("cl-kernels")
        self.opened = opened
        self.name = f"opencl-{opened.index}"

    def version(self) -> str:
        """Platform, device and driver versions of the device this compiler builds for."""
        return self.opened.identity

    def compile(self, src: str) -> bytes:
        """The packed program binary of `src`; CompileError with the driver's build log on failure."""
        pyopencl = import_pyopencl()
        program = pyopencl.Program(self.opened.context, src)
        try:
            program.build(options=list(self.flags), devices=[self.opened.device])
        except pyopencl.Error as error:
            log = _build_log(program, self.opened)
            raise CompileError(f"the OpenCL driver failed to build a kernel for {self.opened.describe()} "
                               f"({type(error).__name__}){_driver_hint(log or str(error))}; its build log follows",
                               log=(log or str(error)) + "\n--- source ---\n" + src) from error
        binaries = program.get_info(pyopencl.program_info.BINARIES)
        if not binaries or not binaries[0]:
            raise CompileError(f"the OpenCL driver of {self.opened.describe()} built the kernel but returned no "
                               "binary (CL_PROGRAM_BINARIES is empty)")
        return pack_binary(bytes(binaries[0]), KernelFacts(depends_on_group_shape(src), written_parameters(src)))


UNKNOWN_CPU_HINT = (": the driver's compiler does not know this CPU (PoCL 3.0, which pyopencl's wheels bundle, builds "
                    "with LLVM 14 and cannot target CPUs newer than it, AMD Zen 5 among them). Use another OpenCL "
                    "driver: a newer PoCL, or Intel's CPU runtime (pip install intel-opencl-rt intel-cmplr-lib-rt, "
                    "then OCL_ICD_VENDORS=a folder holding a .icd file that names $VIRTUAL_ENV/lib/libintelocl.so, "
                    "and LD_LIBRARY_PATH=$VIRTUAL_ENV/lib), or DEV=CPU")
"""What to do when the driver's compiler rejects the host CPU's name (its log says "unknown target CPU")."""


def _driver_hint(log: str) -> str:
    """A hint to add to a build failure whose cause is the driver, not the kernel; '' when there is none."""
    return UNKNOWN_CPU_HINT if "unknown target CPU" in log else ""


def _build_log(program: object, opened: OpenedDevice) -> str:
    """The driver's build log for the device, or '' when it cannot be read."""
    try:
        pyopencl = import_pyopencl()
        return str(program.get_build_info(opened.device, pyopencl.program_build_info.LOG)).strip()  # type: ignore
    except Exception:  # noqa: BLE001 - the log is best effort; the error is raised either way
        return ""
