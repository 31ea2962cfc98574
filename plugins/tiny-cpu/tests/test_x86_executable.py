"""Hand-assembled x86-64 functions loaded into W^X executable memory and called through ctypes, checked against
numpy and hand-computed values."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.assembler import Assembler
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.registers import XMM, YMM, ZMM, r8, r9, rax, rcx, rdi, rdx, rsi, rsp

from tinycore.renderer.isa import Label, Memory

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")


def _cpu_has(flag: str) -> bool:
    with open("/proc/cpuinfo") as cpuinfo:
        return any(flag in line.split() for line in cpuinfo if line.startswith("flags"))


def _pointer(array: np.ndarray) -> int:
    return array.ctypes.data


def test_integer_arguments_in_registers_and_on_the_stack() -> None:
    a = Assembler()
    a.emit("mov", rax, rdi)
    for register in (rsi, rdx, rcx, r8, r9):
        a.emit("add", rax, register)
    a.emit("add", rax, Memory(rsp, None, 1, 8, 64))  # 7th and 8th arguments, above the return address
    a.emit("sub", rax, Memory(rsp, None, 1, 16, 64))
    a.emit("ret")
    add = ExecutableCode(a.finish()).function(ctypes.c_int64, *[ctypes.c_int64] * 8)
    values = [3, -40, 500, 6000, -70000, 800000, 9_000_000_000, 123]
    assert add(*values) == sum(values[:7]) - values[7]


def test_code_is_mapped_read_execute_only() -> None:
    code = ExecutableCode(b"\xc3")
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, permissions = line.split()[:2]
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= code.address < high:
                assert permissions.startswith("r-x"), line
                return
    raise AssertionError("the code's mapping is not in /proc/self/maps")


def _multiply_add_loop(width: int) -> bytes:
    """dst[i] = a[i] * b[i] + a[i] for i < n: vector body of `width` bits, then a scalar tail.
    Arguments: rdi=dst, rsi=a, rdx=b, rcx=n."""
    lanes, table = width // 32, {256: YMM, 512: ZMM}[width]
    scalar_loop, done, vector_loop = Label("scalar"), Label("done"), Label("vector_loop")
    a = Assembler()
    a.emit("xor", rax, rax)
    a.bind(vector_loop)
    a.emit("lea", r8, Memory(rax, None, 1, lanes, 64))
    a.emit("cmp", r8, rcx)
    a.emit("jg", scalar_loop)
    a.emit("vmovups", table[1], Memory(rsi, rax, 4, 0, width))
    a.emit("vmovaps", table[2], table[1])
    a.emit("vfmadd231ps", table[2], table[1], Memory(rdx, rax, 4, 0, width))  # a + a*b
    a.emit("vmovups", Memory(rdi, rax, 4, 0, width), table[2])
    a.emit("mov", rax, r8)
    a.emit("jmp", vector_loop)
    a.bind(scalar_loop)
    a.emit("cmp", rax, rcx)
    a.emit("jge", done)
    a.emit("vmovss", XMM[1], Memory(rsi, rax, 4, 0, 32))
    a.emit("vmulss", XMM[2], XMM[1], Memory(rdx, rax, 4, 0, 32))
    a.emit("vaddss", XMM[2], XMM[2], XMM[1])
    a.emit("vmovss", Memory(rdi, rax, 4, 0, 32), XMM[2])
    a.emit("add", rax, 1)
    a.emit("jmp", scalar_loop)
    a.bind(done)
    a.emit("vzeroupper")
    a.emit("ret")
    return a.finish()


@pytest.mark.parametrize("width", [256, 512])
def test_float_vector_loop_matches_numpy(width: int) -> None:
    if width == 512 and not _cpu_has("avx512f"):
        pytest.skip("this CPU has no AVX-512")
    if width == 256 and not (_cpu_has("avx2") and _cpu_has("fma")):
        pytest.skip("this CPU has no AVX2/FMA")
    function = ExecutableCode(_multiply_add_loop(width)).function(None, *[ctypes.c_void_p] * 3, ctypes.c_int64)
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 16, 37, 1000):
        a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        dst = np.full(n, np.nan, np.float32)
        function(_pointer(dst), _pointer(a), _pointer(b), n)
        lanes = width // 32
        vector_part = n - n % lanes
        # the vector body rounds once (FMA); the scalar tail rounds the product, then the sum
        fused = (a.astype(np.float64) * b + a).astype(np.float32)
        np.testing.assert_array_equal(dst[:vector_part], fused[:vector_part])
        np.testing.assert_array_equal(dst[vector_part:], a[vector_part:] * b[vector_part:] + a[vector_part:])


def test_half_to_float_and_back_with_f16c() -> None:
    if not _cpu_has("f16c"):
        pytest.skip("this CPU has no F16C")
    a = Assembler()
    a.emit("vcvtph2ps", YMM[0], Memory(rsi, None, 1, 0, 128))  # rdi=float out, rsi=half in, rdx=half out
    a.emit("vmovups", Memory(rdi, None, 1, 0, 256), YMM[0])
    a.emit("vaddps", YMM[0], YMM[0], YMM[0])
    a.emit("vcvtps2ph", Memory(rdx, None, 1, 0, 128), YMM[0], 0)  # round to nearest even
    a.emit("vzeroupper")
    a.emit("ret")
    function = ExecutableCode(a.finish()).function(None, *[ctypes.c_void_p] * 3)
    halves = np.array([0.5, -1.25, 3.0e-5, 65504.0, -0.0, 1.0 / 3.0, 1000.5, 7.0], np.float16)
    floats, doubled = np.zeros(8, np.float32), np.zeros(8, np.float16)
    function(_pointer(floats), _pointer(halves), _pointer(doubled))
    np.testing.assert_array_equal(floats, halves.astype(np.float32))
    with np.errstate(over="ignore"):  # 65504 doubled is past float16's range: inf, as vcvtps2ph gives
        expected = (halves.astype(np.float32) * 2).astype(np.float16)
    np.testing.assert_array_equal(doubled, expected)
