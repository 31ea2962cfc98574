"""Scatter reductions on AMD: the HIP renderer declares atomics (`atomic_dtypes`), so codegen runs the repeatable axes
in parallel and the combining store becomes an agent-scope atomic on a global pointer; clang builds it for every
supported target and the disassembly holds the atomic instruction (global_atomic_add_f32, global_atomic_smax, a
global_atomic_cmpswap loop, ...); the programs' answers equal numpy's ufunc.at with many repeated indices."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy
import pytest
from tiny_amd.compiler import AMDCompiler, toolchain_status
from tiny_amd.renderer import HIPRenderer
from tiny_amd.target import TARGETS

from tinycore import Tensor
from tinycore.codegen import lower_to_program
from tinycore.dtype import dtypes
from tinycore.testing.kernel_cases import kernels_of

ARCHS = tuple(TARGETS)


def _expected(numpy_dtype: type, reduce: str, arch: str) -> tuple[str, ...]:
    """The instructions of which one must be in the disassembly (CDNA and RDNA spell some differently)."""
    if reduce == "sum" and numpy_dtype is numpy.float32:
        return ("global_atomic_add_f32",)
    if reduce == "sum" and numpy_dtype is numpy.float64:  # native on gfx942 only
        return ("global_atomic_add_f64",) if arch == "gfx942" else ("global_atomic_cmpswap_x2",
                                                                     "global_atomic_cmpswap_b64")
    if numpy_dtype in (numpy.int32, numpy.uint32, numpy.int64) and reduce != "prod":
        signed = "u" if numpy_dtype is numpy.uint32 else "s"
        name = {"sum": "add", "amax": "max", "amin": "min"}[reduce]
        wide = numpy_dtype is numpy.int64
        if arch.startswith("gfx9"):
            return (f"global_atomic_{signed if name != 'add' else ''}{name}{'_x2' if wide else ''}",)
        kind = "u" if name == "add" else {"s": "i", "u": "u"}[signed]
        return (f"global_atomic_{name}_{kind}{64 if wide else 32}",)
    wide = numpy.dtype(numpy_dtype).itemsize == 8
    return ("global_atomic_cmpswap_x2", "global_atomic_cmpswap_b64") if wide else \
        ("global_atomic_cmpswap", "global_atomic_cmpswap_b32")


CASES = [(numpy.float32, "sum"), (numpy.float32, "amax"), (numpy.float32, "amin"), (numpy.float32, "prod"),
         (numpy.int32, "sum"), (numpy.int32, "amax"), (numpy.int32, "amin"), (numpy.int32, "prod"),
         (numpy.uint32, "amin"), (numpy.int64, "sum"), (numpy.int64, "amax"), (numpy.float64, "sum"),
         (numpy.float64, "amin"), (numpy.float16, "sum"), (numpy.float16, "amax")]
IDS = [f"{dtype.__name__}-{reduce}" for dtype, reduce in CASES]


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    ok, detail = toolchain_status()
    assert ok, f"the AMD compile tests need clang and ld.lld: {detail}"


def _scatter(numpy_dtype: type, reduce: str) -> Tensor:
    rng = numpy.random.default_rng(0)
    index = rng.integers(0, 37, 4000).astype(numpy.int32)
    values = rng.integers(-5, 5, 4000).astype(numpy_dtype)
    return Tensor(numpy.ones(37, numpy_dtype)).scatter_reduce(0, Tensor(index), Tensor(values), reduce)


def test_renderer_declares_atomics() -> None:
    renderer = HIPRenderer("gfx1100")
    assert {dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.int64, dtypes.float64, dtypes.float16,
            dtypes.bfloat16} <= renderer.atomic_dtypes


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("numpy_dtype", "reduce"), CASES, ids=IDS)
def test_scatter_reduce_compiles_to_atomic_instructions(numpy_dtype: type, reduce: str, arch: str) -> None:
    program = lower_to_program(kernels_of(_scatter(numpy_dtype, reduce))[-1].ast, HIPRenderer(arch))
    assert "__hip_atomic_" in program.src and "__builtin_amdgcn_workgroup_id_x" in program.src
    compiler = AMDCompiler(arch)
    assembly = compiler.disassemble(compiler.compile(program.src))
    assert any(instruction in assembly for instruction in _expected(numpy_dtype, reduce, arch)), assembly


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_bfloat16_scatter_sum_compiles_to_a_compare_exchange(arch: str) -> None:
    index = Tensor(numpy.arange(300, dtype=numpy.int32) % 7)
    values = Tensor(numpy.ones(300, numpy.float32)).cast(dtypes.bfloat16)
    result = Tensor.zeros(7, dtype=dtypes.bfloat16).contiguous().scatter_reduce(0, index, values, "sum")
    program = lower_to_program(kernels_of(result)[-1].ast, HIPRenderer(arch))
    compiler = AMDCompiler(arch)
    assert "global_atomic_cmpswap" in compiler.disassemble(compiler.compile(program.src))


SCRIPT = """
import numpy
from tinycore.testing.scatter_cases import scatter_reduction_results, scatter_sum_source
for name, equal in scatter_reduction_results((numpy.float32, numpy.int32, numpy.int64, numpy.float16)):
    print(name, equal)
source = scatter_sum_source("AMD")
print("atomic", "TC_ATOMIC_ADD_F32(" in source)
"""


def test_scatter_reductions_on_the_mock_gpu_equal_numpy() -> None:
    """Tensor-level scatter reductions (3,000 values into 23 elements; float16 sums of small integers stay exact)
    and a gather's gradient on the MOCK GPU, whose interpreter applies each combining store as one indivisible
    read-modify-write."""
    environment = {**os.environ, "DEV": "MOCK+AMD", "TINYCORE_PLUGINS": "amd,cpu"}
    finished = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                              timeout=600, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    lines = finished.stdout.split("\n")
    assert len([line for line in lines if line.endswith("True")]) == 18, finished.stdout
