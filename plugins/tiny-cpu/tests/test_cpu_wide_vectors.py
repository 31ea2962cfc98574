"""AVX-512 targets: 64-byte vectors and 32-column matmul panels where the target has AVX-512F, and the 512-bit
fused multiply-add and max/min builtins spelled so that gcc and clang both compile them."""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tiny_cpu.target as target
from cpu_vectors import cpu_vector_bytes
from tiny_cpu.renderer import CRenderer

from tinycore import Tensor
from tinycore.codegen import lower_to_program
from tinycore.device import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule

X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.parametrize("machine, flags, expected", [
    ("x86_64", "fpu sse2 avx avx2 fma avx512f avx512vl", 64),
    ("x86_64", "fpu sse2 avx avx2 fma", 32),
    ("aarch64", "", 32),
])
def test_host_vector_bytes_follow_avx512f(monkeypatch: pytest.MonkeyPatch, machine: str, flags: str,
                                          expected: int) -> None:
    monkeypatch.setattr(target, "host_cpu_flags", lambda: frozenset(flags.split()))
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert target.host_vector_bytes() == expected
    renderer = CRenderer()
    # four vectors across a packed panel with AVX-512's 32 registers, two with AVX2's 16
    assert (renderer.preferred_vector_bytes, renderer.matmul_panel_bytes) == (expected, {64: 256, 32: 64}[expected])


@pytest.mark.skipif(not X86, reason="-march names of x86 levels need an x86 compiler")
@pytest.mark.parametrize("arch, expected", [("x86-64-v4", 64), ("skylake-avx512", 64), ("x86-64-v3", 32),
                                            ("haswell", 32)])
def test_an_explicit_arch_asks_the_compiler(arch: str, expected: int) -> None:
    renderer = CRenderer(arch=arch)
    # four vectors across a packed panel with AVX-512's 32 registers, two with AVX2's 16
    assert (renderer.preferred_vector_bytes, renderer.matmul_panel_bytes) == (expected, {64: 256, 32: 64}[expected])


def test_the_host_renderer_matches_the_cpu_flags() -> None:
    renderer = CRenderer()
    flags = target.host_cpu_flags()
    assert renderer.preferred_vector_bytes == (64 if X86 and "avx512f" in flags else 32)


def _wide_sources() -> list[str]:
    """The C sources of a 64-byte-vector product with a relu (FMA accumulators) and a row maximum."""
    with cpu_vector_bytes(64):
        a, b = Tensor(np.ones((64, 64), np.float32)), Tensor(np.ones((64, 96), np.float32))
        c = Tensor(np.ones((8, 256), np.float64))
        outputs = [(a @ b).relu().uop, c.max(axis=1).uop, (c * 2.0 + 1.0).maximum(c).uop]
        items = create_schedule(outputs, device_facts).items
        return [lower_to_program(item.ast, Device["CPU"].renderer).src for item in items if not item.is_copy]


def _compilers() -> list[str]:
    """gcc and every clang on PATH (CI has gcc and clang-19)."""
    names = ("gcc", "clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15")
    return [found for found in dict.fromkeys(shutil.which(name) for name in names) if found is not None]


@pytest.mark.skipif(not X86, reason="the 512-bit builtins are x86's")
@pytest.mark.parametrize("compiler", _compilers())
def test_wide_builtins_compile_with_every_compiler(compiler: str, tmp_path: Path) -> None:
    # a misspelt builtin is only an implicit declaration to C: an undefined symbol that fails when the kernel is
    # opened, so implicit declarations are errors here
    sources = _wide_sources()
    text = "\n".join(sources)
    assert "TC_FMA_FLOAT16(" in text and "TC_MAX_" in text, text
    for position, source in enumerate(sources):
        result = subprocess.run([compiler, "-march=x86-64-v4", "-O2", "-Werror=implicit-function-declaration",
                                 "-x", "c", "-c", "-", "-o", str(tmp_path / f"kernel{position}.o")],
                                input=source, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        symbols = subprocess.run(["nm", "-u", str(tmp_path / f"kernel{position}.o")], capture_output=True,
                                 text=True, timeout=60).stdout
        assert "__builtin" not in symbols, symbols


def test_wide_kernels_match_numpy() -> None:
    # on an AVX-512 host these run the 512-bit builtins, elsewhere the same source as two 256-bit halves
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((70, 45), dtype=np.float32), rng.standard_normal((45, 96), dtype=np.float32)
    c = rng.standard_normal((9, 300)).astype(np.float64)
    c[2, 7], c[4, 0] = np.inf, -np.inf
    with cpu_vector_bytes(64):
        product = (Tensor(a) @ Tensor(b)).relu().numpy()
        maxima = Tensor(c).max(axis=1).numpy()
        exp = Tensor(c.astype(np.float32)).exp().numpy()
    np.testing.assert_allclose(product, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(maxima, c.max(axis=1))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(exp, np.exp(c.astype(np.float32).astype(np.float64)), rtol=2e-6)


@pytest.mark.skipif(not X86, reason="x86 CPU names")
@pytest.mark.parametrize("arch, expected", [("skylake-avx512", 64), ("znver4", 64), ("haswell", 32),
                                            ("x86-64", 32)])
def test_llvm_asks_its_target_for_512_bit_registers(arch: str, expected: int) -> None:
    from tiny_cpu.llvm_compiler import llvm_vector_bytes, make_llvm_renderer
    assert llvm_vector_bytes(arch) == expected
    renderer, _ = make_llvm_renderer("CPU", arch)
    # four vectors across a packed panel with AVX-512's 32 registers, two with AVX2's 16
    assert (renderer.preferred_vector_bytes, renderer.matmul_panel_bytes) == (expected, {64: 256, 32: 64}[expected])
    assert llvm_vector_bytes(None) == (64 if "avx512f" in target.host_cpu_flags() else 32)


@pytest.mark.parametrize("flags, arch, expected", [
    ("avx2 avx512_vnni", None, True), ("avx2 avx_vnni", None, True), ("avx2 avx512f", None, False),
    ("avx2 avx512_vnni", "x86-64-v3", False)])
def test_the_renderer_declares_int8_dot_products_from_the_vnni_flags(monkeypatch: pytest.MonkeyPatch, flags: str,
                                                                     arch: str | None, expected: bool) -> None:
    """int8_dot_products: the host has AVX-512 VNNI or AVX-VNNI, and the kernels are compiled for the host."""
    monkeypatch.setattr(target, "host_cpu_flags", lambda: frozenset(flags.split()))
    assert CRenderer(arch=arch).int8_dot_products is expected
