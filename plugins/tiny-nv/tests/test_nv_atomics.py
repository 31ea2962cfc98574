"""Scatter reductions on NV: the CUDA and PTX renderers declare atomics (`atomic_dtypes`), so codegen runs the
repeatable axes in parallel and the combining store becomes atomicAdd / atomicMax / atomicMin / an atomicCAS loop
(CUDA C, compiled by NVRTC for sm_80 and sm_90) or red / atom.cas (PTX, assembled by ptxas when installed); the SASS
holds RED or ATOM; the programs' answers equal numpy's ufunc.at with many repeated indices."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy
import pytest
from tiny_nv.inspect import disassemble, disassembler
from tiny_nv.nvrtc import compile_cuda, nvrtc_status
from tiny_nv.ptx import PTXRenderer
from tiny_nv.ptx_compiler import assemble_with_ptxas
from tiny_nv.renderer import CUDARenderer
from tiny_nv.toolkit import find_tool

from tinycore import Tensor
from tinycore.codegen import lower_to_program
from tinycore.dtype import dtypes
from tinycore.testing.kernel_cases import kernels_of

ARCHS = ("sm_80", "sm_90")
ATOMIC_SASS = re.compile(r"\b(RED|REDG|ATOM|ATOMG)\.")
"""Global reductions and atomics in SASS (sm_90 spells the global forms REDG / ATOMG)."""
# (numpy dtype, scatter_reduce name, what the CUDA source calls, what the PTX holds)
CASES = [(numpy.float32, "sum", "atomicAdd(", "red.global.add.f32"),
         (numpy.float32, "amax", "atomicCAS(", "atom.global.cas.b32"),
         (numpy.float32, "amin", "atomicCAS(", "atom.global.cas.b32"),
         (numpy.float32, "prod", "atomicCAS(", "atom.global.cas.b32"),
         (numpy.int32, "sum", "atomicAdd(", "red.global.add.s32"),
         (numpy.int32, "amax", "atomicMax(", "red.global.max.s32"),
         (numpy.int32, "amin", "atomicMin(", "red.global.min.s32"),
         (numpy.int32, "prod", "atomicCAS(", "atom.global.cas.b32"),
         (numpy.uint32, "amax", "atomicMax(", "red.global.max.u32"),
         (numpy.int64, "sum", "atomicAdd(", "red.global.add.u64"),
         (numpy.int64, "amin", "atomicMin(", "red.global.min.s64"),
         (numpy.float64, "sum", "atomicAdd(", "red.global.add.f64"),
         (numpy.float64, "amax", "atomicCAS(", "atom.global.cas.b64")]
IDS = [f"{dtype.__name__}-{reduce}" for dtype, reduce, _cuda, _ptx in CASES]


def _scatter_kernel(numpy_dtype: type, reduce: str) -> object:
    """The AST of the last kernel of a scatter_reduce of 4,000 values into 37 elements (many repeats each)."""
    rng = numpy.random.default_rng(0)
    index = rng.integers(0, 37, 4000).astype(numpy.int32)
    values = rng.integers(-5, 5, 4000).astype(numpy_dtype)
    result = Tensor(numpy.ones(37, numpy_dtype)).scatter_reduce(0, Tensor(index), Tensor(values), reduce)
    return kernels_of(result)[-1].ast


def test_renderers_declare_atomics() -> None:
    for renderer in (CUDARenderer("sm_80"), CUDARenderer("sm_90"), PTXRenderer("sm_80"), PTXRenderer("sm_90")):
        assert {dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.int64, dtypes.float64, dtypes.float16,
                dtypes.bfloat16} <= renderer.atomic_dtypes


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("numpy_dtype", "reduce", "cuda", "ptx"), CASES, ids=IDS)
def test_cuda_scatter_reduce_compiles_to_atomics(numpy_dtype: type, reduce: str, cuda: str, ptx: str,
                                                 arch: str) -> None:
    ok, detail = nvrtc_status()
    assert ok, f"the NV compile tests need NVRTC from its wheel: {detail}"
    program = lower_to_program(_scatter_kernel(numpy_dtype, reduce), CUDARenderer(arch))
    assert cuda in program.src
    assert "blockIdx" in program.src  # the repeatable axis runs in parallel
    cubin = compile_cuda(program.src, arch)
    if disassembler() is not None:
        sass = disassemble(cubin)
        assert ATOMIC_SASS.search(sass), sass


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_16_bit_scatter_sums_exchange_their_word(arch: str, dtype: str) -> None:
    index = Tensor(numpy.arange(300, dtype=numpy.int32) % 7)
    values = Tensor(numpy.ones(300, numpy.float32)).cast(getattr(dtypes, dtype))
    result = Tensor.zeros(7, dtype=getattr(dtypes, dtype)).contiguous().scatter_reduce(0, index, values, "sum")
    program = lower_to_program(kernels_of(result)[-1].ast, CUDARenderer(arch))
    assert "atomicCAS(" in program.src and "& ~3ull" in program.src
    cubin = compile_cuda(program.src, arch)
    if disassembler() is not None:
        assert "ATOM" in disassemble(cubin)  # the compare-and-swap loop


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("reduce", ["sum", "amin"])
def test_ptx_16_bit_scatter_reductions_exchange_their_word(arch: str, dtype: str, reduce: str) -> None:
    index = Tensor(numpy.arange(300, dtype=numpy.int32) % 7)
    values = Tensor(numpy.ones(300, numpy.float32)).cast(getattr(dtypes, dtype))
    result = Tensor.zeros(7, dtype=getattr(dtypes, dtype)).contiguous().scatter_reduce(0, index, values, reduce)
    program = lower_to_program(kernels_of(result)[-1].ast, PTXRenderer(arch))
    assert "atom.global.cas.b32" in program.src and "and.b64" in program.src
    if find_tool("ptxas") is None:
        return
    cubin = assemble_with_ptxas(program.src, arch)
    assert cubin is not None
    if disassembler() is not None:
        assert "ATOM" in disassemble(cubin)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("numpy_dtype", "reduce", "cuda", "ptx"), CASES, ids=IDS)
def test_ptx_scatter_reduce_assembles_to_atomics(numpy_dtype: type, reduce: str, cuda: str, ptx: str,
                                                 arch: str) -> None:
    program = lower_to_program(_scatter_kernel(numpy_dtype, reduce), PTXRenderer(arch))
    assert ptx in program.src
    if find_tool("ptxas") is None:
        return  # the text checks above still hold; the nvidia-cuda-nvcc wheel adds the assembly check
    cubin = assemble_with_ptxas(program.src, arch)
    assert cubin is not None
    if disassembler() is not None:
        sass = disassemble(cubin)
        assert ATOMIC_SASS.search(sass), sass


SCRIPT = """
import numpy
from tinycore.testing.scatter_cases import scatter_reduction_results, scatter_sum_source
for name, equal in scatter_reduction_results((numpy.float32, numpy.int32, numpy.int64, numpy.float64, numpy.float16)):
    print(name, equal)
source = scatter_sum_source("NV")
print("atomic", "atomicAdd(" in source or "red.global.add" in source)
"""


@pytest.mark.parametrize("dev", ["MOCK+NV", "MOCK+NV:PTX"], ids=["cuda", "ptx"])
def test_scatter_reductions_on_the_mock_gpu_equal_numpy(dev: str) -> None:
    """Tensor-level scatter reductions (3,000 values into 23 elements) and a gather's gradient on the MOCK GPU, whose
    interpreter applies each combining store as one indivisible read-modify-write."""
    environment = {**os.environ, "DEV": dev, "TINYCORE_PLUGINS": "nv,cpu"}
    finished = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                              timeout=600, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    lines = finished.stdout.split("\n")
    assert len([line for line in lines if line.endswith("True")]) == 22, finished.stdout
