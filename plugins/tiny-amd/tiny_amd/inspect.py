"""Looking inside HSA code objects: the kernel metadata notes through llvm-readelf (--notes) and the runtime's own
kernarg packing, so tests and tools can check that a code object matches what the runtime will hand it."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from tiny_amd.compiler import CLANG_VERSIONS

_FIELDS = {".name": "name", ".symbol": "symbol", ".kernarg_segment_size": "kernarg_size",
           ".group_segment_fixed_size": "lds_size", ".wavefront_size": "wave_size",
           ".private_segment_fixed_size": "scratch_size"}
_FIELD_LINE = re.compile(r"^    (\.[a-z_]+):\s+(\S+)\s*$")


@dataclass
class KernelNote:
    """One kernel's entry in the code object's metadata note."""

    name: str = ""
    symbol: str = ""
    kernarg_size: int = -1
    lds_size: int = -1
    wave_size: int = -1
    scratch_size: int = -1


def readelf() -> str | None:
    """The newest llvm-readelf-N (or llvm-readelf) on PATH, None when there is none (apt-get install llvm-19)."""
    for version in CLANG_VERSIONS:
        found = shutil.which(f"llvm-readelf-{version}")
        if found:
            return found
    return shutil.which("llvm-readelf")


def code_object_notes(binary: bytes) -> tuple[str, list[KernelNote]]:
    """(amdhsa.target, the kernels) from `llvm-readelf --notes` of a code object."""
    tool = readelf()
    if tool is None:
        raise RuntimeError("llvm-readelf is not installed: apt-get install -y llvm-19 (or llvm-15)")
    with tempfile.NamedTemporaryFile(suffix=".hsaco") as file:
        file.write(binary)
        file.flush()
        finished = subprocess.run([tool, "--notes", file.name], capture_output=True, text=True, timeout=60,
                                  check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"llvm-readelf failed ({finished.returncode}): {finished.stderr.strip()}")
    return parse_notes(finished.stdout)


def parse_notes(text: str) -> tuple[str, list[KernelNote]]:
    """(target, kernels) from llvm-readelf's YAML rendering of the amdhsa metadata: each kernel starts at a
    two-space "- " item of amdhsa.kernels and its own fields are indented four spaces (its arguments deeper)."""
    target, kernels = "", []
    in_kernels = False
    for line in text.splitlines():
        if not line.startswith(" "):
            in_kernels = line.startswith("amdhsa.kernels:")
            if line.startswith("amdhsa.target:"):
                target = line.split(":", 1)[1].strip().strip("'\"")
            continue
        if not in_kernels:
            continue
        if line.startswith("  - "):
            kernels.append(KernelNote())
            line = "    " + line[4:]
        match = _FIELD_LINE.match(line)
        if match and match.group(1) in _FIELDS and kernels:
            field, value = _FIELDS[match.group(1)], match.group(2)
            setattr(kernels[-1], field, value if field in ("name", "symbol") else int(value))
    return target, kernels


def pack_kernargs(addresses: Sequence[int], values: Sequence[int]) -> bytes:
    """The kernarg block a kernel of the HIP renderer reads: each buffer's 64-bit address, then each variable as a
    32-bit int, in parameter order (no hidden arguments: kernels use none of the implicit ones)."""
    return struct.pack(f"<{len(addresses)}Q{len(values)}i", *addresses, *values)
