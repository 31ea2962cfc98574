"""The LLVM renderer of the CPU (DEV=CPU:LLVM): kernels compiled and linked in this process by llvmlite, results equal
to numpy's. The device is opened with the LLVM renderer in a child process (a process opens CPU once); the compiler
and loader are also checked directly here."""
from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from atomic_scatter_check import run_in_child
from tiny_cpu.llvm_compiler import LLVMCompiler, LLVMProgram, undefined_symbols
from tiny_cpu.llvm_renderer import LLVMRenderer

from tinycore import Tensor
from tinycore.codegen import lower_to_program
from tinycore.device.compiler import CompileError
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule


def _bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 `values` rounded to bfloat16 (to nearest, ties to even), as float32."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)


# each case: tinycore code run under DEV=CPU:LLVM on the inputs below, and the numpy reference
INPUTS = {
    "x": np.linspace(-3.0, 3.0, 37, dtype=np.float32),
    "m": np.random.default_rng(0).standard_normal((33, 47)).astype(np.float32),
    "n": np.random.default_rng(1).standard_normal((47, 29)).astype(np.float32),
    "e": np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, 3.4e38, -3.4e38, 1.5, -2.5, 7.0,
                   -7.0, 0.5, 2.0], dtype=np.float32),
    "f": np.array([np.nan, 0.0, -np.inf, np.inf, 1.0, -1e-45, 1e-45, -1.17e-38, 3.4e38, 3.4e38, -1.5, -2.5, 8.0,
                   -6.0, 0.25, np.nan], dtype=np.float32),
    "i": np.array([-7, -3, 0, 1, 5, 9, 100, -100, 2**31 - 1], dtype=np.int32),
    "d": np.array([3, -2, 0, 7, 0, -4, 3, 9, 1], dtype=np.int32),
    "w": np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32),
    "g": np.random.default_rng(3).integers(0, 33, (5, 47)).astype(np.int32),
    "p": np.random.default_rng(4).integers(0, 2, 24).astype(np.bool_),
}
CASES: dict[str, tuple[str, object]] = {
    "fused elementwise": ("(t['x'] * 2.5 + 1).relu().numpy()", lambda v: np.maximum(v["x"] * 2.5 + 1, 0)),
    "exp and log": ("(t['x'].exp() + (t['x'].abs() + 1).log()).numpy()",
                    lambda v: np.exp(v["x"]) + np.log(np.abs(v["x"]) + 1)),
    "sin, sqrt, pow": ("(t['x'].sin() + t['x'].abs().sqrt() + t['x'].abs().pow(1.7)).numpy()",
                       lambda v: np.sin(v["x"]) + np.sqrt(np.abs(v["x"])) + np.abs(v["x"]) ** np.float32(1.7)),
    "matmul": ("(t['m'] @ t['n']).numpy()", lambda v: v["m"] @ v["n"]),
    "softmax": ("t['m'].softmax(axis=1).numpy()",
                lambda v: np.exp(v["m"] - v["m"].max(1, keepdims=True)) /
                np.exp(v["m"] - v["m"].max(1, keepdims=True)).sum(1, keepdims=True)),
    "row reduces in one kernel": ("[t['m'].log_softmax(axis=1).numpy(), t['m'].layernorm().numpy(), "
                                  "t['m'].var(0).numpy(), t['m'].logsumexp(1).numpy()]",
                                  lambda v: [v["m"] - v["m"].max(1, keepdims=True) - np.log(np.exp(
                                      v["m"] - v["m"].max(1, keepdims=True)).sum(1, keepdims=True)),
                                      (v["m"] - v["m"].mean(1, keepdims=True)) /
                                      np.sqrt(v["m"].var(1, keepdims=True) + 1e-5),
                                      v["m"].var(0, ddof=1), np.log(np.exp(v["m"]).sum(1))]),
    "long rows (vector accumulators folded by halves)": (
        "[t['w'].sum(axis=1).numpy(), (t['w'] @ t['w'].T).numpy(), t['w'].max(axis=1).numpy()]",
        lambda v: [v["w"].sum(1), v["w"] @ v["w"].T, v["w"].max(1)]),
    "sum and max": ("[t['m'].sum(axis=0).numpy(), t['m'].max(axis=1).numpy()]",
                    lambda v: [v["m"].sum(0), v["m"].max(1)]),
    "padded conv": ("t['m'].reshape(1, 1, 33, 47).conv2d(Tensor.ones(2, 1, 3, 3), padding=1).numpy()",
                    lambda v: np.stack([sum(np.pad(v["m"], 1)[r:r + 33, c:c + 47] for r in range(3)
                                            for c in range(3))] * 2)[None]),
    "integer division and modulo": ("[(t['i'] // t['d']).numpy(), (t['i'] % t['d']).numpy()]",
                                    lambda v: [np.where(v["d"] == 0, 0, v["i"] // np.where(v["d"] == 0, 1, v["d"])),
                                               np.where(v["d"] == 0, 0, v["i"] % np.where(v["d"] == 0, 1, v["d"]))]),
    "half and bfloat16": ("[(t['x'].cast('float16') * 3).numpy(), t['x'].cast('bfloat16').cast('float32').numpy()]",
                          lambda v: [v["x"].astype(np.float16) * np.float16(3),
                                     (v["x"].view(np.uint32) + 0x7FFF + ((v["x"].view(np.uint32) >> 16) & 1)
                                      >> 16 << 16).astype(np.uint32).view(np.float32)]),
    "bfloat16 arithmetic, rounded after each op; half math functions": (
        "[(t['x'].cast('bfloat16') * 3).maximum(t['x'].cast('bfloat16') + 1).cast('float32').numpy(), "
        "(t['x'].cast('float16').exp2() + t['x'].cast('float16').sin()).numpy()]",
        lambda v: [np.maximum(_bfloat16(_bfloat16(v["x"]) * 3), _bfloat16(_bfloat16(v["x"]) + 1)),
                   np.exp2(v["x"].astype(np.float16)) + np.sin(v["x"].astype(np.float16))]),
    "bool and where": ("[(t['x'] > 0).numpy(), (t['x'] < 1).where(t['x'], -t['x']).numpy()]",
                       lambda v: [v["x"] > 0, np.where(v["x"] < 1, v["x"], -v["x"])]),
    "edge values: compare, select, maximum": (
        "[(t['e'] < t['f']).numpy(), (t['e'] != t['f']).numpy(), (t['e'] == t['f']).numpy(), "
        "(t['e'] < t['f']).where(t['e'], t['f']).numpy(), t['e'].maximum(t['f']).numpy()]",
        lambda v: [v["e"] < v["f"], v["e"] != v["f"], v["e"] == v["f"], np.where(v["e"] < v["f"], v["e"], v["f"]),
                   np.where(v["e"] < v["f"], v["f"], v["e"])]),  # MAX is (a < b) ? b : a, as on the C renderer
    "edge values: exp2, log2, sqrt": (
        "[t['e'].exp2().numpy(), t['e'].log2().numpy(), t['e'].sqrt().numpy()]",
        lambda v: [np.exp2(v["e"]), np.log2(v["e"]), np.sqrt(v["e"])]),
    "gated reads (llvm_lowering): pads of edge values, bools, int8 and rows, a gather": (
        "[t['e'].pad(((2, 3),), value=-1.5).numpy(), (t['e'] > 0).pad(((1, 1),)).numpy(), "
        "t['i'].cast('int8').pad(((3, 0),)).numpy(), t['m'].pad(((1, 2), (3, 1))).numpy(), "
        "t['m'].gather(0, t['g']).numpy()]",
        lambda v: [np.pad(v["e"], (2, 3), constant_values=-1.5), np.pad(v["e"] > 0, 1),
                   np.pad(v["i"].astype(np.int8), (3, 0)), np.pad(v["m"], ((1, 2), (3, 1))),
                   np.take_along_axis(v["m"], v["g"], 0)]),
    "bool buffers, read and written as bytes (SSA lowering), whole vectors and gated": (
        "[t['p'].logical_not().numpy(), t['p'].pad(((3, 2),), value=True).numpy(), t['p'][5:].flip(0).numpy(), "
        "t['p'].reshape(3, 8).any(1).numpy(), t['p'].where(t['x'][:24], 7.0).numpy(), (t['p'] & t['p'][::-1]).numpy()]",
        lambda v: [~v["p"], np.pad(v["p"], (3, 2), constant_values=True), v["p"][5:][::-1], v["p"].reshape(3, 8).any(1),
                   np.where(v["p"], v["x"][:24], np.float32(7.0)), v["p"] & v["p"][::-1]]),
    "float to narrow and unsigned integers through int32/int64 (llvm_lowering), negatives wrapping": (
        "[(t['x'] * 60).cast(name).numpy() for name in ('int8', 'int16', 'uint16', 'uint32')]",
        lambda v: [(v["x"] * 60).astype(np.int64).astype(name) for name in (np.int8, np.int16, np.uint16, np.uint32)]),
    "casts to unsigned and double": ("[t['x'].cast('uint8').numpy(), (t['x'].cast('float64') / 3).numpy()]",
                                     lambda v: [v["x"].astype(np.int32).astype(np.uint8),
                                                v["x"].astype(np.float64) / 3]),
}

SCRIPT = """
import json, sys
import numpy as np
from tinycore import Device, Tensor
assert type(Device['CPU'].renderer).__name__ == 'LLVMRenderer', type(Device['CPU'].renderer)
inputs = {key: np.array(value, dtype=dtype) for key, (value, dtype) in json.loads(sys.argv[1]).items()}
t = {key: Tensor(value) for key, value in inputs.items()}
results = {}
for name, code in json.loads(sys.argv[2]).items():
    value = eval(code)
    values = value if isinstance(value, list) else [value]
    results[name] = [[v.tolist(), str(v.dtype)] for v in values]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def results() -> dict[str, list[tuple[list[object], str]]]:
    """Every case computed by tinycore under DEV=CPU:LLVM, in one child process."""
    encoded = json.dumps({key: (value.tolist(), str(value.dtype)) for key, value in INPUTS.items()})
    codes = json.dumps({name: code for name, (code, _reference) in CASES.items()})
    environment = {**os.environ, "DEV": "CPU:LLVM"}
    finished = subprocess.run([sys.executable, "-c", SCRIPT, encoded, codes], capture_output=True, text=True,
                              env=environment, timeout=300)
    assert finished.returncode == 0, finished.stderr[-4000:]
    loaded: dict[str, list[tuple[list[object], str]]] = json.loads(finished.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("name", list(CASES))
def test_llvm_kernels_match_numpy(results: dict[str, list[tuple[list[object], str]]], name: str) -> None:
    with np.errstate(all="ignore"):  # the edge values overflow and take logs of negatives on purpose
        reference = CASES[name][1](INPUTS)  # type: ignore[operator]
    expected = reference if isinstance(reference, list) else [reference]
    assert len(results[name]) == len(expected)
    for (values, dtype), wanted in zip(results[name], expected, strict=True):
        wanted = np.asarray(wanted)
        got = np.array(values, dtype=dtype)
        assert got.shape == wanted.shape
        if np.issubdtype(wanted.dtype, np.floating):
            tolerance = 2e-3 if wanted.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got.astype(np.float64), wanted.astype(np.float64), rtol=tolerance,
                                       atol=tolerance)
            np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(wanted[wanted == 0]))
        else:
            np.testing.assert_array_equal(got, wanted.astype(got.dtype))


def _program(expression: Tensor) -> tuple[str, str]:
    """The LLVM IR and name of the one kernel computing `expression` (inputs realized first)."""
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    spec = lower_to_program(items[0].ast, LLVMRenderer())
    return spec.src, spec.function_name


def test_compiles_and_links_in_process_without_a_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path, IR to a result, with process creation refused: llvmlite compiles, MCJIT links, ctypes calls."""
    source = Tensor(np.arange(1000, dtype=np.float32)).realize()
    src, name = _program(source * 2.0 + 1.0)

    def refuse(*arguments: object, **keywords: object) -> None:
        raise AssertionError("the LLVM path started a process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse, raising=False)
    compiler = LLVMCompiler()
    obj = compiler.compile(src)
    assert obj[:4] == b"\x7fELF"
    program = LLVMProgram(name, obj)
    output = np.zeros(1000, dtype=np.float32)
    data = np.arange(1000, dtype=np.float32)
    program(output.ctypes.data, data.ctypes.data, global_size=(1, 1, 1))
    np.testing.assert_array_equal(output, data * np.float32(2) + np.float32(1))
    # the same kernel split over workers through the C pool's entry point
    output[:] = 0
    program(output.ctypes.data, data.ctypes.data, global_size=(2, 1, 1))
    assert ctypes.c_float.from_address(output.ctypes.data + 4 * 999).value == 1999.0


def test_undefined_symbols_of_an_object_name_its_library_calls() -> None:
    src = ("declare double @llvm.sin.f64(double)\n"
           "define double @f(double %x) {\n  %y = call double @llvm.sin.f64(double %x)\n  ret double %y\n}\n")
    assert undefined_symbols(LLVMCompiler().compile(src)) == ["sin"]


def test_invalid_ir_is_a_compile_error_with_the_source() -> None:
    with pytest.raises(CompileError, match="LLVM rejected the kernel's IR"):
        LLVMCompiler().compile("define void @f() {\n  ret i32 0\n}\n")


def test_missing_entry_point_is_a_clear_error() -> None:
    obj = LLVMCompiler().compile("define void @other() {\n  ret void\n}\n")
    with pytest.raises(RuntimeError, match="has no entry point kernel_entry"):
        LLVMProgram("kernel", obj)


def test_scatter_reductions_combine_atomically_across_workers() -> None:
    """Scatter reductions split across 4 workers update with atomicrmw / cmpxchg; results equal numpy's ufunc.at."""
    run_in_child("LLVM")


def test_unresolved_library_call_is_an_error_not_an_abort() -> None:
    """LLVM ends the process on a symbol it cannot resolve; the loader names it first."""
    src = ("declare void @tinycore_no_such_function()\n"
           "define void @k_entry(ptr %arguments, i32 %core_id) {\n  call void @tinycore_no_such_function()\n"
           "  ret void\n}\n")
    with pytest.raises(RuntimeError, match="calls tinycore_no_such_function, which this process does not provide"):
        LLVMProgram("k", LLVMCompiler().compile(src))


def test_without_llvmlite_the_error_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny_cpu import llvm_compiler
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    monkeypatch.setattr(llvm_compiler, "_llvm", llvm_compiler._llvm.__wrapped__)
    # the install line fits how tinycore was installed: from this checkout, the plugin's folder with its extra
    with pytest.raises(RuntimeError, match=r"llvmlite is not installed: .* -m pip install -e '.*plugins/tiny-cpu"
                                           r"\[llvm\]'; or use DEV=CPU:C"):
        llvm_compiler.make_llvm_renderer("CPU", None)


def test_an_unknown_cpu_is_a_clear_error_not_an_abort() -> None:
    with pytest.raises(ValueError, match="LLVM does not know the CPU 'no-such-cpu'"):
        LLVMCompiler("no-such-cpu")
    src = "define void @k_entry(ptr %arguments, i32 %core_id) {\n  ret void\n}\n"
    assert LLVMCompiler("x86-64-v2" if platform.machine() in ("x86_64", "AMD64") else "generic").compile(src)


def test_threads_compiling_at_once_get_correct_objects() -> None:
    """Kernels compiled from several threads at once (ctypes releases the GIL inside LLVM) all link and compute."""
    from concurrent.futures import ThreadPoolExecutor
    compiler = LLVMCompiler()
    sources = [(f"scale{number}", f"define void @scale{number}_entry(ptr %arguments, i32 %core_id) {{\n"
                "  %word = load i64, ptr %arguments, align 8\n  %data = inttoptr i64 %word to ptr\n"
                f"  %value = load float, ptr %data, align 4\n  %scaled = fmul float %value, {float(number):e}\n"
                "  store float %scaled, ptr %data, align 4\n  ret void\n}\n") for number in range(1, 9)]
    with ThreadPoolExecutor(4) as pool:
        objects = list(pool.map(lambda pair: compiler.compile(pair[1]), sources))
    for (name, _src), obj, number in zip(sources, objects, range(1, 9), strict=True):
        data = np.array([1.5], dtype=np.float32)
        LLVMProgram(name, obj)(data.ctypes.data)
        assert data[0] == np.float32(1.5) * number
