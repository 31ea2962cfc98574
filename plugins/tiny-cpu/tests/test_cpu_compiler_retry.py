"""A C compiler that crashes at -O3 (some gcc releases do, in the vectorizer, on particular kernels) still gives a
working kernel: the compile is retried at -O2. The crash is reproduced by a wrapper script around the real gcc."""
from __future__ import annotations

import ctypes
import os
import shutil
import stat

import numpy as np
import pytest
from tiny_cpu.compiler import ClangCompiler

from tinycore.device.compiler import CompileError

SOURCE = "void scale(float* restrict out, const float* restrict in) { for (int i = 0; i < 8; i++) out[i] = in[i] * 3; }"


def _wrapper(tmp_path, crash_always: bool) -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("the CPU plugin's tests need gcc on PATH")
    script = tmp_path / "crashing-cc"
    condition = "true" if crash_always else 'case " $* " in *" -O3 "*) true;; *) false;; esac'
    script.write_text("#!/bin/sh\n"
                      f"if {condition}; then echo 'kernel.c:1:1: internal compiler error: Segmentation fault' >&2; "
                      f"exit 1; fi\nexec {gcc} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_an_internal_compiler_error_at_O3_is_retried_at_O2(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", _wrapper(tmp_path, crash_always=False))
    library_path = tmp_path / "kernel.so"
    library_path.write_bytes(ClangCompiler().compile(SOURCE))
    library = ctypes.CDLL(os.fspath(library_path))
    source = np.arange(8, dtype=np.float32)
    result = np.zeros(8, dtype=np.float32)
    library.scale(result.ctypes.data_as(ctypes.c_void_p), source.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_array_equal(result, source * 3)


def test_a_compiler_that_crashes_at_every_level_reports_both_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", _wrapper(tmp_path, crash_always=True))
    with pytest.raises(CompileError) as raised:
        ClangCompiler().compile(SOURCE)
    assert "retried at -O2" in str(raised.value.log) and "-O2" in str(raised.value)


@pytest.mark.parametrize("version, flags, expected", [
    ("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "fpu avx2 avx512f avx512vl",
     ["-fno-tree-loop-if-convert", "-mno-avx512vl"]),
    ("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "fpu avx2 avx512f avx512vl avx512_fp16",
     ["-fno-tree-loop-if-convert", "-mno-avx512vl", "-mno-avx512fp16"]),
    ("gcc (GCC) 13.2.0", "fpu avx2 avx512f avx512vl avx512_fp16", ["-fno-tree-loop-if-convert"]),
    ("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "fpu avx2 fma", ["-fno-tree-loop-if-convert"]),
    ("Debian clang version 15.0.6", "fpu avx2 avx512f avx512vl", []),
])
def test_gcc_gets_the_flags_that_avoid_its_known_miscompiles(monkeypatch, version, flags, expected):
    """gcc's loop if-conversion miscompiles padded reads (AVX2 masked loads); gcc 12 also miscompiles vector
    selects with AVX-512VL at -O2 and crashes at -O3 (seen on a Zen 4 host taken for znver3)."""
    import tiny_cpu.compiler as compiler
    monkeypatch.setattr(compiler, "host_cpu_flags", lambda: frozenset(flags.split()))
    monkeypatch.setattr(compiler, "_compiler_version", lambda executable: version)
    assert compiler._workarounds("cc", None) == expected
    assert compiler._workarounds("cc", "x86-64-v3") == [flag for flag in expected
                                                         if flag not in ("-mno-avx512vl", "-mno-avx512fp16")]


@pytest.mark.parametrize("rows, columns, padding", [(8, 3, ((1, 2), (0, 0))), (5, 7, ((2, 0), (3, 1))),
                                                    (16, 5, ((0, 3), (2, 2)))])
def test_padded_reads_match_numpy(rows, columns, padding):
    """A pad is a read guarded by a bounds check; gcc's if-converted masked loads once zeroed real values here."""
    from tinycore import Tensor
    values = np.arange(rows * columns, dtype=np.float32).reshape(rows, columns) + 1
    np.testing.assert_array_equal(Tensor(values).pad(padding).numpy(), np.pad(values, padding))


def test_half_precision_kernels_compile_and_match_numpy():
    """gelu's gradient in float16 (the kernel gcc 12 mis-assembled on an AVX512-FP16 host before -mno-avx512fp16)."""
    from tinycore import Tensor
    values = np.linspace(-4, 4, 12, dtype=np.float16).reshape(3, 4)
    x = Tensor(values, requires_grad=True)
    x.gelu().sum().backward()
    assert x.grad is not None
    wide = values.astype(np.float64)
    inner = np.sqrt(2 / np.pi) * (wide + 0.044715 * wide ** 3)
    derivative = 0.5 * (1 + np.tanh(inner)) + 0.5 * wide * (1 - np.tanh(inner) ** 2) * np.sqrt(2 / np.pi) * (
        1 + 3 * 0.044715 * wide ** 2)
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), derivative, rtol=2e-2, atol=2e-2)
