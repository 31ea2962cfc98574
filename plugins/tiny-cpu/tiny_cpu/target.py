"""The vector registers CPU kernels are written for: 64 bytes where the target has AVX-512F, else 32 (AVX2).

The codegen heuristics size vectors, register tiles and matmul panels from `RendererContract.preferred_vector_bytes`
and `matmul_panel_bytes`; on an AVX-512 host 16-lane float vectors halve the instructions of every kernel and double
the FLOPs of each fused multiply-add. Measured on a 2-core Xeon with AVX-512 (paired medians against numpy's
OpenBLAS, which uses AVX-512 there): matmul 1024^2 0.59x with 32-byte vectors, 0.92x with 64; conv2d 32x16x64x64 *
32x16x3x3 152 -> 249 GFLOPS best (bench/README.md).
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess

WIDE_VECTOR_BYTES = 64
"""AVX-512's zmm registers."""
NARROW_VECTOR_BYTES = 32
"""AVX2's ymm registers, and what every other target gets (NEON's 16-byte registers take 32-byte vectors as pairs)."""


@functools.cache
def matmul_panel_bytes(vector_bytes: int) -> int:
    """The bytes across a packed matmul panel for kernels with `vector_bytes` vectors: four vectors with AVX-512's
    32 registers (the heuristic's 6-row x 4-vector tile: 1024^2 kernels 448-453 -> 463-466 GFLOPS on a 2-core Xeon
    against 12 rows x 2 vectors), two with 16 (6 rows x 2 vectors)."""
    return (4 if vector_bytes >= WIDE_VECTOR_BYTES else 2) * vector_bytes


def host_cpu_flags() -> frozenset[str]:
    """The feature flags of the host CPU as Linux reports them (empty where /proc/cpuinfo has none)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


CACHE_DIRECTORY = "/sys/devices/system/cpu/cpu0/cache"
"""Where Linux describes the caches of the first CPU: index*/level, type and size ("2048K")."""


def _size_bytes(text: str) -> int | None:
    """Bytes of a sysfs cache size ("48K", "2048K", "2M", "32768"); None when it does not parse."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in ("K", "M", "G") else text
    return int(digits) * scale if digits.isdigit() else None


@functools.cache
def host_core_cache_bytes(directory: str = CACHE_DIRECTORY) -> int | None:
    """Bytes of the host's level-2 cache (data or unified) as Linux reports it for the first CPU; None where it does
    not (another OS, no sysfs). The CPU heuristics size matmul row groups by it (RendererContract.core_cache_bytes)."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(directory, entry, "level")) as file:
                level = file.read().strip()
            with open(os.path.join(directory, entry, "type")) as file:
                kind = file.read().strip()
            with open(os.path.join(directory, entry, "size")) as file:
                size = _size_bytes(file.read())
        except OSError:
            continue
        if level == "2" and kind in ("Unified", "Data") and size:
            return size
    return None


INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
"""/proc/cpuinfo flags of x86's int8 dot-product instructions: AVX-512 VNNI and AVX-VNNI (vpdpbusd, vpdpwssd)."""


def host_int8_dot_products(arch: str | None) -> bool:
    """Whether kernels compiled for the host (`arch` None) have int8 dot-product instructions; a kernel compiled for
    another `arch` is not assumed to."""
    return arch is None and bool(INT8_DOT_FLAGS & host_cpu_flags())


def _x86_host() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def host_vector_bytes() -> int:
    """64 when this x86 host has AVX-512F (kernels compile with -march=native), else 32."""
    return WIDE_VECTOR_BYTES if _x86_host() and "avx512f" in host_cpu_flags() else NARROW_VECTOR_BYTES


@functools.cache
def compiler_vector_bytes(command: tuple[str, ...], arch: str) -> int:
    """64 when the C compiler `command` defines __AVX512F__ for `-march=arch`, else 32 (also when it cannot run)."""
    try:
        result = subprocess.run([*command, f"-march={arch}", "-dM", "-E", "-x", "c", "-"], input="",
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return NARROW_VECTOR_BYTES
    return WIDE_VECTOR_BYTES if result.returncode == 0 and "__AVX512F__" in result.stdout else NARROW_VECTOR_BYTES


def c_vector_bytes(arch: str | None) -> int:
    """The vector bytes of C kernels compiled for `arch` (None: this host, as -march=native)."""
    if arch is None:
        return host_vector_bytes()
    from tiny_cpu.compiler import _find_compiler
    try:
        command = _find_compiler()
    except RuntimeError:
        return NARROW_VECTOR_BYTES  # no compiler: the device reports that when it compiles
    return compiler_vector_bytes(tuple(command), arch)
