"""The C renderer's tc_dot4_u8s8_N macros (tinycore.codegen.int8_dot's op): each vector width compiled by every C
compiler here for the host (vpdpbusd where it has VNNI: 512-bit, or 256/128-bit through the 512-bit instruction when
gcc 12 runs without AVX512VL) and for a target without VNNI (the plain C form), run on edge bytes against numpy."""
from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tiny_cpu.compiler import _workarounds
from tiny_cpu.renderer import _dot4_macro

X86 = platform.machine().lower() in ("x86_64", "amd64")
WIDTHS = (1, 4, 8, 16)


def _compilers() -> list[str]:
    """gcc and every clang on PATH (CI has gcc and clang-19)."""
    names = ("gcc", "clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15")
    return [found for found in dict.fromkeys(shutil.which(name) for name in names) if found is not None]


def _source() -> str:
    """One function per width: out[i] = tc_dot4_u8s8_N(acc, a, b) over `count` int32 words, N words at a time."""
    lines = [f"typedef int int{width}{suffix} __attribute__((vector_size({4 * width}){alignment}));"
             for width in WIDTHS if width > 1 for suffix, alignment in (("", ""), ("_u", ", aligned(4)"))]
    for width in WIDTHS:
        vector = f"int{width}_u" if width > 1 else "int"  # numpy's arrays are aligned to less than a vector
        lines += [_dot4_macro(width),
                  f"void dot{width}(const {vector} *acc, const {vector} *a, const {vector} *b, {vector} *out, "
                  f"int count) {{ for (int i = 0; i < count / {width}; i++) out[i] = tc_dot4_u8s8_{width}(acc[i], "
                  "a[i], b[i]); }"]
    return "\n".join(lines) + "\n"


def _operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """64 words of unsigned and signed bytes (every pair of edge values among them) and int32 accumulators."""
    edges = np.array([(u, s) for u in (0, 1, 127, 128, 255) for s in (-128, -1, 0, 1, 127)])
    rng = np.random.default_rng(3)
    unsigned, signed = rng.integers(0, 256, (64, 4)), rng.integers(-128, 128, (64, 4))
    unsigned.reshape(-1)[:len(edges)], signed.reshape(-1)[:len(edges)] = edges[:, 0], edges[:, 1]
    unsigned[-1], signed[-1] = 255, -128
    accumulator = rng.integers(-10**6, 10**6, 64)
    accumulator[-1] = -2**31 + 4 * 255 * 128  # lands exactly on int32's minimum
    return unsigned.astype(np.uint8), signed.astype(np.int8), accumulator.astype(np.int32)


@pytest.mark.skipif(not X86, reason="the VNNI builtins and the -march names are x86's")
@pytest.mark.parametrize("arch", [None, "x86-64-v3"])
@pytest.mark.parametrize("compiler", _compilers())
def test_dot4_macros_match_numpy(compiler: str, arch: str | None, tmp_path: Path) -> None:
    """Every width's macro, built with the plugin's own flags (-march=native and its gcc workarounds, or a target
    without VNNI), gives numpy's per-lane sums; on a VNNI host the native build uses vpdpbusd for every vector."""
    flags = ["-O3", f"-march={arch or 'native'}", *_workarounds(compiler, arch), "-shared", "-fPIC", "-fno-math-errno",
             "-ffp-contract=off"]
    library = tmp_path / "dot.so"
    built = subprocess.run([compiler, *flags, "-Werror=implicit-function-declaration", "-x", "c", "-", "-o",
                            str(library)], input=_source(), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    unsigned, signed, accumulator = _operands()
    expected = accumulator.astype(np.int64) + (unsigned.astype(np.int64) * signed.astype(np.int64)).sum(-1)
    a, b = unsigned.view(np.int32).reshape(-1).copy(), signed.view(np.int32).reshape(-1).copy()
    loaded = ctypes.CDLL(str(library))
    for width in WIDTHS:
        out = np.zeros(64, np.int32)
        pointers = [array.ctypes.data_as(ctypes.c_void_p) for array in (accumulator, a, b, out)]
        getattr(loaded, f"dot{width}")(*pointers, ctypes.c_int(64))
        np.testing.assert_array_equal(out.astype(np.int64), expected, err_msg=f"{compiler} {arch} width {width}")
    if arch is None and {"avx512_vnni", "avx_vnni"} & set(Path("/proc/cpuinfo").read_text().split()):
        disassembly = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True).stdout
        for width in (4, 8, 16):
            function = disassembly.split(f"<dot{width}>:")[1].split("\n\n")[0]
            assert "vpdpbusd" in function, f"{compiler}: dot{width} has no vpdpbusd"
