"""The PTX renderer: the representative kernels, and a cast and an add for every dtype, render to PTX that ptxas
(from the nvidia-cuda-nvcc wheel) assembles for sm_80 and sm_90 into a CUDA ELF holding the kernel's symbol.

Nothing here runs the PTX (no GPU in CI); the MOCK GPU runs the same linear programs (DEV=MOCK+NV:PTX)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy
import pytest
from nv_kernels import CASES, Case, case_kernels, kernels_of, symbolic_kernel
from tiny_nv.inspect import EM_CUDA, elf_machine, elf_symbols
from tiny_nv.ptx import PTXRenderer
from tiny_nv.ptx_compiler import PTXCompiler
from tiny_nv.toolkit import find_tool

from tinycore.codegen import lower_to_program
from tinycore.device.compiler import CompileError
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

ARCHS = ("sm_80", "sm_90")
DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
          dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


@pytest.fixture(scope="module")
def ptxas() -> str:
    path = find_tool("ptxas")
    assert path is not None, "the PTX tests need ptxas: pip install nvidia-cuda-nvcc-cu12 (the test extra has it)"
    return path


def assemble(ptxas: str, source: str, arch: str, tmp_path: Path) -> bytes:
    """The CUBIN ptxas makes of `source`; the test fails with ptxas's message when it refuses."""
    (tmp_path / "kernel.ptx").write_text(source)
    result = subprocess.run([ptxas, f"-arch={arch}", str(tmp_path / "kernel.ptx"), "-o", str(tmp_path / "k.cubin")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + "\n" + source
    return (tmp_path / "k.cubin").read_bytes()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kernel_assembles(case: Case, arch: str, ptxas: str, tmp_path: Path) -> None:
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    for item in items:
        program = lower_to_program(item.ast, PTXRenderer(arch))
        assert f".target {arch}" in program.src and f".visible .entry {program.function_name}(" in program.src
        cubin = assemble(ptxas, program.src, arch, tmp_path)
        assert elf_machine(cubin) == EM_CUDA and program.function_name in elf_symbols(cubin)


def test_reduce_uses_shared_memory_and_a_barrier() -> None:
    case = next(case for case in CASES if case.name == "reduce")
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    source = lower_to_program(items[0].ast, PTXRenderer("sm_90")).src
    assert ".shared .align 16 .b8 temp" in source and "bar.sync 0;" in source and "%tid.x" in source


@pytest.mark.parametrize("arch", ARCHS)
def test_symbolic_kernel_takes_the_size_as_a_parameter(arch: str, ptxas: str, tmp_path: Path) -> None:
    _data, item, _expected = symbolic_kernel(7)
    program = lower_to_program(item.ast, PTXRenderer(arch))
    assert ".param .s32 width" in program.src
    assemble(ptxas, program.src, arch, tmp_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(dtype) for dtype in DTYPES])
def test_every_dtype_casts_and_adds(dtype, ptxas: str, tmp_path: Path) -> None:
    values = Tensor(numpy.arange(-8, 24, dtype=numpy.float32).reshape(4, 8))
    converted = values.cast(dtype)
    programs = [*kernels_of((converted + converted).cast(dtypes.float32)), *kernels_of(converted.max(axis=1)),
                *kernels_of((converted < converted.cast(dtypes.int8).cast(dtype)).where(converted, converted * 2))]
    for item in programs:
        program = lower_to_program(item.ast, PTXRenderer("sm_80"))
        assemble(ptxas, program.src, "sm_80", tmp_path)


def test_compiler_passes_ptx_through_for_the_driver() -> None:
    source = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry empty()\n{\n\tret;\n}\n"
    assert PTXCompiler("sm_90").compile(source) == source.encode() + b"\0"
    with pytest.raises(CompileError, match="not a PTX module for sm_80"):
        PTXCompiler("sm_80").compile(source)
